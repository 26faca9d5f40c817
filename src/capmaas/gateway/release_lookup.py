"""The ownership lookups of deletions, shared: one ``GET machines/?agent_name=a&agent_name=b&…`` for the
deletions of many MaasMachines at once instead of one request each.

Before a deletion releases ``spec.systemID`` it asks MAAS for the machines held under the object's agent
name: the machine must be among them (``spec.systemID`` is just a field someone wrote), and any other one
there (a second allocate after a lost answer) is released too. One request per deletion was a third of the
MAAS requests of a machine lifecycle on top of allocate, deploy and release; deletions come in bursts (a
cluster or a MachineDeployment scaled down), so they share list calls here, as the poller's reads do.

MAAS's machine JSON does not show ``agent_name``, so a shared answer says only that a machine is held under
*one of* the batch's agent names. It is enough, and used, only when it cannot mislead: every machine it lists
is the ``spec.systemID`` of exactly one deletion in the batch, and no system ID is named by two deletions.
Then a deletion's machine is in the answer exactly when it is held under one of these agent names by a
deletion that records it (its own), and no deletion has another machine to release. Anything else (two
deletions naming one machine, as a forged reference would; a machine no deletion records, as after a lost
answer) is looked up again per deletion, exactly as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from capmaas import maas

#: Agent names per list call: a UID is 36 characters, so the query string stays a few KiB.
CHUNK = 50
#: A lookup waits for others to share its list call until no other deletion has come for :data:`QUIET`
#: seconds, or :data:`GATHER` seconds after the first, unless :data:`CHUNK` deletions are waiting sooner. The
#: deletions of a burst reach the operator over several seconds (the apiserver marks the objects of a
#: collection deleted one by one, and each pass runs when its watch event arrives); a deletion is not waited
#: on by anyone, so its release may start this much later, and a lone deletion waits only :data:`QUIET`.
QUIET = 1.0
GATHER = 5.0

FindByAgent = Callable[[str], Awaitable[Sequence[maas.Machine]]]
FindByAgents = Callable[[Sequence[str]], Awaitable[Sequence[maas.Machine]]]


@dataclass
class _Ask:
    agent_name: str
    system_id: str
    answer: asyncio.Future[Sequence[maas.Machine]]
    asked: float  # loop time


class ReleaseLookups:
    """Batches :meth:`find` calls; see the module docstring."""

    def __init__(
        self, find_by_agent: FindByAgent, find_by_agents: FindByAgents, *, chunk: int = CHUNK
    ) -> None:
        self._one = find_by_agent
        self._many = find_by_agents
        self._chunk = max(1, chunk)
        self._queue: list[_Ask] = []
        self._task: asyncio.Task[None] | None = None
        self._full = asyncio.Event()  # a chunk is waiting: no need to wait out the coalescing pause
        self._last_ask = 0.0  # loop time of the latest find()
        self.calls = 0  # shared list calls made (for tests and figures)

    async def find(self, agent_name: str, system_id: str) -> Sequence[maas.Machine]:
        """The machines held under ``agent_name`` as far as releasing ``system_id`` needs them: all of
        them (a lookup of its own), or just ``system_id``'s machine when a shared answer proves it is the
        only one there; empty when ``system_id`` is not held under ``agent_name``."""
        loop = asyncio.get_running_loop()
        ask = _Ask(agent_name, system_id, loop.create_future(), loop.time())
        self._queue.append(ask)
        self._last_ask = ask.asked
        if len(self._queue) >= self._chunk:
            self._full.set()
        if self._task is None:
            self._task = loop.create_task(self._drain(), name="capmaas-release-lookups")
        return await ask.answer

    async def _drain(self) -> None:
        try:
            while self._queue:
                await self._gather()
                batch, self._queue = self._queue[: self._chunk], self._queue[self._chunk :]
                batch = [a for a in batch if not a.answer.done()]  # callers that gave up
                if batch:
                    await self._answer(batch)
        finally:
            self._task = None

    async def _gather(self) -> None:
        """Until a chunk is waiting, or QUIET seconds after the latest ask, or GATHER seconds after the oldest
        waiting one (the asks that came while the previous list call was answered wait their turn too, and
        are not sent alone)."""
        loop = asyncio.get_running_loop()
        while len(self._queue) < self._chunk:
            self._full.clear()
            wait = min(self._queue[0].asked + GATHER, self._last_ask + QUIET) - loop.time()
            if wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._full.wait()

    async def aclose(self) -> None:
        """Stop; lookups still waiting fail (their session is closing)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for a in self._queue:
            if not a.answer.done():
                info = maas.RequestInfo("GET", "", "machines/")
                a.answer.set_exception(maas.TransportError("the MAAS session was closed", request=info))
        self._queue.clear()

    async def _answer(self, batch: list[_Ask]) -> None:
        try:
            if len(batch) == 1:
                found = await self._one(batch[0].agent_name)
                _settle(batch[0], found)
                return
            self.calls += 1
            shared = {m.system_id: m for m in await self._many(sorted({a.agent_name for a in batch}))}
        except Exception as exc:  # MaasError mostly: each caller reports it as its own lookup's failure
            for a in batch:
                if not a.answer.done():
                    a.answer.set_exception(exc)
            return
        named = Counter(a.system_id for a in batch)
        if all(n == 1 for n in named.values()) and set(shared) <= set(named):
            for a in batch:
                _settle(a, [shared[a.system_id]] if a.system_id in shared else [])
            return
        for a in batch:  # ambiguous: each its own lookup
            try:
                found = await self._one(a.agent_name)
            except Exception as exc:
                if not a.answer.done():
                    a.answer.set_exception(exc)
                continue
            _settle(a, found)


def _settle(ask: _Ask, found: Sequence[maas.Machine]) -> None:
    if not ask.answer.done():
        ask.answer.set_result(list(found))
