"""``capmaas run`` counts MaasMachineTemplate capacity in MAAS (issue 25 item 3), on the real apiserver with
the simulator: a GPU template tied to a Cluster shows the Ready GPU servers' smallest common hardware (the GPU
count included) and ``status.available`` follows allocations and releases made in MAAS; every value the
cluster autoscaler's clusterapi provider reads has the contract's shape; a MachineDeployment asking for more
than MAAS has gets a Warning Event; the count is a metric; nothing is written while nothing changes."""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal
from typing import Any

import httpx
import pytest
from operator_harness import Harness

from capmaas import maas
from capmaas.api import conditions as C
from capmaas_dev import demo
from capmaas_dev.demo import manifests
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

pytestmark = pytest.mark.k8s

GPU = {
    "vendor_id": "10de",
    "product_id": "2230",
    "vendor_name": "NVIDIA Corporation",
    "product_name": "GA102GL [RTX A6000]",
    "commissioning_driver": "nvidia",
    "hardware_type": "gpu",
}
INVENTORY: dict[str, Any] = {
    "subnets": [{"cidr": "10.0.0.0/24", "name": "main", "gateway_ip": "10.0.0.1"}],
    "boot_resources": [
        {"name": "ubuntu/jammy", "architecture": "amd64/generic"},
        {"name": "ubuntu/jammy", "architecture": "arm64/generic"},
    ],
    "machines": [
        {"hostname": "small", "cpu_count": 4, "memory": 8192},
        {"hostname": "gpu2", "cpu_count": 32, "memory": 131072, "devices": [GPU, GPU],
         "disks": [{"name": "sda", "size": "960G"}]},
        {"hostname": "gpu4", "cpu_count": 16, "memory": 65536, "devices": [GPU, GPU, GPU, GPU],
         "disks": [{"name": "sda", "size": "480G"}]},
        {"hostname": "arm-gpu", "arch": "arm64/generic", "cpu_count": 64, "memory": 262144, "devices": [GPU]},
    ],
}  # fmt: skip
GPU_SPEC = {
    "image": "ubuntu/jammy",
    "minCPU": 8,
    "minMemory": 16384,
    "architecture": "amd64",
    "devices": [{"vendorID": "10de"}],
}
#: The clusterapi provider's arch values (``SystemArchitecture``) and the quantity syntax it parses.
ARCHES = {"amd64", "arm64", "s390x", "ppc64le"}
QUANTITY = re.compile(r"^(?P<n>[0-9]+(\.[0-9]*)?)(?P<s>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
          "Ei": 2**60}  # fmt: skip


@pytest.fixture
def sim() -> Simulator:
    return Simulator(Inventory(INVENTORY), timings=Timings(deploy=1.0, release=0.3), faults=Faults())


def quantity(value: Any) -> Decimal:
    """``resource.ParseQuantity`` for the forms capmaas writes; fails on what the autoscaler would drop."""
    assert isinstance(value, str), f"{value!r}: NestedStringMap drops the whole map for a non-string"
    m = QUANTITY.match(value)
    assert m is not None, f"{value!r} is not a quantity"
    return Decimal(m["n"]) * SUFFIX[m["s"] or ""]


def autoscaler_view(template: dict[str, Any]) -> tuple[dict[str, Decimal], dict[str, str]]:
    """What the clusterapi provider takes from a template (``clusterapi_unstructured.go``):
    ``status.capacity`` as a string map of quantities, ``status.nodeInfo`` as strings; cpu and memory are
    what scaling from zero needs."""
    status = template.get("status") or {}
    capacity = status.get("capacity") or {}
    node_info = status.get("nodeInfo") or {}
    assert all(isinstance(v, str) for v in node_info.values()), node_info
    parsed = {k: quantity(v) for k, v in capacity.items()}
    assert {"cpu", "memory"} <= set(parsed), "CanScaleFromZero needs cpu and memory"
    assert node_info.get("architecture", "amd64") in ARCHES
    assert node_info.get("operatingSystem") in ("linux", "windows")
    return parsed, node_info


async def template_status(h: Harness, name: str) -> dict[str, Any]:
    return dict(await h.field("maasmachinetemplates", name, "status") or {})


async def has(h: Harness, name: str, **want: Any) -> bool:
    status = await template_status(h, name)
    return all(status.get(k) == v for k, v in want.items())


async def scrape_available(h: Harness, template: str) -> float | None:
    port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    for line in text.splitlines():
        if line.startswith("capmaas_template_available{") and f'template="{template}"' in line:
            assert f'namespace="{h.namespace}"' in line
            return float(line.rsplit(" ", 1)[1])
    return None


