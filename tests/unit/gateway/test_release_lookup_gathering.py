"""Deletions that trickle in share one ownership lookup (issue 11 item 5: MAAS requests per lifecycle): the
shared lookup waits while deletions keep coming (up to GATHER seconds), and only QUIET seconds after the last
one. Before, it waited a fixed two seconds: the deletions of one burst reaching the operator over a few
seconds cost a list call every two seconds. Real simulator, real client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import httpx

from capmaas import maas
from capmaas.gateway.release_lookup import CHUNK, GATHER, QUIET, ReleaseLookups
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

ENDPOINT = "http://maas.test/MAAS"
N = 14
SPACING = QUIET / 4  # a deletion every quarter of the quiet time: the burst is still coming


@dataclass
class Deletions:
    """Machines held under agent names ``agent-<i>``, and shared lookups over them that count their list
    calls (a lookup of its own counts 1, a shared one the number of agent names it carries)."""

    lookups: ReleaseLookups
    held: list[maas.Machine]
    calls: list[int] = field(default_factory=list)

    async def find(self, i: int, after: float = 0.0) -> Sequence[maas.Machine]:
        await asyncio.sleep(after)
        return await self.lookups.find(f"agent-{i}", self.held[i].system_id)


@contextlib.asynccontextmanager
async def deletions(n: int, *, chunk: int = CHUNK, slow: float = 0.0) -> AsyncIterator[Deletions]:
    """``n`` machines held in a fresh simulator; ``slow``: seconds each shared list call takes."""
    sim = Simulator(Inventory.generate(machines=n, zones=1, seed=5), timings=Timings(), faults=Faults())
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    calls: list[int] = []

    async def one(agent_name: str) -> Sequence[maas.Machine]:
        calls.append(1)
        return await client.machines.list(agent_name=agent_name)

    async def many(agent_names: Sequence[str]) -> Sequence[maas.Machine]:
        calls.append(len(agent_names))
        await asyncio.sleep(slow)
        return await client.machines.list(agent_names=agent_names)

    lookups = ReleaseLookups(one, many, chunk=chunk)
    try:
        held = [
            await client.machines.allocate(maas.AllocateConstraints(), agent_name=f"agent-{i}")
            for i in range(n)
        ]
        yield Deletions(lookups, held, calls)
    finally:
        await lookups.aclose()
        await client.aclose()


def ids(answers: Sequence[Sequence[maas.Machine]]) -> list[list[str]]:
    return [[m.system_id for m in a] for a in answers]


async def test_a_trickling_burst_shares_one_lookup() -> None:
    assert SPACING * N < GATHER
    async with deletions(N) as d:
        answers = await asyncio.gather(*(d.find(i, after=i * SPACING) for i in range(N)))
        assert ids(answers) == [[m.system_id] for m in d.held]
        assert d.calls == [N]  # one list call for the whole burst
        # A lone deletion later is looked up on its own.
        assert ids([await d.find(0)]) == [[d.held[0].system_id]]
        assert d.calls == [N, 1]


async def test_deletions_that_come_while_a_list_call_is_answered_wait_for_more() -> None:
    """A full chunk goes at once; the deletions that come while MAAS answers it gather again (before, they
    were sent at once, a few at a time: most shared lookups of a 4,000-machine deletion carried 2 or 3
    agent names)."""
    chunk, late = 10, 8
    async with deletions(chunk + late, chunk=chunk, slow=QUIET / 2) as d:
        answers = await asyncio.gather(
            *(d.find(i, after=max(0, i - chunk + 1) * SPACING / 2) for i in range(chunk + late))
        )
        assert ids(answers) == [[m.system_id] for m in d.held]
        assert d.calls == [chunk, late]
