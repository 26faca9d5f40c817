"""Whose MAAS machine is it: the ownership test, its soft memory, and the bookkeeping of giving a machine up.

``spec.systemID`` is just a field someone wrote; before anything is sent to the machine it names, MAAS must
show it held for this object (under its agent name, through the identity the object is stamped with:
:mod:`capmaas.reconcilers.identity`). Each provisioner knows how to ask MAAS (:meth:`Mode.owns`); this module
keeps what both modes share, once: the memory of machines proven ours (valid only for the identity that proved
them, and never a reason to skip the lookup before a destructive call), the check of a recorded system ID,
and the tail of giving a machine back (the references dropped, the attempt counted, the next one asked for).

The :class:`~capmaas.reconcilers.lifecycle.Lifecycle` owns the one :class:`Ownership`; the provisioners get
it at construction, never the lifecycle itself.
"""

from __future__ import annotations

from typing import Protocol

from capmaas.api import conditions as C
from capmaas.reconcilers import identity
from capmaas.reconcilers.errors import TerminalError
from capmaas.reconcilers.keys import DEPLOY_STARTED
from capmaas.reconcilers.ports import MaasPort
from capmaas.reconcilers.scope import MachineScope, Requeue


class Mode(Protocol):
    """What the ownership bookkeeping needs of a provisioner."""

    #: What a run of them is called in messages ("MAAS machines", "VMs").
    tried: str
    #: What the next pass does after a give-back ("allocating another", "composing another").
    another: str
    #: The Warning Event's reason when a recorded system ID is not ours ("MachineNotOurs", "VMNotOurs").
    not_ours_reason: str

    def describe(self, system_id: str) -> str:
        """How messages name the machine ("xyz", "VM xyz")."""
        ...

    async def owns(self, scope: MachineScope, port: MaasPort, system_id: str) -> bool:
        """The ownership lookup (no memory): MAAS shows ``system_id`` held for this object now."""
        ...

    def forgotten(self, scope: MachineScope) -> None:
        """The mode's own fields of a machine no longer held (status follows the machine held)."""
        ...


class Ownership:
    """The ownership memory of this process (soft: rebuilt after a restart at one lookup per machine)."""

    def __init__(self) -> None:
        #: UID -> (identity fingerprint, system ID): valid only for the identity it was proven with and only
        #: while the object is stamped with that identity (:meth:`knows`); it spares the ownership lookup of
        #: a pass that only follows the machine, never the one before a destructive call (:meth:`confirm`).
        self.verified: dict[str, tuple[str, str]] = {}

    def knows(self, scope: MachineScope, port: MaasPort, sid: str) -> bool:
        """This process saw MAAS hold ``sid`` for this object, through ``port``'s identity, which the object's
        references are stamped with (:mod:`capmaas.reconcilers.identity`)."""
        return identity.is_bound_to(scope, port) and self.verified.get(scope.uid) == (port.identity, sid)

    def remember(self, scope: MachineScope, port: MaasPort, sid: str) -> None:
        """``sid`` is ours through ``port``'s identity (a VM composed for this object, not allocated yet)."""
        self.verified[scope.uid] = (port.identity, sid)

    def proved(self, scope: MachineScope, port: MaasPort, sid: str) -> None:
        """MAAS showed ``sid`` held for this object in this pass: remember it, stamp an object from before the
        identity stamp (its migration)."""
        scope.proven = sid
        self.remember(scope, port, sid)
        identity.adopt(scope)

    def drop(self, uid: str) -> None:
        """The object is gone (or named no machine any more): nothing of it is remembered."""
        self.verified.pop(uid, None)

    async def check(self, p: Mode, scope: MachineScope, port: MaasPort, sid: str, message: str) -> bool:
        """Whether the recorded ``sid`` is ours (remembered, or MAAS shows it now). Otherwise it is forgotten
        with a Warning Event and a condition saying ``message``, and nothing is sent to it."""
        if self.knows(scope, port, sid):
            return True
        if await p.owns(scope, port, sid):
            self.proved(scope, port, sid)
            return True
        self.forget(p, scope, port, sid)
        scope.event("Warning", p.not_ours_reason, f"{message}, nothing sent to it")
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_NOT_FOUND_REASON, message)
        await scope.flush()
        return False

    async def confirm(self, p: Mode, scope: MachineScope, port: MaasPort, sid: str, doing: str) -> bool:
        """Right before a destructive call (prepare, deploy, power): MAAS must show ``sid`` held for this
        object, in this pass (no memory counts). Otherwise the reference is forgotten with a Warning Event and
        False."""
        if scope.proven == sid:
            return True
        if await p.owns(scope, port, sid):
            self.proved(scope, port, sid)
            return True
        port.unwatch(sid)
        self.drop(scope.uid)
        scope.set_spec(system_id=None, provider_id=None)
        msg = f"MAAS {p.describe(sid)} is no longer held for this MaasMachine; forgot it, not {doing}"
        scope.event("Warning", "MachineNotOurs", msg)
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.MACHINE_NOT_FOUND_REASON, msg)
        await scope.flush()
        return False

    def forget(self, p: Mode, scope: MachineScope, port: MaasPort, sid: str) -> None:
        """Drop ``sid`` from the MaasMachine (written with the next flush), from the poller and from memory (a
        spec naming it again is checked again)."""
        port.unwatch(sid)
        self.drop(scope.uid)
        scope.set_spec(system_id=None, provider_id=None)
        scope.set_annotation(DEPLOY_STARTED, None)
        p.forgotten(scope)

    async def gave_back(
        self, p: Mode, scope: MachineScope, sid: str, reason: str, why: str, *, attempts: int, limit: int
    ) -> Requeue:
        """After a give-back: the next pass acquires another, unless ``limit`` machines were tried."""
        if attempts >= limit:
            await scope.flush()
            raise TerminalError(C.RETRIES_EXHAUSTED_REASON, f"{attempts} {p.tried} tried; last: {why}")
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, f"{sid}: {why}; {p.another}")
        await scope.flush()
        return Requeue(0.0)
