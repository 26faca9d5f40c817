"""What a real MAAS region answers that the happy path never sees (issue 16): machines with ``manual`` power,
MAAS refusing our deploy request, and MAAS refusing one machine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from reconciler_env import Env, make_env

from capmaas.api import conditions as C
from capmaas.simulator import Faults, Inventory, Simulator, Timings


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def cond(b: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in b["status"]["conditions"] if c["type"] == type_)


Edit = Callable[[list[dict[str, Any]]], None]


@pytest.fixture
def edit(request: pytest.FixtureRequest) -> list[Edit]:
    """Changes to the generated inventory's machines (``indirect`` parametrization) for ``renv``."""
    return list(getattr(request, "param", []))


@pytest.fixture
async def renv(edit: list[Edit]) -> AsyncIterator[Env]:
    inv = Inventory.generate(machines=6, zones=1, seed=1)
    for f in edit:
        f(inv.data["machines"])
    e = make_env(Simulator(inv, timings=Timings.fast(), faults=Faults()))
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def manual_power(machines: list[dict[str, Any]]) -> None:
    for m in machines:
        m["power_type"] = "manual"  # MAAS keeps power_state "unknown" through deploy


@pytest.mark.parametrize("edit", [[manual_power]], indirect=True)
async def test_a_deployed_manual_power_machine_is_ready_without_power_on(renv: Env) -> None:
    await renv.cluster()
    renv.machine("w0")
    await renv.drive(["w0"], ready)
    b = renv.kube.get("maasmachines", "w0")
    sid = b["spec"]["systemID"]
    assert renv.sim.state.machines[sid].power_state == "unknown"
    assert cond(b, C.READY_CONDITION)["status"] == "True"
    assert not [k for k in renv.sim.counters if "power_on" in str(k)], renv.sim.counters
    assert "MachinePoweredOff" not in renv.kube.reasons()
    assert b["status"].get("machinePowered") is None  # MAAS does not know: the status claims neither
