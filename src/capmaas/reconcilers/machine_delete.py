"""MaasMachine deletion: release the MAAS machine, wait for MAAS to confirm, then drop the finalizer.

Hands off (nothing sent to MAAS) when the object carries ``clusterctl.cluster.x-k8s.io/delete-for-move``
(clusterctl is moving it to another management cluster, the machine lives on) or when the cluster is paused.
The confirmation comes from the shared poller, not from a GET per pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import machine_replace
from capmaas.reconcilers.credentials import maas_failure
from capmaas.reconcilers.scope import DELETE_FOR_MOVE_ANNOTATION, Requeue, is_paused

if TYPE_CHECKING:
    from capmaas.reconcilers.machine import MachineReconciler, MachineScope
    from capmaas.reconcilers.ports import MaasPort

RELEASED = frozenset({maas.NodeStatus.READY, maas.NodeStatus.NEW, maas.NodeStatus.BROKEN})
IN_PROGRESS = frozenset({maas.NodeStatus.RELEASING, maas.NodeStatus.DISK_ERASING})


async def start(r: MachineReconciler, scope: MachineScope, kept: str) -> MaasPort | None:
    """The first steps of both deletions (bare metal and LXD). None means hands off: the finalizer is not ours
    (any more), clusterctl is moving the object (``kept`` names what lives on in MAAS), or the cluster is
    paused. Otherwise the MAAS session to delete with."""
    from capmaas.reconcilers.machine import FINALIZER

    if FINALIZER not in scope.finalizers:
        return None
    if DELETE_FOR_MOVE_ANNOTATION in scope.annotations:
        scope.set_condition(C.READY_CONDITION, False, C.DELETE_FOR_MOVE_REASON, f"moved; {kept} kept")
        scope.remove_finalizer(FINALIZER)
        return None
    r.load(scope)
    paused, why = is_paused(scope.body, scope.cluster)
    scope.set_paused_condition(paused, why)
    if paused:
        return None
    return await r.session(scope)


def finished(r: MachineReconciler, scope: MachineScope) -> Requeue:
    """Nothing of ours is left in MAAS: drop the finalizer (the object goes) and its phase metric."""
    from capmaas.reconcilers.machine import FINALIZER

    scope.remove_finalizer(FINALIZER)
    r.recorder.machine_phase(scope.key, None)
    return Requeue()


async def reconcile_delete(r: MachineReconciler, scope: MachineScope) -> Requeue:
    from capmaas.reconcilers.machine import ALLOCATING

    port = await start(r, scope, "MAAS machine")
    if port is None:
        return Requeue()
    sid = scope.spec.get("systemID")
    if not sid and scope.annotation(ALLOCATING):
        try:
            found = await port.find_by_agent(scope.uid)
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, "looking up an earlier allocation") from exc
        if found:
            sid = found[0].system_id
            scope.set_spec(systemID=sid)
        scope.set_annotation(ALLOCATING, None)
        await scope.flush()
    if not sid:
        return finished(r, scope)
    if machine_replace.interrupted(scope, sid):
        if await machine_replace.still_ours(scope, port, sid) is None:
            port.unwatch(sid)  # given back before the last pass ended (maybe someone else's now): not ours
            return finished(r, scope)
        scope.set_annotation(machine_replace.REPLACING, None)
    port.watch(sid, scope.key)
    m = port.snapshot(sid)
    if m is None and not port.is_gone(sid):
        scope.set_condition(C.READY_CONDITION, False, C.DELETING_REASON, f"{sid}: waiting for MAAS state")
        return Requeue()
    if m is None or m.status in RELEASED or (m.owner is None and m.status not in IN_PROGRESS):
        port.unwatch(sid)
        r._released.discard(sid)
        scope.event("Normal", "MachineReleased", f"MAAS machine {sid} released")
        return finished(r, scope)
    scope.status["machineState"] = m.status_name or m.status.name
    if m.status in IN_PROGRESS:
        scope.set_condition(C.READY_CONDITION, False, C.RELEASING_REASON, f"{sid}: {m.status_name}")
        return Requeue()
    opts = scope.spec.get("releaseOptions") or {}
    try:
        await port.release(
            sid,
            erase=bool(opts.get("erase")),
            secure_erase=bool(opts.get("secureErase")),
            quick_erase=bool(opts.get("quickErase")),
            comment=f"capmaas {scope.key} deleted",
        )
    except maas_errors.NotFoundError:
        return finished(r, scope)
    except maas_errors.ConflictError as exc:
        scope.set_condition(C.READY_CONDITION, False, C.RELEASING_REASON, f"{sid}: release refused: {exc}")
        return Requeue(30.0)
    except maas_errors.MaasError as exc:
        raise maas_failure(exc, None, f"releasing {sid}") from exc
    r._released.add(sid)
    # No Event for the request itself: the condition says it, and MachineReleased follows when MAAS confirms
    # (one Event fewer per machine lifecycle).
    scope.set_condition(C.READY_CONDITION, False, C.RELEASING_REASON, f"{sid}: release requested")
    return Requeue()
