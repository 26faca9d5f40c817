"""``clusterctl move`` as the target's operator sees it: every object is new (new UID, so the MAAS
``agent_name`` the machine was allocated under is no longer the MaasMachine's UID), its status is gone, its
spec and annotations are as they were on the source, and the operator is a fresh process.

The moved MaasMachine must adopt ``spec.systemID`` as it is: no allocate, compose, deploy, release or delete
in MAAS, and Ready again with the same providerID. (The end-to-end version with the real ``clusterctl move``
is ``tests/e2e/test_clusterctl_move.py``.)
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_env import Env, make_env
from test_lxd_lifecycle import add_lxd, lxd_sim

from capmaas.reconcilers.keys import AGENT_NAME, ANNOTATION_PREFIX
from capmaas_dev.simulator import Simulator


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def writes(sim: Simulator) -> dict[tuple[str, str, str | None], int]:
    return {k: n for k, n in sim.counters.items() if k[0] != "GET"}


def moved(source: Env) -> Env:
    """The target management cluster after the move: a new operator (new reconcilers, connections, soft
    memory) and a copy of every object with a new UID, owner references rebuilt, status not restored."""
    target = make_env(source.sim)
    uids = {b["metadata"]["uid"]: f"moved-{b['metadata']['uid']}" for b in source.kube.objects.values()}
    for (plural, ns, name), body in source.kube.objects.items():
        copied = copy.deepcopy(body)
        meta = copied["metadata"]
        meta["uid"] = uids[meta["uid"]]
        for ref in meta.get("ownerReferences") or ():
            ref["uid"] = uids.get(ref.get("uid", ""), ref.get("uid"))
        if plural.startswith("maas"):
            copied.pop("status", None)  # a subresource: clusterctl cannot restore it
        target.kube.objects[(plural, ns, name)] = copied
    target.kube.secrets = copy.deepcopy(source.kube.secrets)
    return target


async def _close(*envs: Env) -> None:
    for e in envs:
        await e.connections.aclose()
    await asyncio.sleep(0)


@pytest.fixture
async def lenv() -> AsyncIterator[Env]:
    e = make_env(lxd_sim())
    yield e
    await _close(e)


async def test_moved_bare_metal_machine_is_adopted_without_a_maas_write(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    before = env.kube.get("maasmachines", "w0")
    sid, pid = before["spec"]["systemID"], before["spec"]["providerID"]
    target = moved(env)
    try:
        env.sim.reset_counters()
        await target.drive(["w0"], ready)
        after = target.kube.get("maasmachines", "w0")
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        assert (after["spec"]["systemID"], after["spec"]["providerID"]) == (sid, pid)
        assert writes(env.sim) == {}
        m = env.sim.machine(sid)
        assert m["status_name"] == "Deployed"
        assert env.sim.check_invariants() == []
    finally:
        await _close(target)


async def test_moved_lxd_vm_is_adopted_not_composed_again(lenv: Env) -> None:
    """A moved LXD MaasMachine's VM is held under the *source* UID. Taking that for "someone else's VM"
    would compose a second VM and leave the first deployed for ever."""
    env = lenv
    await env.cluster()
    add_lxd(env, "cp0", cp=True)
    await env.drive(["cp0"], ready)
    before = env.kube.get("maasmachines", "cp0")
    sid, pid = before["spec"]["systemID"], before["spec"]["providerID"]
    vms = {s for s, m in env.sim.state.machines.items() if m.pod_id is not None}
    target = moved(env)
    try:
        env.sim.reset_counters()
        await target.drive(["cp0"], ready)
        after = target.kube.get("maasmachines", "cp0")
        assert (after["spec"]["systemID"], after["spec"]["providerID"]) == (sid, pid)
        assert writes(env.sim) == {}
        assert {s for s, m in env.sim.state.machines.items() if m.pod_id is not None} == vms
        assert env.sim.machine(sid)["status_name"] == "Deployed"
        assert env.sim.check_invariants() == []
    finally:
        await _close(target)


async def test_lxd_vm_allocated_before_the_annotation_existed_is_recorded_then_survives_a_move(
    lenv: Env,
) -> None:
    """An object from an older capmaas has no agent-name annotation: the first pass of an upgraded operator
    (a fresh process) finds the VM under the UID and records it, so a later move still finds it."""
    env = lenv
    await env.cluster()
    add_lxd(env, "cp0", cp=True)
    await env.drive(["cp0"], ready)
    sid = env.kube.get("maasmachines", "cp0")["spec"]["systemID"]
    meta = env.kube.get("maasmachines", "cp0")["metadata"]
    key = ANNOTATION_PREFIX + AGENT_NAME
    assert meta["annotations"].pop(key) == meta["uid"]
    upgraded = make_env(env.sim)
    upgraded.kube.objects = env.kube.objects
    upgraded.kube.secrets = env.kube.secrets
    target: Env | None = None
    try:
        await upgraded.drive(["cp0"], lambda b: key in b["metadata"]["annotations"])
        assert env.kube.get("maasmachines", "cp0")["metadata"]["annotations"][key] == meta["uid"]
        target = moved(upgraded)
        env.sim.reset_counters()
        await target.drive(["cp0"], ready)
        assert target.kube.get("maasmachines", "cp0")["spec"]["systemID"] == sid
        assert writes(env.sim) == {}
    finally:
        await _close(upgraded, *([target] if target else []))


class _Died(Exception):
    """The source process stopped here: nothing after this write happened."""


async def test_allocate_in_doubt_on_the_source_is_adopted_after_the_move(env: Env) -> None:
    """The source died between MAAS's allocate and the spec write, then the cluster was moved: the target's
    MaasMachine (new UID) finds the machine under the agent name recorded before the allocate - no second
    allocation, nothing left held by a name nobody uses."""
    await env.cluster()
    env.machine("w0")
    original = env.kube.patch

    async def dies_on_recording(plural: Any, namespace: str, name: str, body: Any, *, status: bool) -> Any:
        if name == "w0" and (body.get("spec") or {}).get("systemID"):
            raise _Died
        return await original(plural, namespace, name, body, status=status)

    env.kube.patch = dies_on_recording  # type: ignore[method-assign]
    died = False
    for _ in range(4):
        try:
            await env.step("w0")
        except _Died:
            died = True
            break
    assert died
    source_uid = env.kube.get("maasmachines", "w0")["metadata"]["uid"]
    held = [m["system_id"] for m in env.sim.machines_by_agent(source_uid)]
    assert len(held) == 1
    assert not env.kube.get("maasmachines", "w0")["spec"].get("systemID")
    target = moved(env)
    try:
        env.sim.reset_counters()
        await target.drive(["w0"], ready)
        after = target.kube.get("maasmachines", "w0")
        assert after["spec"]["systemID"] == held[0]
        assert not [k for k in env.sim.counters if k[0] == "POST" and k[2] == "allocate"]
        assert env.sim.machines_by_agent(after["metadata"]["uid"]) == []
        assert [m["system_id"] for m in env.sim.machines_by_agent(source_uid)] == held
        assert env.sim.check_invariants() == []
    finally:
        await _close(target)