async def warnings(h: Harness, md: str) -> list[dict[str, Any]]:
    return [
        e
        for e in await h.items("events")
        if e.get("involvedObject", {}).get("kind") == "MachineDeployment"
        and e["involvedObject"].get("name") == md
        and e.get("reason") == C.INSUFFICIENT_MAAS_CAPACITY_REASON
    ]


async def test_gpu_template_capacity_counts_maas_and_follows_allocations(harness: Harness) -> None:
    h = harness
    h.operator.env["CAPMAAS_CAPACITY__INVENTORY_INTERVAL"] = "1"
    h.operator.start()
    await h.cluster("c1")
    await h.apply(
        manifests.maasmachinetemplate("gpu", h.namespace, "c1", GPU_SPEC),
        {  # tied to no Cluster: its status comes from its spec alone, as before
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "MaasMachineTemplate",
            "metadata": {"name": "loose"},
            "spec": {"template": {"spec": GPU_SPEC}},
        },
    )

    both = {"cpu": "16", "memory": "65536Mi", "ephemeral-storage": "480G", "nvidia.com/gpu": "2"}
    await h.wait("gpu counted in MAAS", lambda: has(h, "gpu", available=2, capacity=both), within=60)
    status = await template_status(h, "gpu")
    assert status["nodeInfo"] == {"architecture": "amd64", "operatingSystem": "linux"}
    cond = next(c for c in status["conditions"] if c["type"] == C.MAAS_CAPACITY_CONDITION)
    assert (cond["status"], cond["reason"]) == ("True", C.COUNTED_IN_MAAS_REASON)
    gpu = await h.get("maasmachinetemplates", "gpu")
    assert gpu is not None
    parsed, _ = autoscaler_view(gpu)
    assert parsed == {
        "cpu": 16,
        "memory": 65536 * 2**20,
        "ephemeral-storage": 480 * 10**9,
        "nvidia.com/gpu": 2,
    }

    loose = {"cpu": "8", "memory": "16384Mi", "nvidia.com/gpu": "1"}
    await h.wait("loose from its spec", lambda: has(h, "loose", capacity=loose))
    loose_status = await template_status(h, "loose")
    assert "available" not in loose_status
    assert "conditions" not in loose_status
    autoscaler_view(await h.get("maasmachinetemplates", "loose") or {})

    assert await scrape_available(h, "gpu") == 2
    assert await scrape_available(h, "loose") is None

    # Someone takes gpu2 in MAAS (not through capmaas): the next listing shows one left, with 4 GPUs.
    async with maas.MaasClient(h.url, api_key=h.sim.api_key) as client:
        taken = await client.machines.allocate(
            maas.AllocateConstraints(name="gpu2"), agent_name="someone-else"
        )
        four = {**both, "nvidia.com/gpu": "4"}
        await h.wait("gpu2 counted gone", lambda: has(h, "gpu", available=1, capacity=four), within=30)
        assert await scrape_available(h, "gpu") == 1

        # A MachineDeployment asking for more than that: a Warning on it, once.
        await h.apply(
            demo.bootstrap_secret("gpu-bootstrap", h.namespace, "c1"),
            manifests.machinedeployment(
                "gpus", h.namespace, "c1", template="gpu", replicas=3, bootstrap="gpu-bootstrap"
            ),
        )

        async def warned() -> bool:
            return len(await warnings(h, "gpus")) == 1

        await h.wait("a Warning on the MachineDeployment", warned, within=30)
        (event,) = await warnings(h, "gpus")
        assert event["type"] == "Warning"
        assert "asks for 3 machines of MaasMachineTemplate gpu" in event["message"]
        assert "MAAS has 1 matching servers Ready now, so 2 will wait" in event["message"]

        # Nothing changes: nothing is written (compare-and-set), and the Warning is not repeated.
        before = await h.field("maasmachinetemplates", "gpu", "metadata", "resourceVersion")
        await asyncio.sleep(4)  # four inventory intervals
        assert await h.field("maasmachinetemplates", "gpu", "metadata", "resourceVersion") == before
        assert len(await warnings(h, "gpus")) == 1

        # Released: back to two.
        await client.machines.release(taken.system_id)
    await h.wait("gpu2 counted back", lambda: has(h, "gpu", available=2, capacity=both), within=30)
    assert await scrape_available(h, "gpu") == 2
    # Still more asked than there is (3 > 2): a new shortfall, a new Warning.
    await h.wait("a second Warning", lambda: _count(h, "gpus", 2), within=30)

    # capmaas itself allocates a GPU server for a MaasMachine: the allocate's answer is folded into the
    # count (the cheapest match, gpu4, is taken; gpu2 is left).
    await h.apply(
        demo.bootstrap_secret("g0-bootstrap", h.namespace, "c1"),
        demo.machine("g0", h.namespace, "c1", control_plane=False, bootstrap="g0-bootstrap"),
    )
    muid = await h.uid("machines.cluster.x-k8s.io", "g0")
    mm = demo.maasmachine("g0", h.namespace, "c1", control_plane=False, machine_uid=muid, min_cpu=8)
    mm["spec"].update(minMemory=16384, architecture="amd64", devices=[{"vendorID": "10de"}])
    await h.apply(mm)
    await h.wait("g0 allocated", lambda: h.field("maasmachines", "g0", "spec", "systemID"), within=60)
    left = {"cpu": "32", "memory": "131072Mi", "ephemeral-storage": "960G", "nvidia.com/gpu": "2"}
    await h.wait("gpu4 counted gone", lambda: has(h, "gpu", available=1, capacity=left), within=30)


