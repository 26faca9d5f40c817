"""MaasRemediation: Cluster API's external remediation of a bare-metal server, executed through MAAS.

Cluster API's MachineHealthCheck decides *whether* and *how many* Machines are remediated (``triggerIf``,
``maxUnhealthy``): it creates a MaasRemediation named after each unhealthy Machine and deletes it once the
Machine is healthy again (v1beta2 ``HealthCheckSucceeded=True``). This module only executes, one step at a
time, each with its timeout (``spec``), a condition and an Event:

1. **Power cycle** (``retryLimit`` times): ``op=power_off``, wait for MAAS to report the server off (bounded
   by ``powerOffTimeoutSeconds``; a state other than ``off`` is *reported*, never taken for off), then
   ``op=power_on`` and wait ``timeoutSeconds`` for the Machine to be healthy. MAAS has no power-cycle op. A
   ``manual`` power type (MAAS can neither start nor stop it; its ``power_off`` answers ``null``) is skipped
   with the reason ``PowerNotControllable``.
2. **Redeploy** (``redeploy: true``): release the same server without erasing it, allocate it again with
   ``system_id=<same>`` under the MaasMachine's agent name, then hand it back to the MaasMachine, whose
   lifecycle deploys it (it is Allocated) with the Machine's bootstrap data; ``spec.providerID`` stays.
   Between the release and the allocate the server is Ready in MAAS's pool, and another allocate may take it:
   then the allocate answers 409 and the remediation gives up (the MaasMachine, no longer holding it, forgets
   it with a Warning and its Machine is replaced). MAAS has no "release and keep".
3. **Give up** as the contract says: the Machine's v1beta2 condition ``OwnerRemediated=False`` (server-side
   apply on ``machines/status`` under our own field manager, so only that entry changes); its MachineSet or
   control plane then deletes and replaces it. With ``markBrokenOnFailure`` the server is first marked Broken
   in MAAS (``op=mark_broken`` by its owner, us), so nobody is handed it again until someone marks it fixed.

**The MaasMachine stands aside** while a remediation holds its server: the annotation
``…/remediation=<MaasRemediation UID>`` (:data:`~capmaas.reconcilers.keys.REMEDIATION`) makes its
reconcile send nothing to MAAS (its power-on of a server seen off, its replacement of a server seen Ready
would undo the remediation). It is written before the first MAAS request and removed when the server is
handed back (healthy, or Allocated again for the redeploy) or the remediation is deleted; after giving up it
stays, so the MaasMachine does not replace the server of a Machine that is being replaced. A hold of another
MaasRemediation that still exists makes this one wait: never two remediations of one server at once.

**Crash safety.** Every step is recorded in ``status.step`` (a status patch carrying the resourceVersion this
pass read, so a writer holding a stale copy gets 409 and sends nothing) *before* its MAAS request. A pass that
finds ``PowerOff`` recorded does not know whether the power-off went out, and never sends it again: it waits
for MAAS to report off (bounded) and powers on; ``power_on`` of a Deployed server is harmless to repeat;
``release`` is a no-op on a Ready or Releasing server; ``Allocate`` looks the agent name up before
allocating. A remediation deleted (the Machine healthy, or gone) while the server may be off powers it on
before it lets go (its finalizer). A restarted operator may pass over a MaasRemediation before its watch
cache has the MaasMachine: that is read from the apiserver then, never taken for gone
(:meth:`RemediationKube.read_maasmachine`). **Leadership:** every Kubernetes and MAAS write of the operator
is fenced by the Lease (:mod:`capmaas.operator.app`), so a standby sends nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.v1beta1 import MaasRemediation, MaasRemediationStatus, set_condition
from capmaas.api.v1beta1.common import ConditionStatus
from capmaas.api.v1beta1.maasremediation import RemediationPhase, RemediationStep
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.credentials import maas_failure
from capmaas.reconcilers.keys import AGENT_NAME, ANNOTATION_PREFIX, REMEDIATION
from capmaas.reconcilers.ports import Body, EventType
from capmaas.reconcilers.scope import Requeue

log = logging.getLogger(__name__)

FINALIZER = "maasremediation.infrastructure.cluster.x-k8s.io"
HOLD_ANNOTATION = ANNOTATION_PREFIX + REMEDIATION
#: Cluster API's v1beta2 Machine condition types this module reads and writes.
HEALTH_CHECK_SUCCEEDED = "HealthCheckSucceeded"
OWNER_REMEDIATED = "OwnerRemediated"
#: Seconds between looks at MAAS while a power-off or a release is under way.
POLL = 2.0
#: Seconds before a pass whose Machine is not in the cache yet looks again.
MACHINE_WAIT = 5.0
_POWER_STEPS: frozenset[RemediationStep | None] = frozenset({"PowerOff", "PowerOn"})


class RemediationMaas(Protocol):
    """The MAAS calls of a remediation (a :class:`~capmaas.gateway.MaasSession` is one)."""

    async def read_machine(self, system_id: str) -> maas.Machine: ...

    async def find_by_agent(self, agent_name: str) -> Sequence[maas.Machine]: ...

    async def power_off(self, system_id: str, *, comment: str) -> maas.Machine | None: ...

    async def power_on(self, system_id: str, *, comment: str) -> None: ...

    async def release(
        self, system_id: str, *, erase: bool, secure_erase: bool, quick_erase: bool, comment: str
    ) -> maas.Machine | None: ...

    async def allocate(
        self, constraints: maas.AllocateConstraints, *, agent_name: str, comment: str
    ) -> maas.Machine: ...

    async def mark_broken(self, system_id: str, *, comment: str) -> None: ...


class RemediationKube(Protocol):
    """The Kubernetes side: caches, our writes (fenced by the Lease), the Machine's condition, Events."""

    def get_machine(self, namespace: str, name: str) -> Body | None:
        """The CAPI Machine from the watch cache."""
        ...

    async def read_maasmachine(self, namespace: str, name: str) -> Body | None:
        """A MaasMachine from the watch cache, else from the apiserver: None only when it does not exist (or
        is not this operator's). Not in the cache is not gone: a pass that runs right after the operator
        started may come before kopf has delivered the MaasMachines' listing (only the CAPI Machines and
        Clusters are indexed before any handler runs), and what a pass does without one (give up: the
        Machine is replaced; let go without powering the server on) cannot be undone."""
        ...

    def remediation_alive(self, namespace: str, uid: str) -> bool:
        """A MaasRemediation of this UID exists (not being deleted) in ``namespace``."""
        ...

    async def patch_remediation(
        self, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        """Merge-patch a MaasRemediation (``metadata.resourceVersion`` in ``body``: a precondition, 409 →
        :class:`~capmaas.reconcilers.errors.ConflictError`); None when it is gone."""
        ...

    async def set_maasmachine_annotation(
        self, namespace: str, name: str, key: str, value: str | None
    ) -> None:
        """Set (None: remove) one annotation of a MaasMachine (gone: nothing)."""
        ...

    async def owner_remediated_false(self, namespace: str, machine: str, reason: str, message: str) -> None:
        """Set the Machine's v1beta2 ``OwnerRemediated=False`` (server-side apply, our field manager)."""
        ...

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None: ...


#: Opens the MAAS connection of a MaasMachine's credentials (its MaasCluster's identity).
Connect = Callable[[Body], Awaitable[RemediationMaas]]


def machine_healthy(machine: Body) -> bool:
    """The MachineHealthCheck's verdict on the Machine: v1beta2 ``HealthCheckSucceeded=True``."""
    for cond in (machine.get("status") or {}).get("conditions") or ():
        if cond.get("type") == HEALTH_CHECK_SUCCEEDED:
            return bool(cond.get("status") == "True")
    return False


def holder(maasmachine: Body | None) -> str | None:
    """The UID of the MaasRemediation holding this MaasMachine's server (None: nobody)."""
    annotations = ((maasmachine or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(HOLD_ANNOTATION)
    return str(value) if value else None


class _Pass:
    """One pass over one MaasRemediation: the parsed object, and the writes that record its progress."""

    def __init__(self, kube: RemediationKube, body: Body, clock: Callable[[], float]) -> None:
        self.kube = kube
        self.body = body
        self.clock = clock
        obj = MaasRemediation.from_body(body)
        self.spec = obj.spec
        self.status: MaasRemediationStatus = obj.status
        meta = body.get("metadata") or {}
        self.namespace = str(meta.get("namespace", ""))
        self.name = str(meta.get("name", ""))
        self.uid = str(meta.get("uid", ""))
        self.version = str(meta.get("resourceVersion", ""))
        self.finalizers = list(meta.get("finalizers") or ())
        self.deleting = bool(meta.get("deletionTimestamp"))

    def now(self) -> str:
        return datetime.fromtimestamp(self.clock(), UTC).replace(microsecond=0).isoformat()

    def elapsed(self) -> float:
        """Seconds since the current step was recorded."""
        if not self.status.step_started:
            return 0.0
        return self.clock() - datetime.fromisoformat(self.status.step_started).timestamp()

    def condition(self, type_: str, status: ConditionStatus, reason: str, message: str = "") -> None:
        self.status.conditions = set_condition(self.status.conditions, type_, status, reason, message)

    def event(self, type_: EventType, reason: str, message: str) -> None:
        log.info("MaasRemediation %s/%s: %s: %s", self.namespace, self.name, reason, message)
        self.kube.emit_event(self.body, type_, reason, message)

    async def record(
        self, step: RemediationStep | None = None, phase: RemediationPhase | None = None
    ) -> None:
        """Write the status (a new ``step`` restarts its clock) with the resourceVersion read: the record
        a restart resumes from, written before the step's MAAS request."""
        if step is not None and step != self.status.step:
            self.status.step, self.status.step_started = step, self.now()
        if phase is not None:
            self.status.phase = phase
        body = {"metadata": {"resourceVersion": self.version}, "status": self.status.to_k8s()}
        new = await self.kube.patch_remediation(self.namespace, self.name, body, status=True)
        if new is not None:
            self.version = str((new.get("metadata") or {}).get("resourceVersion", self.version))

    async def finalizer(self, add: bool) -> None:
        names = [f for f in self.finalizers if f != FINALIZER] + ([FINALIZER] if add else [])
        body = {"metadata": {"resourceVersion": self.version, "finalizers": names}}
        new = await self.kube.patch_remediation(self.namespace, self.name, body, status=False)
        self.finalizers = names
        if new is not None:
            self.version = str((new.get("metadata") or {}).get("resourceVersion", self.version))


class RemediationReconciler:
    """Reconciles one MaasRemediation per call (module docstring); no memory between calls."""

    def __init__(
        self, kube: RemediationKube, connect: Connect, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube = kube
        self.connect = connect
        self.clock = clock

    async def reconcile(self, body: Body) -> Requeue:
        p = _Pass(self.kube, body, self.clock)
        if p.deleting:
            return await self._let_go(p)
        if p.status.phase in ("Succeeded", "Failed"):
            return Requeue()
        machine = self.kube.get_machine(p.namespace, p.name)  # CAPI names the request after its Machine
        if machine is None:
            return Requeue(MACHINE_WAIT)
        if FINALIZER not in p.finalizers:
            await p.finalizer(True)
        ref = (machine.get("spec") or {}).get("infrastructureRef") or {}
        mm = (
            await self.kube.read_maasmachine(p.namespace, str(ref.get("name", "")))
            if ref.get("kind") == "MaasMachine"
            else None
        )
        sid = str(((mm or {}).get("spec") or {}).get("systemID") or "")
        if mm is None or not sid:
            return await self._give_up(
                p,
                None,
                None,
                "",
                reason=C.NOTHING_TO_REMEDIATE_REASON,
                why="the Machine has no MaasMachine holding a MAAS server",
            )
        if machine_healthy(machine):  # healthy before anything was sent: nothing to do (the MHC deletes us)
            return await self._healthy(p, mm, sid) if p.status.step is not None else Requeue(MACHINE_WAIT)
        other = holder(mm)
        if other is not None and other != p.uid and self.kube.remediation_alive(p.namespace, other):
            p.condition(
                C.READY_CONDITION,
                "False",
                C.REMEDIATING_REASON,
                f"waiting: MaasRemediation {other} holds {sid}",
            )
            await p.record()
            return Requeue(MACHINE_WAIT * 2)
        port = await self._connect(mm)
        try:
            return await self._step(p, port, mm, sid)
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, f"remediating {sid}") from exc

    async def _connect(self, mm: Body) -> RemediationMaas:
        try:
            return await self.connect(mm)
        except maas_errors.MaasError as exc:
            raise maas_failure(exc, None, "connecting") from exc

    # --- the steps ---------------------------------------------------------------------------------------
    async def _step(self, p: _Pass, port: RemediationMaas, mm: Body, sid: str) -> Requeue:
        step = p.status.step
        agent = _agent(mm)
        if step is None:
            if sid not in {m.system_id for m in await port.find_by_agent(agent)}:
                why = f"MAAS does not show {sid} held under the MaasMachine's agent name; nothing sent to it"
                return await self._give_up(p, None, mm, sid, reason=C.NOTHING_TO_REMEDIATE_REASON, why=why)
            await self.kube.set_maasmachine_annotation(p.namespace, _name(mm), HOLD_ANNOTATION, p.uid)
            p.status.system_id, p.status.retry_count, p.status.power_offs = sid, 0, 0
            return await self._next(p, port, mm, sid)
        if step == "PowerOff":
            return await self._powered_off(p, port, mm, sid)
        if step == "PowerOn":
            return await self._power_on(p, port, sid)
        if step == "WaitNode":
            left = p.spec.timeout_seconds - p.elapsed()
            if left > 0:
                return Requeue(left)
            cycle = p.status.retry_count
            msg = f"the Machine was not healthy {p.spec.timeout_seconds}s after power cycle {cycle}"
            p.condition(C.READY_CONDITION, "False", C.NODE_NOT_HEALTHY_IN_TIME_REASON, msg)
            p.event("Warning", C.NODE_NOT_HEALTHY_IN_TIME_REASON, msg)
            return await self._next(p, port, mm, sid)
        if step == "Release":
            return await self._released(p, port, mm, sid)
        if step == "Allocate":
            return await self._allocate(p, port, mm, sid, agent)
        if step == "Deploy":
            if holder(mm) == p.uid:  # recorded, then the process stopped before handing the server back
                await self.kube.set_maasmachine_annotation(p.namespace, _name(mm), HOLD_ANNOTATION, None)
            left = p.spec.redeploy_timeout_seconds - p.elapsed()
            if left > 0:
                return Requeue(left)
            why = f"the Machine was not healthy {p.spec.redeploy_timeout_seconds}s after {sid} was redeployed"
            p.event("Warning", C.NODE_NOT_HEALTHY_IN_TIME_REASON, why)
            return await self._give_up(p, port, mm, sid, reason=C.NODE_NOT_HEALTHY_IN_TIME_REASON, why=why)
        if step == "GiveUp":
            return await self._give_up(
                p, port, mm, sid, reason=C.REMEDIATION_FAILED_REASON, why="resuming the give-up"
            )
        return Requeue()

    async def _next(self, p: _Pass, port: RemediationMaas, mm: Body, sid: str) -> Requeue:
        """After the start or an unhelpful power cycle: another power cycle, the redeploy, or give up."""
        if (p.status.retry_count or 0) < p.spec.retry_limit:
            return await self._power_off(p, port, mm, sid)
        if p.spec.redeploy:
            return await self._release(p, port, sid)
        why = (
            f"{p.status.retry_count or 0} power cycle(s) did not make the Machine healthy (redeploy disabled)"
        )
        return await self._give_up(p, port, mm, sid, reason=C.REMEDIATION_FAILED_REASON, why=why)

    async def _power_off(self, p: _Pass, port: RemediationMaas, mm: Body, sid: str) -> Requeue:
        m = await port.read_machine(sid)
        if m.power_type == "manual":
            return await self._not_controllable(p, port, mm, sid, f"{sid} has the manual power type")
        attempt = (p.status.retry_count or 0) + 1
        p.condition(
            C.READY_CONDITION, "False", C.REMEDIATING_REASON, f"power cycle {attempt}: powering {sid} off"
        )
        await p.record("PowerOff", "PowerCycling")  # before the request: a restart never sends it again
        answer = await port.power_off(
            sid, comment=f"capmaas remediation {p.namespace}/{p.name}: power cycle {attempt}"
        )
        p.status.power_offs = (p.status.power_offs or 0) + 1
        p.status.last_remediated = p.now()
        if answer is None:
            why = f"MAAS answered power_off of {sid} with null: it sent no power action"
            return await self._not_controllable(p, port, mm, sid, why)
        p.event("Normal", "PowerOffRequested", f"power cycle {attempt}: MAAS is powering {sid} off")
        await p.record()
        return await self._powered_off(p, port, mm, sid, answer)

    async def _powered_off(
        self, p: _Pass, port: RemediationMaas, mm: Body, sid: str, m: maas.Machine | None = None
    ) -> Requeue:
        """A power-off was (maybe) sent: power on once MAAS reports off, or once waiting for it timed out."""
        m = m or await port.read_machine(sid)
        if m.power_state != maas.PowerState.OFF:
            left = p.spec.power_off_timeout_seconds - p.elapsed()
            if left > 0:
                return Requeue(min(POLL, left))
            msg = (
                f"MAAS still reports {sid} powered {m.power_state} {p.spec.power_off_timeout_seconds}s after "
                "power_off; powering it on anyway (the power cycle is not confirmed)"
            )
            p.condition(C.POWER_CYCLED_CONDITION, "Unknown", C.POWER_STATE_UNCONFIRMED_REASON, msg)
            p.event("Warning", C.POWER_STATE_UNCONFIRMED_REASON, msg)
        return await self._power_on(p, port, sid)

    async def _power_on(self, p: _Pass, port: RemediationMaas, sid: str) -> Requeue:
        await p.record("PowerOn", "PowerCycling")
        await port.power_on(sid, comment=f"capmaas remediation {p.namespace}/{p.name}: power cycle")
        p.status.retry_count = (p.status.retry_count or 0) + 1
        msg = f"power cycle {p.status.retry_count}: MAAS powered {sid} off and on"
        cycled = next((c for c in p.status.conditions or () if c.type == C.POWER_CYCLED_CONDITION), None)
        if cycled is None or cycled.reason != C.POWER_STATE_UNCONFIRMED_REASON:
            p.condition(C.POWER_CYCLED_CONDITION, "True", C.POWER_CYCLE_REQUESTED_REASON, msg)
        wait = f"{msg}; waiting {p.spec.timeout_seconds}s for the Machine to be healthy"
        p.condition(C.READY_CONDITION, "False", C.REMEDIATING_REASON, wait)
        p.event("Normal", "PowerCycled", wait)
        await p.record("WaitNode", "WaitingForNode")
        return Requeue(p.spec.timeout_seconds)

    async def _not_controllable(
        self, p: _Pass, port: RemediationMaas, mm: Body, sid: str, why: str
    ) -> Requeue:
        msg = f"{why}: MAAS can neither power it off nor on; not power-cycled"
        p.condition(C.POWER_CYCLED_CONDITION, "False", C.POWER_NOT_CONTROLLABLE_REASON, msg)
        p.event("Warning", C.POWER_NOT_CONTROLLABLE_REASON, msg)
        p.status.retry_count = p.spec.retry_limit  # another try would say the same
        if p.spec.redeploy:
            return await self._release(p, port, sid)
        return await self._give_up(p, port, mm, sid, reason=C.POWER_NOT_CONTROLLABLE_REASON, why=msg)

    async def _release(self, p: _Pass, port: RemediationMaas, sid: str) -> Requeue:
        msg = f"releasing {sid} (not erased) to deploy it again"
        p.condition(C.REDEPLOYED_CONDITION, "False", C.REDEPLOYING_REASON, msg)
        p.condition(C.READY_CONDITION, "False", C.REMEDIATING_REASON, msg)
        await p.record("Release", "Redeploying")
        await port.release(
            sid, erase=False, secure_erase=False, quick_erase=False,
            comment=f"capmaas remediation {p.namespace}/{p.name}: redeploy",
        )  # fmt: skip
        p.status.last_remediated = p.now()
        p.event("Normal", "RedeployStarted", msg)
        await p.record()
        return Requeue(POLL)

    async def _released(self, p: _Pass, port: RemediationMaas, mm: Body, sid: str) -> Requeue:
        m = await port.read_machine(sid)
        S = maas.NodeStatus
        if m.status == S.READY:
            return await self._allocate(p, port, mm, sid, _agent(mm))
        if p.elapsed() > p.spec.redeploy_timeout_seconds:
            why = f"{sid} was not released within {p.spec.redeploy_timeout_seconds}s (MAAS: {m.status_name})"
            return await self._give_up(p, port, mm, sid, reason=C.REDEPLOY_FAILED_REASON, why=why)
        if m.status not in (
            S.RELEASING,
            S.DISK_ERASING,
        ):  # recorded, then stopped before the release went out
            await port.release(
                sid, erase=False, secure_erase=False, quick_erase=False,
                comment=f"capmaas remediation {p.namespace}/{p.name}: redeploy",
            )  # fmt: skip
        return Requeue(POLL)

    async def _allocate(self, p: _Pass, port: RemediationMaas, mm: Body, sid: str, agent: str) -> Requeue:
        await p.record("Allocate")
        if sid not in {m.system_id for m in await port.find_by_agent(agent)}:
            try:
                await port.allocate(
                    maas.AllocateConstraints(system_id=sid), agent_name=agent,
                    comment=f"capmaas remediation {p.namespace}/{p.name}: redeploy",
                )  # fmt: skip
            except maas_errors.ConflictError as exc:
                why = f"MAAS would not allocate {sid} again (taken meanwhile?): {exc}"
                p.condition(C.REDEPLOYED_CONDITION, "False", C.REDEPLOY_FAILED_REASON, why)
                return await self._give_up(p, port, mm, sid, reason=C.REDEPLOY_FAILED_REASON, why=why)
        msg = f"{sid} allocated again; the MaasMachine deploys it with its bootstrap data"
        p.condition(C.REDEPLOYED_CONDITION, "True", C.REDEPLOYING_REASON, msg)
        wait = f"{msg}; waiting {p.spec.redeploy_timeout_seconds}s for the Machine to be healthy"
        p.condition(C.READY_CONDITION, "False", C.REMEDIATING_REASON, wait)
        await p.record("Deploy", "Redeploying")
        await self.kube.set_maasmachine_annotation(p.namespace, _name(mm), HOLD_ANNOTATION, None)
        p.event("Normal", "Redeploying", wait)
        return Requeue(p.spec.redeploy_timeout_seconds)

    async def _healthy(self, p: _Pass, mm: Body, sid: str) -> Requeue:
        """The MachineHealthCheck sees the Machine healthy (it deletes this object next)."""
        if p.status.step in _POWER_STEPS:  # never leave a server off
            port = await self._connect(mm)
            await port.power_on(sid, comment=f"capmaas remediation {p.namespace}/{p.name}: healthy again")
        if holder(mm) == p.uid:
            await self.kube.set_maasmachine_annotation(p.namespace, _name(mm), HOLD_ANNOTATION, None)
        msg = f"the Machine is healthy again ({_cycles(p)} power cycle(s))"
        p.condition(C.READY_CONDITION, "True", C.REMEDIATED_REASON, msg)
        p.event("Normal", C.REMEDIATED_REASON, msg)
        await p.record("Done", "Succeeded")
        return Requeue()

    async def _give_up(
        self, p: _Pass, port: RemediationMaas | None, mm: Body | None, sid: str, *, reason: str, why: str
    ) -> Requeue:
        """The contract's hand-off: OwnerRemediated=False on the Machine (after marking the server Broken if
        asked), so its owner replaces it. Recorded first; every part is safe to repeat."""
        await p.record("GiveUp")
        if mm is not None and sid:
            # The MaasMachine must not replace (or power on) the server of a Machine being replaced.
            if holder(mm) != p.uid:
                await self.kube.set_maasmachine_annotation(p.namespace, _name(mm), HOLD_ANNOTATION, p.uid)
            held = port is not None and p.spec.mark_broken_on_failure
            if (
                port is not None
                and held
                and sid in {m.system_id for m in await port.find_by_agent(_agent(mm))}
            ):
                await port.mark_broken(sid, comment=f"capmaas remediation {p.namespace}/{p.name}: {why}")
                p.event("Warning", "MarkedBroken", f"marked {sid} Broken in MAAS: {why}")
        message = f"MaasRemediation gave up: {why}"
        await self.kube.owner_remediated_false(p.namespace, p.name, C.REMEDIATION_WAITING_REASON, message)
        p.condition(
            C.READY_CONDITION,
            "False",
            C.REMEDIATION_FAILED_REASON,
            f"{reason}: {why}; the Machine's owner replaces it",
        )
        p.event("Warning", C.REMEDIATION_FAILED_REASON, f"{why}; Machine {p.name} set OwnerRemediated=False")
        await p.record("Done", "Failed")
        return Requeue()

    async def _let_go(self, p: _Pass) -> Requeue:
        """Deleted (healthy again, or the Machine gone): power on a server that may be off, hand the server
        back unless the remediation gave up, drop the finalizer."""
        if FINALIZER not in p.finalizers:
            return Requeue()
        machine = self.kube.get_machine(p.namespace, p.name)
        ref = ((machine or {}).get("spec") or {}).get("infrastructureRef") or {}
        mm = await self.kube.read_maasmachine(p.namespace, str(ref["name"])) if ref.get("name") else None
        sid = p.status.system_id or ""
        ended = p.status.phase in ("Succeeded", "Failed")
        if machine is not None and not (machine.get("metadata") or {}).get("deletionTimestamp") and not ended:
            # Deleted while its Machine lives: the MachineHealthCheck found it healthy (it deletes the request
            # first, then marks the Machine).
            msg = f"the Machine is healthy again ({_cycles(p)} power cycle(s))"
            p.event("Normal", C.REMEDIATED_REASON, msg)
        if mm is not None and sid and not ended:
            if p.status.step in _POWER_STEPS:
                port = await self._connect(mm)
                try:
                    await port.power_on(sid, comment=f"capmaas remediation {p.namespace}/{p.name}: ended")
                except maas_errors.MaasError as exc:
                    raise maas_failure(exc, None, f"powering {sid} on") from exc
            if holder(mm) == p.uid:
                await self.kube.set_maasmachine_annotation(p.namespace, _name(mm), HOLD_ANNOTATION, None)
        await p.finalizer(False)
        return Requeue()


def _cycles(p: _Pass) -> int:
    return p.status.retry_count or 0


def _name(body: Body) -> str:
    return str((body.get("metadata") or {}).get("name", ""))


def _agent(mm: Body) -> str:
    """The MaasMachine's MAAS agent name (the rule of :func:`capmaas.reconcilers.baremetal.agent_name`)."""
    meta = mm.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(ANNOTATION_PREFIX + AGENT_NAME) or meta.get("uid", ""))
