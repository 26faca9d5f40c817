"""The LXD placement inputs (candidates, requests, existing placements) and the whole path at 100 VM hosts."""

from __future__ import annotations

import time
from collections import Counter

from reconciler_env import make_env

from capmaas import maas, placement
from capmaas.api.related import CapiMachine, MaasMachineView, ObjectMeta
from capmaas.api.v1beta1 import LXDNetwork, MaasMachineSpec
from capmaas.reconcilers import lxd_placer
from capmaas.reconcilers.keys import ANNOTATION_PREFIX
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


def vm_host(**over: object) -> maas.VmHost:
    data: dict[str, object] = {
        "id": 7,
        "name": "lxd-1",
        "type": "lxd",
        "tags": ["lxd", "maintenance-2026"],
        "capabilities": ["composable"],
        "total": {"cores": 16, "memory": 65536, "local_storage": 0},
        "used": {"cores": 4, "memory": 8192, "local_storage": 0},
        "available": {"cores": 12, "memory": 57344, "local_storage": 0},
        "zone": {"id": 2, "name": "az2"},
        "pool": {"id": 3, "name": "vms"},
        "cpu_over_commit_ratio": 2.0,
        "memory_over_commit_ratio": 1.5,
        "storage_pools": [
            {"id": 1, "name": "a", "total": 100 * 10**9, "used": 10**9},
            {"id": 2, "name": "b", "total": 10**12, "used": 0},
        ],
        "default_storage_pool": "a",
        "host": {"system_id": "abc123"},
    }
    data.update(over)
    return maas.VmHost.model_validate(data)


def machine(status: maas.NodeStatus, power: str) -> maas.Machine:
    return maas.Machine.model_validate(
        {"system_id": "abc123", "hostname": "kvm", "status": int(status), "power_state": power,
         "zone": {"id": 2, "name": "az2"}}
    )  # fmt: skip


def test_candidate_carries_figures_ratios_default_pool_and_maintenance() -> None:
    c = lxd_placer.candidate(vm_host(), machine(maas.NodeStatus.DEPLOYED, "on"))
    assert (c.id, c.name, c.zone, c.pool) == (7, "lxd-1", "az2", "vms")
    assert (c.cores_total, c.cores_used, c.memory_total_mib, c.memory_used_mib) == (16, 4, 65536, 8192)
    assert (c.cpu_over_commit_ratio, c.memory_over_commit_ratio) == (2.0, 1.5)
    default = c.storage_pool(None)
    assert default is not None
    assert default.name == "a"  # named by default_storage_pool, although "b" is larger
    assert c.maintenance
    assert c.host_ready
    assert not lxd_placer.candidate(vm_host(), machine(maas.NodeStatus.DEPLOYED, "off")).host_ready
    assert not lxd_placer.candidate(vm_host(), machine(maas.NodeStatus.RELEASING, "on")).host_ready
    assert lxd_placer.candidate(vm_host(host={"system_id": None}), None).host_ready
    assert not lxd_placer.candidate(vm_host(tags=["lxd"]), None).maintenance


def test_hostname_is_stable_per_uid_and_a_dns_label() -> None:
    a = lxd_placer.vm_hostname("My_Machine.CP-0", "uid-1")
    assert a == lxd_placer.vm_hostname("My_Machine.CP-0", "uid-1")
    assert a != lxd_placer.vm_hostname("My_Machine.CP-0", "uid-2")
    assert a.startswith("my-machine-cp-0-")
    long = lxd_placer.vm_hostname("x" * 200, "u")
    assert len(long) <= 63
    assert lxd_placer.vm_hostname("___", "u").startswith("vm-")


def test_interfaces_map_for_a_static_ip() -> None:
    net = LXDNetwork.model_validate({"staticIP": {"address": "10.0.0.5", "subnet": "10.0.0.0/24"}})
    assert net.compose_interfaces() == "eth0:subnet_cidr=10.0.0.0/24,ip=10.0.0.5"
    net = LXDNetwork.model_validate({"staticIP": {"address": "10.0.0.5", "interface": "ens3"}})
    assert (net.compose_interfaces() or "").startswith("ens3:")
    assert LXDNetwork().compose_interfaces() is None


