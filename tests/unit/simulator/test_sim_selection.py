"""Allocate's hardware constraints as MAAS 3.7.3 parses and matches them (issue 25 items 1 and 4): ``arch``,
``devices``, ``interfaces``, ``storage`` and ``not_tags``, and every text MAAS refuses them with.

Line numbers are ``src/maasserver/node_constraint_filter_forms.py`` at tag 3.7.3 unless another file is named.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from simtools import ADMIN_KEY, client

from capmaas_dev.simulator import Inventory, Simulator
from capmaas_dev.simulator.inventory import InventoryError

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
    "tags": [{"name": "gpu"}, {"name": "spare"}],
    "subnets": [
        {"cidr": "10.1.0.0/24", "name": "api", "space": "api"},
        {"cidr": "10.2.0.0/24", "name": "storage", "vid": 20, "space": "storage"},
    ],
    "boot_resources": [
        {"name": "ubuntu/jammy", "architecture": "amd64/generic"},
        {"name": "ubuntu/jammy", "architecture": "arm64/generic"},
    ],
    "machines": [
        # cheapest first: allocate hands out the smallest (cpu_count + memory/1024) that matches
        {"hostname": "plain", "cpu_count": 4, "memory": 8192, "devices": [INTEL_X710]},
        {"hostname": "arm", "arch": "arm64/generic", "cpu_count": 8, "memory": 16384},
        {"hostname": "gpu-a6000", "cpu_count": 16, "memory": 65536, "tags": ["gpu"],
         "devices": [NVIDIA_A6000, INTEL_X710]},
        {"hostname": "gpu-a100", "cpu_count": 32, "memory": 131072, "tags": ["gpu", "spare"],
         "devices": [NVIDIA_A100]},
        {"hostname": "storage", "cpu_count": 24, "memory": 98304,
         "disks": [ROOT, {"name": "sdb", "size": "1T", "tags": ["ssd"]},
                   {"name": "sdc", "size": "4T", "tags": ["hdd"]}]},
        {"hostname": "net", "cpu_count": 40, "memory": 196608,
         "interfaces": [
             {"name": "eth0", "subnet": "api"},
             {"name": "eth1", "subnet": "storage", "link_speed": 25000, "tags": ["sriov"]},
         ]},
    ],
}  # fmt: skip


@pytest.fixture
def hsim() -> Simulator:
    return Simulator(Inventory(INVENTORY), api_key=ADMIN_KEY)


@pytest.fixture
async def api(hsim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(hsim, ADMIN_KEY) as c:
        yield c


async def allocate(c: httpx.AsyncClient, **data: str | list[str]) -> httpx.Response:
    return await c.post("machines/", params={"op": "allocate"}, data={"dry_run": "true", **data})


async def chosen(c: httpx.AsyncClient, **data: str | list[str]) -> str | None:
    """The hostname allocate picks (dry run), or None on MAAS's 409."""
    r = await allocate(c, **data)
    if r.status_code == 409:
        return None
    assert r.status_code == 200, r.text
    return str(r.json()["hostname"])


async def listed(c: httpx.AsyncClient, **params: str) -> list[str]:
    r = await c.get("machines/", params=params)
    assert r.status_code == 200, r.text
    return sorted(m["hostname"] for m in r.json())


# -- devices (l.137-143 keys, 191-195 validator, 1310-1318 filter) -------------------------------------------
async def test_a_gpu_filter_allocates_only_gpu_servers(api: httpx.AsyncClient) -> None:
    assert await listed(api, devices="vendor_id=10de") == ["gpu-a100", "gpu-a6000"]
    assert await chosen(api, devices="vendor_id=10de") == "gpu-a6000"  # the cheaper GPU server
    assert await chosen(api, devices="vendor_id=10de,product_id=20b5") == "gpu-a100"
    assert await chosen(api, devices="commissioning_driver=nvidia", cpu_count="20") == "gpu-a100"


async def test_device_values_compare_exactly_but_case_insensitively(api: httpx.AsyncClient) -> None:
    assert await listed(api, devices="vendor_id=10DE,vendor_name=nvidia corporation") == [
        "gpu-a100",
        "gpu-a6000",
    ]
    assert await listed(api, devices="vendor_name=NVIDIA") == []  # iexact, not icontains
    assert await listed(api, devices="product_name=GA102GL [RTX A6000]") == ["gpu-a6000"]


async def test_every_key_must_hold_for_one_device(api: httpx.AsyncClient) -> None:
    # gpu-a6000 has an NVIDIA device and an i40e NIC, but no single device that is both
    assert await listed(api, devices="vendor_id=10de,commissioning_driver=i40e") == []
    assert await listed(api, devices="vendor_id=8086,commissioning_driver=i40e") == ["gpu-a6000", "plain"]


async def test_devices_is_one_value_the_last_one_sent(api: httpx.AsyncClient) -> None:
    """A CharField: Django's QueryDict.get returns the last of repeated values."""
    assert await listed(api, devices=["vendor_id=8086", "vendor_id=10de"]) == ["gpu-a100", "gpu-a6000"]  # type: ignore[arg-type]


