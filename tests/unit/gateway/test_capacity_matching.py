"""The product-side matcher (:mod:`capmaas.gateway.matching`), one constraint at a time, on machines as the
MAAS client reads them from the simulator (``GET machines/?status=ready``, ``GET nodes/{id}/devices/``), and
checked against the simulator's own matcher (MAAS 3.7.3's ``ReadNodesForm`` filters, the same constraints
the allocate gets from :func:`capmaas.reconcilers.facts.selection`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from capmaas import maas
from capmaas.api.v1beta1 import MaasMachineSpec
from capmaas.gateway import matching
from capmaas.reconcilers import facts
from capmaas_dev.simulator import Faults, Inventory, Simulator

ENDPOINT = "http://maas.test/MAAS"
API = ENDPOINT + "/api/2.0/"
NVIDIA_A6000 = {
    "vendor_id": "10de",
    "product_id": "2230",
    "vendor_name": "NVIDIA Corporation",
    "product_name": "GA102GL [RTX A6000]",
    "commissioning_driver": "nvidia",
    "hardware_type": "gpu",
}
NVIDIA_A100 = {**NVIDIA_A6000, "product_id": "20b5", "product_name": "GA100 [A100 PCIe 80GB]"}
INTEL_X710 = {
    "vendor_id": "8086",
    "product_id": "1572",
    "vendor_name": "Intel Corporation",
    "product_name": "Ethernet Controller X710 for 10GbE SFP+",
    "commissioning_driver": "i40e",
    "hardware_type": "network",
}
ROOT = {"name": "sda", "size": "240G", "tags": ["ssd"]}

INVENTORY: dict[str, Any] = {
    "zones": [{"name": "z1"}, {"name": "z2"}],
    "pools": [{"name": "gpu-pool"}],
    "tags": [{"name": "gpu"}, {"name": "spare"}],
    "subnets": [
        {"cidr": "10.1.0.0/24", "name": "api", "space": "api"},
        {"cidr": "10.2.0.0/24", "name": "storage", "vid": 20, "space": "storage"},
    ],
    "boot_resources": [
        {"name": "ubuntu/jammy", "architecture": "amd64/generic"},
        {"name": "ubuntu/jammy", "architecture": "arm64/generic"},
        {"name": "ubuntu/jammy", "architecture": "arm64/xgene-uboot"},
    ],
    "machines": [
        {"hostname": "plain", "cpu_count": 4, "memory": 8192, "zone": "z1", "devices": [INTEL_X710]},
        {"hostname": "arm", "arch": "arm64/generic", "cpu_count": 8, "memory": 16384, "zone": "z2"},
        {"hostname": "arm-xgene", "arch": "arm64/xgene-uboot", "cpu_count": 8, "memory": 16384},
        {"hostname": "gpu-a6000", "cpu_count": 16, "memory": 65536, "tags": ["gpu"], "pool": "gpu-pool",
         "zone": "z1", "devices": [NVIDIA_A6000, NVIDIA_A6000, INTEL_X710]},
        {"hostname": "gpu-a100", "cpu_count": 32, "memory": 131072, "tags": ["gpu", "spare"],
         "pool": "gpu-pool", "zone": "z2", "devices": [NVIDIA_A100]},
        {"hostname": "storage", "cpu_count": 24, "memory": 98304,
         "disks": [ROOT, {"name": "sdb", "size": "1T", "tags": ["ssd"]},
                   {"name": "sdc", "size": "4T", "tags": ["hdd"]}]},
        {"hostname": "net", "cpu_count": 40, "memory": 196608,
         "interfaces": [
             {"name": "eth0", "subnet": "api"},
             {"name": "eth1", "subnet": "storage", "link_speed": 25000, "tags": ["sriov"]},
         ]},
        {"hostname": "taken", "cpu_count": 64, "memory": 262144, "status": "allocated", "owner": "admin"},
    ],
}  # fmt: skip


class Fleet:
    """The Ready machines and their devices, read through the product's MAAS client."""

    def __init__(self, ready: list[maas.Machine], devices: dict[str, list[maas.NodeDevice]]) -> None:
        self.ready = ready
        self.devices = devices

    def names(self, **fields: Any) -> list[str]:
        sel = matching.Selection.of(spec(**fields))
        return sorted(m.hostname for m in self.ready if matching.matches(sel, m, self.devices[m.system_id]))


