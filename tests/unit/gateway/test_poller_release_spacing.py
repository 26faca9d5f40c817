"""The shared poller's spacing (issue 11 item 5): while only machines being released are in flight, hot lists
run every few fast intervals (nobody waits on a release to become Ready, and each list call then carries
more machines); a machine deploying, or not seen yet, brings the fast interval back. Real simulator, real
client; the machines' states come from MAAS's own answers."""

from __future__ import annotations

import asyncio

import httpx

from capmaas import maas
from capmaas.gateway.poller import FRESH_BATCH, RELEASE_SLOWDOWN, MachinePoller
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

ENDPOINT = "http://maas.test/MAAS"
FAST, IDLE = 1.0, 30.0


async def test_release_only_polls_are_spaced_out_and_a_deploy_brings_the_fast_interval_back() -> None:
    timings = Timings(deploy=0, release=60)  # a deploy ends at the next tick; a release takes a minute
    sim = Simulator(Inventory.generate(machines=6, zones=1, seed=2), timings=timings, faults=Faults())
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    poller = MachinePoller(client, fast=FAST, idle=IDLE, batch_size=200, wake=lambda key: None)
    try:
        a = await client.machines.allocate(maas.AllocateConstraints(), agent_name="a")
        b = await client.machines.allocate(maas.AllocateConstraints(), agent_name="b")
        poller.watch(b.system_id, "b")
        assert poller.spacing() == FAST  # not seen yet
        await client.machines.deploy(b.system_id)
        sim.tick()
        await poller.poll_once()
        assert poller.spacing() == FAST * RELEASE_SLOWDOWN  # Deployed: not hot, nothing in flight
        released = await client.machines.release(b.system_id)
        assert released is not None
        assert released.status == maas.NodeStatus.RELEASING
        poller.put(released)
        assert poller.spacing() == FAST * RELEASE_SLOWDOWN  # only a release in flight
        poller.kick()
        await poller.poll_once(full=False)  # and it is listed by the hot poll
        assert (poller.snapshot(b.system_id) or released).status == maas.NodeStatus.RELEASING

        poller.watch(a.system_id, "a")
        poller.put(await client.machines.deploy(a.system_id))  # Deploying: someone waits on it
        assert poller.snapshot(a.system_id) is not None
        assert poller.spacing() == FAST
    finally:
        await client.aclose()


async def test_a_trickle_of_deploys_is_listed_every_hot_max_and_a_batch_every_fast_interval() -> None:
    """Fewer than FRESH_BATCH deploys since the last list wait up to ``hot_max`` (a MAAS deploy takes
    minutes; a trickle of deploys needs no list call per second each); FRESH_BATCH of them bring the next list
    forward to one fast interval; once listed, machines still deploying are listed every ``hot_max``."""
    hot_max = 2.5
    timings = Timings(deploy=600, release=0)
    sim = Simulator(
        Inventory.generate(machines=FRESH_BATCH + 2, zones=1, seed=3), timings=timings, faults=Faults()
    )
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    poller = MachinePoller(
        client, fast=FAST, idle=IDLE, batch_size=200, wake=lambda key: None, hot_max=hot_max
    )
    try:
        ids = []
        for i in range(FRESH_BATCH):
            m = await client.machines.allocate(maas.AllocateConstraints(), agent_name=f"m{i}")
            poller.put(m)
            poller.watch(m.system_id, f"m{i}")
            ids.append(m.system_id)
        assert poller.spacing() == FAST * RELEASE_SLOWDOWN  # Allocated: MAAS leaves them alone
        for sid in ids[:3]:
            poller.put(await client.machines.deploy(sid))
        assert poller.spacing() == hot_max  # a trickle: three deploys since the last list
        for sid in ids[3:]:
            poller.put(await client.machines.deploy(sid))
        assert poller.spacing() == FAST  # a batch: one list call carries them all, at once
        await poller.poll_once(full=False)
        snap = poller.snapshot(ids[0])
        assert snap is not None
        assert snap.status == maas.NodeStatus.DEPLOYING
        assert poller.spacing() == hot_max  # listed once, still deploying for minutes
    finally:
        await client.aclose()