async def test_an_unknown_device_key_is_maas_s_400(api: httpx.AsyncClient) -> None:
    r = await allocate(api, devices="vendor_id=10de,hardware_type=gpu")
    assert (r.status_code, r.json()) == (400, {"devices": ["Unknown devices constraint: 'hardware_type"]})


# -- arch (clean_arch l.1028-1058) --------------------------------------------------------------------------
async def test_arch_takes_a_primary_name_or_arch_subarch(api: httpx.AsyncClient, hsim: Simulator) -> None:
    assert await chosen(api, arch="arm64") == "arm"
    assert await chosen(api, arch="arm64/generic") == "arm"
    assert await chosen(api, arch="amd64") == "plain"
    r = await allocate(api, arch="arm64")
    assert r.json()["architecture"] == "arm64/generic"  # the machine JSON shows MAAS's arch/subarch


async def test_an_unknown_architecture_is_maas_s_400(api: httpx.AsyncClient) -> None:
    r = await allocate(api, arch="ppc64el")
    assert (r.status_code, r.json()) == (400, {"arch": ["Architecture not recognised."]})


# -- not_tags (NODE_EXCLUDES l.1004: _match_any; no clean_not_tags, so unknown names are no error) -----------
async def test_not_tags_excludes_any_of_them_and_unknown_names_are_accepted(api: httpx.AsyncClient) -> None:
    assert await listed(api, not_tags="gpu") == ["arm", "net", "plain", "storage"]
    assert await chosen(api, devices="vendor_id=10de", not_tags="spare") == "gpu-a6000"
    assert await chosen(api, devices="vendor_id=10de", cpu_count="20", not_tags="spare") is None
    assert await chosen(api, not_tags="no-such-tag") == "plain"


# -- storage (STORAGE_REGEX l.69-74, storage_validator 77-103, nodes_by_storage 343-528) ---------------------
async def test_storage_first_entry_is_the_root_disk_then_the_smallest_unused_disk(
    api: httpx.AsyncClient,
) -> None:
    r = await allocate(api, storage="root:200(ssd),data:900(ssd)")
    assert r.status_code == 200, r.text
    body = r.json()
    ids = {d["name"]: d["id"] for d in body["physicalblockdevice_set"]}
    assert body["hostname"] == "storage"
    assert body["constraints_by_type"]["storage"] == {"root": [ids["sda"]], "data": [ids["sdb"]]}
    r = await allocate(api, storage="root:0,bulk:500")
    assert r.json()["constraints_by_type"]["storage"]["bulk"] == [ids["sdb"]]  # 1T fits before 4T
    r = await allocate(api, storage="root:0,a:100,b:100(hdd)")  # most tags first: b takes sdc, a sdb
    assert r.json()["constraints_by_type"]["storage"] == {
        "root": [ids["sda"]],
        "a": [ids["sdb"]],
        "b": [ids["sdc"]],
    }


async def test_storage_root_must_be_the_disk_holding_root(api: httpx.AsyncClient) -> None:
    assert await chosen(api, storage="root:1000") is None  # only sdb/sdc are that big, and they are not root
    assert await chosen(api, storage="root:0,x:5000") is None
    assert await chosen(api, storage="root:0,x:100,y:100,z:100") is None  # three extra disks wanted, two free
    assert await chosen(api, storage="root:10(partition)") is None  # no partitions are modelled


async def test_unlabelled_storage_groups_match_but_are_not_reported(api: httpx.AsyncClient) -> None:
    r = await allocate(api, storage="200,data:900")
    assert r.json()["constraints_by_type"]["storage"] == {
        "data": [r.json()["physicalblockdevice_set"][1]["id"]]
    }


@pytest.mark.parametrize("value", ["data:100,root", "root:40 ,data:100", "root:40;data:100", "root:x"])
async def test_malformed_storage_is_maas_s_400(api: httpx.AsyncClient, value: str) -> None:
    r = await allocate(api, storage=value)
    assert (r.status_code, r.json()) == (400, {"storage": [f'Malformed storage constraint, "{value}".']})