def spec(**fields: Any) -> MaasMachineSpec:
    return MaasMachineSpec.model_validate({"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 1024, **fields})


@pytest.fixture
def sim() -> Simulator:
    return Simulator(Inventory(INVENTORY), faults=Faults())


@pytest.fixture
async def client(sim: Simulator) -> AsyncIterator[maas.MaasClient]:
    c = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    yield c
    await c.aclose()


@pytest.fixture
async def fleet(client: maas.MaasClient) -> Fleet:
    ready, skipped = await client.machines.list_status_lenient(maas.NodeStatus.READY)
    assert skipped == []
    return Fleet(ready, {m.system_id: await client.machines.devices(m.system_id) for m in ready})


def test_the_ready_listing_carries_the_hardware_the_matcher_reads(fleet: Fleet) -> None:
    by_name = {m.hostname: m for m in fleet.ready}
    assert "taken" not in by_name  # allocated: not Ready
    storage = by_name["storage"]
    assert [(d.name, d.size, d.tags) for d in storage.physicalblockdevice_set] == [
        ("sda", 240 * 1000**3, ("ssd",)),
        ("sdb", 1000**4, ("ssd",)),
        ("sdc", 4 * 1000**4, ("hdd",)),
    ]
    assert matching.root_disk(storage) == storage.physicalblockdevice_set[0]
    eth1 = by_name["net"].interface_set[1]
    assert (eth1.link_speed, eth1.tags, eth1.vlan and eth1.vlan.vid) == (25000, ("sriov",), 20)
    assert by_name["arm"].architecture == "arm64/generic"
    assert [d.vendor_id for d in fleet.devices[by_name["gpu-a6000"].system_id]] == ["10de", "10de", "8086"]


def test_cpu_and_memory_are_minimums(fleet: Fleet) -> None:
    assert fleet.names(minCPU=32) == ["gpu-a100", "net"]
    assert fleet.names(minMemory=131072) == ["gpu-a100", "net"]
    assert fleet.names(minCPU=40, minMemory=196609) == []


def test_tags_all_present_and_not_tags_none_present(fleet: Fleet) -> None:
    assert fleet.names(tags=["gpu"]) == ["gpu-a100", "gpu-a6000"]
    assert fleet.names(tags=["gpu", "spare"]) == ["gpu-a100"]
    assert fleet.names(tags=["gpu"], notTags=["spare"]) == ["gpu-a6000"]
    assert "plain" in fleet.names(notTags=["no-such-tag"])  # unknown names exclude nothing


def test_pool_and_zone_by_name(fleet: Fleet) -> None:
    assert fleet.names(resourcePool="gpu-pool") == ["gpu-a100", "gpu-a6000"]
    assert fleet.names(failureDomain="z1") == ["gpu-a6000", "plain"]
    assert fleet.names(resourcePool="gpu-pool", failureDomain="z2") == ["gpu-a100"]


def test_architecture_primary_is_a_wildcard_and_arch_subarch_is_exact(fleet: Fleet) -> None:
    assert fleet.names(architecture="arm64") == ["arm", "arm-xgene"]
    assert fleet.names(architecture="arm64/generic") == ["arm"]
    assert "arm" not in fleet.names(architecture="amd64")


def test_devices_one_device_matches_every_key_case_insensitively(fleet: Fleet) -> None:
    assert fleet.names(devices=[{"vendorID": "10DE"}]) == ["gpu-a100", "gpu-a6000"]
    assert fleet.names(devices=[{"vendorName": "nvidia corporation", "productID": "20b5"}]) == ["gpu-a100"]
    # vendor Intel and driver nvidia are on gpu-a6000, but on two devices: no match
    assert fleet.names(devices=[{"vendorID": "8086", "commissioningDriver": "nvidia"}]) == []


def test_a_device_filter_never_matches_a_machine_whose_devices_are_unknown(fleet: Fleet) -> None:
    sel = matching.Selection.of(spec(devices=[{"vendorID": "10de"}]))
    gpu = next(m for m in fleet.ready if m.hostname == "gpu-a100")
    assert matching.matches(sel, gpu, fleet.devices[gpu.system_id])
    assert not matching.matches(sel, gpu, None)


def test_interfaces_each_label_on_one_interface(fleet: Fleet) -> None:
    assert fleet.names(interfaces=[{"label": "st", "space": "storage", "linkSpeed": 25000}]) == ["net"]
    assert fleet.names(interfaces=[{"label": "st", "vid": 20, "tags": ["sriov"]}]) == ["net"]
    assert fleet.names(interfaces=[{"label": "st", "subnetCIDR": "10.2.0.0/24", "name": "eth1"}]) == ["net"]
    assert fleet.names(interfaces=[{"label": "x", "space": "storage", "name": "eth0"}]) == []  # two NICs
    assert fleet.names(interfaces=[{"label": "x", "linkSpeed": 40000}]) == []
    both = [{"label": "a", "space": "api"}, {"label": "b", "vlan": "vid:20"}]
    assert fleet.names(interfaces=both) == ["net"]


def test_storage_root_first_then_the_smallest_unused_disk(fleet: Fleet) -> None:
    assert fleet.names(minDiskSize=241) == ["arm", "arm-xgene", "gpu-a100", "gpu-a6000", "net", "plain"]
    assert fleet.names(rootDiskTags=["ssd"]) == ["storage"]
    assert fleet.names(extraDisks=[{"label": "data", "size": "2T"}]) == ["storage"]
    assert fleet.names(extraDisks=[{"label": "data", "size": 500, "tags": ["ssd"]}]) == ["storage"]
    # two extra disks: the 1T ssd and the 4T hdd; a third has nothing left
    two = [{"label": "a", "size": 500}, {"label": "b", "size": 500}]
    assert fleet.names(extraDisks=two) == ["storage"]
    assert fleet.names(extraDisks=[*two, {"label": "c", "size": 1}]) == []
    assert fleet.names(extraDisks=[{"label": "data", "size": "5T"}]) == []


SPECS: list[dict[str, Any]] = [
    {},
    {"minCPU": 16},
    {"minMemory": 98304},
    {"tags": ["gpu"], "notTags": ["spare"]},
    {"resourcePool": "gpu-pool"},
    {"architecture": "arm64"},
    {"architecture": "arm64/xgene-uboot"},
    {"devices": [{"vendorID": "10de", "productName": "GA102GL [RTX A6000]"}]},
    {"devices": [{"commissioningDriver": "I40E"}]},
    {"interfaces": [{"label": "a", "space": "api"}, {"label": "s", "linkSpeed": 20000}]},
    {"interfaces": [{"label": "a", "subnet": "cidr:10.2.0.0/24"}]},
    {
        "minDiskSize": 200,
        "rootDiskTags": ["ssd"],
        "extraDisks": [{"label": "d", "size": "3T", "tags": ["hdd"]}],
    },
    {"extraDisks": [{"label": "d", "size": 100}]},
]


@pytest.mark.parametrize("fields", SPECS, ids=[str(s) or "none" for s in SPECS])
async def test_the_matcher_agrees_with_maas_s_filter(
    fleet: Fleet, sim: Simulator, fields: dict[str, Any]
) -> None:
    """The simulator's ``GET machines/?status=ready&<constraints>`` (MAAS's filter) lists the same."""
    s = spec(**fields)
    query: list[tuple[str, str]] = [
        ("status", "ready"),
        ("cpu_count", str(s.min_cpu)),
        ("mem", str(s.min_memory)),
    ]
    for key, value in facts.selection(s).items():
        query += [(key, v) for v in value] if isinstance(value, tuple) else [(key, str(value))]
    query += [("tags", t) for t in s.tags or ()]
    if s.resource_pool:
        query.append(("pool", s.resource_pool))
    if s.failure_domain:
        query.append(("zone", s.failure_domain))
    consumer, token, secret = sim.api_key.split(":")
    auth = (
        f'OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="{consumer}", '
        f'oauth_token="{token}", oauth_signature="%26{secret}", oauth_nonce="n{id(query)}", '
        f'oauth_timestamp="{int(time.time())}"'
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=sim.app), base_url=API) as raw:
        r = await raw.get("machines/", params=query, headers={"Authorization": auth})
    assert r.status_code == 200, r.text
    assert fleet.names(**fields) == sorted(m["hostname"] for m in r.json())
