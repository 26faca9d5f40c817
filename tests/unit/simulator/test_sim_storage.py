"""Block devices with every MAAS 3.7 field, VM host storage pool ids as strings, a composed VM's parent."""

from __future__ import annotations

import httpx

from capmaas_dev.simulator import Simulator

BLOCK_DEVICE_FIELDS = {  # M api/blockdevices.py DISPLAYED_BLOCKDEVICE_FIELDS, plus resource_uri
    "system_id",
    "id",
    "name",
    "uuid",
    "type",
    "path",
    "model",
    "serial",
    "id_path",
    "size",
    "block_size",
    "available_size",
    "used_size",
    "used_for",
    "tags",
    "filesystem",
    "partition_table_type",
    "partitions",
    "firmware_version",
    "storage_pool",
    "numa_node",
    "resource_uri",
}
PARTITION_FIELDS = {  # M api/partitions.py DISPLAYED_PARTITION_FIELDS, plus resource_uri
    "system_id",
    "device_id",
    "id",
    "uuid",
    "path",
    "type",
    "size",
    "bootable",
    "filesystem",
    "used_for",
    "tags",
    "resource_uri",
}


async def test_block_devices_carry_every_maas_field(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sid = sim.state.by_hostname["cp-1"].system_id
    m = (await admin.get(f"machines/{sid}/")).json()
    boot = m["boot_disk"]
    assert set(boot) == BLOCK_DEVICE_FIELDS
    assert m["blockdevice_set"][0] == boot == m["physicalblockdevice_set"][0]
    assert (boot["partition_table_type"], boot["used_for"]) == ("GPT", "GPT partitioned with 2 partitions")
    assert boot["used_size"] + boot["available_size"] <= boot["size"]
    assert boot["storage_pool"] is None  # bare metal: no VM host storage pool behind it
    efi, root = boot["partitions"]
    assert set(efi) == PARTITION_FIELDS
    assert (efi["filesystem"]["mount_point"], root["filesystem"]["mount_point"]) == ("/boot/efi", "/")
    assert efi["resource_uri"] == f"/MAAS/api/2.0/nodes/{sid}/blockdevices/{boot['id']}/partition/{efi['id']}"
    assert efi["size"] + root["size"] < boot["size"]
    assert {efi["device_id"], root["device_id"]} == {boot["id"]}


async def test_vm_host_storage_pool_id_is_a_string_and_vm_disks_name_it(
    lsim: Simulator, ladmin: httpx.AsyncClient
) -> None:
    host = (await ladmin.get("vm-hosts/1/")).json()
    ids = [p["id"] for p in host["storage_pools"]]
    assert all(isinstance(i, str) for i in ids)
    r = await ladmin.post(
        "vm-hosts/1/",
        params={"op": "compose"},
        data={"storage": "root:20(fast)", "skip_commissioning": "true"},
    )
    assert r.status_code == 200, r.text
    vm = (await ladmin.get(f"machines/{r.json()['system_id']}/")).json()
    fast = next(p["id"] for p in host["storage_pools"] if p["name"] == "fast")
    assert vm["boot_disk"]["storage_pool"] == fast
    kvm_a = lsim.state.by_hostname["kvm-a"].system_id
    assert vm["parent"] == {
        "system_id": kvm_a,
        "resource_uri": f"/MAAS/api/2.0/machines/{kvm_a}/",
        "__incomplete__": True,
    }
    metal = (await ladmin.get(f"machines/{lsim.state.by_hostname['metal-1'].system_id}/")).json()
    assert metal["parent"] is None


async def test_uncommissioned_and_second_disks_have_no_partitions(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    m = sim.state.by_hostname["cp-1"]
    m.commissioned = False
    m.cached_json = None
    body = (await admin.get(f"machines/{m.system_id}/")).json()
    assert body["boot_disk"]["partitions"] == []
    assert body["boot_disk"]["used_for"] == "Unused"
    assert body["boot_disk"]["available_size"] == body["boot_disk"]["size"]


async def test_put_swap_size_like_machine_form(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sid = sim.state.by_hostname["cp-1"].system_id
    assert (await admin.get(f"machines/{sid}/")).json()["swap_size"] is None
    for given, stored in (("2G", 2_000_000_000), ("512M", 512_000_000), ("4096", 4096), ("1T", 10**12)):
        r = await admin.put(f"machines/{sid}/", data={"swap_size": given})
        assert (r.status_code, r.json()["swap_size"]) == (200, stored)
    r = await admin.put(f"machines/{sid}/", data={"swap_size": "lots"})
    assert (r.status_code, r.json()) == (400, {"swap_size": ["Invalid size for swap: lots"]})
    r = await admin.put(f"machines/{sid}/", data={"swap_size": ""})
    assert r.json()["swap_size"] is None
