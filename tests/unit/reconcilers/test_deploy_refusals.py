"""What a real MAAS region answers that the happy path never sees (issue 16): machines with ``manual`` power,
MAAS refusing our deploy request, and MAAS refusing one machine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from reconciler_env import Env, make_env

from capmaas.api import conditions as C
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


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


def states(env: Env) -> dict[str, str]:
    return {sid: m.status.name for sid, m in env.sim.state.machines.items()}


async def test_an_image_maas_does_not_have_releases_the_machine_and_tries_no_other(renv: Env) -> None:
    await renv.cluster()
    renv.machine("w0", image="ubuntu/focal")  # the inventory has jammy and noble only
    for _ in range(4):
        with contextlib.suppress(Exception):
            await renv.step("w0")
        await renv.settle()
    b = renv.kube.get("maasmachines", "w0")
    c = cond(b, C.MACHINE_PROVISIONED_CONDITION)
    assert c["reason"] == C.INVALID_IMAGE_REASON, c
    assert "'ubuntu/focal' is not a valid distro_series" in c["message"]
    assert "systemID" not in b["spec"]
    assert not [s for s, st in states(renv).items() if st != "READY"], states(renv)  # none broken, none held
    allocates = sum(
        n for (method, _, op), n in renv.sim.counters.items() if (method, op) == ("POST", "allocate")
    )
    assert allocates == 1, renv.sim.counters
    warnings = [e for e in renv.kube.events if e[2] == C.INVALID_IMAGE_REASON]
    assert len(warnings) == 1, renv.kube.events
    assert "released" in warnings[0][3]
    assert "not marked broken" in warnings[0][3]

    renv.kube.get("maasmachines", "w0")["spec"]["image"] = "ubuntu/noble"  # the user fixes the spec
    await renv.drive(["w0"], ready)
    assert renv.kube.get("maasmachines", "w0")["status"]["attempts"] == 1


def unlinked_first(machines: list[dict[str, Any]]) -> None:
    del machines[2:]
    for m in machines:
        m["tags"] = []
    machines[0]["interfaces"] = [{"name": "eth0"}]  # no subnet link: MAAS refuses to deploy it
    machines[0]["cpu_count"] = 64  # the only one with 32 or more CPUs
    machines[1]["cpu_count"] = 4


@pytest.mark.parametrize("edit", [[unlinked_first]], indirect=True)
async def test_a_machine_without_network_is_marked_broken_and_another_one_deployed(renv: Env) -> None:
    await renv.cluster()
    bad = next(m for m in renv.sim.state.machines.values() if not renv.sim.state.has_network_link(m))
    renv.machine("w0", min_cpu=32)  # only the unlinked machine matches at first
    with contextlib.suppress(Exception):
        await renv.step("w0")
    assert bad.status.name == "BROKEN", states(renv)
    assert "Node must be configured to use a network" in bad.error_description
    b = renv.kube.get("maasmachines", "w0")
    assert cond(b, C.MACHINE_PROVISIONED_CONDITION)["reason"] == C.DEPLOYMENT_FAILED_REASON
    assert "systemID" not in b["spec"]
    events = [e for e in renv.kube.events if e[2] == C.DEPLOYMENT_FAILED_REASON]
    assert len(events) == 1, renv.kube.events
    assert "marking it broken" in events[0][3]
    assert "network" in events[0][3]
    renv.kube.get("maasmachines", "w0")["spec"]["minCPU"] = 2
    await renv.drive(["w0"], ready)
    assert renv.kube.get("maasmachines", "w0")["spec"]["systemID"] != bad.system_id


async def test_no_machine_available_says_how_maas_resolved_the_constraints(renv: Env) -> None:
    await renv.cluster()
    renv.machine("big", min_cpu=999)
    for _ in range(2):
        with contextlib.suppress(Exception):
            await renv.step("big")
    c = cond(renv.kube.get("maasmachines", "big"), C.READY_CONDITION)
    assert c["reason"] == C.NO_MACHINE_AVAILABLE_REASON
    assert "cpu_count=999" in c["message"]  # ours
    assert "No available machine matches constraints" in c["message"], c  # MAAS's own
    assert "resolved to" in c["message"]
    events = [e for e in renv.kube.events if e[2] == C.NO_MACHINE_AVAILABLE_REASON]
    assert len(events) == 1, renv.kube.events  # one per streak of failures, not one per pass
    assert "No available machine matches constraints" in events[0][3]
