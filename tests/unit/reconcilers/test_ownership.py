"""Ownership before any destructive MAAS write (issue 10 item 2) and several machines under one agent name
(issue 11 item 3), against the real simulator.

``spec.systemID`` is only a field of an object someone created: before a release (or erase) MAAS must show the
machine held under *this* object's agent name, else the reference is forgotten and nothing is touched. A lost
allocate answer can leave two machines under one agent name: adopt keeps one and releases the other, delete
releases every one."""

from __future__ import annotations

from typing import Any

import httpx
from reconciler_env import ENDPOINT, Env, make_env
from test_lxd_lifecycle import add_lxd, lxd_sim

from capmaas import maas
from capmaas.reconcilers.keys import AGENT_NAME, ALLOCATING, ANNOTATION_PREFIX, MACHINE_FINALIZER
from capmaas_dev import demo


def ready(b: dict[str, Any]) -> bool:
    return bool(b.get("status", {}).get("ready"))


def client(env: Env) -> maas.MaasClient:
    """Another MAAS client of the same user (as a second, lost allocate would be)."""
    return maas.MaasClient(
        ENDPOINT, api_key=env.sim.api_key, transport=httpx.ASGITransport(app=env.sim.app), max_retries=0
    )


async def delete(env: Env, name: str, rounds: int = 6) -> None:
    env.kube.get("maasmachines", name)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(rounds):
        if ("maasmachines", "ns", name) not in env.kube.objects:
            return
        await env.step(name)
        await env.settle()
    raise AssertionError(env.kube.get("maasmachines", name).get("status"))


async def test_deleting_a_forged_reference_never_releases_anothers_machine(env: Env) -> None:
    """A MaasMachine created with the finalizer preset, spec.systemID naming a machine deployed for someone
    else, secure erase on and no owner: deleting it leaves the victim Deployed and says why."""
    await env.cluster()
    env.machine("victim")
    await env.drive(["victim"], ready)
    sid = env.kube.get("maasmachines", "victim")["spec"]["systemID"]
    evil = demo.maasmachine("evil", "ns", "c1", control_plane=False)
    evil["metadata"]["finalizers"] = [MACHINE_FINALIZER]
    evil["spec"].update(systemID=sid, providerID=f"maas://az1/{sid}", releaseOptions={"secureErase": True})
    env.kube.add("maasmachines", evil)
    env.sim.reset_counters()
    await delete(env, "evil")
    assert env.sim.machine(sid)["status_name"] == "Deployed"
    assert not [k for k in env.sim.counters if k[0] == "POST" and k[2] in ("release", "mark_broken")]
    assert ("evil", "Warning", "MachineNotOurs") in [e[:3] for e in env.kube.events]
    assert ready(env.kube.get("maasmachines", "victim"))


async def test_delete_releases_every_machine_held_under_the_agent_name(env: Env) -> None:
    """A second machine under the recorded agent name (an allocate whose answer was lost) is released too."""
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    b = env.kube.get("maasmachines", "w0")
    sid = b["spec"]["systemID"]
    agent = b["metadata"]["annotations"][ANNOTATION_PREFIX + AGENT_NAME]
    async with client(env) as c:
        extra = await c.machines.allocate(maas.AllocateConstraints(), agent_name=agent)
    assert len(env.sim.machines_by_agent(agent)) == 2
    await delete(env, "w0")
    for s in (sid, extra.system_id):
        assert env.sim.machine(s)["status_name"] == "Ready"
    assert env.sim.machines_by_agent(agent) == []
    assert "ExtraMachineReleased" in env.kube.reasons()
    assert env.sim.check_invariants() == []


async def test_adopt_keeps_one_of_several_machines_and_releases_the_rest(env: Env) -> None:
    """An allocate in doubt (``…/allocating`` written) whose answer was lost twice: two machines are held
    under the agent name. The next pass adopts one, releases the other, and allocates nothing."""
    await env.cluster()
    env.machine("w0")
    agent = "lost-answer-agent"
    env.kube.get("maasmachines", "w0")["metadata"]["annotations"] = {
        ANNOTATION_PREFIX + ALLOCATING: "1",
        ANNOTATION_PREFIX + AGENT_NAME: agent,
    }
    async with client(env) as c:
        first = await c.machines.allocate(maas.AllocateConstraints(), agent_name=agent)
        second = await c.machines.allocate(maas.AllocateConstraints(), agent_name=agent)
    env.sim.reset_counters()
    await env.drive(["w0"], ready)
    kept = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    other = ({first.system_id, second.system_id} - {kept}).pop()
    assert kept in (first.system_id, second.system_id)
    assert env.sim.machine(other)["status_name"] == "Ready"
    assert [m["system_id"] for m in env.sim.machines_by_agent(agent)] == [kept]
    assert not [k for k in env.sim.counters if k[0] == "POST" and k[2] == "allocate"]
    assert "ExtraMachineReleased" in env.kube.reasons()
    assert env.sim.check_invariants() == []


