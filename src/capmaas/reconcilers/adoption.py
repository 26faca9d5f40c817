"""Adopting a machine MAAS already shows Deployed (``spec.adopt``, issue 24 item 3): no allocate, no deploy.

What MAAS 3.7 allows decides the design. No API call changes a machine's owner or its ``agent_name``
(``agent_name`` is set by ``allocate`` only and is not even in the machine JSON), so the ownership test every
other machine passes - "MAAS shows it held under this object's agent name" - can never hold for a machine
someone deployed by hand or under an operator install whose objects were lost. MAAS's one path to a new owner,
``POST machines/ deployed=true`` after deleting the record, throws away the commissioning data and the
network and storage model; capmaas does not take it (docs/operating.md, "Adopting a deployed machine").

What MAAS does allow, and what an adopted machine's ownership therefore is:

- the machine is **owned by the MAAS user of the MaasMachine's identity** (its ``owner`` against the
  identity fingerprint of the connection, :func:`~capmaas.reconcilers.ports.identity_fingerprint`);
- it carries **our marker** in its workload annotations (``set_workload_annotations``, the owner only; MAAS
  wipes them at release): the key :data:`MARKER_PREFIX` + the object's agent name (its UID, kept across
  ``clusterctl move`` by the ``…/agent-name`` annotation), the value naming cluster, namespace, name and UID;
- the MaasMachine records it: ``…/adopted`` (the durable record, written before the marker, so a crash in
  between leaves a marker capmaas knows to remove) and then ``spec.systemID``/``spec.providerID`` as for an
  allocated machine. Both are guarded by the chart's admission policy, as ``spec.adopt`` itself is.

Never two holders: a candidate refused when another MaasMachine in the cache records the system ID, or when
the machine carries another object's marker; and since the cache may not yet show a MaasMachine created at
the same moment, the marker is a claim: each object writes its own key (MAAS merges keys), reads the machine
back, and keeps it only when no other capmaas marker is there. Of two concurrent claims at most one sees only
its own key (the later writer sees both); when both see both, both withdraw and try again after a jittered
backoff, and the first to come back wins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from capmaas import backoff, maas
from capmaas.api import conditions as C
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.credentials import maas_step
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ADOPTED, AGENT_NAME
from capmaas.reconcilers.ports import KubePort, MaasPort, identity_fingerprint
from capmaas.reconcilers.scope import MachineScope, Requeue

#: The workload-annotation key prefix of capmaas's marker (MAAS allows ``[\w.-]`` in keys: no slash).
MARKER_PREFIX = "capmaas.held-by."
#: Seconds between looks at a machine whose adoption is refused (it may be deployed, or released, meanwhile).
REFUSED_RETRY = 60.0


def wanted(scope: MachineScope) -> str | None:
    """The system ID ``spec.adopt`` asks for (None: allocate as usual)."""
    return scope.want.adopt.system_id if scope.want.adopt is not None else None


def adopted(scope: MachineScope) -> str | None:
    """The system ID this object adopted or is adopting (``…/adopted``): its ownership goes by the marker."""
    return scope.annotation(ADOPTED)


def marker_key(agent: str) -> str:
    return MARKER_PREFIX + agent


def markers(m: maas.Machine) -> dict[str, str]:
    """capmaas markers on ``m``: agent name -> value (MAAS answers both spellings of the same data)."""
    found = {**m.owner_data, **m.workload_annotations}
    return {k.removeprefix(MARKER_PREFIX): v for k, v in found.items() if k.startswith(MARKER_PREFIX)}


def owned_by_identity(m: maas.Machine, port: MaasPort) -> bool:
    """MAAS shows ``m`` owned by the MAAS user ``port`` connects as (the user is part of its fingerprint)."""
    return m.owner is not None and identity_fingerprint(port.endpoint, m.owner) == port.identity


class Adoption:
    """Takes a Deployed machine under a MaasMachine, checks it is still ours, lets it go."""

    def __init__(self, kube: KubePort, *, retry: float = REFUSED_RETRY) -> None:
        self.kube = kube
        self.retry = retry

    async def read(self, port: MaasPort, sid: str) -> maas.Machine | None:
        """The machine now (a GET, not the poller's snapshot); None when this identity cannot see it."""
        with maas_step(f"reading MAAS machine {sid}"):
            try:
                return await port.read_machine(sid)
            except (maas_errors.NotFoundError, maas_errors.ForbiddenError):
                return None

    async def held(self, scope: MachineScope, port: MaasPort, sid: str, agent: str) -> maas.Machine | None:
        """The ownership test of an adopted machine: ``m`` if MAAS shows it owned by this identity's user and
        carrying this object's marker, else None."""
        m = await self.read(port, sid)
        if m is None or not owned_by_identity(m, port) or agent not in markers(m):
            return None
        return m

    async def acquire(
        self, scope: MachineScope, port: MaasPort, agent: str, provider_id: Callable[[str, str], str]
    ) -> str | Requeue:
        """Adopt ``spec.adopt.systemID``: checked, claimed with the marker, recorded; or refused with a
        condition and a Warning Event. ``provider_id(zone, system_id)`` is the provisioner's."""
        sid = wanted(scope)
        assert sid is not None
        m = await self.read(port, sid)
        why = self._refusal(scope, port, sid, m, agent)
        if why is not None:
            return await self._refuse(scope, port, m, agent, why)
        assert m is not None
        if adopted(scope) != sid or scope.annotation(AGENT_NAME) != agent:
            scope.set_annotation(ADOPTED, sid)  # before the marker: a crash leaves nothing unknown in MAAS
            scope.set_annotation(AGENT_NAME, agent)
            await scope.flush()
        value = f"cluster={scope.cluster_name} namespace={scope.namespace} name={scope.name} uid={scope.uid}"
        with maas_step(f"marking {sid} adopted"):
            await port.set_workload_annotations(sid, {marker_key(agent): value})
        m = await self.read(port, sid)  # read back: a claim made at the same time shows now
        others = sorted(set(markers(m)) - {agent}) if m is not None else []
        if m is None or others or not owned_by_identity(m, port) or agent not in markers(m):
            await self._withdraw(scope, port, m, sid, agent)
            msg = (
                f"MAAS machine {sid} was claimed at the same time by another MaasMachine ({others}); retrying"
            )
            delay = 1.0 + backoff.full_jitter(3, base=1.0, cap=self.retry / 4)  # apart, not in step again
            raise TransientError(C.ADOPTION_HELD_ELSEWHERE_REASON, msg, delay=delay)
        scope.set_spec(system_id=sid, provider_id=provider_id(m.zone.name, sid))
        scope.set_spec(failure_domain=m.zone.name)
        scope.event(
            "Normal",
            "MachineAdopted",
            f"adopted MAAS machine {sid} ({m.hostname}), Deployed by {m.owner}: nothing deployed, "
            f"workload annotation {marker_key(agent)} set",
        )
        await scope.flush()
        return sid

    def _refusal(
        self, scope: MachineScope, port: MaasPort, sid: str, m: maas.Machine | None, agent: str
    ) -> tuple[str, str] | None:
        """Why ``m`` may not be adopted (reason, message), or None."""
        if m is None:
            return (
                C.ADOPTION_OTHER_OWNER_REASON,
                f"MAAS shows no machine {sid} to the MAAS user of this MaasMachine's identity "
                "(no such machine, or another user's)",
            )
        if m.status != maas.NodeStatus.DEPLOYED:
            return (
                C.ADOPTION_NOT_DEPLOYED_REASON,
                f"MAAS shows {sid} {m.status_name or m.status.name}, not Deployed: only a Deployed machine "
                "is adopted (nothing is deployed for spec.adopt)",
            )
        if not owned_by_identity(m, port):
            return (
                C.ADOPTION_OTHER_OWNER_REASON,
                f"MAAS machine {sid} is owned by {m.owner or 'nobody'}, not by the MAAS user of this "
                "MaasMachine's identity; MAAS has no call that changes a machine's owner",
            )
        theirs = {a: v for a, v in markers(m).items() if a != agent}
        if theirs:
            first = sorted(theirs)[0]
            return (
                C.ADOPTION_HELD_ELSEWHERE_REASON,
                f"MAAS machine {sid} carries another MaasMachine's marker "
                f"({marker_key(first)}={theirs[first]})",
            )
        holders = [
            b for b in self.kube.maasmachines_naming(sid) if (b.get("metadata") or {}).get("uid") != scope.uid
        ]
        if holders:
            meta = holders[0].get("metadata") or {}
            return (
                C.ADOPTION_HELD_ELSEWHERE_REASON,
                f"MAAS machine {sid} is held by MaasMachine {meta.get('namespace')}/{meta.get('name')}",
            )
        return None

    async def _refuse(
        self, scope: MachineScope, port: MaasPort, m: maas.Machine | None, agent: str, why: tuple[str, str]
    ) -> Requeue:
        """A condition says why, one Warning Event per reason, nothing sent to the machine; looked at again
        later (it may be deployed or released meanwhile). A marker of ours is withdrawn first."""
        reason, msg = why
        sid = wanted(scope) or ""
        if adopted(scope) == sid:
            await self._withdraw(scope, port, m, sid, agent)
        if scope.condition_reason(C.MACHINE_PROVISIONED_CONDITION) != reason:
            scope.event("Warning", reason, f"not adopting: {msg}")
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, msg)
        return Requeue(self.retry)

    async def _withdraw(
        self, scope: MachineScope, port: MaasPort, m: maas.Machine | None, sid: str, agent: str
    ) -> None:
        """Take our marker off ``sid`` (``m`` as just read) where it is and MAAS lets us (we own it), and
        drop the record."""
        if m is not None and owned_by_identity(m, port) and agent in markers(m):
            with (
                maas_step(f"removing the adoption marker from {sid}"),
                contextlib.suppress(maas_errors.ApiError),  # released or re-owned meanwhile: nothing to take
            ):
                await port.set_workload_annotations(sid, {marker_key(agent): ""})
        scope.set_annotation(ADOPTED, None)
        await scope.flush()

    async def abandon(self, scope: MachineScope, port: MaasPort, agent: str) -> None:
        """A deletion before the adoption was recorded in ``spec.systemID``: the machine was never ours; only
        our marker comes off (nothing is released)."""
        sid = adopted(scope)
        if sid:
            await self._withdraw(scope, port, await self.read(port, sid), sid, agent)