# -- interfaces (LabeledConstraintMap, provisioningserver/utils/constraints.py; keys l.106-134) --------------
async def test_interfaces_by_space_vid_speed_and_tag(api: httpx.AsyncClient, hsim: Simulator) -> None:
    net = hsim.state.by_hostname["net"]
    eth0, eth1 = (i.id for i in net.interfaces)
    r = await allocate(api, interfaces="api:space=api;st:space=storage,link_speed=25000")
    assert r.status_code == 200, r.text
    assert r.json()["hostname"] == "net"
    assert r.json()["constraints_by_type"]["interfaces"] == {"api": [eth0], "st": [eth1]}
    assert await chosen(api, interfaces="x:vid=20") == "net"
    assert await chosen(api, interfaces="x:vlan=vid:20") == "net"
    assert await chosen(api, interfaces="x:tag=sriov,fabric=fabric-0") == "net"
    assert await chosen(api, interfaces="x:subnet_cidr=10.2.0.0/24,name=eth1") == "net"
    assert await chosen(api, interfaces="x:space=storage,name=eth0") is None  # one interface must have both
    assert await chosen(api, interfaces="x:link_speed=40000") is None
    # each label on its own: two labels may match the same interface (nodes_by_interface l.531-611)
    r = await allocate(api, interfaces="a:space=storage;b:vid=20")
    assert r.json()["constraints_by_type"]["interfaces"] == {"a": [eth1], "b": [eth1]}
    assert await chosen(api, interfaces="a:space=storage,not_name=eth1") is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "eth0space=api",
            "Malformed constraint: 'eth0space=api' (required format: "
            "'<label>:<key>=<value>[,<key2>=<value2>[,...]]')",
        ),
        ("a:space=api;a:vid=0", "Constraint label defined more than once: 'a'"),
        ("a:space", "Malformed key/value pair in constraint: 'space'"),
        ("a:colour=red", "Unknown interfaces constraint: 'colour"),  # sic: MAAS's text has no closing quote
        (
            "-a:vid=0",
            "Invalid label name: '-a' (Must begin with an alphanumeric character, and include only "
            "alphanumeric characters, dashes, and underscores.)",
        ),
    ],
)
async def test_malformed_interfaces_are_maas_s_400(api: httpx.AsyncClient, value: str, message: str) -> None:
    r = await allocate(api, interfaces=value)
    assert (r.status_code, r.json()) == (400, {"interfaces": [message]})


async def test_an_interface_mode_other_than_unconfigured_is_a_plain_400(api: httpx.AsyncClient) -> None:
    r = await allocate(api, interfaces="a:mode=static")
    assert r.status_code == 400
    assert "The only valid value for 'mode' is 'unconfigured'." in r.text


# -- what MAAS says when nothing matches (api/machines.py:2621-2637) -----------------------------------------
async def test_no_match_lists_the_constraints_as_maas_resolved_them(api: httpx.AsyncClient) -> None:
    r = await api.post(
        "machines/", params={"op": "allocate"}, data={"devices": "vendor_id=1002", "arch": "arm64"}
    )
    assert r.status_code == 409
    assert r.text == (
        "No available machine matches constraints: [('devices', ['vendor_id=1002']), ('arch', ['arm64'])] "
        '(resolved to "arch=arm64/generic devices=vendor_id=1002")'
    )


# -- inventory -----------------------------------------------------------------------------------------------
def test_inventory_devices_need_hex_ids_and_a_known_bus() -> None:
    bad = {"machines": [{"hostname": "x", "devices": [{"vendor_id": "nvidia", "product_id": "2230"}]}]}
    with pytest.raises(InventoryError, match="four hex digits"):
        Inventory(bad).build()
    bad = {"machines": [{"hostname": "x", "devices": [{**NVIDIA_A6000, "bus": "ISA"}]}]}
    with pytest.raises(InventoryError, match="PCIE or USB"):
        Inventory(bad).build()


# -- nodes/{system_id}/devices/ (api/nodedevices.py:19-251) ------------------------------------------------
async def test_node_devices_list_filters_and_reads(api: httpx.AsyncClient, hsim: Simulator) -> None:
    sid = hsim.state.by_hostname["gpu-a6000"].system_id
    r = await api.get(f"nodes/{sid}/devices/")
    assert r.status_code == 200
    devices = r.json()
    assert [(d["vendor_id"], d["hardware_type"], d["hardware_type_name"]) for d in devices] == [
        ("10de", 5, "GPU"),
        ("8086", 4, "Network"),
    ]
    assert (devices[0]["bus"], devices[0]["bus_name"], devices[0]["system_id"]) == (1, "PCIE", sid)
    assert [
        d["id"] for d in (await api.get(f"nodes/{sid}/devices/", params={"hardware_type": "gpu"})).json()
    ] == [devices[0]["id"]]
    graphics = await api.get(
        f"nodes/{sid}/devices/", params={"hardware_type": "graphics", "vendor_id": "10DE"}
    )
    assert len(graphics.json()) == 1  # MAAS's alias, and the ids compared case-insensitively
    assert (await api.get(f"nodes/{sid}/devices/", params={"bus": "usb"})).json() == []
    r = await api.get(f"nodes/{sid}/devices/{devices[0]['id']}/")
    assert r.json() == devices[0]
    r = await api.get(f"nodes/{sid}/devices/{devices[0]['pci_address']}/")
    assert r.json()["id"] == devices[0]["id"]


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"bus": "ISA"}, "Bus must be PCIE or USB!"),
        ({"bus": "7"}, "Invalid bus numeric value!"),
        ({"hardware_type": "fpga"}, "Hardware type must be node, cpu, memory, storage, or gpu"),
        ({"hardware_type": "9"}, "Invalid hardware type numeric value."),
    ],
)
async def test_node_devices_bad_filters_are_maas_s_400(
    api: httpx.AsyncClient, hsim: Simulator, params: dict[str, str], text: str
) -> None:
    sid = hsim.state.by_hostname["plain"].system_id
    r = await api.get(f"nodes/{sid}/devices/", params=params)
    assert (r.status_code, r.text) == (400, text)
