"""A release MAAS took after the client gave up on its answer (the simulator's late commit; a slow region
under load): the request timed out, so the pass ended in an error, and by the next pass MAAS is releasing
the machine. Its agent name is gone, so the ownership lookup no longer lists it, while the shared poller
still shows it Deployed. The deletion must wait for MAAS to finish, as after any release of its own, not
call the machine someone else's and drop the finalizer while MAAS is still releasing it (seen in CI: a
machine still Releasing after every MaasMachine was gone)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from reconciler_env import ENDPOINT, Env

from capmaas import maas
from capmaas_dev.simulator import Faults, Inventory, NodeStatus, Simulator, Timings

#: The simulator's clock, moved by hand: MAAS takes RELEASE seconds to release a machine, so a pass runs
#: while it is still Releasing, then the clock is moved past that.
NOW = [0.0]
RELEASE = 5.0


@pytest.fixture
def sim() -> Simulator:
    NOW[0] = 1000.0
    return Simulator(
        Inventory.generate(machines=5, zones=1, seed=1),
        timings=Timings(release=RELEASE),
        faults=Faults(),
        clock=lambda: NOW[0],
    )


def ready(b: dict[str, Any]) -> bool:
    return bool(b.get("status", {}).get("ready"))


async def release_behind_the_pollers_back(env: Env, sid: str) -> None:
    """What MAAS does with the timed-out request: the same release, by the operator's own user, with no poll
    after it (the poller's snapshot still shows the machine Deployed)."""
    async with maas.MaasClient(
        ENDPOINT, api_key=env.sim.api_key, transport=httpx.ASGITransport(app=env.sim.app)
    ) as client:
        await client.machines.release(sid, erase=False, secure_erase=False, quick_erase=False, comment="late")


async def test_a_release_maas_took_after_the_client_gave_up_is_waited_for(env: Env) -> None:
    await env.cluster()
    env.machine("w1")
    await env.drive(["w1"], ready)
    sid = env.kube.get("maasmachines", "w1")["spec"]["systemID"]
    session = next(iter(env.connections.sessions()))
    assert session.poller.snapshot(sid).status == maas.NodeStatus.DEPLOYED

    await release_behind_the_pollers_back(env, sid)
    assert env.sim.state.machines[sid].status is NodeStatus.RELEASING
    env.kube.get("maasmachines", "w1")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await env.step("w1")

    assert ("maasmachines", "ns", "w1") in env.kube.objects, "the finalizer went while MAAS was releasing"
    reasons = [e[2] for e in env.kube.events if e[0] == "w1"]
    assert "MachineNotOurs" not in reasons, reasons
    assert env.sim.state.machines[sid].status is NodeStatus.RELEASING
    releases = sum(n for (m, _, op), n in env.sim.counters.items() if m == "POST" and op == "release")
    await env.settle()
    await env.step("w1")  # the next pass: the poller sees Releasing now; still waiting
    assert ("maasmachines", "ns", "w1") in env.kube.objects

    NOW[0] += RELEASE + 1
    for _ in range(8):
        if ("maasmachines", "ns", "w1") not in env.kube.objects:
            break
        await env.settle()
        await env.step("w1")
    assert ("maasmachines", "ns", "w1") not in env.kube.objects
    assert env.sim.state.machines[sid].status is NodeStatus.READY
    assert "MachineReleased" in [e[2] for e in env.kube.events if e[0] == "w1"]
    # Waiting wrote nothing to MAAS: no second release of a machine MAAS was already releasing.
    assert sum(n for (m, _, op), n in env.sim.counters.items() if m == "POST" and op == "release") == releases
