"""The shared poll lists a large round in pages (issue 26 target 3): with the default ``polling.batch_size``,
no list call carries more than 100 system IDs, so one answer (and the parsed tree pydantic's JSON parser holds
while it reads it) stays a page's worth however many machines are in flight; every watched machine is still
read once per round, and a machine absent from its page is still found gone. Real simulator, real client."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from capmaas import maas
from capmaas.config import PollingSection
from capmaas.gateway.poller import MachinePoller
from capmaas.maas import errors as maas_errors
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

ENDPOINT = "http://maas.test/MAAS"
#: System IDs one list call of the shared poll may carry with the default settings.
PAGE = 100
REQUEST = maas_errors.RequestInfo("GET", "machines/", "machines/")


def polled(machines: int, *, seed: int) -> tuple[Simulator, maas.MaasClient, MachinePoller, list[str]]:
    """A simulator of ``machines``, a client of it and a poller with the default page size, and the keys the
    poller wakes, in order."""
    sim = Simulator(
        Inventory.generate(machines=machines, zones=1, seed=seed), timings=Timings(), faults=Faults()
    )
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    woken: list[str] = []
    poller = MachinePoller(
        client, fast=1.0, idle=30.0, batch_size=PollingSection().batch_size, wake=woken.append
    )
    return sim, client, poller, woken


async def test_a_round_of_many_machines_is_listed_in_pages_of_at_most_a_hundred_ids() -> None:
    sim, client, poller, woken = polled(2 * PAGE + 30, seed=4)
    calls: list[list[str]] = []
    listed = client.machines.list_lenient

    async def recording(ids: Sequence[str]) -> tuple[list[maas.Machine], list[str]]:
        calls.append(list(ids))
        return await listed(ids)

    client.machines.list_lenient = recording  # type: ignore[method-assign]
    try:
        ids = list(sim.state.machines)
        for sid in ids:
            poller.watch(sid, f"key-{sid}")
        poller.watch("gone00", "key-gone00")  # MAAS does not know it: found absent from its page
        await poller.poll_once()
        assert [len(c) for c in calls] == [PAGE, PAGE, 31]
        assert sorted(sid for c in calls for sid in c) == sorted([*ids, "gone00"])
        for sid in ids:
            snap = poller.snapshot(sid)
            assert snap is not None
            assert snap.system_id == sid
            assert snap.status == maas.NodeStatus.READY
        assert poller.is_gone("gone00")
        assert sorted(woken) == sorted(f"key-{sid}" for sid in [*ids, "gone00"])  # each woken once
    finally:
        await client.aclose()


async def test_each_page_is_folded_in_as_soon_as_it_is_answered() -> None:
    """The owners of a page's machines are woken when that page is answered, not after the whole round (a
    round of many pages must not hold back the first machines' readiness); a failed call ends the round
    there, with the pages before it kept and the round counted as failed."""
    sim, client, poller, woken = polled(2 * PAGE + 5, seed=5)
    woken_before_call: list[int] = []
    listed = client.machines.list_lenient

    async def recording(ids: Sequence[str]) -> tuple[list[maas.Machine], list[str]]:
        woken_before_call.append(len(woken))
        if len(woken_before_call) == 3:
            raise maas_errors.TransportError("connection refused", request=REQUEST)
        return await listed(ids)

    client.machines.list_lenient = recording  # type: ignore[method-assign]
    try:
        ids = list(sim.state.machines)
        for sid in ids:
            poller.watch(sid, f"key-{sid}")
        await poller.poll_once()
        assert woken_before_call == [0, PAGE, 2 * PAGE]
        assert sorted(woken) == sorted(f"key-{sid}" for sid in ids[: 2 * PAGE])
        assert all(poller.snapshot(sid) is not None for sid in ids[: 2 * PAGE])
        assert all(poller.snapshot(sid) is None for sid in ids[2 * PAGE :])
        assert poller.last_error is not None
        assert poller.polls == 0
    finally:
        await client.aclose()
