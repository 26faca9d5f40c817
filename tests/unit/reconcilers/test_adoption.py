"""Adopting a machine MAAS already shows Deployed (``spec.adopt``, issue 24 item 3), against the simulator.

MAAS 3.7 cannot change a machine's owner or agent name, so capmaas adopts only a machine owned by the MAAS
user of the MaasMachine's identity, marks it in its workload annotations (``capmaas.held-by.<agent name>``)
and holds it by that marker: no allocate, no deploy. Refused, with a condition and one Warning Event and
nothing sent to the machine: a machine not Deployed, another user's, another MaasMachine's (its marker, or
its ``spec.systemID``). Two MaasMachines naming one machine at the same moment: one wins.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
from reconciler_env import Env
from test_release_options import delete

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers.adoption import MARKER_PREFIX
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.machine import MachineReconciler
from capmaas_dev import demo
from capmaas_dev.simulator.models import NodeStatus

PREFIX = "capmaas.infrastructure.cluster.x-k8s.io/"


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def provisioned(env: Env, name: str) -> dict[str, Any]:
    conds = env.kube.get("maasmachines", name).get("status", {}).get("conditions") or []
    return next(c for c in conds if c["type"] == C.MACHINE_PROVISIONED_CONDITION)


def writes(env: Env) -> dict[str, int]:
    """MAAS requests that change a machine, by op (allocate, deploy, release, set_workload_annotations...)."""
    out: dict[str, int] = {}
    for (method, _, op), n in env.sim.counters.items():
        if method in ("POST", "PUT", "DELETE"):
            out[op or method] = out.get(op or method, 0) + n
    return out


async def deploy_by_hand(env: Env, api_key: str | None = None) -> str:
    """A machine deployed outside capmaas: allocated with no agent name and deployed, by the operator's MAAS
    user (or by the user of ``api_key``)."""
    key = api_key or env.sim.api_key
    async with maas.MaasClient(env.creds.endpoint, api_key=key, transport=_asgi(env)) as c:
        m = await c.machines.allocate(maas.AllocateConstraints(not_pod_type=("lxd",)))
        await c.machines.deploy(m.system_id, user_data=demo.CLOUD_CONFIG)
    for _ in range(20):
        env.sim.tick()
        if env.sim.machine(m.system_id)["status_name"] == "Deployed":
            return m.system_id
        await asyncio.sleep(0.05)
    raise AssertionError(env.sim.machine(m.system_id)["status_name"])


def _asgi(env: Env) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=env.sim.app)


def adopter(env: Env, name: str, sid: str, **kw: Any) -> None:
    env.machine(name, bootstrap=False, **kw)
    env.kube.get("maasmachines", name)["spec"]["adopt"] = {"systemID": sid}


async def test_a_deployed_machine_is_adopted_without_allocate_or_deploy(env: Env) -> None:
    await env.cluster()
    sid = await deploy_by_hand(env)
    env.sim.reset_counters()
    adopter(env, "w0", sid)  # no bootstrap data either: nothing is deployed
    await env.drive(["w0"], ready)
    mm = env.kube.get("maasmachines", "w0")
    zone = env.sim.machine(sid)["zone"]["name"]
    assert mm["spec"]["systemID"] == sid
    assert mm["spec"]["providerID"] == f"maas://{zone}/{sid}"
    assert mm["metadata"]["annotations"][PREFIX + "adopted"] == sid
    assert writes(env) == {"set_workload_annotations": 1}  # no allocate, no deploy, no power
    uid = mm["metadata"]["uid"]
    marker = env.sim.machine(sid)["workload_annotations"][MARKER_PREFIX + uid]
    assert marker == f"cluster=c1 namespace=ns name=w0 uid={uid}"
    assert env.sim.machine(sid)["status_name"] == "Deployed"
    assert "MachineAdopted" in env.kube.reasons()
    # Deleting it releases it like any other, with its releaseOptions.
    mm["spec"]["releaseOptions"] = {"scripts": ["wipe-disks"]}
    mm["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await env.step("w0")
    assert env.sim.machine(sid)["status_name"] == "Disk erasing"
    await delete(env, "w0")
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Ready"
    assert not env.sim.machine(sid)["workload_annotations"]  # MAAS wipes them at release


async def refused(env: Env, name: str, reason: str) -> dict[str, Any]:
    for _ in range(3):
        got = await env.step(name)  # no exception: a refusal is a condition, not a traceback loop
        assert got.after is not None
        await env.settle()
    c = provisioned(env, name)
    assert c["status"] == "False"
    assert c["reason"] == reason, c
    assert [e for e in env.kube.events if e[2] == reason and e[0] == name] != []
    assert len([e for e in env.kube.events if e[2] == reason and e[0] == name]) == 1  # said once
    assert not env.kube.get("maasmachines", name)["spec"].get("systemID")
    return c


async def test_a_machine_that_is_not_deployed_is_refused(env: Env) -> None:
    await env.cluster()
    ready_sid = env.sim.machines_in(NodeStatus.READY)[0]
    env.sim.reset_counters()
    adopter(env, "w0", ready_sid)
    c = await refused(env, "w0", C.ADOPTION_NOT_DEPLOYED_REASON)
    assert "not Deployed" in c["message"]
    assert writes(env) == {}
    assert env.sim.machine(ready_sid)["status_name"] == "Ready"


async def test_another_users_machine_is_refused(env: Env) -> None:
    await env.cluster()
    bob = env.sim.add_user("bob", admin=True)
    sid = await deploy_by_hand(env, bob.api_key)
    env.sim.reset_counters()
    adopter(env, "w0", sid)
    c = await refused(env, "w0", C.ADOPTION_OTHER_OWNER_REASON)
    assert "owned by bob" in c["message"]
    assert writes(env) == {}
    assert env.sim.machine(sid)["owner"] == "bob"
    assert env.sim.machine(sid)["workload_annotations"] == {}


async def test_a_machine_with_another_maasmachines_marker_is_refused(env: Env) -> None:
    await env.cluster()
    sid = await deploy_by_hand(env)
    env.sim.state.machines[sid].annotations[MARKER_PREFIX + "someone-else"] = "cluster=c9 namespace=x name=y"
    env.sim.state.machines[sid].cached_json = None
    env.sim.reset_counters()
    adopter(env, "w0", sid)
    c = await refused(env, "w0", C.ADOPTION_HELD_ELSEWHERE_REASON)
    assert MARKER_PREFIX + "someone-else" in c["message"]
    assert writes(env) == {}


async def test_a_machine_another_maasmachine_holds_is_refused(env: Env) -> None:
    """A machine capmaas allocated and deployed for w0 (held under w0's agent name, which MAAS does not show)
    is not taken by an adopter: w0 records it in spec.systemID."""
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    sid = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    env.sim.reset_counters()
    adopter(env, "w1", sid)
    c = await refused(env, "w1", C.ADOPTION_HELD_ELSEWHERE_REASON)
    assert "ns/w0" in c["message"]
    assert writes(env) == {}
    # Deleting the refused adopter releases nothing.
    await delete(env, "w1")
    assert ("maasmachines", "ns", "w1") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Deployed"
    assert writes(env) == {}


async def test_an_adopted_machine_whose_marker_is_gone_is_not_released(env: Env) -> None:
    """The ownership test of an adopted machine is the identity's user plus our marker: with the marker gone
    (someone released and redeployed it, or removed it), a deletion forgets it and sends nothing."""
    await env.cluster()
    sid = await deploy_by_hand(env)
    adopter(env, "w0", sid)
    await env.drive(["w0"], ready)
    env.sim.state.machines[sid].annotations.clear()
    env.sim.state.machines[sid].cached_json = None
    env.sim.reset_counters()
    await delete(env, "w0")
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Deployed"
    assert "release" not in writes(env)
    assert "MachineNotOurs" in env.kube.reasons()


async def test_two_maasmachines_adopting_one_machine_at_once_one_wins(env: Env) -> None:
    """Concurrency: two adopters of one machine, their first passes run at the same moment and interleave
    (MAAS answers after a delay, so each reads the machine before the other's marker is written); later passes
    run when their own outcome says (a virtual clock). Exactly one holds it; the other is refused."""
    await env.cluster()
    sid = await deploy_by_hand(env)
    adopter(env, "a0", sid)
    adopter(env, "a1", sid)
    env.sim.faults.latency = 0.01
    due = {"a0": 0.0, "a1": 0.0}
    collided = False
    for _ in range(12):
        now = min(due.values())
        batch = [n for n, t in due.items() if t <= now + 0.05]  # at the same moment: concurrently
        results = await asyncio.gather(*(env.step(n) for n in batch), return_exceptions=True)
        for n, r in zip(batch, results, strict=True):
            if isinstance(r, TransientError):
                collided = collided or len(batch) == 2
                due[n] = now + r.delay
            elif isinstance(r, BaseException):
                raise r
            else:
                due[n] = now + (r.after if r.after is not None else 1e9)
        await env.settle()
        if min(due.values()) >= 1e8:
            break
    holders = [n for n in ("a0", "a1") if env.kube.get("maasmachines", n)["spec"].get("systemID") == sid]
    assert len(holders) == 1, holders
    loser = "a1" if holders == ["a0"] else "a0"
    assert provisioned(env, loser)["reason"] == C.ADOPTION_HELD_ELSEWHERE_REASON
    winner_uid = env.kube.get("maasmachines", holders[0])["metadata"]["uid"]
    keys = [k for k in env.sim.machine(sid)["workload_annotations"] if k.startswith(MARKER_PREFIX)]
    assert keys == [MARKER_PREFIX + winner_uid]
    assert collided  # the first passes did race (both withdrew), so the read-back decided, not the order
    with contextlib.suppress(TransientError):
        await env.step(loser)
    assert not env.kube.get("maasmachines", loser)["spec"].get("systemID")


async def test_after_a_restart_the_adopted_machine_is_still_proven_ours_by_its_marker(env: Env) -> None:
    """A new process (no ownership memory) checks the recorded system ID as for any machine: MAAS shows no
    agent name of ours on it, the owner and the marker prove it; it stays held, Ready, and nothing is sent."""
    await env.cluster()
    sid = await deploy_by_hand(env)
    adopter(env, "w0", sid)
    await env.drive(["w0"], ready)
    env.machines = MachineReconciler(env.kube, env.connections, default_credentials=env.creds)
    env.sim.reset_counters()
    for _ in range(3):
        await env.step("w0")
        await env.settle()
    mm = env.kube.get("maasmachines", "w0")
    assert mm["spec"]["systemID"] == sid
    assert mm["status"]["ready"] is True
    assert writes(env) == {}
    assert "MachineNotOurs" not in env.kube.reasons()
    reads = sum(n for (method, _, op), n in env.sim.counters.items() if method == "GET" and op is None)
    assert reads >= 1  # the ownership lookup was made (a GET of the machine), not skipped
