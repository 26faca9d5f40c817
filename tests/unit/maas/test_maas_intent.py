"""The client's network and storage intent calls (``fabrics/``, ``create_bond``/``create_vlan``/DELETE
interface, block device ``format``/``mount``/``unmount``/``unformat``, ``set_storage_layout``) against the
simulator: typed answers, MAAS's refusals as the right class with MAAS's words in the body, the forms
sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from maas_fakes import FakeMaas, form_of

from capmaas.maas import (
    AllocateConstraints,
    BadRequestError,
    BlockDevice,
    ConflictError,
    Fabric,
    ForbiddenError,
    Interface,
    MaasClient,
    Machine,
    NodeStatus,
    NotFoundError,
)
from capmaas_dev.simulator import Inventory, Simulator

ALICE = "alice00000000000000:alicetoken00000000:alicesecret000000000000000000000"
INVENTORY: dict[str, Any] = {
    "fabrics": [
        {"name": "fabric-0", "vlans": [{"vid": 0}, {"vid": 100, "name": "storage"}]},
        {"name": "oob"},
    ],
    "subnets": [
        {"cidr": "10.0.0.0/24", "name": "lan"},
        {"cidr": "10.100.0.0/24", "name": "storage", "vid": 100},
    ],
    "users": [{"username": "alice", "api_key": ALICE}],
    "machines": [
        {
            "hostname": "m1",
            "disks": [{"name": "sda", "size": "100G"}, {"name": "sdb", "size": "1T", "tags": ["ssd"]}],
            "interfaces": [
                {"name": "eth0", "mac": "52:54:00:00:00:01", "subnet": "lan", "ip": "10.0.0.20"},
                {"name": "eth1", "mac": "52:54:00:00:00:02"},
            ],
        }
    ],
}


@pytest.fixture
def sim() -> Simulator:
    return Simulator(Inventory(INVENTORY))


def _client(sim: Simulator, key: str) -> MaasClient:
    return MaasClient("http://maas.test/MAAS", api_key=key, transport=httpx.ASGITransport(app=sim.app))


@pytest.fixture
async def admin(sim: Simulator) -> AsyncIterator[MaasClient]:
    async with _client(sim, sim.api_key) as maas:
        yield maas


@pytest.fixture
async def alice(sim: Simulator) -> AsyncIterator[MaasClient]:
    async with _client(sim, ALICE) as maas:
        yield maas


@pytest.fixture
def m1(sim: Simulator) -> str:
    return sim.state.by_hostname["m1"].system_id


def nic(machine: Machine, name: str) -> Interface:
    return next(i for i in machine.interface_set if i.name == name)


async def test_fabrics_list_their_vlans_by_id(admin: MaasClient) -> None:
    fabrics = await admin.fabrics.list()
    assert all(isinstance(f, Fabric) for f in fabrics)
    assert [f.name for f in fabrics] == ["fabric-0", "oob"]
    storage = next(v for v in fabrics[0].vlans if v.name == "storage")
    assert (storage.id, storage.vid, storage.fabric_id) == (5100, 100, 0)


async def test_bond_then_vlan_on_an_allocated_machine_and_they_survive_release(
    admin: MaasClient, m1: str
) -> None:
    machine = await admin.machines.get(m1)
    eth0, eth1 = nic(machine, "eth0"), nic(machine, "eth1")
    await admin.machines.allocate(AllocateConstraints(system_id=m1))
    bond = await admin.interfaces.create_bond(
        m1, name="bond0", parents=[eth0.id, eth1.id], bond_mode="802.3ad"
    )
    assert (bond.type, bond.parents, bond.params["bond_mode"], bond.params["bond_lacp_rate"]) == (
        "bond",
        ("eth0", "eth1"),
        "802.3ad",
        "fast",
    )
    assert [lk.mode for lk in bond.links] == ["link_up"]
    storage = next(v for v in (await admin.fabrics.list())[0].vlans if v.vid == 100)
    vlan = await admin.interfaces.create_vlan(m1, parent=bond.id, vlan=storage.id, mtu=9000)
    assert (vlan.name, vlan.type, vlan.vlan and vlan.vlan.vid, vlan.params) == (
        "bond0.100",
        "vlan",
        100,
        {"mtu": 9000},
    )
    linked = await admin.interfaces.link_subnet(m1, bond.id, mode="auto", subnet="lan")
    assert linked.links[0].mode == "auto"
    machine = await admin.machines.get(m1)
    assert nic(machine, "eth0").links == ()
    await admin.machines.deploy(m1)
    deployed = await admin.machines.get(m1)
    bond_ip = nic(deployed, "bond0").links[0].ip_address
    assert bond_ip is not None
    assert bond_ip in deployed.ip_addresses
    await admin.machines.release(m1)
    released = await admin.machines.get(m1)
    assert released.status is NodeStatus.READY
    assert [i.name for i in released.interface_set] == ["eth0", "eth1", "bond0", "bond0.100"]
    assert nic(released, "bond0").links[0].ip_address is None
    await admin.interfaces.delete(m1, bond.id)
    assert [i.name for i in (await admin.machines.get(m1)).interface_set] == ["eth0", "eth1"]
    with pytest.raises(NotFoundError):
        await admin.interfaces.delete(m1, bond.id)


async def test_interface_refusals_are_typed_with_maas_words(
    admin: MaasClient, alice: MaasClient, m1: str
) -> None:
    machine = await admin.machines.get(m1)
    eth0 = nic(machine, "eth0")
    with pytest.raises(BadRequestError) as bad:
        await admin.interfaces.create_vlan(m1, parent=eth0.id, vlan=100)  # a tag, not a VLAN id
    assert bad.value.field_errors == {
        "vlan": ("Select a valid choice. That choice is not one of the available choices.",)
    }
    with pytest.raises(BadRequestError) as bad:
        await admin.interfaces.create_vlan(m1, parent=eth0.id, vlan=5000)
    assert bad.value.field_errors == {"vlan": ("A VLAN interface can only belong to a tagged VLAN.",)}
    with pytest.raises(BadRequestError) as bad:
        await admin.interfaces.create_bond(m1, name="bond0", parents=[])
    assert bad.value.field_errors["parents"] == ("A bond interface must have one or more parents.",)
    await alice.machines.allocate(AllocateConstraints(system_id=m1))
    with pytest.raises(ForbiddenError):  # the owner is not enough: MAAS wants an admin
        await alice.interfaces.create_bond(m1, name="bond0", parents=[eth0.id])
    await admin.machines.deploy(m1)
    with pytest.raises(ConflictError) as conflict:
        await admin.interfaces.create_bond(m1, name="bond0", parents=[eth0.id])
    assert conflict.value.body == (
        "Cannot create bond interface because the machine is not New, Ready, Allocated, or Broken."
    )
    with pytest.raises(ConflictError) as conflict:
        await admin.interfaces.delete(m1, eth0.id)
    assert conflict.value.body == (
        "Cannot delete interface interface because the machine is not New, Ready, Allocated, or Broken."
    )


async def test_machine_reports_its_block_devices(admin: MaasClient, m1: str) -> None:
    machine = await admin.machines.get(m1)
    assert machine.boot_disk is not None
    assert machine.boot_disk.name == "sda"
    assert [p.filesystem and p.filesystem.mount_point for p in machine.boot_disk.partitions] == [
        "/boot/efi",
        "/",
    ]
    sdb = machine.blockdevice_set[1]
    assert isinstance(sdb, BlockDevice)
    assert (sdb.name, sdb.size, sdb.tags, sdb.filesystem, sdb.used_for) == (
        "sdb",
        10**12,
        ("ssd",),
        None,
        "Unused",
    )
    assert sdb.id_path
    assert sdb.serial


async def test_owner_formats_and_mounts_while_allocated_and_release_drops_it(
    admin: MaasClient, alice: MaasClient, m1: str
) -> None:
    sdb = (await admin.machines.get(m1)).blockdevice_set[1].id
    with pytest.raises(ForbiddenError) as denied:
        await alice.block_devices.format(m1, sdb, fstype="ext4")
    assert (
        denied.value.body
        == "Cannot format block device because you don't have the permissions on a Ready machine."
    )
    await alice.machines.allocate(AllocateConstraints(system_id=m1))
    formatted = await alice.block_devices.format(m1, sdb, fstype="ext4", label="data")
    assert formatted.filesystem is not None
    assert (formatted.filesystem.fstype, formatted.filesystem.label) == ("ext4", "data")
    mounted = await alice.block_devices.mount(m1, sdb, mount_point="/var/lib/data", mount_options="noatime")
    assert mounted.filesystem is not None
    assert (mounted.filesystem.mount_point, mounted.filesystem.mount_options) == ("/var/lib/data", "noatime")
    assert (await alice.machines.get(m1)).blockdevice_set[1] == mounted
    unmounted = await alice.block_devices.unmount(m1, sdb)
    assert unmounted.filesystem is not None
    assert unmounted.filesystem.mount_point is None
    assert (await alice.block_devices.unformat(m1, sdb)).filesystem is None
    await alice.block_devices.format(m1, sdb, fstype="xfs")
    await alice.machines.release(m1)
    assert (await admin.machines.get(m1)).blockdevice_set[1].filesystem is None
    with pytest.raises(BadRequestError) as bad:
        await admin.block_devices.unformat(m1, sdb)
    assert bad.value.body == "Block device is not formatted."


async def test_storage_layout_is_for_ready_machines_only(admin: MaasClient, m1: str) -> None:
    blank = await admin.machines.set_storage_layout(m1, storage_layout="blank")
    assert blank.boot_disk is not None
    assert blank.boot_disk.partitions == ()
    # no partition table left: the whole boot disk formats now
    formatted = await admin.block_devices.format(m1, blank.boot_disk.id, fstype="ext4")
    assert formatted.filesystem is not None
    await admin.machines.allocate(AllocateConstraints(system_id=m1))
    with pytest.raises(ConflictError) as conflict:
        await admin.machines.set_storage_layout(m1, storage_layout="flat")
    assert conflict.value.body == "Cannot change the storage layout on a machine that is not Ready."


async def test_forms_sent(client: MaasClient, fake: FakeMaas) -> None:
    iface = {"id": 9, "name": "bond0", "type": "bond", "params": ""}
    device = {"id": 3, "name": "sdb"}
    fake.route("POST", "nodes/abc/interfaces/", "create_bond", httpx.Response(200, json=iface))
    fake.route("POST", "nodes/abc/interfaces/", "create_vlan", httpx.Response(200, json=iface))
    fake.route("POST", "nodes/abc/blockdevices/3/", "mount", httpx.Response(200, json=device))
    fake.route("POST", "nodes/abc/blockdevices/3/", "format", httpx.Response(200, json=device))
    bond = await client.interfaces.create_bond(
        "abc", name="bond0", parents=[1, 2], bond_lacp_rate="slow", mtu=9000
    )
    assert bond.params == {}  # MAAS's "" for no parameters
    assert form_of(fake.last) == [
        ("name", "bond0"),
        ("parents", "1"),
        ("parents", "2"),
        ("bond_lacp_rate", "slow"),
        ("mtu", "9000"),
    ]
    await client.interfaces.create_vlan("abc", parent=1, vlan=5100)
    assert form_of(fake.last) == [("parent", "1"), ("vlan", "5100")]
    await client.interfaces.create_vlan("abc", parent=1, vlan=5100, tags=["a", "b"])
    assert form_of(fake.last) == [("parent", "1"), ("vlan", "5100"), ("tags", "a,b")]
    await client.block_devices.format("abc", 3, fstype="ext4")
    assert form_of(fake.last) == [("fstype", "ext4")]
    await client.block_devices.mount("abc", 3, mount_point="/data")
    assert form_of(fake.last) == [("mount_point", "/data")]


def test_block_device_and_interface_parse_leniently() -> None:
    device = BlockDevice.model_validate(
        {
            "id": 1,
            "name": "sda",
            "tags": None,
            "partitions": [{"id": 2, "tags": None, "x": 1}],
            "new_field": 1,
        }
    )
    assert (device.tags, device.partitions[0].tags) == ((), ())
    iface = Interface.model_validate({"id": 1, "name": "eth0", "params": ""})
    assert iface.params == {}
