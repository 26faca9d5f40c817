"""Zone spreading for bare-metal allocation: try the zone placement chose, fall back to any zone.

The chosen zone is a preference (spreading a cluster over its failure domains), not a requirement. When MAAS
has no Ready machine in that zone for the request, the allocate falls back to any zone; that zone is then left
out for a while ("dry") - but only for the same cluster asking with the same constraints on the same MAAS, and
only when the fallback *found* a machine elsewhere. A 409 for constraints no machine anywhere meets (``minCPU:
999``) says nothing about the zone, and one object's failures never change another cluster's placement.

The first allocation into a zone not yet known to have machines for those constraints ("wet") holds a lock
per verdict key, so a burst of new MaasMachines learns that a zone is empty from one request rather than one
failed allocate each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass

from capmaas import maas
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.ports import MaasPort

#: Seconds a zone's dry/wet verdict is trusted.
VERDICT_SECONDS = 300.0


@dataclass(frozen=True)
class Asking:
    """Who asks for what, apart from the zone: a dry/wet verdict holds only for the same asking."""

    endpoint: str
    cluster: str  # namespace/name of the CAPI Cluster
    constraints: str  # the allocate constraints other than the zone, canonical

    @classmethod
    def of(cls, endpoint: str, cluster: str, constraints: maas.AllocateConstraints) -> Asking:
        return cls(endpoint, cluster, constraints.model_copy(update={"zone": None}).model_dump_json())


class ZoneSpread:
    """Soft, per-process memory of which zones recently had (or lacked) machines for an :class:`Asking`."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._dry: dict[tuple[Asking, str], float] = {}  # (asking, zone) -> until
        self._wet: dict[tuple[Asking, str], float] = {}
        self._probes: dict[tuple[Asking, str], asyncio.Lock] = {}
        self._chosen: dict[str, tuple[str, float]] = {}  # MaasMachine UID -> (zone, until)

    def remember_choice(self, uid: str, zone: str) -> None:
        """Record the zone just chosen for ``uid``: until its ``spec.failureDomain`` reaches the cache,
        siblings choosing in the same burst count it (Machines of a MachineDeployment arrive together; stale
        counts alone put two of three in one zone)."""
        now = self.clock()
        if len(self._chosen) > 4096:
            self._chosen = {u: c for u, c in self._chosen.items() if c[1] >= now}
        self._chosen[uid] = (zone, now + VERDICT_SECONDS)

    def chosen_uids(self) -> Collection[str]:
        """The UIDs :meth:`chosen_zone` may know (some expired: it says None for those)."""
        return self._chosen.keys()

    def chosen_zone(self, uid: str) -> str | None:
        choice = self._chosen.get(uid)
        return choice[0] if choice is not None and choice[1] >= self.clock() else None

    def is_dry(self, asking: Asking, zone: str) -> bool:
        return self._dry.get((asking, zone), 0.0) >= self.clock()

    def _expire(self) -> None:
        now = self.clock()
        for book in (self._dry, self._wet):
            if len(book) > 4096:
                for k in [k for k, until in book.items() if until < now]:
                    del book[k]
        if len(self._probes) > 4096:
            self._probes = {k: lock for k, lock in self._probes.items() if lock.locked()}

    async def allocate(
        self,
        port: MaasPort,
        asking: Asking,
        constraints: maas.AllocateConstraints,
        *,
        agent_name: str,
        comment: str,
    ) -> tuple[maas.Machine, maas.AllocateConstraints]:
        """The machine and the constraints that found it (``zone`` cleared after a fallback). Raises MAAS's
        :class:`~capmaas.maas.errors.NoMachineAvailableError` of the last allocate when no zone has one."""
        key = (asking, str(constraints.zone))
        self._expire()
        if self._wet.get(key, 0.0) < self.clock():
            async with self._probes.setdefault(key, asyncio.Lock()):
                if self._dry.get(key, 0.0) >= self.clock():
                    anywhere = constraints.model_copy(update={"zone": None})
                    return await port.allocate(anywhere, agent_name=agent_name, comment=comment), anywhere
                if self._wet.get(key, 0.0) < self.clock():
                    return await self._try(port, key, constraints, agent_name, comment)
        return await self._try(port, key, constraints, agent_name, comment)

    async def _try(
        self,
        port: MaasPort,
        key: tuple[Asking, str],
        constraints: maas.AllocateConstraints,
        agent_name: str,
        comment: str,
    ) -> tuple[maas.Machine, maas.AllocateConstraints]:
        anywhere = constraints.model_copy(update={"zone": None})
        try:
            m = await port.allocate(constraints, agent_name=agent_name, comment=comment)
        except maas_errors.NoMachineAvailableError:
            self._wet.pop(key, None)
            m = await port.allocate(anywhere, agent_name=agent_name, comment=comment)
            # Only now is the zone known to lack what another zone has: a 409 in every zone says nothing
            # about this one.
            self._dry[key] = self.clock() + VERDICT_SECONDS
            return m, anywhere
        self._wet[key] = self.clock() + VERDICT_SECONDS
        self._dry.pop(key, None)
        return m, constraints
