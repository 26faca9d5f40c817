"""LXD MaasMachines (``provisioningMode: lxd``): place → reserve → compose → commission → allocate → deploy.

The VM is composed on a MAAS VM host chosen by :mod:`capmaas.placement`, then handled like a bare-metal
machine by the shared :mod:`~capmaas.reconcilers.lifecycle`: allocated by system ID with ``agent_name`` =
the MaasMachine UID, deployed with the bootstrap data, Ready once Deployed and powered on. Deleting the
MaasMachine deletes the machine in MAAS, which decomposes the VM and gives its cores, memory and disk back to
the host.

Crash safety of compose (no VM is ever composed twice for one MaasMachine):

1. Placement reserves the host's resources in the endpoint's ``ReservationBook`` (no ``await`` between
   choosing and reserving), then the annotation ``…/composing`` is written (a Kubernetes write).
2. The compose asks for a hostname derived from the MaasMachine UID (:func:`lxd_placer.vm_hostname`).
3. The returned system ID goes to ``spec.systemID``/``spec.providerID`` (``maas-lxd://<zone>/<id>``) at once.

A pass that finds ``…/composing`` but no system ID (a crash between 1 and 3) looks the hostname up in MAAS and
adopts the VM it finds; MAAS itself refuses a second VM with that hostname, which is adopted the same way.

Compose refusals: an over-commit 503 or a vanished host (404) drops the host, fetches a fresh listing and
places again (up to :data:`MAX_COMPOSE_TRIES` hosts per pass); MAAS 4.0's 410 is terminal (no VM-host API);
nothing fitting is a wait whose condition message says, per zone, why each host was skipped.

Deleting the MaasMachine deletes its VM in MAAS (which decomposes it) and waits until MAAS (the shared poller)
no longer lists it; only a VM MAAS shows held under this object's agent name, or not yet allocated and named
for this object: any other ``spec.systemID`` is forgotten with a Warning Event, nothing deleted. The
reservation of a machine deleted mid-placement is dropped first, so its capacity is free for others at once.
"""

from __future__ import annotations

import functools

from capmaas import maas, placement
from capmaas.api import conditions as C
from capmaas.api.related import MaasMachineView
from capmaas.api.v1beta1 import PROVISIONING_MODE_LXD, VMResourceUsage
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts, identity
from capmaas.reconcilers.credentials import maas_step
from capmaas.reconcilers.errors import TerminalError, TransientError
from capmaas.reconcilers.keys import (
    AGENT_NAME,
    ANNOTATION_PREFIX,
    COMPOSING,
    DECOMPOSING,
    DEPLOY_STARTED,
    HOST_ID_ANNOTATION,
    LXD_SCHEME,
    ZONE_FROM_OPERATOR,
    ZONE_FROM_USER,
    ZONE_SOURCE,
    provider_id,
)
from capmaas.reconcilers.lifecycle import Finished, Strategy
from capmaas.reconcilers.lxd_placer import (
    Listing,
    LxdPlacer,
    existing_placements,
    foreign_pin,
    not_ours_message,
    tenant_candidates,
    user_zone,
    vm_hostname,
    vm_request,
)
from capmaas.reconcilers.ports import MaasPort
from capmaas.reconcilers.scope import MachineScope, Requeue

#: Hosts tried per pass when MAAS refuses composes (over-commit 503, host gone).
MAX_COMPOSE_TRIES = 3
#: Longest wait between placement attempts while nothing fits (capacity may free at any time).
MAX_NO_FIT_DELAY = 30.0
#: Seconds after a delete before asking MAAS again if the VM still shows up.
DECOMPOSE_RECHECK = 30.0


def _project(scope: MachineScope) -> str:
    lxd = scope.want.lxd_config
    return (lxd.project if lxd else None) or "default"


