"""Deletions that trickle in share one ownership lookup (issue 11 item 5: MAAS requests per lifecycle): the
shared lookup waits while deletions keep coming (up to GATHER seconds), and only QUIET seconds after the last
one. Before, it waited a fixed two seconds: the deletions of one burst reaching the operator over a few
seconds cost a list call every two seconds. Real simulator, real client."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx

from capmaas import maas
from capmaas.gateway.release_lookup import GATHER, QUIET, ReleaseLookups
from capmaas.simulator import Faults, Inventory, Simulator, Timings

ENDPOINT = "http://maas.test/MAAS"
N = 14
SPACING = QUIET / 4  # a deletion every quarter of the quiet time: the burst is still coming


async def test_a_trickling_burst_shares_one_lookup() -> None:
    assert SPACING * N < GATHER
    sim = Simulator(Inventory.generate(machines=N, zones=1, seed=5), timings=Timings(), faults=Faults())
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    calls: list[int] = []

    async def one(agent_name: str) -> Sequence[maas.Machine]:
        calls.append(1)
        return await client.machines.list(agent_name=agent_name)

    async def many(agent_names: Sequence[str]) -> Sequence[maas.Machine]:
        calls.append(len(agent_names))
        return await client.machines.list(agent_names=agent_names)

    lookups = ReleaseLookups(one, many)
    try:
        held = [
            await client.machines.allocate(maas.AllocateConstraints(), agent_name=f"agent-{i}")
            for i in range(N)
        ]

        async def delete(i: int) -> Sequence[maas.Machine]:
            await asyncio.sleep(i * SPACING)
            return await lookups.find(f"agent-{i}", held[i].system_id)

        answers = await asyncio.gather(*(delete(i) for i in range(N)))
        assert [[m.system_id for m in a] for a in answers] == [[m.system_id] for m in held]
        assert calls == [N]  # one list call for the whole burst
        # A lone deletion later is looked up on its own.
        alone = await lookups.find("agent-0", held[0].system_id)
        assert [m.system_id for m in alone] == [held[0].system_id]
        assert calls == [N, 1]
    finally:
        await lookups.aclose()
        await client.aclose()


async def test_deletions_that_come_while_a_list_call_is_answered_wait_for_more() -> None:
    """A full chunk goes at once; the deletions that come while MAAS answers it gather again (before, they
    were sent at once, a few at a time: most shared lookups of a 4,000-machine deletion carried 2 or 3
    agent names)."""
    chunk, late = 10, 8
    sim = Simulator(
        Inventory.generate(machines=chunk + late, zones=1, seed=7), timings=Timings(), faults=Faults()
    )
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    calls: list[int] = []

    async def one(agent_name: str) -> Sequence[maas.Machine]:
        calls.append(1)
        return await client.machines.list(agent_name=agent_name)

    async def many(agent_names: Sequence[str]) -> Sequence[maas.Machine]:
        calls.append(len(agent_names))
        await asyncio.sleep(QUIET / 2)  # a slow answer: more deletions come meanwhile
        return await client.machines.list(agent_names=agent_names)

    lookups = ReleaseLookups(one, many, chunk=chunk)
    try:
        held = [
            await client.machines.allocate(maas.AllocateConstraints(), agent_name=f"agent-{i}")
            for i in range(chunk + late)
        ]

        async def delete(i: int) -> Sequence[maas.Machine]:
            if i >= chunk:
                await asyncio.sleep((i - chunk + 1) * SPACING / 2)
            return await lookups.find(f"agent-{i}", held[i].system_id)

        answers = await asyncio.gather(*(delete(i) for i in range(chunk + late)))
        assert [[m.system_id for m in a] for a in answers] == [[m.system_id] for m in held]
        assert calls == [chunk, late]
    finally:
        await lookups.aclose()
        await client.aclose()
