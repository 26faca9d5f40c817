"""The per-process ownership memory (which MAAS machine this process has seen held under a MaasMachine's agent
name) is per object, forgotten with the machine and with the object.

Before: a set of (UID, system ID) pairs that only grew, one entry per machine ever held in the process's
life (unbounded memory), and a machine given back stayed "verified", so a spec naming it again skipped the
ownership test (issue 10 item 2)."""

from __future__ import annotations

from typing import Any

from reconciler_env import Env

from capmaas.maas import NodeStatus


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def deploying(b: dict[str, Any]) -> bool:
    return (b.get("status") or {}).get("machineState") == "Deploying"


async def test_a_machine_given_back_is_checked_again_when_the_spec_names_it_again(env: Env) -> None:
    await env.cluster()
    env.machine("a")
    env.sim.faults.deploy_failure_rate = 1.0
    await env.drive(["a"], deploying)
    given_back = str(env.kube.get("maasmachines", "a")["spec"]["systemID"])
    env.sim.faults.deploy_failure_rate = 0.0
    await env.drive(["a"], ready)  # the failed one marked broken and given back, another one Ready
    assert env.sim.machine(given_back)["status"] == int(NodeStatus.BROKEN)
    # Someone writes the given-back machine into the spec again (a privileged user, or no admission policy).
    b = env.kube.get("maasmachines", "a")
    b["spec"]["systemID"] = given_back
    b["spec"]["providerID"] = f"maas:///{given_back}"
    env.sim.reset_counters()
    await env.step("a")
    assert ("a", "Warning", "MachineNotOurs") in [e[:3] for e in env.kube.events], env.kube.events
    sent = [k for k in env.sim.counters if k[0] == "POST" and k[2] in ("deploy", "release", "mark_broken")]
    assert sent == []
    assert env.sim.machine(given_back)["status"] == int(NodeStatus.BROKEN)


async def test_the_memory_of_a_deleted_machine_is_dropped(env: Env) -> None:
    await env.cluster()
    names = [f"w{i}" for i in range(3)]
    for n in names:
        env.machine(n)
    await env.drive(names, ready)
    uids = {str(env.kube.get("maasmachines", n)["metadata"]["uid"]) for n in names}
    life = env.machines.life
    assert uids <= set(life.verified)
    for n in names:
        env.kube.get("maasmachines", n)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(8):
        for n in names:
            if ("maasmachines", "ns", n) in env.kube.objects:
                await env.step(n)
        await env.settle()
    assert not [n for n in names if ("maasmachines", "ns", n) in env.kube.objects]
    assert not uids & set(life.verified)
    assert not uids & set(life._node_done)