def _interfaces(scope: MachineScope) -> str | None:
    """The compose ``interfaces`` map of the canonical spec's ``lxdConfig.network`` (None: the host's)."""
    lxd = scope.want.lxd_config
    return lxd.network.compose_interfaces() if lxd and lxd.network else None


def _gone_error(exc: maas_errors.MaasError, endpoint: str) -> TerminalError:
    return TerminalError(
        C.VM_HOSTS_UNSUPPORTED_REASON,
        f"MAAS at {endpoint} has no VM-host API (HTTP 410: {exc}); MAAS 4.0 removed LXD VM hosts, so "
        "provisioningMode lxd needs MAAS 3.x",
    )


def _short(exc: maas_errors.MaasError) -> str:
    """What a condition or Event may say of a refused compose: MAAS's own answer shapes only (its form
    errors, its compose and over-commit phrasings), otherwise the status alone (facts.maas_text)."""
    if isinstance(exc, maas_errors.ApiError):
        return facts.maas_text(exc.body, exc.status)
    return str(exc)  # no answer: the client's own message, which never carries a body


def _forgotten(scope: MachineScope) -> None:
    """Status follows the VM held: none until the next one is seen (its state, power, host name, zone, VM
    host and size fill in then), not the one given back."""
    scope.set_status(
        machine_state=None,
        machine_powered=None,
        hostname=None,
        failure_domain=None,
        lxd_host=None,
        vm_resource_usage=None,
    )


def _creating(scope: MachineScope, message: str) -> None:
    scope.set_condition(C.LXD_VM_CREATED_CONDITION, False, C.VM_COMMISSIONING_REASON, message)
    scope.set_condition(C.LXD_VM_DEPLOYED_CONDITION, False, C.VM_COMMISSIONING_REASON, message)
    scope.wait(C.VM_COMMISSIONING_REASON, message)


