"""Deletions share their ownership lookups (issue 11 item 5: MAAS requests per lifecycle), against the real
simulator: many MaasMachines deleted together cost one ``GET machines/?agent_name=…`` list call, not one
each, and every safety the per-deletion lookup gave still holds: a forged reference is not released, a
second machine under an agent name is released too."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from reconciler_env import ENDPOINT, Env

from capmaas import maas
from capmaas.reconcilers.keys import AGENT_NAME, ANNOTATION_PREFIX, MACHINE_FINALIZER
from capmaas_dev import demo

N = 20


def ready(b: dict[str, Any]) -> bool:
    return bool(b.get("status", {}).get("ready"))


def lists(env: Env) -> int:
    return env.sim.counters.get(("GET", "/MAAS/api/2.0/machines/", None), 0)


def releases(env: Env) -> int:
    return sum(n for (method, _, op), n in env.sim.counters.items() if method == "POST" and op == "release")


async def delete_together(env: Env, names: list[str]) -> None:
    """Mark them deleted and run one pass of each at the same time (as the operator's loops would)."""
    for n in names:
        env.kube.get("maasmachines", n)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"

    async def one(n: str) -> None:
        with contextlib.suppress(Exception):
            await env.step(n)

    await asyncio.gather(*(one(n) for n in names))


async def finish(env: Env, names: list[str], rounds: int = 8) -> None:
    for _ in range(rounds):
        left = [n for n in names if ("maasmachines", "ns", n) in env.kube.objects]
        if not left:
            return
        await env.settle()
        for n in left:
            await env.step(n)
    raise AssertionError([n for n in names if ("maasmachines", "ns", n) in env.kube.objects])


async def provision(env: Env, names: list[str]) -> None:
    await env.cluster()
    for n in names:
        env.machine(n)
    await env.drive(names, ready)


async def test_deletions_together_share_one_lookup(env: Env) -> None:
    names = [f"w{i:02d}" for i in range(N)]
    await provision(env, names)
    before_lists, before_releases = lists(env), releases(env)
    await delete_together(env, names)
    assert releases(env) - before_releases == N  # every one released in this pass
    assert lists(env) - before_lists <= 2  # one shared lookup (and at most one poll meanwhile), not N
    await finish(env, names)
    assert env.sim.check_invariants() == []
    assert not [m for m in env.sim.state.machines.values() if m.owner is not None]


async def test_a_forged_reference_in_a_batch_is_not_released(env: Env) -> None:
    """The victim and a forged MaasMachine naming the victim's machine are deleted together: two deletions
    name one machine, so each is looked up on its own; the forged one releases nothing."""
    names = ["victim", "w1", "w2"]
    await provision(env, names)
    sid = env.kube.get("maasmachines", "victim")["spec"]["systemID"]
    evil = demo.maasmachine("evil", "ns", "c1", control_plane=False)
    evil["metadata"]["finalizers"] = [MACHINE_FINALIZER]
    evil["spec"].update(systemID=sid, providerID=f"maas://az1/{sid}", releaseOptions={"quickErase": True})
    env.kube.add("maasmachines", evil)
    await delete_together(env, ["evil", *names])
    assert ("evil", "Warning", "MachineNotOurs") in [e[:3] for e in env.kube.events]
    assert ("maasmachines", "ns", "evil") not in env.kube.objects  # forgotten, nothing sent
    await finish(env, names)
    assert env.sim.check_invariants() == []
    assert not [m for m in env.sim.state.machines.values() if m.owner is not None]


async def test_a_second_machine_under_an_agent_name_is_released_in_a_batch(env: Env) -> None:
    names = [f"w{i}" for i in range(5)]
    await provision(env, names)
    agent = env.kube.get("maasmachines", "w3")["metadata"]["annotations"][ANNOTATION_PREFIX + AGENT_NAME]
    async with maas.MaasClient(
        ENDPOINT, api_key=env.sim.api_key, transport=httpx.ASGITransport(app=env.sim.app), max_retries=0
    ) as c:  # an allocate whose answer was lost, under w3's agent name
        extra = await c.machines.allocate(maas.AllocateConstraints(), agent_name=agent)
    await delete_together(env, names)
    await finish(env, names)
    assert env.sim.machine(extra.system_id)["status_name"] == "Ready"
    assert ("w3", "Warning", "ExtraMachineReleased") in [e[:3] for e in env.kube.events]
    assert env.sim.machines_by_agent(agent) == []
    assert env.sim.check_invariants() == []
