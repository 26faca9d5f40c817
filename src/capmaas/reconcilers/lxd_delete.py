"""Deleting an LXD MaasMachine: delete its VM in MAAS (which decomposes it), confirm MAAS no longer lists it.

MAAS answers the delete at once and decomposes afterwards; the machine disappearing from MAAS (seen by the
shared poller, not by a GET per pass) is the confirmation that the VM and its resources are gone. The
reservation of a machine deleted mid-placement is dropped first, so its capacity is free for others at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import machine_delete
from capmaas.reconcilers.credentials import maas_failure
from capmaas.reconcilers.lxd import COMPOSING, DECOMPOSE_RECHECK, DECOMPOSING, _adopt
from capmaas.reconcilers.lxd_placer import vm_hostname
from capmaas.reconcilers.scope import Requeue

if TYPE_CHECKING:
    from capmaas.reconcilers.machine import MachineReconciler, MachineScope


async def reconcile_delete(r: MachineReconciler, scope: MachineScope) -> Requeue:
    """Delete the VM in MAAS (decompose), wait until MAAS no longer lists it, then drop the finalizer."""
    port = await machine_delete.start(r, scope, "VM")
    if port is None:
        return Requeue()
    r.lxd.book(port.endpoint).release(scope.uid)
    r.lxd.waits.pop(scope.uid, None)
    sid = scope.spec.get("systemID")
    if not sid and scope.annotation(COMPOSING):
        sid = await _adopt(r, scope, port, vm_hostname(scope.name, scope.uid))
        scope.set_annotation(COMPOSING, None)
        await scope.flush()
    if not sid:
        return _deleted(r, scope, None)
    requested = scope.annotation(DECOMPOSING)
    if requested is None or r.clock() - float(requested) > DECOMPOSE_RECHECK:
        try:
            known = await port.delete_machine(sid)
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, f"decomposing VM {sid}") from exc
        r.lxd.invalidate(port.endpoint)
        if not known:
            port.unwatch(sid)
            return _deleted(r, scope, sid)
        scope.set_annotation(DECOMPOSING, str(r.clock()))
        scope.event("Normal", "VMDecomposing", f"deleting VM {sid} from its VM host")
        await scope.flush()
    port.watch(sid, scope.key)
    if port.is_gone(sid):
        port.unwatch(sid)
        return _deleted(r, scope, sid)
    scope.set_condition(
        C.READY_CONDITION, False, C.DECOMPOSING_REASON, f"{sid}: waiting for MAAS to remove it"
    )
    return Requeue(DECOMPOSE_RECHECK)


def _deleted(r: MachineReconciler, scope: MachineScope, sid: str | None) -> Requeue:
    if sid:
        scope.event("Normal", "VMDecomposed", f"VM {sid} deleted; its resources are back on the host")
        r.lxd.allocated.discard((scope.uid, sid))
    return machine_delete.finished(r, scope)
