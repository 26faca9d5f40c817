"""Bare-metal MaasMachines (``provisioningMode: bare-metal``): allocate (idempotent, zone-spread) → the shared
lifecycle → release; mark-broken for a machine that failed to deploy.

Crash safety of allocation (no machine is ever allocated twice or leaked):

1. Before ``allocate`` the annotation ``…/allocating`` is written (a Kubernetes write, no MAAS request).
2. ``allocate`` passes the MaasMachine UID as MAAS ``agent_name``.
3. The returned system ID goes to ``spec.systemID``/``spec.providerID`` at once (the annotation goes away).

A pass that finds ``…/allocating`` but no system ID (a crash between 1 and 3) looks the UID up in MAAS and
adopts what it finds instead of allocating again; without the annotation no allocation can have happened, so
the happy path spends no lookup request.

A lookup that finds nothing does not prove the allocate never happened: an allocate whose answer was lost
(the client timed out) may still be queued at MAAS and take effect later. The mark holds the wall-clock time
it was written, just before the allocate was first sent, and another allocate is sent only once
``MachineSettings.allocate_in_doubt`` (:func:`capmaas.maas.in_doubt_window` of the client's timeout and retry
policy) has passed since; until then the pass looks again later, with the condition
``AllocationInDoubt``. Wall-clock, since the pass that reads the mark may run in another process.

The mark and every other annotation that closes a crash window are written with a resourceVersion
precondition (:mod:`capmaas.reconcilers.scope`): a writer holding a stale copy of the object gets 409 and
sends nothing to MAAS.

Giving a machine back (failed, broken, timed out, gone) is crash-safe too. A released machine is back in
MAAS's pool at once, and another MaasMachine's allocate can take it within milliseconds. Should this process
die (or the spec write fail) after the release but before ``spec.systemID`` is cleared, the next pass would
find the old system ID and see that machine Allocated or Deployed - for its new holder, under the same MAAS
user - and take it for its own: two MaasMachines on one machine, and deleting this one would release the
other's. MAAS's machine JSON does not show ``agent_name``, so the shared poller's snapshot cannot tell. Hence
the system ID being given back is written down first (``…/replacing``: one metadata patch, only on this rare
path) and cleared together with the system ID; a pass that finds it asks MAAS for the machines held under our
UID before it touches that machine again.

Deletion releases the machine and waits for the shared poller to see it released; it hands off (nothing sent
to MAAS) while clusterctl moves the object or the cluster is paused (see :mod:`capmaas.reconcilers.machine`).
Before the release, MAAS must show the machine held under this object's agent name (``spec.systemID`` is
just a field someone wrote): otherwise the reference is forgotten with a Warning Event and nothing is sent.
Every other machine held under that agent name (a second allocate after a lost answer) is released too. The
lookup is shared by the deletions under way at the same time (``MaasPort.find_for_release``: one list call for
many, exact whenever a shared answer could mislead).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from capmaas import maas, placement
from capmaas.api import conditions as C
from capmaas.api.v1beta1 import (
    PROVISIONING_MODE_BARE_METAL,
    MaasClusterStatus,
    ReleaseOptions,
)
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import addresses, adoption, facts, layout, reuse, vmhost
from capmaas.reconcilers.credentials import maas_step
from capmaas.reconcilers.errors import TerminalError, TransientError
from capmaas.reconcilers.keys import (
    ADOPTED,
    AGENT_NAME,
    ALLOCATE_AFTER,
    ALLOCATING,
    BARE_METAL_SCHEME,
    DEPLOY_STARTED,
    FAILURES,
    LAYOUT_MADE,
    PREPARE_REFUSALS,
    REPLACING,
    ZONE_FROM_MAAS,
    ZONE_FROM_OPERATOR,
    ZONE_FROM_USER,
    ZONE_SOURCE,
    provider_id,
)
from capmaas.reconcilers.lifecycle import Finished, Strategy
from capmaas.reconcilers.ports import MaasPort
from capmaas.reconcilers.reuse import NodeReuse
from capmaas.reconcilers.scope import MachineScope, Requeue
from capmaas.reconcilers.spread import Asking, ZoneSpread

#: MAAS power type of composed LXD VMs: a bare-metal allocate never takes one (they are Ready between
#: commissioning and their own allocate).
LXD_POWER_TYPE = "lxd"


def agent_name(scope: MachineScope) -> str:
    """The MAAS ``agent_name`` this MaasMachine allocates under: its UID, kept in the ``…/agent-name``
    annotation from the first allocation on. ``clusterctl move`` recreates the object with a new UID but keeps
    its annotations, so the moved object still finds what it allocated (an earlier allocate whose answer was
    lost, or a machine an interrupted replacement had not yet given back)."""
    return scope.annotation(AGENT_NAME) or scope.uid


#: Seconds between tries of a release MAAS refused for its form (spec.releaseOptions): a person fixes it.
RELEASE_REFUSED_RETRY = 60.0
#: Seconds after a release request before a deletion's "Releasing" status is written, if MAAS has not
#: confirmed the release by then (the shared poller's release confirmations come within a few seconds).
RELEASE_QUIET = 10.0
#: Seconds between looks at claims still without an address (their watch events wake the object sooner).
ADDRESS_WAIT = 60.0


class BareMetal(Strategy):
    """The :class:`~capmaas.reconcilers.lifecycle.Provisioner` of whole MAAS machines."""

    mode = PROVISIONING_MODE_BARE_METAL
    kept = "MAAS machine"
    tried = "MAAS machines"
    another = "allocating another"
    not_ours_reason = "MachineNotOurs"

    @functools.cached_property
    def adopter(self) -> adoption.Adoption:
        """Adopting a Deployed machine (``spec.adopt``): its claim, checks and ownership test."""
        return adoption.Adoption(self.kube)

    @functools.cached_property
    def spread(self) -> ZoneSpread:
        """The zone spread of this process's allocations (soft memory of dry zones and choices)."""
        return ZoneSpread(self.clock)

    @functools.cached_property
    def reuse(self) -> NodeReuse:
        """Node reuse: the servers released without erase for a MachineDeployment/control plane."""
        settings = self.settings
        return NodeReuse(self.kube, wait=settings.reuse_wait, ttl=settings.reuse_ttl, clock=self.clock)

    def provider_id(self, zone: str, system_id: str) -> str:
        return provider_id(BARE_METAL_SCHEME, zone, system_id)

    def describe(self, system_id: str) -> str:
        return system_id

    def refusal(self, exc: maas_errors.MaasError) -> str:
        return f"{exc}"

    def deploying(self, scope: MachineScope, system_id: str) -> None:
        return None

    def deployed(self, scope: MachineScope, m: maas.Machine) -> None:
        return None

    # --- acquire -----------------------------------------------------------------------------------------
    async def acquire(self, scope: MachineScope, port: MaasPort) -> str | Requeue:
        sid = scope.want.system_id
        if sid and scope.annotation(REPLACING) == sid:  # a replacement of sid was under way
            if await self._still_ours(scope, port, sid) is None:
                self.ownership.forget(self, scope, port, sid)
                msg = f"{sid} was given back before the last pass ended; allocating another"
                scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_NOT_FOUND_REASON, msg)
                await scope.flush()
                return Requeue(0.0)
            scope.set_annotation(REPLACING, None)  # still ours: decide again below
            self.ownership.proved(scope, port, sid)
        if not sid and adoption.wanted(scope):
            # Adoption hook (issue 24): a Deployed machine is taken as it is; this object never allocates.
            got = await self.adopter.acquire(scope, port, agent_name(scope), self.provider_id)
            if isinstance(got, Requeue):
                return got
            sid = got
            self.ownership.proved(scope, port, sid)
        elif not sid:
            waiting = self._backing_off(scope)
            if waiting is not None:
                return waiting
            if scope.want.addresses and not scope.annotation(ALLOCATING):
                # Nothing is allocated in MAAS until every address is known (an allocate in doubt is
                # looked up first, whatever the addresses).
                known = await addresses.wanted(scope, self.kube)
                if isinstance(known, str):
                    scope.wait(C.WAITING_FOR_IP_ADDRESS_REASON, known)
                    return Requeue(ADDRESS_WAIT)
            got = await self._allocate(scope, port)
            if isinstance(got, Requeue):
                return got
            sid = got
            self.ownership.proved(scope, port, sid)  # the allocate (or adopt) answer under our agent name
        else:
            # spec.systemID is just a field someone wrote: before the lifecycle deploys, releases or marks
            # it broken, MAAS must show it held under this object's agent name (through this identity).
            msg = f"MAAS machine {sid} is not held under this MaasMachine's agent name; forgot it"
            if not await self.ownership.check(self, scope, port, sid, msg):
                return Requeue(0.0)
        await self.reuse.settle(scope)  # node reuse hook: a server is held, any entry it claimed goes
        return str(sid)

    async def owns(self, scope: MachineScope, port: MaasPort, system_id: str) -> bool:
        return await self._holds(scope, port, system_id)

    async def _allocate(self, scope: MachineScope, port: MaasPort) -> str | Requeue:
        agent = agent_name(scope)
        if marked := scope.annotation(ALLOCATING):
            with maas_step("looking up an earlier allocation"):
                found = await port.find_by_agent(agent)
            if found:
                return await self._adopt(scope, port, found)
            left = self._in_doubt(marked)
            if left > 0:
                msg = (
                    f"an earlier allocate's answer was lost and MAAS holds nothing under agent name {agent} "
                    f"yet; it may still take effect, so no other machine is allocated for {int(left) + 1}s"
                )
                scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.ALLOCATION_IN_DOUBT_REASON, msg)
                return Requeue(min(left, self.settings.retry_base))
        attempts = scope.attempts
        if attempts >= self.settings.max_deploy_attempts:
            raise TerminalError(
                C.RETRIES_EXHAUSTED_REASON, f"{attempts} {self.tried} tried; delete the Machine to try again"
            )
        # Node reuse hook (issue 24): a server released for this Machine's MachineDeployment/control plane
        # (through this identity) is asked for first, on the same crash-safe path (capmaas.reconcilers.reuse).
        reused = await self.reuse.claim(scope, port)
        if isinstance(reused, Requeue):
            return reused
        constraints, source = self._constraints(scope, port)
        if reused:
            constraints = self.reuse.narrow(constraints, reused, keep_zone=source == ZONE_FROM_USER)
        scope.set_annotation(ALLOCATING, str(int(self.clock())))
        scope.set_annotation(AGENT_NAME, agent)  # same patch: survives a move with the allocate in doubt
        await scope.flush()
        started = self.clock()
        # An allocate that may or may not have happened keeps the annotation: the next pass looks first.
        with maas_step("allocating"):
            try:
                if source == ZONE_FROM_OPERATOR and not reused:
                    m, constraints = await self.spread.allocate(
                        port,
                        self._asking(scope, port, constraints),
                        constraints,
                        agent_name=agent,
                        comment=f"capmaas {scope.key}",
                    )
                else:
                    m = await port.allocate(constraints, agent_name=agent, comment=f"capmaas {scope.key}")
            except maas_errors.NoMachineAvailableError as exc:
                if reused:  # node reuse hook: taken, gone or no longer matching: a fresh server at once
                    scope.set_annotation(ALLOCATING, None)
                    self.reuse.taken(scope, reused, facts.maas_text(exc.body))
                    return Requeue(0.0)
                failures, delay = self._failed_allocate(scope)
                msg = self._no_machine(constraints, source, facts.maas_text(exc.body))
                if (which := port.explain_empty(scope.want, constraints.zone)) is not None:
                    msg = f"{msg}; {which}"
                if failures == 1:  # one Event per streak; the condition stays current
                    scope.event("Warning", C.NO_MACHINE_AVAILABLE_REASON, msg)
                raise TransientError(C.NO_MACHINE_AVAILABLE_REASON, msg, delay=delay) from exc
            except maas_errors.BadRequestError as exc:
                # MAAS's form refused a constraint (unknown tag or architecture, a malformed devices/
                # interfaces/storage value): nothing was allocated. Its own words name the field; retried
                # with the backoff of an empty pool, as an admin may add the tag or import the architecture's
                # image.
                failures, delay = self._failed_allocate(scope)
                said = facts.maas_text(exc.body, 400)
                msg = f"MAAS refused the allocate constraints ({facts.describe(constraints)}): {said}"
                if failures == 1:
                    scope.event("Warning", C.CONSTRAINTS_REFUSED_REASON, msg)
                raise TransientError(C.CONSTRAINTS_REFUSED_REASON, msg, delay=delay) from exc
        self.recorder.allocation_duration(self.clock() - started)
        scope.set_status(attempts=attempts + 1)
        self._record(scope, m, source)
        if m.status == maas.NodeStatus.ALLOCATED:
            # The deploy follows in this pass: stamping it now saves a metadata patch per machine (the deploy
            # timeout then also counts the few milliseconds of the deploy request).
            scope.set_annotation(DEPLOY_STARTED, str(self.clock()))
            scope.deploy_stamped = True
        scope.event(
            "Normal", "MachineAllocated", f"allocated MAAS machine {m.system_id} in zone {m.zone.name}"
        )
        await scope.flush()
        return m.system_id

    def _failed_allocate(self, scope: MachineScope) -> tuple[int, float]:
        """An allocate that MAAS answered with nothing allocated: the streak of such answers and the backoff
        before the next allocate. Every pass until then ends before MAAS (see :meth:`_backing_off`): a wake-up
        from a CAPI Machine or MaasCluster update within the backoff sends no allocate. The backoff carries
        the spec's generation: a spec edit (smaller sizes, another pool) ends it at once."""
        scope.set_annotation(ALLOCATING, None)
        failures = int(scope.annotation(FAILURES) or 0) + 1
        scope.set_annotation(FAILURES, str(failures))
        delay = self.settings.backoff(failures - 1)
        scope.set_annotation(ALLOCATE_AFTER, f"{self.clock() + delay:.3f}@{scope.generation}")
        return failures, delay

    def _in_doubt(self, marked: str) -> float:
        """Seconds an allocate sent at the ``…/allocating`` mark's time may still take effect at MAAS (0: it
        cannot any more, or the mark has no time)."""
        try:
            sent = float(marked)
        except ValueError:
            return 0.0
        window = self.settings.allocate_in_doubt
        return min(window, max(0.0, sent + window - self.clock()))  # a mark from the future: one window

    async def _adopt(self, scope: MachineScope, port: MaasPort, found: Sequence[maas.Machine]) -> str:
        """Adopt what an earlier allocate (whose answer was lost) left under our agent name. A lost answer
        can leave *several* machines there (the first allocate reached MAAS after the client gave up, then a
        second one was sent): keep one, release the rest (before the spec write, so none is leaked)."""
        keep, *extra = sorted(found, key=lambda m: m.system_id)
        await self._release_extra(scope, port, extra, ReleaseOptions())
        scope.event("Normal", "MachineAdopted", f"adopted MAAS machine {keep.system_id} allocated earlier")
        self.recorder.machine_adopted()
        self._record(scope, keep)
        await scope.flush()
        return keep.system_id

    async def _release_extra(
        self, scope: MachineScope, port: MaasPort, extra: Sequence[maas.Machine], opts: ReleaseOptions
    ) -> None:
        """Release machines held under our agent name that the MaasMachine does not record (a second allocate
        after a lost answer), with a Warning Event each."""
        for x in extra:
            if x.status.released or x.status.releasing:
                continue
            with maas_step(f"releasing extra machine {x.system_id}"):
                try:
                    await port.release(
                        x.system_id,
                        erase=bool(opts.erase),
                        secure_erase=bool(opts.secure_erase),
                        quick_erase=bool(opts.quick_erase),
                        comment=f"capmaas {scope.key}: second machine under one agent name",
                        scripts=opts.scripts or (),
                    )
                except maas_errors.NotFoundError:
                    continue
            scope.event(
                "Warning",
                "ExtraMachineReleased",
                f"MAAS machine {x.system_id} was also held under this MaasMachine's agent name; released it",
            )
            self.recorder.extra_machine_released()

    async def _releasing_unseen(self, port: MaasPort, sid: str) -> bool:
        """Whether MAAS is releasing ``sid`` although the poller still shows it held: a release of ours that
        MAAS took after the client gave up on its answer (the pass ended in an error) clears the agent name,
        so the ownership lookup no longer lists the machine. One fresh read tells it from a machine someone
        else holds; the deletion then waits for MAAS as after any release of its own (the read is folded into
        the snapshot, so later passes take the usual path) and writes nothing."""
        with maas_step(f"reading {sid}"):
            try:
                fresh = await port.read_machine(sid)
            except maas_errors.NotFoundError:
                return False
        return fresh.status.releasing

    async def _held(self, scope: MachineScope, port: MaasPort, doing: str) -> Sequence[maas.Machine]:
        """The machines MAAS shows held under this object's agent name (the ownership test)."""
        with maas_step(doing):
            return await port.find_by_agent(agent_name(scope))

    async def _holds(self, scope: MachineScope, port: MaasPort, sid: str) -> bool:
        if adoption.adopted(scope) == sid:  # adoption hook: MAAS shows no agent name for it, our marker
            return await self.adopter.held(scope, port, sid, agent_name(scope)) is not None
        return sid in {m.system_id for m in await self._held(scope, port, f"checking who holds {sid}")}

    def _record(self, scope: MachineScope, m: maas.Machine, source: str | None = None) -> None:
        """Write the machine we got to the spec. Where its zone came from is recorded once, at the first
        allocation (``…/zone-source``): ``spec.failureDomain`` then holds the zone we got, whoever chose it,
        and CAPI may copy it to the Machine, so neither tells a replacement whether the user asked for it."""
        if not scope.annotation(ZONE_SOURCE):
            scope.set_annotation(ZONE_SOURCE, source or self._zone_source(scope))
        scope.set_spec(system_id=m.system_id, provider_id=self.provider_id(m.zone.name, m.system_id))
        scope.set_spec(failure_domain=m.zone.name)
        scope.set_annotation(ALLOCATING, None)
        scope.set_annotation(DEPLOY_STARTED, None)
        scope.set_annotation(FAILURES, None)  # allocation backoff: over
        scope.set_annotation(ALLOCATE_AFTER, None)

    def _backing_off(self, scope: MachineScope) -> Requeue | None:
        """Within the backoff of the last allocation failure: end the pass before MAAS, to run again when
        the backoff is over. Passes are woken by more than their own timer (the CAPI Machine mirrors our
        condition, the MaasCluster changes), and each would otherwise send another allocate."""
        if scope.annotation(ALLOCATING):
            return None  # an allocate in doubt is looked up first, whatever the backoff
        due_text, _, generation = (scope.annotation(ALLOCATE_AFTER) or "").partition("@")
        if generation and generation != str(scope.generation):
            return None  # the spec changed since the failure: try the new one now
        try:
            due = float(due_text or 0.0)
        except ValueError:
            return None
        left = due - self.clock()
        return Requeue(left) if left > 0 else None

    def _no_machine(self, asked: maas.AllocateConstraints, source: str, said: str) -> str:
        """The NoMachineAvailable message: what was asked (MAAS's own words too) and, for a zone the user
        or CAPI gave, that this zone is empty and no other is tried."""
        if source == ZONE_FROM_USER and asked.zone:
            rest = facts.describe(asked.model_copy(update={"zone": None}))
            return (
                f"no machine left in zone {asked.zone} that matches {rest} (the Machine's failure domain: "
                f"no other zone is tried); MAAS: {said}"
            )
        if source == ZONE_FROM_OPERATOR:  # the spread's last try was any zone
            asked = asked.model_copy(update={"zone": None})
        return f"no Ready MAAS machine matches {facts.describe(asked)}; MAAS: {said}"

    def _user_zone(self, scope: MachineScope) -> str | None:
        """The zone the user or CAPI asked for: the MaasMachine's ``spec.failureDomain``, else the Machine's -
        unless the first allocation recorded that neither was given (what they hold now is what we got)."""
        if scope.annotation(ZONE_SOURCE) in (ZONE_FROM_OPERATOR, ZONE_FROM_MAAS):
            return None
        machine_zone = scope.machine.spec.failure_domain if scope.machine else None  # the CAPI Machine's
        return scope.want.failure_domain or machine_zone or None

    def _domains(self, scope: MachineScope) -> list[str]:
        """The cluster's failure domains (the MaasCluster's status)."""
        if scope.maascluster is None:
            return []
        cluster_status = MaasClusterStatus.model_validate(scope.maascluster.get("status") or {})
        return [d.name for d in cluster_status.failure_domains or () if d.name]

    def _zone_source(self, scope: MachineScope) -> str:
        if self._user_zone(scope):
            return ZONE_FROM_USER
        return ZONE_FROM_OPERATOR if self._domains(scope) else ZONE_FROM_MAAS

    @staticmethod
    def _asking(scope: MachineScope, port: MaasPort, constraints: maas.AllocateConstraints) -> Asking:
        return Asking.of(port.endpoint, f"{scope.namespace}/{scope.cluster_name}", constraints)

    def _constraints(self, scope: MachineScope, port: MaasPort) -> tuple[maas.AllocateConstraints, str]:
        """What to ask MAAS for, and where its zone comes from (``ZONE_FROM_*``): the user's or CAPI's zone;
        else the spread rule's choice among the cluster's failure domains; else no zone (MAAS chooses)."""
        spec = scope.want
        asked = maas.AllocateConstraints(
            cpu_count=spec.min_cpu,
            mem=spec.min_memory,
            tags=tuple(spec.tags or ()),
            pool=spec.resource_pool,
            not_pod_type=(LXD_POWER_TYPE,),
            **facts.selection(spec),
        )
        zone = self._user_zone(scope)
        if zone:
            return asked.model_copy(update={"zone": zone}), ZONE_FROM_USER
        domains = self._domains(scope)
        if not domains:
            return asked, ZONE_FROM_MAAS
        asking = self._asking(scope, port, asked)
        wet = [d for d in domains if not self.spread.is_dry(asking, d)]
        # The cluster's other machines per zone: placed ones where they are, the rest where this process chose
        # (an allocation in flight: its spec.failureDomain is not in the cache yet).
        tally = self.kube.zone_tally(scope.namespace, scope.cluster_name or "")
        counts = tally.counts(
            leave_out=scope.uid, chosen=self.spread.chosen_zone, chosen_uids=self.spread.chosen_uids()
        )
        zone = placement.choose_zone(counts, wet or domains, machine=scope.name)
        self.spread.remember_choice(scope.uid, zone)
        return asked.model_copy(update={"zone": zone}), ZONE_FROM_OPERATOR

    # --- following MAAS ----------------------------------------------------------------------------------
    async def unseen(self, scope: MachineScope, port: MaasPort, system_id: str) -> Requeue:
        if port.is_gone(system_id):
            return await self.give_back(scope, port, system_id, C.MACHINE_NOT_FOUND_REASON, "gone from MAAS")
        scope.set_condition(
            C.MACHINE_PROVISIONED_CONDITION,
            False,
            C.MACHINE_ALLOCATED_REASON,
            f"{system_id}: waiting for MAAS",
        )
        return Requeue()

    async def follow(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue | None:
        S = maas.NodeStatus
        scope.set_status(provisioning_mode=self.mode)
        if m.status == S.ALLOCATED and (scope.want.addresses or layout.wanted(scope)):
            return await self._prepare(scope, port, m)
        if m.status.deploy_path:  # the shared lifecycle's
            return None
        if m.status == S.FAILED_DEPLOYMENT:
            why = m.error_description or "Failed deployment"
            return await self.give_back(scope, port, m.system_id, C.DEPLOYMENT_FAILED_REASON, why)
        if m.status == S.BROKEN:
            why = m.error_description or "Broken"
            return await self.give_back(scope, port, m.system_id, C.MACHINE_BROKEN_REASON, why)
        if m.status.let_go or m.owner is None:
            # Released behind our back: it is no longer ours. Allocate another.
            return await self.give_back(
                scope, port, m.system_id, C.MACHINE_NOT_FOUND_REASON, "released in MAAS"
            )
        return None

    async def _prepare(self, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue | None:
        """Before the deploy: the server shaped (:mod:`~capmaas.reconcilers.layout`) and its addresses pinned
        (:mod:`~capmaas.reconcilers.addresses`); None hands it on to the deploy. What the server or MAAS
        refuses gives the server back (not broken), claims kept, the next one after a backoff."""
        known: list[addresses.Wanted] = []
        if scope.want.addresses:
            got = await addresses.wanted(scope, self.kube)
            if isinstance(got, str):  # a claim lost its address after the allocation: hold the server, wait
                scope.wait(C.WAITING_FOR_IP_ADDRESS_REASON, got)
                return Requeue(ADDRESS_WAIT)
            known = got
        if not await self.ownership.confirm(self, scope, port, m.system_id, "preparing it"):
            return Requeue(0.0)
        if layout.wanted(scope):
            try:
                m = await layout.apply(scope, port, m)
            except layout.Refused as exc:
                return await self._refused(scope, port, m.system_id, C.LAYOUT_REFUSED_REASON, str(exc))
        why = await addresses.pin(scope, port, m, known)
        if why is not None:
            return await self._refused(scope, port, m.system_id, C.IP_ADDRESS_REFUSED_REASON, why)
        scope.set_annotation(PREPARE_REFUSALS, None)
        return None

    async def _refused(self, scope: MachineScope, port: MaasPort, sid: str, reason: str, why: str) -> Requeue:
        """Give the server back for ``why`` (not its fault: not broken, not counted) and wait the backoff."""
        refusals = int(scope.annotation(PREPARE_REFUSALS) or 0) + 1
        scope.set_status(attempts=max(0, scope.attempts - 1))
        await self.give_back(scope, port, sid, reason, why)
        delay = self.settings.backoff(refusals - 1)
        scope.set_annotation(PREPARE_REFUSALS, str(refusals))
        scope.set_annotation(ALLOCATE_AFTER, f"{self.clock() + delay:.3f}@{scope.generation}")
        msg = f"{why}; released {sid} (not marked broken), the claims kept; next server in {int(delay) + 1}s"
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, msg)
        await scope.flush()
        return Requeue(delay)

    # --- giving back -------------------------------------------------------------------------------------
    async def give_back(
        self, scope: MachineScope, port: MaasPort, system_id: str, reason: str, why: str
    ) -> Requeue:
        """Release this machine (mark it broken if it failed to deploy); the next pass allocates another."""
        sid = system_id
        attempts = scope.attempts or 1
        broken = reason in (C.DEPLOYMENT_FAILED_REASON, C.DEPLOYMENT_TIMED_OUT_REASON)
        done = "marking it broken" if broken else "releasing it"
        scope.event("Warning", reason, f"MAAS machine {sid}: {why}; {done} (attempt {attempts})")
        if scope.annotation(REPLACING) != sid:
            scope.set_annotation(REPLACING, sid)
            await scope.flush()
        m = port.snapshot(sid)
        held = m is not None and m.owner is not None and m.status != maas.NodeStatus.READY
        if held and scope.proven != sid and not await self._holds(scope, port, sid):
            # No memory skips the lookup before a release or mark-broken: not held for us, nothing sent.
            held = False
            scope.event("Warning", "MachineNotOurs", f"MAAS machine {sid} is not held for us; nothing sent")
        with maas_step(f"releasing failed machine {sid}"):
            try:
                await addresses.unpin(scope, port, m if held else None)  # MAAS left clean for the next user
                if not held:
                    await layout.undo(scope, port, None)
                elif broken:
                    # mark_broken releases it *and* keeps it out of the pool, so it is not handed to us again;
                    # a Broken server's interfaces may be edited (not a Deploying/Failed one's): undo after.
                    await port.mark_broken(sid, comment=f"capmaas {scope.key}: {reason}: {why}")
                    await self._undo_or_say(scope, port, m)
                else:
                    await self._undo_or_say(scope, port, m)
                    await port.release(
                        sid, erase=False, secure_erase=False, quick_erase=False, comment=reason
                    )
            except maas_errors.NotFoundError:
                pass
        self.ownership.forget(self, scope, port, sid)
        limit = self.settings.max_deploy_attempts
        return await self.ownership.gave_back(self, scope, sid, reason, why, attempts=attempts, limit=limit)

    async def _undo_or_say(self, scope: MachineScope, port: MaasPort, m: maas.Machine | None) -> None:
        """Undo the layout on ``m`` now; when MAAS allows no interface edit in its state, say what is left."""
        left = layout.made_names(scope)
        if not await layout.undo(scope, port, m) and m is not None:
            scope.event(
                "Warning",
                "LayoutLeftOnServer",
                f"MAAS machine {m.system_id}: MAAS allows no interface edit while it is {m.status_name}; "
                f"{', '.join(left)} stay on it",
            )
            scope.set_annotation(LAYOUT_MADE, None)

    async def _clean_after_release(self, scope: MachineScope, port: MaasPort, sid: str) -> Requeue:
        """The server is released with bonds/VLANs capmaas made on it, which MAAS let nobody delete while it
        was Deployed: take it back at once (allocate by system ID, under this object's agent name), so the
        next pass finds it held and Allocated, undoes the layout and releases it again. If another user got
        it first, say so: its bonds and VLANs stay (MAAS offers no other way)."""
        left = layout.made_names(scope)
        with maas_step(f"taking {sid} back to remove its layout"):
            try:
                await port.allocate(
                    maas.AllocateConstraints(system_id=sid, not_pod_type=(LXD_POWER_TYPE,)),
                    agent_name=agent_name(scope),
                    comment=f"capmaas {scope.key}: removing {', '.join(left)}",
                )
            except (maas_errors.NoMachineAvailableError, maas_errors.ConflictError) as exc:
                port.unwatch(sid)
                scope.set_annotation(LAYOUT_MADE, None)
                scope.event(
                    "Warning",
                    "LayoutLeftOnServer",
                    f"MAAS machine {sid} was taken before capmaas could remove {', '.join(left)} ({exc})",
                )
                return Finished()
        scope.set_deletion(C.RELEASING_REASON, f"{sid}: taken back to remove {', '.join(left)}")
        return Requeue(0.0)

    def forgotten(self, scope: MachineScope) -> None:
        """Status follows the machine held: none until the next one is seen (its state, power, host name and
        zone fill in then), not the one given back; a replacement under way is over."""
        scope.set_annotation(REPLACING, None)
        scope.set_annotation(ADOPTED, None)  # adoption hook: the record goes with the machine
        scope.set_status(machine_state=None, machine_powered=None, hostname=None, failure_domain=None)
        if not scope.ready:
            scope.set_status(addresses=None)

    async def _still_ours(self, scope: MachineScope, port: MaasPort, sid: str) -> maas.Machine | None:
        """After an interrupted replacement: the machine if MAAS still holds it under our agent name, else
        None (given back already, and maybe someone else's by now: not to be touched)."""
        if adoption.adopted(scope) == sid:  # adoption hook: held by our marker, not an agent name
            return await self.adopter.held(scope, port, sid, agent_name(scope))
        with maas_step("checking an interrupted replacement"):
            found = await port.find_by_agent(agent_name(scope))
        return next((m for m in found if m.system_id == sid), None)

    # --- delete ------------------------------------------------------------------------------------------
    async def delete(self, scope: MachineScope, port: MaasPort) -> Requeue:
        """Release the machine, wait for MAAS (the shared poller) to confirm, then finish."""
        sid = scope.want.system_id
        if not sid and scope.annotation(ALLOCATING):
            found = await self._held(scope, port, "looking up an earlier allocation")
            if found:  # the rest (if several) are released below, before this one
                sid = sorted(found, key=lambda m: m.system_id)[0].system_id
                scope.set_spec(system_id=sid)
            scope.set_annotation(ALLOCATING, None)
            await scope.flush()
        if not sid and adoption.adopted(scope):  # adoption hook: never recorded, so never ours: marker off
            await self.adopter.abandon(scope, port, agent_name(scope))
        if not sid:
            return Finished()
        if scope.annotation(REPLACING) == sid:
            if await self._still_ours(scope, port, sid) is None:
                port.unwatch(
                    sid
                )  # given back before the last pass ended (maybe someone else's now): not ours
                return Finished()
            scope.set_annotation(REPLACING, None)
        port.watch(sid, scope.key)
        m = port.snapshot(sid)
        if m is None and not port.is_gone(sid):
            scope.set_deletion(C.DELETING_REASON, f"{sid}: waiting for MAAS state")
            return Requeue()
        if m is not None and m.status == maas.NodeStatus.READY and scope.annotation(LAYOUT_MADE):
            return await self._clean_after_release(scope, port, sid)
        if m is None or m.status.released or (m.owner is None and not m.status.releasing):
            port.unwatch(sid)
            if m is not None and m.status.released:  # node reuse hook: recorded for its owner, if kept
                await self.reuse.released(scope, port, sid)
            scope.event("Normal", "MachineReleased", f"MAAS machine {sid} released")
            return Finished()
        scope.set_status(machine_state=m.status_name or m.status.name)
        if m.status.releasing:
            scope.set_deletion(C.RELEASING_REASON, f"{sid}: {m.status_name}")
            return Requeue()
        if (hosting := await vmhost.clear_for_release(scope, port, m, agent_name(scope))) is not None:
            return hosting
        opts = scope.want.release_options or ReleaseOptions()
        if self.reuse.releasing_for(scope) is not None:  # node reuse hook: released without erase
            opts = reuse.keeping(opts)
        # The ownership test, once, right before the only MAAS write of a deletion: spec.systemID is just a
        # field of an object someone created; MAAS must show the machine held under this object's agent name.
        # Shared with the other deletions under way (one list call for many).
        held: Sequence[maas.Machine]
        if adoption.adopted(scope) == sid:  # adoption hook: held by the marker; nothing under the agent name
            held = [x] if (x := await self.adopter.held(scope, port, sid, agent_name(scope))) else []
        else:
            with maas_step(f"checking who holds {sid}"):
                held = await port.find_for_release(agent_name(scope), sid)
        if sid not in {m.system_id for m in held}:
            if await self._releasing_unseen(port, sid):
                scope.set_deletion(C.RELEASING_REASON, f"{sid}: MAAS is releasing it")
                return Requeue(RELEASE_QUIET)
            port.unwatch(sid)
            scope.event(
                "Warning",
                "MachineNotOurs",
                f"MAAS machine {sid} is not held under this MaasMachine's agent name; "
                "forgetting it, nothing released",
            )
            return Finished()
        if opts.force and (hosting := await vmhost.vms_hosted(scope, port, sid)) is not None:
            return hosting  # force would have MAAS remove VM hosts that still carry someone's VMs
        await self._release_extra(scope, port, [m for m in held if m.system_id != sid], opts)
        await addresses.unpin(scope, port, m)  # proven ours above: its pins go before the release
        # The bonds and VLANs capmaas made, now if MAAS allows (not while Deployed: then after the release).
        await layout.undo(scope, port, m)
        with maas_step(f"releasing {sid}"):
            try:
                await port.release(
                    sid,
                    erase=bool(opts.erase),
                    secure_erase=bool(opts.secure_erase),
                    quick_erase=bool(opts.quick_erase),
                    comment=f"capmaas {scope.key} deleted",
                    scripts=opts.scripts or (),
                    force=bool(opts.force),
                )
            except maas_errors.NotFoundError:
                return Finished()
            except maas_errors.ConflictError as exc:
                scope.set_deletion(C.RELEASING_REASON, f"{sid}: release refused: {exc}")
                return Requeue(30.0)
            except maas_errors.BadRequestError as exc:
                if exc.field_errors and exc.hosted_vm_hosts is None:
                    # The release form itself (spec.releaseOptions): a person must fix it; the machine stays
                    # held.
                    msg = (
                        f"MAAS refused to release {sid} with spec.releaseOptions: "
                        f"{facts.refusal_text(exc.field_errors)}; the machine stays held until they are fixed"
                    )
                    if scope.condition_reason(C.READY_CONDITION) != C.RELEASE_REFUSED_REASON:
                        scope.event("Warning", C.RELEASE_REFUSED_REASON, msg)
                    scope.set_deletion(C.RELEASE_REFUSED_REASON, msg)
                    return Requeue(RELEASE_REFUSED_RETRY)
                raise
        # No Event for the request itself: the condition says it, and MachineReleased follows when MAAS
        # confirms (one Event fewer per machine lifecycle). Nor a status write, unless MAAS takes longer than
        # RELEASE_QUIET: a quick release is confirmed by the write that removes the finalizer (and the
        # object); a slow one (disk erasing) says "Releasing" from the next pass on (docs/scaling.md).
        scope.set_deletion(C.RELEASING_REASON, f"{sid}: release requested")
        scope.hold_status()
        return Requeue(RELEASE_QUIET)