async def _count(h: Harness, md: str, n: int) -> bool:
    return len(await warnings(h, md)) == n


async def test_nothing_matching_falls_back_to_the_minimums(harness: Harness) -> None:
    h = harness
    h.operator.env["CAPMAAS_CAPACITY__INVENTORY_INTERVAL"] = "1"
    h.operator.start()
    await h.cluster("c1")
    big = {**GPU_SPEC, "minCPU": 128}
    await h.apply(manifests.maasmachinetemplate("huge", h.namespace, "c1", big))
    want = {"cpu": "128", "memory": "16384Mi", "nvidia.com/gpu": "1"}
    await h.wait("huge counted", lambda: has(h, "huge", available=0, capacity=want), within=60)
    status = await template_status(h, "huge")
    cond = next(c for c in status["conditions"] if c["type"] == C.MAAS_CAPACITY_CONDITION)
    assert (cond["status"], cond["reason"]) == ("False", C.NO_MATCHING_SERVERS_REASON)
    assert cond["message"] == "no Ready server in MAAS matches: capacity from the template's minimums"
    autoscaler_view(await h.get("maasmachinetemplates", "huge") or {})

    # A template of a paused Cluster (clusterctl move pauses it first) is not written.
    await h.apply(demo.cluster("c2", h.namespace, paused=True))
    await h.apply(manifests.maasmachinetemplate("moving", h.namespace, "c2", GPU_SPEC))
    await asyncio.sleep(3)  # three inventory intervals and timer passes
    assert await template_status(h, "moving") == {}
    unpause = '{"spec":{"paused":false}}'
    await h.k("patch", "clusters.cluster.x-k8s.io", "c2", "-n", h.namespace, "--type=merge", "-p", unpause)
    amd64 = {"architecture": "amd64", "operatingSystem": "linux"}
    await h.wait("written once unpaused", lambda: has(h, "moving", nodeInfo=amd64))


WATCH_FILTER = "cluster.x-k8s.io/watch-filter"


def labelled(obj: dict[str, Any], shard: str) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[WATCH_FILTER] = shard
    return obj


async def test_a_sharded_template_is_counted_by_its_shard_alone(harness: Harness, tmp_path: Any) -> None:
    """Two shards: the template and its Cluster carry shard a's label. Shard b cannot see the Cluster; if it
    wrote the template's status too (its minimums, "not listed"), the two would undo each other's writes."""
    h = harness
    h.operator.extra_args = ["--watch-filter", f"{WATCH_FILTER}=shard-a"]
    h.operator.env["CAPMAAS_CAPACITY__INVENTORY_INTERVAL"] = "1"
    b = h.operator.replica(
        "shard-b", tmp_path / "shard-b.log", extra_args=["--watch-filter", f"{WATCH_FILTER}=shard-b"]
    )
    h.operator.start()
    b.start()
    try:
        await h.apply(labelled(demo.cluster("c1", h.namespace), "shard-a"))
        uid = await h.uid("clusters.cluster.x-k8s.io", "c1")
        mc = labelled(demo.maascluster("c1", h.namespace), "shard-a")
        mc["metadata"]["ownerReferences"] = [demo.owner("Cluster", "c1", uid)]
        await h.apply(mc)
        await h.apply(labelled(manifests.maasmachinetemplate("gpu", h.namespace, "c1", GPU_SPEC), "shard-a"))
        both = {"cpu": "16", "memory": "65536Mi", "ephemeral-storage": "480G", "nvidia.com/gpu": "2"}
        await h.wait("gpu counted by shard a", lambda: has(h, "gpu", available=2, capacity=both), within=60)
        before = await h.field("maasmachinetemplates", "gpu", "metadata", "resourceVersion")
        await asyncio.sleep(4)  # four inventory intervals of both shards
        assert await has(h, "gpu", available=2, capacity=both)
        assert await h.field("maasmachinetemplates", "gpu", "metadata", "resourceVersion") == before
    finally:
        b.stop()