class Lxd(Strategy):
    """The :class:`~capmaas.reconcilers.lifecycle.Provisioner` of LXD VMs composed on MAAS VM hosts."""

    mode = PROVISIONING_MODE_LXD
    kept = "VM"
    tried = "VMs"
    another = "composing another"
    not_ours_reason = "VMNotOurs"

    @functools.cached_property
    def placer(self) -> LxdPlacer:
        """The reservation book and shared VM-host listing per endpoint."""
        return LxdPlacer()

    def provider_id(self, zone: str, system_id: str) -> str:
        return provider_id(LXD_SCHEME, zone, system_id)

    def describe(self, system_id: str) -> str:
        return f"VM {system_id}"

    def refusal(self, exc: maas_errors.MaasError) -> str:
        return _short(exc)

    def forgotten(self, scope: MachineScope) -> None:
        _forgotten(scope)

    def deploying(self, scope: MachineScope, system_id: str) -> None:
        scope.set_condition(
            C.LXD_VM_DEPLOYED_CONDITION, False, C.MACHINE_DEPLOYING_REASON, f"{system_id} deploying"
        )

    def deployed(self, scope: MachineScope, m: maas.Machine) -> None:
        scope.set_condition(
            C.LXD_VM_DEPLOYED_CONDITION, True, C.MACHINE_DEPLOYED_REASON, f"{m.system_id} deployed"
        )

    # --- acquire: place, reserve, compose ---------------------------------------------------------------
    async def acquire(self, scope: MachineScope, port: MaasPort) -> str | Requeue:
        scope.set_status(provisioning_mode=self.mode, lxd_project=_project(scope))
        sid = scope.want.system_id
        if not sid:
            sid = await self._place_and_compose(scope, port)
        else:
            # spec.systemID is just a field someone wrote: never allocate, deploy or decompose someone's VM.
            msg = (
                f"VM {sid} is neither held under this MaasMachine's agent name nor composed for it; forgot it"
            )
            if not await self.ownership.check(self, scope, port, sid, msg):
                return Requeue(0.0)
        # Composed by this pass, or proven: the VM named for this object (ours until someone allocates it).
        self.ownership.remember(scope, port, sid)
        return sid

    async def owns(self, scope: MachineScope, port: MaasPort, system_id: str) -> bool:
        return await self._owns(scope, port, system_id)

    def _no_fit_delay(self, uid: str) -> float:
        return self.settings.backoff(self.placer.no_fit(uid) - 1, cap=MAX_NO_FIT_DELAY)

    async def _adopt(self, scope: MachineScope, port: MaasPort, hostname: str) -> str | None:
        """The VM an earlier pass composed under our hostname, recorded as ours; None when there is none."""
        with maas_step(f"looking up VM {hostname}"):
            found = await port.find_by_hostname(hostname)
        if not found:
            return None
        m = found[0]
        scope.event("Normal", "VMAdopted", f"adopted VM {m.system_id} ({hostname}) composed earlier")
        self._record(scope, port.endpoint, m.system_id, zone=m.zone.name, host=m.pod.name if m.pod else None)
        if m.pod is not None:
            scope.set_annotation(HOST_ID_ANNOTATION, str(m.pod.id))
        await scope.flush()
        return m.system_id

    def _record(self, scope: MachineScope, endpoint: str, sid: str, *, zone: str, host: str | None) -> None:
        """Write the VM we got to the spec. Where its zone came from is recorded once, at the first compose
        (``…/zone-source``): ``user`` when the MaasMachine or its Machine named one, else ``operator`` (the
        placement chose it). ``spec.failureDomain`` then holds the VM's zone whoever chose it, and CAPI may
        copy it to the Machine, so neither tells a replacement whether the user asked for it."""
        if not scope.annotation(ZONE_SOURCE):
            given = user_zone(scope.meta, scope.want, scope.machine)
            scope.set_annotation(ZONE_SOURCE, ZONE_FROM_USER if given else ZONE_FROM_OPERATOR)
        scope.set_spec(system_id=sid, provider_id=self.provider_id(zone, sid), failure_domain=zone)
        scope.set_annotation(COMPOSING, None)
        scope.set_annotation(DEPLOY_STARTED, None)
        if host:
            scope.set_status(lxd_host=host)
        self.placer.composed(endpoint, scope.uid)

    async def _listing(self, scope: MachineScope, port: MaasPort, fresh: bool) -> Listing:
        with maas_step("listing VM hosts"):
            try:
                return await self.placer.listing(port.endpoint, port, fresh=fresh)
            except maas_errors.GoneError as exc:
                err = _gone_error(exc, port.endpoint)
                scope.set_condition(C.LXD_HOST_SELECTED_CONDITION, False, err.reason, err.message)
                raise err from exc

    async def _place_and_compose(self, scope: MachineScope, port: MaasPort) -> str:
        hostname = vm_hostname(scope.name, scope.uid)
        if scope.annotation(COMPOSING):
            adopted = await self._adopt(scope, port, hostname)
            if adopted:
                return adopted
        attempts = scope.attempts
        if attempts >= self.settings.max_deploy_attempts:
            raise TerminalError(
                C.RETRIES_EXHAUSTED_REASON, f"{attempts} {self.tried} tried; delete the Machine to try again"
            )
        book = self.placer.book(port.endpoint)
        request = vm_request(scope.meta, scope.want, scope.machine, f"{scope.namespace}/{scope.cluster_name}")
        refused: dict[int, str] = {}
        fresh = False
        for _ in range(MAX_COMPOSE_TRIES):
            listing = await self._listing(scope, port, fresh)
            self._check_pin(scope, listing, request.pinned_host)
            cluster = scope.cluster_name or ""
            siblings = MaasMachineView.all(self.kube.list_maasmachines(scope.namespace, cluster))
            existing = existing_placements(siblings, scope.uid, listing, ANNOTATION_PREFIX)
            usable = tenant_candidates(listing, scope.namespace)  # only this namespace's and shared hosts
            candidates = [c for c in usable if c.id not in refused]
            # No await between placing and reserving: ``place`` does both.
            result = book.place(request, candidates, existing, snapshot_at=listing.fetched_at)
            if isinstance(result, placement.NoFit):
                raise self._no_fit(scope, result, listing, refused)
            self.placer.placed(scope.uid)
            sid = await self._compose(
                scope, port, listing=listing, p=result, hostname=hostname, refused=refused
            )
            if sid is not None:
                return sid
            self.placer.invalidate(port.endpoint)
            fresh = True
        notes = "; ".join(
            f"{listing.hosts[h].name}: {why}" for h, why in refused.items() if h in listing.hosts
        )
        raise TransientError(
            C.VM_COMPOSE_FAILED_REASON, f"MAAS refused the compose on every chosen host: {notes}", delay=5.0
        )

    def _check_pin(self, scope: MachineScope, listing: Listing, pin: str | None) -> None:
        """A ``lxdConfig.vmHost`` pin onto a host that is not this namespace's: a condition naming the host,
        nothing composed (another tenant's host would otherwise hold our VM and its deletion would wait)."""
        host = foreign_pin(listing, pin, scope.namespace)
        if host is None:
            return
        message = (
            f"spec.lxdConfig.vmHost {pin!r}: VM host {host.name} is not available to namespace "
            f"{scope.namespace} ({not_ours_message(scope.namespace)}); nothing composed"
        )
        scope.set_condition(C.LXD_HOST_SELECTED_CONDITION, False, C.VM_HOST_NOT_ALLOWED_REASON, message)
        scope.set_condition(
            C.LXD_RESOURCES_ALLOCATED_CONDITION, False, C.VM_HOST_NOT_ALLOWED_REASON, "nothing reserved"
        )
        raise TransientError(C.VM_HOST_NOT_ALLOWED_REASON, message, delay=self._no_fit_delay(scope.uid))

    def _no_fit(
        self, scope: MachineScope, result: placement.NoFit, listing: Listing, refused: dict[int, str]
    ) -> TransientError:
        parts = [result.message]
        zone = user_zone(scope.meta, scope.want, scope.machine)
        if zone:  # the user's or CAPI's zone: a host elsewhere is no way out, so say what this zone lacks
            inside = placement.summarize(r for r in result.reasons if r.zone == zone)
            parts = [
                f"no VM host left in zone {zone} that fits (the Machine's failure domain: no other zone is "
                f"tried): {inside or f'no VM host is in {zone}'}"
            ]
        parts += [f"{listing.hosts[h].name} refused the compose ({why})" for h, why in refused.items()]
        if listing.ignored:
            parts.append("not LXD VM hosts: " + ", ".join(listing.ignored))
        others = len(listing.candidates) - len(tenant_candidates(listing, scope.namespace))
        if others:  # counted, not named: other tenants' host names are theirs
            parts.append(f"{others} VM host(s) left out, {not_ours_message(scope.namespace)}")
        message = "; ".join(parts) + "; waiting for capacity"
        scope.set_condition(C.LXD_HOST_SELECTED_CONDITION, False, C.NO_VM_HOST_AVAILABLE_REASON, message)
        scope.set_condition(
            C.LXD_RESOURCES_ALLOCATED_CONDITION, False, C.NO_VM_HOST_AVAILABLE_REASON, "nothing reserved"
        )
        return TransientError(C.NO_VM_HOST_AVAILABLE_REASON, message, delay=self._no_fit_delay(scope.uid))

    async def _compose(
        self,
        scope: MachineScope,
        port: MaasPort,
        *,
        listing: Listing,
        p: placement.Placement,
        hostname: str,
        refused: dict[int, str],
    ) -> str | None:
        """Compose on the placed host. None: MAAS refused this host (the caller places again)."""
        book = self.placer.book(port.endpoint)
        host = listing.hosts[p.host_id]
        why = p.reason + (f"; skipped: {p.skipped_message}" if p.skipped_message else "")
        scope.set_condition(C.LXD_HOST_SELECTED_CONDITION, True, C.VM_HOST_SELECTED_REASON, why)
        scope.set_condition(
            C.LXD_RESOURCES_ALLOCATED_CONDITION,
            True,
            C.RESOURCES_RESERVED_REASON,
            f"{p.cores} cores, {p.memory_mib} MiB, {p.disk_gb} GB in storage pool {p.storage_pool} "
            f"on {p.host_name}",
        )
        scope.set_annotation(COMPOSING, str(p.host_id))
        scope.set_annotation(HOST_ID_ANNOTATION, str(p.host_id))
        await scope.flush()
        request = maas.ComposeRequest(
            cores=p.cores,
            memory=p.memory_mib,
            storage=f"root:{p.disk_gb}({p.storage_pool})",
            interfaces=_interfaces(scope),
            hostname=hostname,
            zone=host.zone.id if host.zone else None,
            pool=host.pool.id if host.pool else None,
        )
        # A compose that may have happened keeps the annotation (the next pass looks the hostname up) and
        # the reservation.
        with maas_step(f"composing on {p.host_name}"):
            try:
                composed = await port.compose(p.host_id, request)
            except (maas_errors.ServiceUnavailableError, maas_errors.NotFoundError) as exc:
                book.release(scope.uid)
                gone = isinstance(exc, maas_errors.NotFoundError)
                refused[p.host_id] = "the host is gone" if gone else _short(exc)
                scope.set_annotation(COMPOSING, None)
                scope.event(
                    "Warning", "VMComposeRefused", f"{p.host_name}: {refused[p.host_id]}; trying another host"
                )
                return None
            except maas_errors.GoneError as exc:
                book.release(scope.uid)
                scope.set_annotation(COMPOSING, None)
                raise _gone_error(exc, port.endpoint) from exc
            except maas_errors.BadRequestError as exc:
                if "hostname" in exc.field_errors or "already exists" in exc.body:
                    adopted = await self._adopt(scope, port, hostname)
                    if adopted:
                        return adopted
                book.release(scope.uid)
                scope.set_annotation(COMPOSING, None)
                message = f"MAAS refused to compose on {p.host_name}: {_short(exc)}"
                scope.set_condition(C.LXD_VM_CREATED_CONDITION, False, C.VM_COMPOSE_FAILED_REASON, message)
                raise TerminalError(C.VM_COMPOSE_FAILED_REASON, message) from exc
        scope.set_status(attempts=scope.attempts + 1)
        self._record(scope, port.endpoint, composed.system_id, zone=p.zone, host=p.host_name)
        scope.set_status(
            vm_resource_usage=VMResourceUsage(
                allocated_cores=p.cores, allocated_memory=p.memory_mib, allocated_disk=p.disk_gb
            )
        )
        scope.event("Normal", "VMComposed", f"composed VM {composed.system_id} ({hostname}) on {p.host_name}")
        await scope.flush()
        _creating(scope, f"{composed.system_id}: composed on {p.host_name}, commissioning")
        return composed.system_id

    # --- following the VM --------------------------------------------------------------------------------
    async def unseen(self, scope: MachineScope, port: MaasPort, system_id: str) -> Requeue:
        if port.is_gone(system_id):
            return await self._start_over(
                scope, port, system_id, C.MACHINE_NOT_FOUND_REASON, why="the VM is gone from MAAS"
            )
        _creating(scope, f"{system_id}: composed, waiting for MAAS to report it")
        return Requeue()

    async def follow(
        self, scope: MachineScope, port: MaasPort, m: maas.Machine
    ) -> Requeue | maas.Machine | None:
        """Commissioning and failures are the VM's own; Ready → allocate it (the shared lifecycle deploys the
        allocated VM in the same pass); then the shared lifecycle."""
        if m.pod is not None:
            scope.set_status(lxd_host=m.pod.name)
        if m.cpu_count:
            scope.set_status(
                vm_resource_usage=VMResourceUsage(
                    allocated_cores=m.cpu_count,
                    allocated_memory=m.memory,
                    allocated_disk=round(m.storage / 1000),
                )
            )
        if m.status.commissioning:
            _creating(scope, f"{m.system_id}: {m.status_name or m.status.name}")
            return Requeue()
        if m.status.failed:
            why = m.error_description or m.status_name or m.status.name
            return await self._start_over(scope, port, m.system_id, C.DEPLOYMENT_FAILED_REASON, why=why)
        scope.set_condition(
            C.LXD_VM_CREATED_CONDITION, True, C.VM_COMPOSED_REASON, f"{m.system_id} commissioned"
        )
        if m.status == maas.NodeStatus.READY:
            return await self._allocate(scope, port, m)
        if not await self._ours(scope, port, m):
            return await self._start_over(
                scope,
                port,
                m.system_id,
                C.MACHINE_NOT_FOUND_REASON,
                why="taken by another allocation",
                own=False,
            )
        return None

    async def _ours(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> bool:
        """Whether the allocated VM is held under our UID, or under the agent name recorded when it was
        allocated (a moved MaasMachine has a new UID); checked once per process, then remembered. Recording
        the agent name found also covers objects allocated before the annotation existed, ahead of a move."""
        if self.placer.is_allocated_to(port.identity, scope.uid, m.system_id) and identity.is_bound_to(
            scope, port
        ):
            return True
        recorded = scope.annotation(AGENT_NAME)
        for agent in dict.fromkeys(a for a in (scope.uid, recorded) if a):
            with maas_step("checking who holds the VM"):
                mine = {x.system_id for x in await port.find_by_agent(agent)}
            if m.system_id in mine:
                self.placer.allocated_to(port.identity, scope.uid, m.system_id)
                scope.set_annotation(AGENT_NAME, agent)
                self.ownership.proved(scope, port, m.system_id)
                return True
        return False

    async def _owns(self, scope: MachineScope, port: MaasPort, sid: str) -> bool:
        """The ownership test before decomposing ``sid`` (``spec.systemID`` is just a field someone wrote):
        MAAS holds it under our agent name, or it is not allocated yet and carries the hostname composed for
        this object (:func:`lxd_placer.vm_hostname`). Always asked (no memory): it runs right before a
        decompose, and when nothing in this process proved ``sid`` ours through the current identity."""
        recorded = scope.annotation(AGENT_NAME)
        for agent in dict.fromkeys(a for a in (scope.uid, recorded) if a):
            with maas_step(f"checking who holds VM {sid}"):
                held = {x.system_id for x in await port.find_by_agent(agent)}
            if sid in held:
                return True
        with maas_step(f"checking who composed VM {sid}"):
            composed = await port.find_by_hostname(vm_hostname(scope.name, scope.uid))
        return any(x.system_id == sid and x.owner is None for x in composed)

    async def _allocate(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue | maas.Machine:
        """Take the commissioned VM by system ID under our UID, ours like an allocated bare-metal machine."""
        with maas_step(f"allocating VM {m.system_id}"):
            try:
                new = await port.allocate(
                    maas.AllocateConstraints(system_id=m.system_id),
                    agent_name=scope.uid,
                    comment=f"capmaas {scope.key}",
                )
            except maas_errors.ConflictError as exc:
                if await self._ours(scope, port, m):
                    return Requeue(0.0)
                raise TransientError(
                    C.MACHINE_ALLOCATED_REASON,
                    f"{m.system_id}: allocate refused ({exc}); retrying",
                    delay=5.0,
                ) from exc
        self.placer.allocated_to(port.identity, scope.uid, new.system_id)
        scope.set_annotation(AGENT_NAME, scope.uid)
        self.ownership.proved(scope, port, new.system_id)
        scope.event("Normal", "VMAllocated", f"VM {new.system_id} allocated")
        return new  # the shared lifecycle deploys it in this pass

    # --- giving back -------------------------------------------------------------------------------------
    async def give_back(
        self, scope: MachineScope, port: MaasPort, system_id: str, reason: str, why: str
    ) -> Requeue:
        return await self._start_over(scope, port, system_id, reason, why=why)

    async def _start_over(
        self, scope: MachineScope, port: MaasPort, sid: str, reason: str, *, why: str, own: bool = True
    ) -> Requeue:
        """Give up on this VM (decomposing it if it is ours) and place a new one on the next pass."""
        attempts = scope.attempts or 1
        scope.event("Warning", reason, f"VM {sid}: {why}; composing another (attempt {attempts})")
        if own and scope.proven != sid and not await self._owns(scope, port, sid):
            own = False  # no memory skips the lookup before a decompose: not ours, nothing sent
            scope.event("Warning", "VMNotOurs", f"VM {sid} is not held for this MaasMachine; not decomposed")
        if own:
            with maas_step(f"decomposing failed VM {sid}"):
                await port.delete_machine(sid)
            self.placer.invalidate(port.endpoint)
        self.placer.release(port.endpoint, scope.uid)
        self.ownership.forget(self, scope, port, sid)
        scope.set_annotation(HOST_ID_ANNOTATION, None)
        scope.set_annotation(AGENT_NAME, None)
        scope.set_condition(C.LXD_VM_CREATED_CONDITION, False, reason, f"{sid}: {why}")
        limit = self.settings.max_deploy_attempts
        return await self.ownership.gave_back(self, scope, sid, reason, why, attempts=attempts, limit=limit)

    # --- delete ------------------------------------------------------------------------------------------
    async def delete(self, scope: MachineScope, port: MaasPort) -> Requeue:
        """Delete the VM in MAAS (decompose), wait until MAAS no longer lists it, then finish."""
        self.placer.forget(scope.uid, port.endpoint)
        sid = scope.want.system_id
        if not sid and scope.annotation(COMPOSING):
            sid = await self._adopt(scope, port, vm_hostname(scope.name, scope.uid))
            scope.set_annotation(COMPOSING, None)
            await scope.flush()
        if not sid:
            return self._deleted(scope, port, None)
        requested = scope.annotation(DECOMPOSING)
        if requested is None or self.clock() - float(requested) > DECOMPOSE_RECHECK:
            if not await self._owns(scope, port, sid):
                port.unwatch(sid)
                scope.event(
                    "Warning",
                    "VMNotOurs",
                    f"VM {sid} is neither held under this MaasMachine's agent name nor composed for it; "
                    "forgetting it, nothing deleted",
                )
                return Finished()
            with maas_step(f"decomposing VM {sid}"):
                known = await port.delete_machine(sid)
            self.placer.invalidate(port.endpoint)
            if not known:
                port.unwatch(sid)
                return self._deleted(scope, port, sid)
            scope.set_annotation(DECOMPOSING, str(self.clock()))
            scope.event("Normal", "VMDecomposing", f"deleting VM {sid} from its VM host")
            await scope.flush()
        port.watch(sid, scope.key)
        if port.is_gone(sid):
            port.unwatch(sid)
            return self._deleted(scope, port, sid)
        scope.set_deletion(C.DECOMPOSING_REASON, f"{sid}: waiting for MAAS to remove it")
        return Requeue(DECOMPOSE_RECHECK)

    def _deleted(self, scope: MachineScope, port: MaasPort, sid: str | None) -> Requeue:
        if sid:
            scope.event("Normal", "VMDecomposed", f"VM {sid} deleted; its resources are back on the host")
            self.placer.not_allocated(port.identity, scope.uid, sid)
        return Finished()
