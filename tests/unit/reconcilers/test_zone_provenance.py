"""What a real MAAS 3.7.3 region showed about zones (issue 16, items 3 and 4), on the simulator:

- a 409 for constraints no machine meets must not switch zone spread off for another cluster;
- the allocation backoff holds from the first failure, however often the object is woken;
- a replacement keeps a zone the user or CAPI gave, and may move one the operator (or MAAS) chose;
- the condition names an empty user zone, and status follows the machine held, not the one given back.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from reconciler_env import Env, make_env

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ALLOCATE_AFTER, ANNOTATION_PREFIX, ZONE_SOURCE
from capmaas.reconcilers.scope import Requeue
from capmaas.reconcilers.spread import Asking
from capmaas_dev import demo
from capmaas_dev.simulator import NodeStatus, Simulator

ALLOCATE = ("POST", "/MAAS/api/2.0/machines/", "allocate")


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def cond(b: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in b["status"]["conditions"] if c["type"] == type_)


def annotation(b: dict[str, Any], short: str) -> str | None:
    return (b["metadata"].get("annotations") or {}).get(ANNOTATION_PREFIX + short)


def add(env: Env, name: str, cluster: str, *, cp: bool = False, **kw: Any) -> None:
    """A Machine and its MaasMachine in ``cluster`` (``Env.machine`` knows only c1)."""
    env.kube.secrets[("ns", f"{name}-bootstrap")] = {"value": demo.CLOUD_CONFIG, "format": b"cloud-config"}
    m = env.kube.add(
        "machines", demo.machine(name, "ns", cluster, control_plane=cp, bootstrap=f"{name}-bootstrap")
    )
    env.kube.add(
        "maasmachines",
        demo.maasmachine(name, "ns", cluster, control_plane=cp, machine_uid=m["metadata"]["uid"], **kw),
    )


def backoff_over(env: Env, name: str) -> None:
    """What the passing of the backoff does to the object: nothing but time (the annotation's moment past)."""
    annotations = env.kube.get("maasmachines", name)["metadata"].setdefault("annotations", {})
    if ANNOTATION_PREFIX + ALLOCATE_AFTER in annotations:
        annotations[ANNOTATION_PREFIX + ALLOCATE_AFTER] = "0"


def zone_of(sim: Simulator, sid: str) -> str:
    return str(sim.machine(sid)["zone"]["name"])


def deploying(b: dict[str, Any]) -> bool:
    return (b.get("status") or {}).get("machineState") == "Deploying"


async def first_deploy_fails(env: Env, name: str) -> tuple[str, str]:
    """Drive ``name`` until its first machine deploys, and make MAAS fail that deploy (the machine is
    then marked broken and given back): its system ID and zone, the zone emptied meanwhile."""
    env.sim.faults.deploy_failure_rate = 1.0
    await env.drive([name], deploying)
    sid = str(env.kube.get("maasmachines", name)["spec"]["systemID"])
    zone = zone_of(env.sim, sid)
    empty_zone(env.sim, zone)
    env.sim.faults.deploy_failure_rate = 0.0
    return sid, zone


def empty_zone(sim: Simulator, zone: str) -> None:
    """No Ready machine left in ``zone`` (every one of them broken)."""
    for sid, m in list(sim.state.machines.items()):
        if m.status == NodeStatus.READY and zone_of(sim, sid) == zone:
            sim.mark_broken(m, "test: zone emptied")


async def test_an_impossible_machine_leaves_another_clusters_spread_alone(env: Env) -> None:
    """Three passes of a ``minCPU: 999`` MaasMachine (409 in every zone) used to mark every zone dry for five
    minutes; the next cluster's control plane then went out without ``zone=`` and MAAS put it where it
    liked."""
    await env.cluster("c1")
    add(env, "big", "c1", min_cpu=999)
    for _ in range(3):
        with pytest.raises(TransientError) as err:
            await env.step("big")
        assert err.value.reason == C.NO_MACHINE_AVAILABLE_REASON
        backoff_over(env, "big")
    await env.cluster("c2")
    names = ["c2-cp0", "c2-cp1", "c2-cp2"]
    for n in names:
        add(env, n, "c2", cp=True)
    env.sim.reset_counters()
    await env.drive(names, ready)
    zones = [zone_of(env.sim, env.kube.get("maasmachines", n)["spec"]["systemID"]) for n in names]
    assert sorted(zones) == ["az1", "az2", "az3"], zones
    assert env.sim.counters[ALLOCATE] == 3  # each one asked for its zone, and got it at once


async def test_a_zone_empty_for_one_cluster_is_tried_again_by_another(env: Env) -> None:
    """A dry verdict (the zone had nothing, another zone had) holds for the cluster that learnt it, with the
    same constraints: another cluster still asks for its zone first."""
    await env.cluster("c1")
    await env.cluster("c2")
    empty_zone(env.sim, "az1")
    add(env, "a0", "c1", failure_domain=None)
    spread = env.machines.bare_metal.spread
    session = await env.connections.connect(env.creds)
    b = env.kube.get("maasmachines", "a0")
    # The spread's verdicts for c1, as an allocate that fell back from az1 would leave them.
    asked = maas.AllocateConstraints(cpu_count=2, mem=4096, not_pod_type=("lxd",))
    c1 = Asking.of(session.endpoint, "ns/c1", asked)
    c2 = Asking.of(session.endpoint, "ns/c2", asked)
    m, got = await spread.allocate(
        session, c1, asked.model_copy(update={"zone": "az1"}), agent_name=b["metadata"]["uid"], comment="t"
    )
    assert got.zone is None
    assert zone_of(env.sim, m.system_id) != "az1"
    assert spread.is_dry(c1, "az1")
    assert not spread.is_dry(c2, "az1")
    other = maas.AllocateConstraints(cpu_count=4, mem=4096, not_pod_type=("lxd",))
    assert not spread.is_dry(Asking.of(session.endpoint, "ns/c1", other), "az1")


async def test_no_machine_anywhere_marks_no_zone_dry(env: Env) -> None:
    await env.cluster("c1")
    add(env, "big", "c1", min_cpu=999)
    with pytest.raises(TransientError):
        await env.step("big")
    spread = env.machines.bare_metal.spread
    assert not spread._dry, spread._dry  # a 409 in every zone says nothing about one


async def test_the_backoff_holds_from_the_first_failure_however_often_the_object_is_woken(env: Env) -> None:
    await env.cluster("c1")
    add(env, "big", "c1", min_cpu=999)
    env.sim.reset_counters()
    with pytest.raises(TransientError) as err:
        await env.step("big")
    first = env.sim.counters[ALLOCATE]
    assert first >= 1
    delay = err.value.delay
    assert delay is not None
    message = cond(env.kube.get("maasmachines", "big"), C.READY_CONDITION)["message"]
    # Woken at once, again and again (the CAPI Machine mirroring our condition, the MaasCluster changing):
    for _ in range(3):
        with contextlib.suppress(TransientError):
            await env.step("big")
    assert env.sim.counters[ALLOCATE] == first
    result = await env.step("big")
    assert result.after is not None
    assert 0 < result.after <= delay
    b = env.kube.get("maasmachines", "big")
    assert cond(b, C.READY_CONDITION)["message"] == message
    assert message.startswith("no Ready MAAS machine matches cpu_count=999"), message
    assert "zone=" not in message  # the spread's last try was any zone
    assert [e[2] for e in env.kube.events].count(C.NO_MACHINE_AVAILABLE_REASON) == 1
    backoff_over(env, "big")
    with pytest.raises(TransientError):
        await env.step("big")
    assert env.sim.counters[ALLOCATE] > first
    assert annotation(env.kube.get("maasmachines", "big"), "failures") == "2"


async def test_an_operator_chosen_zone_moves_on_replacement_even_after_a_move(env: Env) -> None:
    """The spread chose the zone (no zone on the MaasMachine or the Machine); its Ready machines are gone
    when the deploy fails: the replacement goes to another zone. ``spec.failureDomain`` holds the
    zone we got, CAPI (v1beta1) copies it to the Machine, and ``clusterctl move`` drops the status: the
    annotation recorded at the first allocation still says whose zone it was."""
    await env.cluster("c1")
    env.machine("w0")
    sid, first = await first_deploy_fails(env, "w0")
    b = env.kube.get("maasmachines", "w0")
    assert b["spec"]["failureDomain"] == first
    assert annotation(b, ZONE_SOURCE) == "operator"
    env.kube.get("machines", "w0")["spec"]["failureDomain"] = first  # CAPI's reverse copy
    target = moved(env)
    try:
        await target.settle()
        await target.drive(["w0"], lambda b: bool(b["spec"].get("systemID")) and b["spec"]["systemID"] != sid)
        await target.drive(["w0"], ready)
        b = target.kube.get("maasmachines", "w0")
        new = b["spec"]["systemID"]
        assert new != sid
        assert zone_of(target.sim, new) != first
        assert b["spec"]["failureDomain"] == zone_of(target.sim, new)
        assert b["status"]["failureDomain"] == zone_of(target.sim, new)
        assert annotation(b, ZONE_SOURCE) == "operator"
    finally:
        await target.connections.aclose()


def moved(source: Env) -> Env:
    """The MaasMachine as ``clusterctl move`` recreates it: new UID, same spec and annotations, no status."""
    target = make_env(source.sim)
    for (plural, ns, name), body in source.kube.objects.items():
        copied = copy.deepcopy(body)
        if plural.startswith("maas"):
            copied.pop("status", None)
            copied["metadata"]["uid"] = f"moved-{copied['metadata']['uid']}"
        target.kube.objects[(plural, ns, name)] = copied
    target.kube.secrets = copy.deepcopy(source.kube.secrets)
    return target


@pytest.mark.parametrize("given_on", ["MaasMachine", "Machine"])
async def test_a_user_zone_is_kept_and_its_emptiness_named(env: Env, given_on: str) -> None:
    await env.cluster("c1")
    if given_on == "MaasMachine":
        env.machine("w0", failure_domain="az2")
    else:
        env.machine("w0")
        env.kube.get("machines", "w0")["spec"]["failureDomain"] = "az2"
    sid, zone = await first_deploy_fails(env, "w0")
    assert zone == "az2"
    assert annotation(env.kube.get("maasmachines", "w0"), ZONE_SOURCE) == "user"
    await env.settle()
    assert await env.step("w0") == Requeue(0.0)  # given back (marked broken)
    for _ in range(3):
        with pytest.raises(TransientError) as err:
            await env.step("w0")
        assert err.value.reason == C.NO_MACHINE_AVAILABLE_REASON
        backoff_over(env, "w0")
    b = env.kube.get("maasmachines", "w0")
    assert "systemID" not in b["spec"]
    assert env.sim.machine(sid)["status_name"] == "Broken"
    assert b["spec"].get("failureDomain", "az2") == "az2"
    message = cond(b, C.READY_CONDITION)["message"]
    assert message.startswith("no machine left in zone az2 that matches cpu_count=2"), message
    assert "no other zone is tried" in message
    st = b["status"]
    # Status follows the machine held: none (not the broken one's Deploying/Broken, host name or zone).
    for field in ("machineState", "machinePowered", "hostname", "failureDomain"):
        assert field not in st, (field, st)
    held = [m for m in env.sim.state.machines.values() if m.agent_name == b["metadata"]["uid"] and m.owner]
    assert held == []


async def test_a_machine_without_failure_domains_records_that_maas_chose(sim: Simulator) -> None:
    env = make_env(sim)
    try:
        await env.cluster("c1")
        mc = env.kube.get("maasclusters", "c1")
        mc["status"]["failureDomains"] = []
        env.machine("w0")
        await env.drive(["w0"], ready)
        b = env.kube.get("maasmachines", "w0")
        assert annotation(b, ZONE_SOURCE) == "maas"
        assert b["spec"]["failureDomain"] == zone_of(env.sim, b["spec"]["systemID"])
    finally:
        await env.connections.aclose()


async def test_a_zone_found_empty_costs_the_cluster_one_failed_allocate(env: Env) -> None:
    """The verdict still serves its purpose: siblings with the same constraints skip the empty zone and spread
    over the others."""
    await env.cluster("c1")
    empty_zone(env.sim, "az1")
    names = [f"w{i}" for i in range(6)]
    for n in names:
        env.machine(n)
    env.sim.reset_counters()
    await env.drive(names, ready)
    zones = [zone_of(env.sim, env.kube.get("maasmachines", n)["spec"]["systemID"]) for n in names]
    assert sorted(zones) == ["az2"] * 3 + ["az3"] * 3  # spread over the zones that have machines
    assert env.sim.counters[ALLOCATE] <= len(names) + 1, env.sim.counters


async def test_a_spec_edit_ends_the_allocation_backoff(env: Env) -> None:
    """A user who fixes an impossible size does not wait out the old one's backoff (up to five minutes)."""
    await env.cluster("c1")
    add(env, "big", "c1", min_cpu=999)
    with pytest.raises(TransientError) as err:
        await env.step("big")
    assert err.value.reason == C.NO_MACHINE_AVAILABLE_REASON
    env.sim.reset_counters()
    await env.step("big")  # woken within the backoff: nothing sent
    assert env.sim.counters[ALLOCATE] == 0
    b = env.kube.get("maasmachines", "big")
    b["spec"]["minCPU"] = 1
    b["metadata"]["generation"] += 1  # what the apiserver does on a spec change
    await env.drive(["big"], ready, rounds=5)
    assert env.sim.counters[ALLOCATE] == 1
