"""While MAAS deploys a machine (tens of minutes on real hardware) its MaasMachine's status is written once,
when the deploy is requested (docs/scaling.md, "Kubernetes writes per machine"): the passes that follow
write nothing for the power MAAS switches on and off as it installs, nor for the ``observedGeneration`` of
the spec write the deploying pass made itself. What a user needs to see still is written at once: a
condition that changes (here, the cluster paused), and Ready at Deployed, with the power state then."""

from __future__ import annotations

import time
from typing import Any

import pytest
from reconciler_env import Env

from capmaas.api import conditions as C
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

#: The simulator's clock: a deploy takes an hour of it, moved on by the tests.
DEPLOY = 3600.0


class Apiserver:
    """The fake's patches as the apiserver does them: a spec change moves ``metadata.generation``."""

    def __init__(self, env: Env) -> None:
        self.writes: list[tuple[str, dict[str, Any]]] = []
        inner = env.kube.patch

        async def patch(plural: Any, namespace: str, name: str, body: Any, *, status: bool) -> Any:
            self.writes.append(("status" if status else "meta", dict(body)))
            obj = env.kube.objects.get((plural, namespace, name))
            before = dict((obj or {}).get("spec") or {})
            new = await inner(plural, namespace, name, body, status=status)
            if new is not None and not status and obj is not None and (obj.get("spec") or {}) != before:
                obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
                new["metadata"]["generation"] = obj["metadata"]["generation"]
            return new

        env.kube.patch = patch  # type: ignore[method-assign]

    def statuses(self) -> list[dict[str, Any]]:
        return [body["status"] for kind, body in self.writes if kind == "status"]


def deploying(b: dict[str, Any]) -> bool:
    return (b.get("status") or {}).get("machineState") == "Deploying"


@pytest.fixture
def sim_clock() -> list[float]:
    return [time.monotonic()]


@pytest.fixture
def sim(sim_clock: list[float]) -> Simulator:
    return Simulator(
        Inventory.generate(machines=30, zones=3, seed=1),
        timings=Timings(deploy=DEPLOY),
        faults=Faults(),
        clock=lambda: sim_clock[0],
    )


@pytest.fixture
async def deploying_w0(env: Env) -> tuple[Env, Apiserver, str]:
    """``w0`` deploying, MAAS taking an hour; its system ID."""
    await env.cluster()
    env.machine("w0")
    api = Apiserver(env)
    await env.drive(["w0"], deploying)
    return env, api, env.kube.get("maasmachines", "w0")["spec"]["systemID"]


async def test_the_deploying_status_observes_the_generation_of_its_own_spec_write(
    deploying_w0: tuple[Env, Apiserver, str],
) -> None:
    env, api, _ = deploying_w0
    obj = env.kube.get("maasmachines", "w0")
    assert obj["metadata"]["generation"] == 2  # the system ID's write
    (written,) = api.statuses()
    assert {c["observedGeneration"] for c in written["conditions"]} == {2}
    api.writes.clear()
    for _ in range(3):
        await env.settle()
        await env.step("w0")
    assert api.writes == []  # nothing new to say while MAAS deploys


async def test_the_power_maas_switches_while_it_deploys_is_written_with_ready(
    deploying_w0: tuple[Env, Apiserver, str], sim_clock: list[float]
) -> None:
    env, api, sid = deploying_w0
    api.writes.clear()
    env.sim.state.machines[sid].power_state = "on"  # MAAS booted it to install
    env.sim.state.machines[sid].cached_json = None
    await env.settle()
    await env.step("w0")
    assert api.writes == []
    assert env.kube.get("maasmachines", "w0")["status"]["machineState"] == "Deploying"

    sim_clock[0] += DEPLOY
    await env.drive(["w0"], lambda b: bool((b.get("status") or {}).get("ready")))
    (ready,) = api.statuses()
    assert ready["ready"] is True
    assert env.kube.get("maasmachines", "w0")["status"]["machinePowered"] is True


async def test_a_condition_that_changes_while_deploying_is_written_at_once(
    deploying_w0: tuple[Env, Apiserver, str],
) -> None:
    env, api, sid = deploying_w0
    api.writes.clear()
    env.sim.state.machines[sid].power_state = "on"
    env.sim.state.machines[sid].cached_json = None
    env.kube.get("clusters", "c1")["spec"]["paused"] = True
    await env.settle()
    await env.step("w0")
    (written,) = api.statuses()
    paused = {c["type"]: c for c in written["conditions"]}[C.PAUSED_CONDITION]
    assert paused["status"] == "True"
