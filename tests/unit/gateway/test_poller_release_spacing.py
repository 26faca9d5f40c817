"""The shared poller's spacing (issue 11 item 5): while only machines being released are in flight, hot lists
run every few fast intervals (nobody waits on a release to become Ready, and each list call then carries
more machines); a machine deploying, or not seen yet, brings the fast interval back. Real simulator, real
client; the machines' states come from MAAS's own answers."""

from __future__ import annotations

import httpx

from capmaas import maas
from capmaas.gateway.poller import RELEASE_SLOWDOWN, MachinePoller
from capmaas.simulator import Faults, Inventory, Simulator, Timings

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
