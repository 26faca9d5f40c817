"""A template's count from a session's shared inventory (:mod:`capmaas.gateway.inventory` in the poller,
:mod:`capmaas.operator.capacity`), on the simulator through the product's MAAS client: Ready GPU servers and
their smallest common hardware, an allocation and a release folded in without another listing, the fallback
to the template's minimums, LXD VM slots, and the requests one round costs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.v1beta1 import MaasMachineSpec
from capmaas.gateway import MachinePoller
from capmaas.operator import capacity
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

ENDPOINT = "http://maas.test/MAAS"
RESOURCES = {"10de": "nvidia.com/gpu", "1002": "amd.com/gpu"}
GPU = {
    "vendor_id": "10de",
    "product_id": "2230",
    "vendor_name": "NVIDIA Corporation",
    "product_name": "GA102GL [RTX A6000]",
    "commissioning_driver": "nvidia",
    "hardware_type": "gpu",
}
INVENTORY: dict[str, Any] = {
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
LXD: dict[str, Any] = {
    "machines": [
        {"hostname": "kvm", "status": "deployed", "owner": "admin", "cpu_count": 16, "memory": 32768},
        {"hostname": "kvm-other", "status": "deployed", "owner": "admin", "cpu_count": 16, "memory": 32768},
    ],
    "vm_hosts": [
        {"name": "shared", "host": "kvm", "tags": ["capmaas-shared"],
         "storage_pools": [{"name": "default", "size": "100G", "default": True}]},
        {"name": "theirs", "host": "kvm-other", "tags": ["capmaas-ns-other"],
         "storage_pools": [{"name": "default", "size": "1T", "default": True}]},
    ],
}  # fmt: skip


def spec(**fields: Any) -> MaasMachineSpec:
    return MaasMachineSpec.model_validate({"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096, **fields})


def template(namespace: str = "team-a") -> dict[str, Any]:
    return {"metadata": {"name": "t", "namespace": namespace, "uid": "u-1"}}


AMD64_GPU = spec(architecture="amd64", devices=[{"vendorID": "10de"}])


async def poller_for(sim: Simulator) -> AsyncIterator[MachinePoller]:
    client = maas.MaasClient(
        ENDPOINT, api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app), max_retries=0
    )
    poller = MachinePoller(client, fast=1, idle=30, batch_size=200, wake=lambda key: None)
    yield poller
    await client.aclose()


@pytest.fixture
def sim() -> Simulator:
    return Simulator(Inventory(INVENTORY), timings=Timings(deploy=0, release=0), faults=Faults())


@pytest.fixture
async def poller(sim: Simulator) -> AsyncIterator[MachinePoller]:
    async for p in poller_for(sim):
        yield p


async def counted(poller: MachinePoller, s: MaasMachineSpec, body: dict[str, Any] | None = None) -> Any:
    """Count, running the inventory rounds the count asks for first (a device filter's listing, then the
    devices of the machines it names), as the operator's loop does."""
    inv = poller.inventory
    for _ in range(3):
        c = capacity.count(body or template(), s, inv, RESOURCES)
        if c is not None and not (c.devices_unread and inv.want_devices(c.devices_unread)):
            return c
        await inv.refresh()
    raise AssertionError("the count did not settle in three rounds")


async def test_nothing_is_listed_until_a_template_wants_it(poller: MachinePoller) -> None:
    await poller.inventory.refresh()
    assert poller.inventory.requests == 0
    assert capacity.count(template(), AMD64_GPU, poller.inventory, RESOURCES) is None


async def test_gpu_servers_counted_with_their_smallest_common_hardware(poller: MachinePoller) -> None:
    inv = poller.inventory
    assert inv.want("t")
    await inv.refresh()
    assert inv.requests == 1  # one Ready listing for every template of the session
    assert capacity.count(template(), AMD64_GPU, inv, RESOURCES) is None  # its device filter: not listed
    await inv.refresh()
    assert inv.requests == 3  # the Ready listing again, and the one with the filter (MAAS's device match)
    first = capacity.count(template(), AMD64_GPU, inv, RESOURCES)
    assert first is not None
    assert first.available == 0  # their devices are not read yet: not counted
    unread = sorted(inv.ready[s].hostname for s in first.devices_unread)  # type: ignore[index]
    assert unread == ["gpu2", "gpu4"]  # arm64 is not amd64; "small" has no NVIDIA device (MAAS's filter)
    c = await counted(poller, AMD64_GPU)
    assert inv.requests == 5  # + one device read per candidate (for the count), no listing
    assert (c.available, c.architecture) == (2, "amd64")
    assert c.capacity == {
        "cpu": "16",
        "memory": "65536Mi",
        "ephemeral-storage": "480G",
        "nvidia.com/gpu": "2",
    }
    assert all(isinstance(v, str) for v in c.capacity.values())
    again = await counted(poller, AMD64_GPU)
    assert (again, inv.requests) == (c, 5)  # devices are read once


