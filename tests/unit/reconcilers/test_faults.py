"""Reconcilers under injected MAAS faults: all machines end Ready, nothing leaked, nothing allocated twice."""

from __future__ import annotations

from typing import Any

import pytest
from reconciler_env import IN_DOUBT, make_env

from capmaas.reconcilers.machine import MachineSettings
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


# Dropped connections included: over ASGITransport the simulator's drop is a bare ConnectionResetError, which
# the client maps to its TransportError like a real socket's (capmaas.maas._http).
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_faulty_maas_converges_without_leaks(seed: int) -> None:
    sim = Simulator(
        Inventory.generate(machines=40, zones=3, seed=seed),
        timings=Timings.fast(),
        faults=Faults(
            seed=seed, unavailable_rate=0.15, drop_rate=0.05, deploy_failure_rate=0.15, broken_rate=0.05
        ),
    )
    # A dropped allocate may have reached MAAS: no second one until the client's in-doubt window has passed
    # since the first was sent (wall time; here each round of drive() moves the reconcilers' clock on).
    settings = MachineSettings(max_deploy_attempts=10, allocate_in_doubt=IN_DOUBT)
    env = make_env(sim, settings, clock_step=IN_DOUBT / 4)
    try:
        await env.cluster_with_retries()
        names = [f"m{i}" for i in range(10)]
        for n in names:
            env.machine(n, cp=n in ("m0", "m1", "m2"))
        await env.drive(names, ready, rounds=60)
        uids = {env.kube.get("maasmachines", n)["metadata"]["uid"]: n for n in names}
        for uid, n in uids.items():
            owned = env.sim.machines_by_agent(uid)
            assert [m["system_id"] for m in owned] == [env.kube.get("maasmachines", n)["spec"]["systemID"]]
        assert env.sim.check_invariants() == []
    finally:
        await env.connections.aclose()
