"""Bare-metal MaasMachine lifecycle against the simulator: allocate, deploy, Ready, release; MAAS budget."""

from __future__ import annotations

from typing import Any

import pytest
from reconciler_env import Env

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers import facts
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import MACHINE_FINALIZER as FINALIZER


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def cond(b: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in b["status"]["conditions"] if c["type"] == type_)


async def test_six_machines_go_ready_and_are_released_within_the_request_budget(env: Env) -> None:
    await env.cluster()
    names = [f"cp{i}" for i in range(3)] + [f"w{i}" for i in range(3)]
    for n in names:
        env.machine(n, cp=n.startswith("cp"))
    env.sim.reset_counters()
    await env.drive(names, ready)
    for n in names:
        b = env.kube.get("maasmachines", n)
        sid = b["spec"]["systemID"]
        zone = b["status"]["failureDomain"]
        assert b["spec"]["providerID"] == f"maas://{zone}/{sid}"
        assert b["status"]["initialization"] == {"provisioned": True}
        assert b["status"]["machineState"] == "Deployed"
        types = {a["type"] for a in b["status"]["addresses"]}
        assert {"Hostname", "InternalDNS", "InternalIP", "ExternalIP"} <= types
        assert cond(b, C.READY_CONDITION)["status"] == "True"
        assert FINALIZER in b["metadata"]["finalizers"]
        assert [m["system_id"] for m in env.sim.machines_by_agent(b["metadata"]["uid"])] == [sid]
    zones = {env.kube.get("maasmachines", n)["status"]["failureDomain"] for n in names}
    assert len(zones) == 3  # spread over the cluster's failure domains

    for n in names:
        env.kube.get("maasmachines", n)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(10):
        for n in names:
            if ("maasmachines", "ns", n) in env.kube.objects:
                await env.step(n)
        await env.settle()
    assert not [n for n in names if ("maasmachines", "ns", n) in env.kube.objects]
    assert env.sim.check_invariants() == []
    per_machine = env.requests() / len(names)
    print(f"MAAS requests per machine lifecycle: {per_machine:.2f}", dict(env.sim.counters))
    assert per_machine <= 6, env.sim.counters


async def test_waits_for_bootstrap_data_without_touching_maas(env: Env) -> None:
    await env.cluster()
    env.machine("w0", bootstrap=False)
    env.sim.reset_counters()
    await env.step("w0")
    b = env.kube.get("maasmachines", "w0")
    assert cond(b, C.READY_CONDITION)["reason"] == C.WAITING_FOR_BOOTSTRAP_DATA_REASON
    assert "systemID" not in b["spec"]
    assert env.requests() == 0


