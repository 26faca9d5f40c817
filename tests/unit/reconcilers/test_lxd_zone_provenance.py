"""Zone provenance of LXD VMs on replacement (issue 16 item 4), on the simulator:

- a replacement VM keeps a zone the user or CAPI gave, and may leave one the placement chose;
- the condition names a user zone with no VM host that fits, and no other zone is tried;
- status follows the VM held, not the one given back.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from reconciler_env import ENDPOINT, Env, make_env
from test_lxd_lifecycle import add_lxd, lxd_sim

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, ZONE_SOURCE
from capmaas.reconcilers.scope import Requeue
from capmaas_dev.simulator import NodeStatus

#: Status fields that describe the VM held (the poller's view and our compose).
HELD_FIELDS = ("machineState", "machinePowered", "hostname", "failureDomain", "lxdHost", "vmResourceUsage")


@pytest.fixture
async def lenv() -> AsyncIterator[Env]:
    e = make_env(lxd_sim())
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def deploying(b: dict[str, Any]) -> bool:
    return (b.get("status") or {}).get("machineState") == "Deploying"


def cond(b: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in b["status"]["conditions"] if c["type"] == type_)


def annotation(b: dict[str, Any], short: str) -> str | None:
    return (b["metadata"].get("annotations") or {}).get(ANNOTATION_PREFIX + short)


def zone_of(env: Env, sid: str) -> str:
    return str(env.sim.machine(sid)["zone"]["name"])


def close_zone(env: Env, zone: str) -> None:
    """Every VM host of ``zone`` in maintenance: no new VM is placed there."""
    for h in env.sim.state.vm_hosts.values():
        if env.sim.state.zones[h.zone_id].name == zone:
            h.tags.append("maintenance")


async def first_deploy_fails(env: Env, name: str) -> tuple[str, str]:
    """Drive ``name`` until its first VM deploys and make MAAS fail that deploy; that VM's zone is closed
    meanwhile. Then one pass sees the failure and gives the VM back (decomposed). Its system ID and zone."""
    env.sim.faults.deploy_failure_rate = 1.0
    await env.drive([name], deploying)
    sid = str(env.kube.get("maasmachines", name)["spec"]["systemID"])
    zone = zone_of(env, sid)
    close_zone(env, zone)
    env.sim.faults.deploy_failure_rate = 0.0
    for _ in range(10):
        await env.settle()
        if env.sim.machine(sid)["status"] == int(NodeStatus.FAILED_DEPLOYMENT):
            break
    assert env.sim.machine(sid)["status_name"] == "Failed deployment"
    assert await env.step(name) == Requeue(0.0)  # given back: decomposed
    return sid, zone


def assert_status_forgotten(b: dict[str, Any]) -> None:
    st = b["status"]
    for field in HELD_FIELDS:
        assert field not in st, (field, st)


async def test_a_placement_chosen_zone_moves_on_replacement(lenv: Env) -> None:
    """No zone on the MaasMachine or the Machine: the placement chose it. Its hosts are closed when the
    deploy fails; the replacement VM goes to another zone, although ``spec.failureDomain`` and CAPI's copy on
    the Machine hold the old one."""
    env = lenv
    await env.cluster()
    add_lxd(env, "w0")
    b = env.kube.get("maasmachines", "w0")
    assert "failureDomain" not in b["spec"]
    env.kube.get("machines", "w0")["spec"].pop("failureDomain", None)
    await env.drive(["w0"], lambda b: bool(b["spec"].get("systemID")))
    b = env.kube.get("maasmachines", "w0")
    assert annotation(b, ZONE_SOURCE) == "operator"
    # CAPI's reverse copy of the zone the VM got:
    env.kube.get("machines", "w0")["spec"]["failureDomain"] = b["spec"]["failureDomain"]
    sid, first = await first_deploy_fails(env, "w0")
    b = env.kube.get("maasmachines", "w0")
    assert "systemID" not in b["spec"]
    assert b["spec"]["failureDomain"] == first
    assert_status_forgotten(b)
    await env.drive(["w0"], ready)
    b = env.kube.get("maasmachines", "w0")
    new = b["spec"]["systemID"]
    assert new != sid
    assert zone_of(env, new) != first
    assert b["spec"]["failureDomain"] == b["status"]["failureDomain"] == zone_of(env, new)
    assert b["spec"]["providerID"] == f"maas-lxd://{zone_of(env, new)}/{new}"
    assert annotation(b, ZONE_SOURCE) == "operator"
    assert env.sim.machine(new)["pod"]["name"] == b["status"]["lxdHost"]


@pytest.mark.parametrize("given_on", ["MaasMachine", "Machine"])
async def test_a_user_zone_is_kept_and_its_lack_of_hosts_named(lenv: Env, given_on: str) -> None:
    env = lenv
    await env.cluster()
    if given_on == "MaasMachine":
        add_lxd(env, "w0", failureDomain="az2")
    else:
        add_lxd(env, "w0")
        env.kube.get("machines", "w0")["spec"]["failureDomain"] = "az2"
    sid, zone = await first_deploy_fails(env, "w0")
    assert zone == "az2"
    b = env.kube.get("maasmachines", "w0")
    assert annotation(b, ZONE_SOURCE) == "user"
    assert_status_forgotten(b)
    for _ in range(3):
        with pytest.raises(TransientError) as err:
            await env.step("w0")
        assert err.value.reason == C.NO_VM_HOST_AVAILABLE_REASON
        await env.settle()
    b = env.kube.get("maasmachines", "w0")
    assert "systemID" not in b["spec"]
    assert sid not in env.sim.state.machines  # the failed VM was decomposed
    message = cond(b, C.LXD_HOST_SELECTED_CONDITION)["message"]
    assert message.startswith("no VM host left in zone az2 that fits"), message
    assert "no other zone is tried" in message
    assert "2 hosts in az2 are in maintenance" in message, message
    for other in ("az1", "az3"):  # other zones are no way out
        assert other not in message, message
    assert cond(b, C.READY_CONDITION)["message"] == message
    assert_status_forgotten(b)
    vms = [m for m in env.sim.state.machines.values() if m.hostname.startswith("w0-")]
    assert vms == []  # nothing composed elsewhere


def restarted(source: Env) -> Env:
    """The same objects and MAAS seen by a new operator process (nothing verified in memory yet)."""
    target = make_env(source.sim)
    target.kube.objects = copy.deepcopy(source.kube.objects)
    target.kube.secrets = copy.deepcopy(source.kube.secrets)
    return target


async def test_a_vm_reference_forgotten_as_not_ours_leaves_no_status_behind(lenv: Env) -> None:
    """``spec.systemID`` rewritten to someone else's VM, seen by a new process: the reference is forgotten
    (VMNotOurs), and so is the status of the VM it described."""
    env = lenv
    await env.cluster()
    add_lxd(env, "w0")
    await env.drive(["w0"], ready)
    assert env.kube.get("maasmachines", "w0")["status"]["machineState"] == "Deployed"
    async with maas.MaasClient(
        ENDPOINT, api_key=env.sim.api_key, transport=httpx.ASGITransport(app=env.sim.app), max_retries=0
    ) as c:
        host = (await c.vm_hosts.list())[0]
        spare = await c.vm_hosts.compose(
            host.id, maas.ComposeRequest(cores=1, memory=1024, storage="root:10", hostname="spare")
        )
    env.kube.get("maasmachines", "w0")["spec"].update(
        systemID=spare.system_id, providerID=f"maas-lxd://{zone_of(env, spare.system_id)}/{spare.system_id}"
    )
    target = restarted(env)
    try:
        assert await target.step("w0") == Requeue(0.0)
        b = target.kube.get("maasmachines", "w0")
        assert ("w0", "Warning", "VMNotOurs") in [e[:3] for e in target.kube.events]
        assert "systemID" not in b["spec"]
        assert_status_forgotten(b)
    finally:
        await target.connections.aclose()
