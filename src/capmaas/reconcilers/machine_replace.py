"""Giving a MaasMachine's MAAS machine back (failed, broken, timed out, gone) so that the next pass allocates
another, crash-safe.

Why the ``…/replacing`` annotation: a released machine is back in MAAS's pool at once, and another
MaasMachine's allocate can take it within milliseconds. Should this process die (or the spec write fail)
after the release but before ``spec.systemID`` is cleared, the next pass would find the old system ID and see
that machine Allocated or Deployed - for its new holder, under the same MAAS user - and take it for its own:
two MaasMachines on one machine, and deleting this one would release the other's. MAAS's machine JSON does
not show ``agent_name``, so the shared poller's snapshot cannot tell. Hence the system ID being given back is
written down first (one metadata patch, only on this rare path) and cleared together with the system ID; a
pass that finds it asks MAAS for the machines held under our UID before it touches that machine again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.credentials import maas_failure
from capmaas.reconcilers.errors import TerminalError
from capmaas.reconcilers.scope import Requeue

if TYPE_CHECKING:
    from capmaas.reconcilers.machine import MachineReconciler, MachineScope
    from capmaas.reconcilers.ports import MaasPort

#: Annotation (under the capmaas prefix): the system ID being given back.
REPLACING = "replacing"


async def replace(
    r: MachineReconciler, scope: MachineScope, port: MaasPort, sid: str, *, reason: str, why: str
) -> Requeue:
    """Give this machine back (broken if it failed to deploy); the next pass allocates another."""
    attempts = int(scope.status.get("attempts") or 1)
    scope.event("Warning", reason, f"MAAS machine {sid}: {why}; releasing it (attempt {attempts})")
    if scope.annotation(REPLACING) != sid:
        scope.set_annotation(REPLACING, sid)
        await scope.flush()
    m = port.snapshot(sid)
    try:
        if m is not None and m.owner is not None and m.status != maas.NodeStatus.READY:
            if reason in (C.DEPLOYMENT_FAILED_REASON, C.DEPLOYMENT_TIMED_OUT_REASON):
                # mark_broken releases it *and* keeps it out of the pool, so it is not handed to us again.
                await port.mark_broken(sid, comment=f"capmaas {scope.key}: {reason}")
            else:
                await port.release(sid, erase=False, secure_erase=False, quick_erase=False, comment=reason)
    except maas_errors.NotFoundError:
        pass
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, f"releasing failed machine {sid}") from exc
    forget(scope, port, sid)
    if attempts >= r.settings.max_deploy_attempts:
        await scope.flush()
        raise TerminalError(C.RETRIES_EXHAUSTED_REASON, f"{attempts} MAAS machines tried; last: {why}")
    scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, f"{sid}: {why}; allocating another")
    await scope.flush()
    return Requeue(0.0)


def forget(scope: MachineScope, port: MaasPort, sid: str) -> None:
    """Drop ``sid`` from the MaasMachine (written with the next flush) and from the poller."""
    from capmaas.reconcilers.machine import DEPLOY_STARTED

    port.unwatch(sid)
    scope.set_spec(systemID=None, providerID=None)
    scope.set_annotation(DEPLOY_STARTED, None)
    scope.set_annotation(REPLACING, None)
    if not scope.status.get("ready"):
        scope.status.pop("addresses", None)


def interrupted(scope: MachineScope, sid: str) -> bool:
    """Whether a replacement of ``sid`` was under way when the last pass ended early."""
    return scope.annotation(REPLACING) == sid


def agent_name(scope: MachineScope) -> str:
    """The MAAS ``agent_name`` this MaasMachine allocates under: its UID, kept in the ``…/agent-name``
    annotation from the first allocation on. ``clusterctl move`` recreates the object with a new UID but keeps
    its annotations, so the moved object still finds what it allocated (an earlier allocate whose answer was
    lost, or a machine an interrupted replacement had not yet given back)."""
    from capmaas.reconcilers.lxd import AGENT_NAME

    return scope.annotation(AGENT_NAME) or scope.uid


async def still_ours(scope: MachineScope, port: MaasPort, sid: str) -> maas.Machine | None:
    """After an interrupted replacement: the machine if MAAS still holds it under our agent name, else None
    (given back already, and maybe someone else's by now: not to be touched)."""
    try:
        found = await port.find_by_agent(agent_name(scope))
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, "checking an interrupted replacement") from exc
    return next((m for m in found if m.system_id == sid), None)
