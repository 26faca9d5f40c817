"""LXD MaasMachines (``provisioningMode: lxd``): place → reserve → compose → commission → allocate → deploy.

The VM is composed on a MAAS VM host chosen by :mod:`capmaas.placement`, then handled like a bare-metal
machine: allocated by system ID with ``agent_name`` = the MaasMachine UID, deployed with the bootstrap data,
Ready once Deployed and powered on. Deleting the MaasMachine deletes the machine in MAAS, which decomposes the
VM and gives its cores, memory and disk back to the host.

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capmaas import maas, placement
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.credentials import maas_failure
from capmaas.reconcilers.errors import TerminalError, TransientError
from capmaas.reconcilers.lxd_placer import (
    HOST_ID_ANNOTATION,
    Listing,
    existing_placements,
    interfaces,
    vm_hostname,
    vm_request,
)
from capmaas.reconcilers.machine_facts import _bootstrap_secret, detect_format, distro_series
from capmaas.reconcilers.ports import MaasPort
from capmaas.reconcilers.scope import ANNOTATION_PREFIX, Requeue

if TYPE_CHECKING:
    from capmaas.reconcilers.machine import MachineReconciler, MachineScope

LXD = "lxd"
COMPOSING = "composing"
DECOMPOSING = "decomposing"
DEPLOY_STARTED = "deploy-started"
#: The MAAS ``agent_name`` the VM is held under: the UID at allocation. A ``clusterctl move`` recreates the
#: MaasMachine with a new UID but keeps its annotations, so this is how the target still knows the VM is ours.
AGENT_NAME = "agent-name"
#: Hosts tried per pass when MAAS refuses composes (over-commit 503, host gone).
MAX_COMPOSE_TRIES = 3
#: Longest wait between placement attempts while nothing fits (capacity may free at any time).
MAX_NO_FIT_DELAY = 30.0
#: Seconds after a delete before asking MAAS again if the VM still shows up.
DECOMPOSE_RECHECK = 30.0
_CREATING = frozenset({maas.NodeStatus.NEW, maas.NodeStatus.COMMISSIONING, maas.NodeStatus.TESTING})
_FAILED = frozenset(
    {
        maas.NodeStatus.FAILED_COMMISSIONING,
        maas.NodeStatus.FAILED_TESTING,
        maas.NodeStatus.FAILED_DEPLOYMENT,
        maas.NodeStatus.BROKEN,
    }
)


def is_lxd(spec: dict[str, Any]) -> bool:
    return spec.get("provisioningMode") == LXD


def provider_id(zone: str, system_id: str) -> str:
    return f"maas-lxd://{zone}/{system_id}"


def _project(scope: MachineScope) -> str:
    return str((scope.spec.get("lxdConfig") or {}).get("project") or "default")


def _gone_error(exc: maas_errors.MaasError, endpoint: str) -> TerminalError:
    return TerminalError(
        C.VM_HOSTS_UNSUPPORTED_REASON,
        f"MAAS at {endpoint} has no VM-host API (HTTP 410: {exc}); MAAS 4.0 removed LXD VM hosts, so "
        "provisioningMode lxd needs MAAS 3.x",
    )


# --- normal ----------------------------------------------------------------------------------------------
async def reconcile(r: MachineReconciler, scope: MachineScope, port: MaasPort) -> Requeue:
    """One pass for an LXD MaasMachine whose owner, cluster and bootstrap data are in place."""
    scope.status["provisioningMode"] = LXD
    scope.status["lxdProject"] = _project(scope)
    sid = scope.spec.get("systemID")
    if not sid:
        sid = await _place_and_compose(r, scope, port)
    port.watch(sid, scope.key)
    m = port.snapshot(sid)
    if m is None:
        if port.is_gone(sid):
            return await _start_over(
                r, scope, port, sid, C.MACHINE_NOT_FOUND_REASON, why="the VM is gone from MAAS"
            )
        _creating(scope, f"{sid}: composed, waiting for MAAS to report it")
        return Requeue()
    return await _follow(r, scope, port, m)


def _creating(scope: MachineScope, message: str) -> None:
    scope.set_condition(C.LXD_VM_CREATED_CONDITION, False, C.VM_COMMISSIONING_REASON, message)
    scope.set_condition(C.LXD_VM_DEPLOYED_CONDITION, False, C.VM_COMMISSIONING_REASON, message)
    scope.wait(C.VM_COMMISSIONING_REASON, message)


def _no_fit_delay(r: MachineReconciler, uid: str) -> float:
    n = r.lxd.waits.get(uid, 0) + 1
    r.lxd.waits[uid] = n
    cap = min(MAX_NO_FIT_DELAY, r.settings.retry_max)
    return float(min(cap, r.settings.retry_base * 2 ** (n - 1)))


async def _adopt(r: MachineReconciler, scope: MachineScope, port: MaasPort, hostname: str) -> str | None:
    """The VM an earlier pass composed under our hostname, recorded as ours; None when there is none."""
    try:
        found = await port.find_by_hostname(hostname)
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, f"looking up VM {hostname}") from exc
    if not found:
        return None
    m = found[0]
    scope.event("Normal", "VMAdopted", f"adopted VM {m.system_id} ({hostname}) composed earlier")
    _record(r, scope, port.endpoint, m.system_id, zone=m.zone.name, host=m.pod.name if m.pod else None)
    if m.pod is not None:
        scope.set_annotation(HOST_ID_ANNOTATION, str(m.pod.id))
    await scope.flush()
    return m.system_id


def _record(
    r: MachineReconciler, scope: MachineScope, endpoint: str, sid: str, *, zone: str, host: str | None
) -> None:
    scope.set_spec(systemID=sid, providerID=provider_id(zone, sid), failureDomain=zone)
    scope.set_annotation(COMPOSING, None)
    scope.set_annotation(DEPLOY_STARTED, None)
    if host:
        scope.status["lxdHost"] = host
    r.lxd.book(endpoint).composed(scope.uid, at=r.lxd.clock())


async def _listing(r: MachineReconciler, scope: MachineScope, port: MaasPort, fresh: bool) -> Listing:
    try:
        return await r.lxd.listing(port.endpoint, port, fresh=fresh)
    except maas_errors.GoneError as exc:
        err = _gone_error(exc, port.endpoint)
        scope.set_condition(C.LXD_HOST_SELECTED_CONDITION, False, err.reason, err.message)
        raise err from exc
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, "listing VM hosts") from exc


async def _place_and_compose(r: MachineReconciler, scope: MachineScope, port: MaasPort) -> str:
    hostname = vm_hostname(scope.name, scope.uid)
    if scope.annotation(COMPOSING):
        adopted = await _adopt(r, scope, port, hostname)
        if adopted:
            return adopted
    attempts = int(scope.status.get("attempts") or 0)
    if attempts >= r.settings.max_deploy_attempts:
        raise TerminalError(
            C.RETRIES_EXHAUSTED_REASON, f"{attempts} VMs tried; delete the Machine to try again"
        )
    book = r.lxd.book(port.endpoint)
    request = vm_request(scope.body, scope.spec, scope.machine, f"{scope.namespace}/{scope.cluster_name}")
    refused: dict[int, str] = {}
    fresh = False
    for _ in range(MAX_COMPOSE_TRIES):
        listing = await _listing(r, scope, port, fresh)
        siblings = r.kube.list_maasmachines(scope.namespace, scope.cluster_name or "")
        existing = existing_placements(siblings, scope.uid, listing, ANNOTATION_PREFIX)
        candidates = [c for c in listing.candidates if c.id not in refused]
        # No await between placing and reserving: ``place`` does both.
        result = book.place(request, candidates, existing, snapshot_at=listing.fetched_at)
        if isinstance(result, placement.NoFit):
            raise _no_fit(r, scope, result, listing, refused)
        r.lxd.waits.pop(scope.uid, None)
        sid = await _compose(r, scope, port, listing=listing, p=result, hostname=hostname, refused=refused)
        if sid is not None:
            return sid
        r.lxd.invalidate(port.endpoint)
        fresh = True
    notes = "; ".join(f"{listing.hosts[h].name}: {why}" for h, why in refused.items() if h in listing.hosts)
    raise TransientError(
        C.VM_COMPOSE_FAILED_REASON, f"MAAS refused the compose on every chosen host: {notes}", delay=5.0
    )


def _no_fit(
    r: MachineReconciler,
    scope: MachineScope,
    result: placement.NoFit,
    listing: Listing,
    refused: dict[int, str],
) -> TransientError:
    parts = [result.message]
    parts += [f"{listing.hosts[h].name} refused the compose ({why})" for h, why in refused.items()]
    if listing.ignored:
        parts.append("not LXD VM hosts: " + ", ".join(listing.ignored))
    message = "; ".join(parts) + "; waiting for capacity"
    scope.set_condition(C.LXD_HOST_SELECTED_CONDITION, False, C.NO_VM_HOST_AVAILABLE_REASON, message)
    scope.set_condition(
        C.LXD_RESOURCES_ALLOCATED_CONDITION, False, C.NO_VM_HOST_AVAILABLE_REASON, "nothing reserved"
    )
    return TransientError(C.NO_VM_HOST_AVAILABLE_REASON, message, delay=_no_fit_delay(r, scope.uid))


async def _compose(
    r: MachineReconciler,
    scope: MachineScope,
    port: MaasPort,
    *,
    listing: Listing,
    p: placement.Placement,
    hostname: str,
    refused: dict[int, str],
) -> str | None:
    """Compose on the placed host. None: MAAS refused this host (the caller places again)."""
    book = r.lxd.book(port.endpoint)
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
        interfaces=interfaces(scope.spec),
        hostname=hostname,
        zone=host.zone.id if host.zone else None,
        pool=host.pool.id if host.pool else None,
    )
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
            adopted = await _adopt(r, scope, port, hostname)
            if adopted:
                return adopted
        book.release(scope.uid)
        scope.set_annotation(COMPOSING, None)
        message = f"MAAS refused to compose on {p.host_name}: {_short(exc)}"
        scope.set_condition(C.LXD_VM_CREATED_CONDITION, False, C.VM_COMPOSE_FAILED_REASON, message)
        raise TerminalError(C.VM_COMPOSE_FAILED_REASON, message) from exc
    except maas_errors.MaasError as exc:
        # It may have happened: keep the annotation (the next pass looks the hostname up) and the reservation.
        raise maas_failure(exc, None, f"composing on {p.host_name}") from exc
    scope.status["attempts"] = int(scope.status.get("attempts") or 0) + 1
    _record(r, scope, port.endpoint, composed.system_id, zone=p.zone, host=p.host_name)
    scope.status["vmResourceUsage"] = {
        "allocatedCores": p.cores,
        "allocatedMemory": p.memory_mib,
        "allocatedDisk": p.disk_gb,
    }
    scope.event("Normal", "VMComposed", f"composed VM {composed.system_id} ({hostname}) on {p.host_name}")
    await scope.flush()
    _creating(scope, f"{composed.system_id}: composed on {p.host_name}, commissioning")
    return composed.system_id


def _short(exc: maas_errors.MaasError) -> str:
    body = getattr(exc, "body", None)
    text = body if isinstance(body, str) and body else str(exc)
    return text.strip()[:400]


# --- following the VM ------------------------------------------------------------------------------------
async def _follow(r: MachineReconciler, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
    S = maas.NodeStatus
    scope.status.update(
        machineState=m.status_name or m.status.name,
        machinePowered=m.power_state == maas.PowerState.ON,
        hostname=m.hostname,
        failureDomain=m.zone.name,
    )
    if m.pod is not None:
        scope.status["lxdHost"] = m.pod.name
    if m.cpu_count:
        scope.status["vmResourceUsage"] = {
            "allocatedCores": m.cpu_count,
            "allocatedMemory": m.memory,
            "allocatedDisk": round(m.storage / 1000),
        }
    if m.status in _CREATING:
        _creating(scope, f"{m.system_id}: {m.status_name or m.status.name}")
        return Requeue()
    if m.status in _FAILED:
        why = m.error_description or m.status_name or m.status.name
        return await _start_over(r, scope, port, m.system_id, C.DEPLOYMENT_FAILED_REASON, why=why)
    scope.set_condition(C.LXD_VM_CREATED_CONDITION, True, C.VM_COMPOSED_REASON, f"{m.system_id} commissioned")
    if m.status == S.READY:
        return await _allocate(r, scope, port, m)
    if not await _ours(r, scope, port, m):
        return await _start_over(
            r,
            scope,
            port,
            m.system_id,
            C.MACHINE_NOT_FOUND_REASON,
            why="taken by another allocation",
            own=False,
        )
    if m.status == S.ALLOCATED:
        return await _deploy(r, scope, port, m)
    if m.status == S.DEPLOYING:
        started = float(scope.annotation(DEPLOY_STARTED) or r.clock())
        if r.clock() - started > r.settings.deploy_timeout:
            why = f"still Deploying after {int(r.settings.deploy_timeout)}s"
            return await _start_over(r, scope, port, m.system_id, C.DEPLOYMENT_TIMED_OUT_REASON, why=why)
        _deploying(scope, m.system_id)
        return Requeue(max(1.0, started + r.settings.deploy_timeout - r.clock()))
    if m.status == S.DEPLOYED:
        scope.set_condition(
            C.LXD_VM_DEPLOYED_CONDITION, True, C.MACHINE_DEPLOYED_REASON, f"{m.system_id} deployed"
        )
        return await r._deployed(scope, port, m)
    scope.set_condition(
        C.MACHINE_PROVISIONED_CONDITION, "Unknown", C.MACHINE_DEPLOYING_REASON, f"MAAS state {m.status_name}"
    )
    return Requeue(r.settings.retry_base * 6)


def _deploying(scope: MachineScope, sid: str) -> None:
    msg = f"{sid} deploying"
    scope.set_condition(C.LXD_VM_DEPLOYED_CONDITION, False, C.MACHINE_DEPLOYING_REASON, msg)
    scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_DEPLOYING_REASON, msg)
    scope.set_condition(C.READY_CONDITION, False, C.MACHINE_DEPLOYING_REASON, msg)


async def _ours(r: MachineReconciler, scope: MachineScope, port: MaasPort, m: maas.Machine) -> bool:
    """Whether the allocated VM is held under our UID, or under the agent name recorded when it was allocated
    (a moved MaasMachine has a new UID); checked once per process, then remembered. Recording the agent name
    found also covers objects allocated before the annotation existed, ahead of any move."""
    if (scope.uid, m.system_id) in r.lxd.allocated:
        return True
    recorded = scope.annotation(AGENT_NAME)
    for agent in dict.fromkeys(a for a in (scope.uid, recorded) if a):
        try:
            mine = {x.system_id for x in await port.find_by_agent(agent)}
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, "checking who holds the VM") from exc
        if m.system_id in mine:
            r.lxd.allocated.add((scope.uid, m.system_id))
            scope.set_annotation(AGENT_NAME, agent)
            return True
    return False


async def _allocate(r: MachineReconciler, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
    """Take the commissioned VM by system ID under our UID, so it is ours like an allocated bare-metal one."""
    try:
        new = await port.allocate(
            maas.AllocateConstraints(system_id=m.system_id),
            agent_name=scope.uid,
            comment=f"capmaas {scope.key}",
        )
    except maas_errors.ConflictError as exc:
        if await _ours(r, scope, port, m):
            return Requeue(0.0)
        raise TransientError(
            C.MACHINE_ALLOCATED_REASON, f"{m.system_id}: allocate refused ({exc}); retrying", delay=5.0
        ) from exc
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, f"allocating VM {m.system_id}") from exc
    r.lxd.allocated.add((scope.uid, new.system_id))
    scope.set_annotation(AGENT_NAME, scope.uid)
    scope.event("Normal", "VMAllocated", f"VM {new.system_id} allocated")
    return await _deploy(r, scope, port, new)


async def _deploy(r: MachineReconciler, scope: MachineScope, port: MaasPort, m: maas.Machine) -> Requeue:
    assert scope.machine is not None
    secret_name = _bootstrap_secret(scope.machine)
    data = await r.kube.read_secret_fresh(scope.namespace, secret_name) if secret_name else None
    if data is None or not data.get("value"):
        raise TransientError(
            C.WAITING_FOR_BOOTSTRAP_DATA_REASON,
            f"bootstrap Secret {secret_name} is missing or has no 'value'",
            delay=10,
        )
    try:
        new = await port.deploy(
            m.system_id,
            user_data=data["value"],
            distro_series=distro_series(scope.spec.get("image")),
            hwe_kernel=scope.spec.get("hweKernel"),
            ephemeral_deploy=bool(scope.spec.get("deployInMemory")),
            comment=f"capmaas {scope.key}",
        )
    except maas_errors.ConflictError as exc:
        raise TransientError(C.MACHINE_DEPLOYING_REASON, f"deploy refused: {exc}", delay=5) from exc
    except maas_errors.BadRequestError as exc:
        return await _start_over(r, scope, port, m.system_id, C.DEPLOYMENT_FAILED_REASON, why=_short(exc))
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, "deploying the VM") from exc
    scope.set_annotation(DEPLOY_STARTED, str(r.clock()))
    scope.event(
        "Normal", "MachineDeploying", f"deploying VM {m.system_id} with {detect_format(data)} user data"
    )
    _deploying(scope, m.system_id)
    scope.status["machineState"] = new.status_name or new.status.name
    return Requeue(r.settings.deploy_timeout)


async def _start_over(
    r: MachineReconciler,
    scope: MachineScope,
    port: MaasPort,
    sid: str,
    reason: str,
    *,
    why: str,
    own: bool = True,
) -> Requeue:
    """Give up on this VM (decomposing it if it is ours) and place a new one on the next pass."""
    attempts = int(scope.status.get("attempts") or 1)
    scope.event("Warning", reason, f"VM {sid}: {why}; composing another (attempt {attempts})")
    if own:
        try:
            await port.delete_machine(sid)
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, f"decomposing failed VM {sid}") from exc
        r.lxd.invalidate(port.endpoint)
    port.unwatch(sid)
    r.lxd.book(port.endpoint).release(scope.uid)
    scope.set_spec(systemID=None, providerID=None)
    scope.set_annotation(DEPLOY_STARTED, None)
    scope.set_annotation(HOST_ID_ANNOTATION, None)
    scope.set_annotation(AGENT_NAME, None)
    scope.status.pop("lxdHost", None)
    scope.status.pop("vmResourceUsage", None)
    scope.set_condition(C.LXD_VM_CREATED_CONDITION, False, reason, f"{sid}: {why}")
    if attempts >= r.settings.max_deploy_attempts:
        await scope.flush()
        raise TerminalError(C.RETRIES_EXHAUSTED_REASON, f"{attempts} VMs tried; last: {why}")
    scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, f"{sid}: {why}; composing another")
    await scope.flush()
    return Requeue(0.0)


# --- delete ----------------------------------------------------------------------------------------------
async def reconcile_delete(r: MachineReconciler, scope: MachineScope) -> Requeue:
    """Delete the VM in MAAS (decompose): see :mod:`capmaas.reconcilers.lxd_delete`."""
    from capmaas.reconcilers import lxd_delete

    return await lxd_delete.reconcile_delete(r, scope)