def test_request_and_existing_placements_from_the_objects() -> None:
    body = {
        "metadata": {"name": "cp0", "uid": "u0", "labels": {"cluster.x-k8s.io/control-plane": ""}},
        "spec": {"minCPU": 4, "minMemory": 8192, "minDiskSize": 40, "tags": ["lxd"], "resourcePool": "vms",
                 "lxdConfig": {"storage": {"size": 60, "pool": "fast"}, "vmHost": "lxd-1"}},
    }  # fmt: skip
    spec = MaasMachineSpec.model_validate(
        {**body["spec"], "image": "ubuntu/jammy", "provisioningMode": "lxd"}
    )
    machine = CapiMachine.from_body({"spec": {"failureDomain": "az3"}})
    req = lxd_placer.vm_request(ObjectMeta.from_body(body["metadata"]), spec.canonical(), machine, "ns/c1")
    assert (req.cores, req.memory_mib, req.disk_gb, req.storage_pool) == (4, 8192, 60, "fast")
    assert (req.zone, req.resource_pool, req.pinned_host, req.key) == ("az3", "vms", "lxd-1", "u0")
    assert req.role is placement.Role.CONTROL_PLANE
    assert req.tags == frozenset({"lxd"})
    listing = lxd_placer.Listing(0.0, {7: vm_host()}, ())
    siblings = [
        body,  # itself: left out
        {"metadata": {"uid": "u1", "annotations": {ANNOTATION_PREFIX + "lxd-host-id": "9"}},
         "spec": {"systemID": "s1"}, "status": {"failureDomain": "az1"}},
        {"metadata": {"uid": "u2"}, "spec": {"systemID": "s2", "failureDomain": "az2"},
         "status": {"lxdHost": "lxd-1"}},
        {"metadata": {"uid": "u3"}, "spec": {"failureDomain": "az2"}},  # not placed yet: the book counts it
    ]  # fmt: skip
    got = lxd_placer.existing_placements(MaasMachineView.all(siblings), "u0", listing, ANNOTATION_PREFIX)
    assert [(p.key, p.zone, p.host_id) for p in got] == [("u1", "az1", 9), ("u2", "az2", 7)]


async def test_one_hundred_hosts_thirty_machines_figures() -> None:
    """Balance and cost at 100 VM hosts: prints figures; asserts balance, capacity and a request budget."""
    sim = Simulator(Inventory.generate(machines=110, zones=3, vmhosts=100, seed=3), timings=Timings.fast(),
                    faults=Faults(), dynamic_compose=False)  # fmt: skip
    env = make_env(sim)
    try:
        await env.cluster()
        names = [f"cp{i}" for i in range(3)] + [f"w{i}" for i in range(27)]
        for n in names:
            env.machine(n, cp=n.startswith("cp"))
            env.kube.get("maasmachines", n)["spec"].update(provisioningMode="lxd", minDiskSize=20)
        env.sim.reset_counters()
        started = time.perf_counter()
        for n in names:  # one placement + compose per machine, as the operator's first passes do
            await env.step(n)
        per_machine_ms = (time.perf_counter() - started) * 1000 / len(names)
        await env.drive(names, lambda b: bool((b.get("status") or {}).get("ready")))
        zones = Counter(env.kube.get("maasmachines", n)["status"]["failureDomain"] for n in names)
        hosts = {env.kube.get("maasmachines", n)["status"]["lxdHost"] for n in names[:3]}
        for n in names:
            env.kube.get("maasmachines", n)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        for _ in range(5):
            for n in names:
                if ("maasmachines", "ns", n) in env.kube.objects:
                    await env.step(n)
            await env.settle()
        requests = sum(env.sim.counters.values()) / len(names)
        listings = env.sim.counters[("GET", "/MAAS/api/2.0/vm-hosts/", None)]
        print(
            f"\n100 VM hosts, 30 LXD machines: {per_machine_ms:.1f} ms per place+compose pass (in-process "
            f"MAAS), {listings} VM-host listings, {requests:.2f} MAAS requests per machine lifecycle, "
            f"per zone {dict(zones)}"
        )
        assert max(zones.values()) - min(zones.values()) <= 1
        assert len(hosts) == 3
        assert requests <= 6, env.sim.counters
        assert not [n for n in names if ("maasmachines", "ns", n) in env.kube.objects]
        assert env.sim.check_invariants() == []
    finally:
        await env.connections.aclose()