async def test_machines_not_seen_yet_are_fresh() -> None:
    """After a restart every watched machine is unknown: FRESH_BATCH of them are listed at the fast
    interval, a few wait up to ``hot_max``."""
    sim = Simulator(Inventory.generate(machines=2, zones=1, seed=4), timings=Timings(), faults=Faults())
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    poller = MachinePoller(client, fast=FAST, idle=IDLE, batch_size=200, wake=lambda key: None, hot_max=4.0)
    try:
        for i in range(FRESH_BATCH - 1):
            poller.watch(f"unknown{i}", f"k{i}")
        assert poller.spacing() == 4.0
        poller.watch("unknown-last", "k-last")
        assert poller.spacing() == FAST
        poller.unwatch("unknown-last")
        assert poller.spacing() == 4.0
    finally:
        await client.aclose()


async def test_a_hot_list_carries_the_steady_machines_about_to_be_due() -> None:
    """The steady machines are read about once per idle interval; while machines are in flight, the hot
    list call's spare room carries the ones about to be due, instead of a list call of their own: a steady
    machine powered off behind the operator's back is noticed by the next hot list."""
    fast = idle_fast = 0.25
    idle = 3.0
    sim = Simulator(
        Inventory.generate(machines=6, zones=1, seed=6), timings=Timings(deploy=600), faults=Faults()
    )
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    woken: list[str] = []
    poller = MachinePoller(client, fast=fast, idle=idle, batch_size=200, wake=woken.append, hot_max=idle_fast)
    try:
        steady = []
        for i in range(4):
            m = await client.machines.allocate(maas.AllocateConstraints(), agent_name=f"s{i}")
            poller.watch(m.system_id, f"s{i}")
            steady.append(m.system_id)
        await poller.poll_once()
        assert {poller.snapshot(sid).status for sid in steady} == {maas.NodeStatus.ALLOCATED}  # type: ignore[union-attr]
        await asyncio.sleep(idle - 2 * idle_fast + 0.1)  # about to be due, not due yet
        for sid in steady:  # changed in MAAS, not through the poller
            await client.machines.power_on(sid)
        deploying = await client.machines.allocate(maas.AllocateConstraints(), agent_name="d")
        poller.watch(deploying.system_id, "d")
        poller.put(await client.machines.deploy(deploying.system_id))
        lists_before = sim.counters[("GET", "/MAAS/api/2.0/machines/", None)]
        woken.clear()
        await poller.poll_once(full=False)
        assert sim.counters[("GET", "/MAAS/api/2.0/machines/", None)] == lists_before + 1
        assert sorted(woken) == [f"s{i}" for i in range(4)]  # read by the hot list call
    finally:
        await client.aclose()


async def test_an_allocate_answer_folded_in_before_its_watch_counts_as_read() -> None:
    """The allocate's answer is folded in before the machine is watched: it was just read, so it is not due
    (before, it counted as unread for an idle interval and brought on a round of every steady machine)."""
    sim = Simulator(Inventory.generate(machines=3, zones=1, seed=8), timings=Timings(), faults=Faults())
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    poller = MachinePoller(client, fast=FAST, idle=IDLE, batch_size=200, wake=lambda key: None)
    try:
        m = await client.machines.allocate(maas.AllocateConstraints(), agent_name="a")
        poller.put(m)
        poller.watch(m.system_id, "a")
        lists = sim.counters.get(("GET", "/MAAS/api/2.0/machines/", None), 0)
        await poller.poll_once(full=False)
        assert sim.counters.get(("GET", "/MAAS/api/2.0/machines/", None), 0) == lists
    finally:
        await client.aclose()
