"""A replacement interrupted between giving the machine back and clearing ``spec.systemID`` (found by the
chaos test): the released machine goes straight back to the pool, so by the next pass it may be another
MaasMachine's, Allocated or Deployed under the same MAAS user. MAAS's machine JSON has no agent name, so only
asking MAAS for the machines held under our UID tells whether it is still ours."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from reconciler_env import Env, make_env

from capmaas.reconcilers.keys import MACHINE_FINALIZER as FINALIZER
from capmaas.reconcilers.ports import Body, ObjectPlural
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


class BrokenOnce(Faults):
    """The first machine to finish deploying turns Broken (hardware failure); the rest deploy fine."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def goes_broken(self) -> bool:
        self.calls += 1
        return self.calls == 1


class Died(Exception):
    """The process stopped here (SIGKILL) or the apiserver refused the write: nothing after it happened."""


class Killable:
    """Wraps the fake Kubernetes port: from the spec write that forgets ``name``'s machine on, every write
    fails (the process is dead) until :meth:`restart`."""

    def __init__(self, env: Env, name: str) -> None:
        self.original = env.kube.patch
        self.name = name
        self.dead = False
        self.deaths = 0
        env.kube.patch = self.patch  # type: ignore[method-assign,assignment]

    async def patch(
        self, plural: ObjectPlural, namespace: str, obj: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        spec = body.get("spec") or {}
        if not self.deaths and obj == self.name and "systemID" in spec and spec["systemID"] is None:
            self.dead = True
            self.deaths += 1
        if self.dead:
            raise Died
        return await self.original(plural, namespace, obj, body, status=status)

    def restart(self) -> None:
        self.dead = False


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


@pytest.fixture
async def benv() -> Any:
    sim = Simulator(
        Inventory.generate(machines=12, zones=1, seed=3), timings=Timings.fast(), faults=BrokenOnce()
    )
    e = make_env(sim)
    yield e
    await e.connections.aclose()


async def crash_after_giving_back(env: Env) -> str:
    """w0 gets a machine that turns Broken, gives it back, and dies before forgetting it; w1 then gets that
    machine (the cheapest Ready one). Returns its system ID."""
    await env.cluster()
    env.machine("w0")
    kube = Killable(env, "w0")
    for _ in range(6):
        try:
            await env.step("w0")
        except Died:
            break
        await env.settle()
    assert kube.deaths == 1
    kube.restart()
    first = str(env.kube.get("maasmachines", "w0")["spec"]["systemID"])
    assert env.sim.machine(first)["status_name"] in ("Ready", "Releasing")  # given back, not yet forgotten
    env.sim.tick()
    env.machine("w1")
    await env.step("w1")
    assert env.kube.get("maasmachines", "w1")["spec"]["systemID"] == first
    return first


async def test_a_machine_given_back_before_a_crash_is_not_taken_for_ours_again(benv: Env) -> None:
    env = benv
    first = await crash_after_giving_back(env)
    await env.drive(["w0", "w1"], ready)
    w0, w1 = env.kube.get("maasmachines", "w0"), env.kube.get("maasmachines", "w1")
    assert w1["spec"]["systemID"] == first
    assert w0["spec"]["systemID"] != first  # not w1's machine
    for b in (w0, w1):
        held = [m["system_id"] for m in env.sim.machines_by_agent(b["metadata"]["uid"])]
        assert held == [b["spec"]["systemID"]]
    assert "capmaas.infrastructure.cluster.x-k8s.io/replacing" not in w0["metadata"].get("annotations", {})
    assert env.sim.check_invariants() == []


async def test_deleting_right_after_such_a_crash_leaves_the_other_machine_alone(benv: Env) -> None:
    env = benv
    first = await crash_after_giving_back(env)
    await env.drive(["w1"], ready)
    env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(5):
        if ("maasmachines", "ns", "w0") in env.kube.objects:
            await env.step("w0")
        await env.settle()
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(first)["status_name"] == "Deployed"  # w1's, untouched
    w1 = env.kube.get("maasmachines", "w1")
    assert [m["system_id"] for m in env.sim.machines_by_agent(w1["metadata"]["uid"])] == [first]
    assert FINALIZER in w1["metadata"]["finalizers"]
    assert env.sim.check_invariants() == []
