"""MAAS's 409 on allocate lists every constraint but not which one emptied the pool (issue 25 item 1). When
the session's inventory has a Ready listing (it lists while templates count capacity), the NoMachineAvailable
condition names the constraint that left no machine, with no MAAS request of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_env import Env, make_env

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.v1beta1 import MaasMachineSpec
from capmaas.gateway import matching
from capmaas.reconcilers.errors import TransientError
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

INVENTORY: dict[str, Any] = {
    "pools": [{"name": "gold"}],
    "boot_resources": [
        {"name": "ubuntu/jammy", "architecture": "amd64/generic"},
        {"name": "ubuntu/jammy", "architecture": "arm64/generic"},
    ],
    "machines": [
        {"hostname": "big-1", "cpu_count": 16, "memory": 65536},
        {"hostname": "big-2", "cpu_count": 16, "memory": 65536},
        {"hostname": "gold-small", "cpu_count": 4, "memory": 8192, "pool": "gold"},
    ],
}


@pytest.fixture
async def xenv() -> AsyncIterator[Env]:
    e = make_env(Simulator(Inventory(INVENTORY), timings=Timings.fast(), faults=Faults()))
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def message(env: Env, name: str) -> dict[str, Any]:
    mm = env.kube.get("maasmachines", name)
    return next(c for c in mm["status"]["conditions"] if c["type"] == C.MACHINE_PROVISIONED_CONDITION)


async def test_the_condition_names_the_constraint_that_emptied_the_pool(xenv: Env) -> None:
    env = xenv
    await env.cluster()
    env.machine("w1", min_cpu=8, resource_pool="gold")
    with pytest.raises(TransientError):
        await env.step("w1")  # connects; no listing yet: MAAS's words only
    c = message(env, "w1")
    assert c["reason"] == C.NO_MACHINE_AVAILABLE_REASON
    assert "matched every constraint before" not in c["message"]
    (session,) = env.connections.sessions()
    inventory = session.poller.inventory
    inventory.want("template")  # a template counts capacity on this MAAS: the inventory lists
    await inventory.refresh()
    before = dict(env.sim.counters)
    env.kube.get("maasmachines", "w1")["metadata"]["annotations"].pop(
        "capmaas.infrastructure.cluster.x-k8s.io/allocate-after", None
    )
    with pytest.raises(TransientError, match="none that one"):
        await env.step("w1")
    c = message(env, "w1")
    assert c["reason"] == C.NO_MACHINE_AVAILABLE_REASON
    assert "of the 3 Ready machines MAAS listed" in c["message"]
    assert "2 matched every constraint before resourcePool gold, none that one" in c["message"]
    sent = {k: n - before.get(k, 0) for k, n in env.sim.counters.items() if n != before.get(k, 0)}
    # The explanation costs no request: the allocates (a zone, then any zone) are all that went to MAAS.
    assert set(sent) == {("POST", "/MAAS/api/2.0/machines/", "allocate")}, sent


def test_emptied_by_follows_the_constraints_in_order() -> None:
    spec = MaasMachineSpec.model_validate(
        {"image": "ubuntu/jammy", "minCPU": 8, "minMemory": 4096, "architecture": "arm64"}
    )
    sel = matching.Selection.of(spec)
    assert matching.emptied_by(sel, []) is None

    def machine(sid: str, cpu: int, arch: str) -> maas.Machine:
        return maas.Machine.model_validate(
            {"system_id": sid, "hostname": sid, "status": 4, "zone": {"id": 1, "name": "z"}, "cpu_count": cpu,
             "memory": 8192, "architecture": arch}
        )  # fmt: skip

    small_arm, big_amd = machine("a", 4, "arm64/generic"), machine("b", 16, "amd64/generic")
    assert matching.emptied_by(sel, [small_arm, big_amd]) == ("architecture arm64", 1)
    assert matching.emptied_by(sel, [small_arm]) == ("minCPU 8", 1)
    assert matching.emptied_by(sel, [machine("c", 8, "arm64/generic")]) is None  # it matches: taken since