async def test_an_allocation_and_a_release_fold_in_without_another_listing(
    poller: MachinePoller, sim: Simulator
) -> None:
    inv = poller.inventory
    inv.want("t")
    await inv.refresh()
    await counted(poller, AMD64_GPU)
    requests = inv.requests
    client = poller._client
    taken = await client.machines.allocate(maas.AllocateConstraints(devices="vendor_id=10de", cpu_count=20))
    assert taken.hostname == "gpu2"
    poller.put(taken)  # what the session does with every write's answer
    c = await counted(poller, AMD64_GPU)
    assert (c.available, c.capacity["nvidia.com/gpu"], c.capacity["cpu"]) == (1, "4", "16")
    released = await client.machines.release(taken.system_id)
    sim.tick()
    poller.put(await client.machines.get(released.system_id))  # a watched machine's poll shows it Ready
    c = await counted(poller, AMD64_GPU)
    assert (c.available, c.capacity["nvidia.com/gpu"]) == (2, "2")
    assert inv.requests == requests + 1  # its devices are read again (it left Ready); no listing


async def test_an_allocation_by_someone_else_shows_at_the_next_listing(
    poller: MachinePoller, sim: Simulator
) -> None:
    inv = poller.inventory
    inv.want("t")
    await inv.refresh()
    assert (await counted(poller, AMD64_GPU)).available == 2
    await poller._client.machines.allocate(maas.AllocateConstraints(name="gpu4"))  # not folded in
    assert (await counted(poller, AMD64_GPU)).available == 2
    inv.listed_at = None  # the interval has passed
    await inv.refresh()
    assert (await counted(poller, AMD64_GPU)).available == 1


async def test_nothing_matching_falls_back_to_the_minimums_and_says_so(poller: MachinePoller) -> None:
    poller.inventory.want("t")
    await poller.inventory.refresh()
    wants = spec(minCPU=128, devices=[{"vendorID": "10de"}], architecture="arm64")
    c = await counted(poller, wants)
    assert c.available == 0
    status, cond = capacity.desired(wants, c, "", RESOURCES)
    assert status == {
        "capacity": {"cpu": "128", "memory": "4096Mi", "nvidia.com/gpu": "1"},
        "nodeInfo": {"operatingSystem": "linux", "architecture": "arm64"},
        "available": 0,
    }
    assert cond is not None
    assert cond[:2] == (False, C.NO_MATCHING_SERVERS_REASON)
    unknown, cond = capacity.desired(wants, None, "MAAS not listed yet", RESOURCES)
    assert "available" not in unknown
    assert cond is not None
    assert cond[:2] == (False, C.MAAS_NOT_LISTED_REASON)
    untied, cond = capacity.desired(wants, None, "", RESOURCES)
    assert cond is None
    assert "available" not in untied


async def test_the_arm64_gpu_server_gives_arm64_node_info(poller: MachinePoller) -> None:
    poller.inventory.want("t")
    await poller.inventory.refresh()
    c = await counted(poller, spec(architecture="arm64", devices=[{"vendorID": "10de"}]))
    assert (c.available, c.architecture, c.capacity["nvidia.com/gpu"]) == (1, "arm64", "1")
    mixed = await counted(poller, spec(devices=[{"vendorID": "10de"}]))
    assert (mixed.available, mixed.architecture) == (3, None)  # amd64 and arm64: no single arch


async def test_lxd_counts_vm_slots_on_the_hosts_placement_would_use() -> None:
    sim = Simulator(Inventory(LXD), faults=Faults())
    async for poller in poller_for(sim):
        inv = poller.inventory
        assert inv.want("t", vm_hosts=True)
        await inv.refresh()
        assert inv.requests == 3  # Ready machines, VM hosts, the hosts' own machines
        vm = spec(provisioningMode="lxd", lxdConfig={"storage": {"size": 20}})
        c = capacity.count(template(), vm, inv, RESOURCES)
        assert c is not None
        # "shared": 16 cores / 2, 32768 MiB / 4096, 100 GB / 20 GB -> 5; "theirs" is another namespace's
        assert c.available == 5
        assert c.capacity == {"cpu": "2", "memory": "4096Mi", "ephemeral-storage": "20G"}
        c_other = capacity.count(template("other"), vm, inv, RESOURCES)
        assert c_other is not None
        assert c_other.available == 5 + 8