async def test_deleting_a_forged_lxd_reference_never_deletes_anothers_vm() -> None:
    """The LXD variant: the delete path would decompose the victim's VM outright."""
    env = make_env(lxd_sim())
    try:
        await env.cluster()
        add_lxd(env, "victim")
        await env.drive(["victim"], ready)
        sid = env.kube.get("maasmachines", "victim")["spec"]["systemID"]
        add_lxd(env, "evil")
        evil = env.kube.get("maasmachines", "evil")
        evil["metadata"]["finalizers"] = [MACHINE_FINALIZER]
        evil["metadata"]["ownerReferences"] = []
        evil["spec"].update(systemID=sid, providerID=f"maas-lxd://az1/{sid}")
        env.sim.reset_counters()
        await delete(env, "evil")
        assert env.sim.machine(sid)["status_name"] == "Deployed"
        assert not [k for k in env.sim.counters if k[0] == "DELETE"]
        assert ("evil", "Warning", "VMNotOurs") in [e[:3] for e in env.kube.events]
        assert ready(env.kube.get("maasmachines", "victim"))
    finally:
        await env.connections.aclose()


async def test_a_forged_reference_is_never_deployed_nor_given_back(env: Env) -> None:
    """A (not deleted) MaasMachine whose spec.systemID names a machine allocated under another agent name:
    the lifecycle would deploy it with this object's user data (or mark it broken). It is forgotten with a
    Warning Event and the victim is left as it was; this object gets a machine of its own."""
    await env.cluster()
    async with client(env) as c:
        victim = await c.machines.allocate(maas.AllocateConstraints(), agent_name="victim-agent")
    env.machine("evil")
    sid = victim.system_id
    env.kube.get("maasmachines", "evil")["spec"].update(systemID=sid, providerID=f"maas://az1/{sid}")
    env.sim.reset_counters()
    await env.drive(["evil"], ready)
    assert env.sim.machine(sid)["status_name"] == "Allocated"
    assert [m["system_id"] for m in env.sim.machines_by_agent("victim-agent")] == [sid]
    assert env.kube.get("maasmachines", "evil")["spec"]["systemID"] != sid
    assert ("evil", "Warning", "MachineNotOurs") in [e[:3] for e in env.kube.events]


async def test_a_forged_lxd_reference_never_takes_anothers_vm() -> None:
    """A (not deleted) LXD MaasMachine whose spec.systemID names a commissioned VM composed by someone else
    (not allocated yet): the lifecycle would allocate it under this object's UID and deploy it. It is
    forgotten with a Warning Event, the VM stays Ready and unowned, and this object composes its own."""
    env = make_env(lxd_sim())
    try:
        await env.cluster()
        async with client(env) as c:
            host = (await c.vm_hosts.list())[0]
            vm = await c.vm_hosts.compose(
                host.id, maas.ComposeRequest(cores=1, memory=1024, storage="root:10", hostname="spare")
            )
        for _ in range(5):
            await env.settle()
        sid = vm.system_id
        assert env.sim.machine(sid)["status_name"] == "Ready"
        add_lxd(env, "evil")
        env.kube.get("maasmachines", "evil")["spec"].update(systemID=sid, providerID=f"maas-lxd://az1/{sid}")
        await env.drive(["evil"], ready)
        assert env.sim.machine(sid)["status_name"] == "Ready"
        assert env.sim.machine(sid)["owner"] is None
        assert env.kube.get("maasmachines", "evil")["spec"]["systemID"] != sid
        assert ("evil", "Warning", "VMNotOurs") in [e[:3] for e in env.kube.events]
    finally:
        await env.connections.aclose()
