"""Zone spreading for bare-metal allocation: try the zone placement chose, fall back to any zone.

The chosen zone is a preference (spreading a cluster over its failure domains), not a requirement, so a zone
with nothing suitable costs one failed allocate and is then left out for a while ("dry"). The first allocation
into a zone not yet known to have machines ("wet") holds a per-zone lock, so a burst of new MaasMachines
learns that a zone is empty from one request rather than one failed allocate each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from capmaas import maas
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.ports import MaasPort

#: Seconds a zone's dry/wet verdict is trusted.
VERDICT_SECONDS = 300.0


class ZoneSpread:
    """Soft, per-process memory of which zones recently had (or lacked) machines."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._dry: dict[str, float] = {}  # zone -> until
        self._wet: dict[str, float] = {}
        self._probes: dict[str, asyncio.Lock] = {}
        self._chosen: dict[str, tuple[str, float]] = {}  # MaasMachine UID -> (zone, until)

    def remember_choice(self, uid: str, zone: str) -> None:
        """Record the zone just chosen for ``uid``: until its ``spec.failureDomain`` reaches the cache,
        siblings choosing in the same burst count it (Machines of a MachineDeployment arrive together; stale
        counts alone put two of three in one zone)."""
        now = self.clock()
        if len(self._chosen) > 4096:
            self._chosen = {u: c for u, c in self._chosen.items() if c[1] >= now}
        self._chosen[uid] = (zone, now + VERDICT_SECONDS)

    def chosen_zone(self, uid: str) -> str | None:
        choice = self._chosen.get(uid)
        return choice[0] if choice is not None and choice[1] >= self.clock() else None

    def is_dry(self, zone: str, now: float) -> bool:
        return self._dry.get(zone, 0.0) >= now

    async def allocate(
        self, port: MaasPort, constraints: maas.AllocateConstraints, *, agent_name: str, comment: str
    ) -> tuple[maas.Machine, maas.AllocateConstraints]:
        """The machine and the constraints that found it (``zone`` cleared after a fallback)."""
        zone = str(constraints.zone)
        anywhere = constraints.model_copy(update={"zone": None})
        if self._wet.get(zone, 0.0) < self.clock():
            async with self._probes.setdefault(zone, asyncio.Lock()):
                if self.is_dry(zone, self.clock()):
                    return await port.allocate(anywhere, agent_name=agent_name, comment=comment), anywhere
                if self._wet.get(zone, 0.0) < self.clock():
                    return await self._try(port, constraints, anywhere, agent_name, comment)
        return await self._try(port, constraints, anywhere, agent_name, comment)

    async def _try(
        self,
        port: MaasPort,
        constraints: maas.AllocateConstraints,
        anywhere: maas.AllocateConstraints,
        agent_name: str,
        comment: str,
    ) -> tuple[maas.Machine, maas.AllocateConstraints]:
        zone = str(constraints.zone)
        try:
            m = await port.allocate(constraints, agent_name=agent_name, comment=comment)
        except maas_errors.NoMachineAvailableError:
            self._dry[zone] = self.clock() + VERDICT_SECONDS
            self._wet.pop(zone, None)
            return await port.allocate(anywhere, agent_name=agent_name, comment=comment), anywhere
        self._wet[zone] = self.clock() + VERDICT_SECONDS
        return m, constraints