async def test_crash_after_allocate_adopts_instead_of_allocating_again(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    b = env.kube.get("maasmachines", "w0")
    uid = b["metadata"]["uid"]
    # Simulate: the annotation was written and MAAS allocated, but the spec write never happened.
    session = await env.connections.connect(env.creds)
    from capmaas import maas

    m = await session.allocate(maas.AllocateConstraints(cpu_count=2), agent_name=uid, comment="t")
    b.setdefault("metadata", {}).setdefault("annotations", {})[
        "capmaas.infrastructure.cluster.x-k8s.io/allocating"
    ] = "1"
    await env.drive(["w0"], ready)
    b = env.kube.get("maasmachines", "w0")
    assert b["spec"]["systemID"] == m.system_id
    assert len(env.sim.machines_by_agent(uid)) == 1
    assert "MachineAdopted" in env.kube.reasons()


async def test_no_matching_machine_names_the_constraints(env: Env) -> None:
    await env.cluster()
    env.machine("big", min_cpu=4096)
    with pytest.raises(TransientError):
        await env.step("big")
    b = env.kube.get("maasmachines", "big")
    c = cond(b, C.READY_CONDITION)
    assert c["reason"] == C.NO_MACHINE_AVAILABLE_REASON
    assert "cpu_count=4096" in c["message"]
    assert "systemID" not in b["spec"]


async def test_delete_after_the_cluster_is_gone_still_releases(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    sid = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    del env.kube.objects[("clusters", "ns", "c1")]
    del env.kube.objects[("machines", "ns", "w0")]
    env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(5):
        if ("maasmachines", "ns", "w0") not in env.kube.objects:
            break
        await env.step("w0")
        await env.settle()
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Ready"


async def test_delete_for_move_never_calls_maas(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    env.kube.get("clusters", "c1")["spec"]["paused"] = True  # clusterctl move pauses the Cluster first
    meta = env.kube.get("maasmachines", "w0")["metadata"]
    meta["annotations"] = {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}
    meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    env.sim.reset_counters()
    await env.step("w0")
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.requests() == 0


async def test_delete_for_move_on_an_unpaused_cluster_releases_and_says_why(env: Env) -> None:
    """Issue 21, attack 9: the annotation alone (anyone who may write the object can set it) hands nothing
    on; without clusterctl's pause the deletion gives the machine back, with a Warning naming the reason."""
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    sid = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    meta = env.kube.get("maasmachines", "w0")["metadata"]
    meta["annotations"] = {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}
    meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(5):
        if ("maasmachines", "ns", "w0") not in env.kube.objects:
            break
        await env.step("w0")
        await env.settle()
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Ready"
    warned = [e for e in env.kube.events if e[2] == "DeleteForMoveIgnored"]
    assert len(warned) == 1, warned
    assert "Cluster c1 is not paused" in warned[0][3]


def conditions(b: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(c["type"], c["status"], c["reason"], c["message"]) for c in b["status"]["conditions"]]


async def test_conditions_say_the_current_step_never_an_earlier_one(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    machine = env.kube.objects.pop(("machines", "ns", "w0"))  # the owner is not in the cache yet
    await env.step("w0")
    c = cond(env.kube.get("maasmachines", "w0"), C.READY_CONDITION)
    assert (c["status"], c["reason"], c["message"]) == (
        "False", C.WAITING_FOR_MACHINE_OWNER_REASON, "owner Machine w0 not found yet"
    )  # fmt: skip
    env.kube.objects[("machines", "ns", "w0")] = machine
    await env.drive(["w0"], ready)
    b = env.kube.get("maasmachines", "w0")
    ok = [
        (C.READY_CONDITION, "True", C.READY_REASON, ""),
        (C.MACHINE_PROVISIONED_CONDITION, "True", C.PROVISIONED_REASON, ""),
    ]
    assert conditions(b)[:2] == ok
    # Ready, then a pass that misses the owner in the cache: nothing about the machine changed.
    env.kube.objects.pop(("machines", "ns", "w0"))
    await env.step("w0")
    assert conditions(env.kube.get("maasmachines", "w0"))[:2] == ok
    env.kube.objects[("machines", "ns", "w0")] = machine
    # The machine breaks in MAAS: Ready says so while another is allocated (status.ready stays, per contract).
    sid = b["spec"]["systemID"]
    env.sim.mark_broken(env.sim.state.machines[sid], "disk died")
    await env.settle()
    await env.step("w0")
    b = env.kube.get("maasmachines", "w0")
    assert b["status"]["ready"] is True
    c = cond(b, C.READY_CONDITION)
    assert (c["status"], c["reason"]) == ("False", C.MACHINE_BROKEN_REASON), c
    assert c["message"] == f"{sid}: disk died; allocating another"
    await env.drive(["w0"], lambda b: cond(b, C.READY_CONDITION)["status"] == "True")
    assert conditions(env.kube.get("maasmachines", "w0"))[:2] == ok


async def test_a_node_with_another_provider_id_is_left_alone_with_a_warning(env: Env) -> None:
    await env.cluster()
    env.kube.secrets[("ns", "c1-kubeconfig")] = {"value": b"apiVersion: v1\nkind: Config\n"}
    for n in ("w0", "w1"):
        env.machine(n)
    await env.drive(["w0", "w1"], ready)  # no Nodes yet: the operator keeps looking
    b0, b1 = env.kube.get("maasmachines", "w0"), env.kube.get("maasmachines", "w1")
    foreign = "aws:///us-east-1a/i-0abc"
    env.kube.nodes[b0["status"]["hostname"]] = ""
    env.kube.nodes[b1["status"]["hostname"]] = foreign
    for _ in range(2):
        for n in ("w0", "w1"):
            await env.step(n)
    assert env.kube.nodes[b0["status"]["hostname"]] == b0["spec"]["providerID"]
    assert env.kube.nodes[b1["status"]["hostname"]] == foreign
    conflicts = [e for e in env.kube.events if e[2] == "NodeProviderIDConflict"]
    assert len(conflicts) == 1, env.kube.events  # said once, not on every pass
    name, type_, _, message = conflicts[0]
    assert (name, type_) == ("w1", "Warning")
    assert foreign in message
    assert b1["spec"]["providerID"] in message
    assert "left unchanged" in message
    assert cond(env.kube.get("maasmachines", "w1"), C.READY_CONDITION)["status"] == "True"


async def test_the_node_gets_topology_labels_with_its_provider_id_and_a_users_label_stays(env: Env) -> None:
    """Zone, region (spec.region, else the MAAS endpoint's host), pool and machine type in the providerID's
    patch; a label a person set to another value is kept and said once in a Warning Event."""
    await env.cluster()
    env.kube.get("maasclusters", "c1")["spec"]["region"] = "dc-east"
    env.kube.secrets[("ns", "c1-kubeconfig")] = {"value": b"apiVersion: v1\nkind: Config\n"}
    for n in ("w0", "w1"):
        env.machine(n)
    await env.drive(["w0", "w1"], ready)
    b0, b1 = env.kube.get("maasmachines", "w0"), env.kube.get("maasmachines", "w1")
    h0, h1 = b0["status"]["hostname"], b1["status"]["hostname"]
    env.kube.nodes[h0] = ""
    env.kube.nodes[h1] = ""
    env.kube.node_labels[h1] = {"topology.kubernetes.io/zone": "rack-7"}  # set by a person
    for _ in range(2):
        for n in ("w0", "w1"):
            await env.step(n)
    m0 = env.sim.machine(b0["spec"]["systemID"])
    assert env.kube.nodes[h0] == b0["spec"]["providerID"]
    assert env.kube.node_labels[h0] == {
        "topology.kubernetes.io/zone": m0["zone"]["name"],
        "topology.kubernetes.io/region": "dc-east",
        "capmaas.infrastructure.cluster.x-k8s.io/pool": m0["pool"]["name"],
        "capmaas.infrastructure.cluster.x-k8s.io/machine-type": "baremetal",
    }
    assert env.kube.nodes[h1] == b1["spec"]["providerID"]
    assert env.kube.node_labels[h1]["topology.kubernetes.io/zone"] == "rack-7"
    assert env.kube.node_labels[h1]["topology.kubernetes.io/region"] == "dc-east"
    conflicts = [e for e in env.kube.events if e[2] == "NodeLabelConflict"]
    assert len(conflicts) == 1, env.kube.events
    assert conflicts[0][:2] == ("w1", "Warning")
    assert "topology.kubernetes.io/zone=rack-7" in conflicts[0][3]


def test_node_labels_leave_out_what_is_not_a_label_value_and_default_the_region() -> None:
    m = maas.Machine.model_validate(
        {
            "system_id": "abc",
            "hostname": "vm-1",
            "status": 6,
            "status_name": "Deployed",
            "zone": {"id": 1, "name": "az1"},
            "pool": {"id": 0, "name": "GPU pool"},  # a MAAS name with a space: no label value
            "pod": {"id": 3, "name": "host-3"},
        }
    )
    labels = facts.node_labels(m, facts.region_of(None, "https://maas.example.com:5240/MAAS"))
    assert labels == {
        "topology.kubernetes.io/zone": "az1",
        "topology.kubernetes.io/region": "maas.example.com",
        "capmaas.infrastructure.cluster.x-k8s.io/machine-type": "lxd",
        "capmaas.infrastructure.cluster.x-k8s.io/vm-host": "host-3",
    }
    assert facts.region_of({"spec": {"dnsDomain": "maas", "region": "r1"}}, "http://10.0.0.1/MAAS") == "r1"


async def test_a_burst_spreads_over_zones_even_when_the_cache_lags(env: Env) -> None:
    """A MachineDeployment's Machines arrive together and each chooses its zone before the others'
    ``spec.failureDomain`` reaches the informer cache: the zones chosen in this process count as well."""
    import copy

    await env.cluster()
    names = ["w0", "w1", "w2"]
    for n in names:
        env.machine(n)
    stale = copy.deepcopy(env.kube.list_maasmachines("ns", "c1"))  # the cache as it was before any allocation
    env.kube.list_maasmachines = lambda namespace, cluster_name: stale  # type: ignore[method-assign]
    await env.drive(names, ready)
    zones = [env.kube.get("maasmachines", n)["status"]["failureDomain"] for n in names]
    assert sorted(zones) == ["az1", "az2", "az3"], zones


async def test_ready_is_written_before_the_node_step_reads_the_kubeconfig(env: Env) -> None:
    """CAPI waits on Ready, not on the Node's providerID: the Node step (a Secret read queued behind other
    machines' writes, then a workload apiserver that may be slow) must not hold the Ready write back."""
    await env.cluster()
    env.kube.secrets[("ns", "c1-kubeconfig")] = {"value": b"apiVersion: v1\nkind: Config\n"}
    ready_when_read: list[bool] = []
    read = env.kube.get_secret

    async def observed(namespace: str, name: str) -> Any:
        if name == "c1-kubeconfig":
            ready_when_read.append(env.kube.get("maasmachines", "w0")["status"].get("ready") is True)
        return await read(namespace, name)

    env.kube.get_secret = observed  # type: ignore[method-assign]
    env.machine("w0")
    await env.drive(["w0"], ready)
    assert ready_when_read, "the Node step never ran"
    assert ready_when_read[0] is True
