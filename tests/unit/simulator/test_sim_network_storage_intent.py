"""Network and storage intent on a machine before deploy, as MAAS 3.7.3 answers it: bonds and VLAN
interfaces (``create_bond``/``create_vlan``/DELETE, M ``api/interfaces.py``, ``forms/interface.py``),
filesystems on whole disks (``format``/``mount``/``unmount``/``unformat``, M ``api/blockdevices.py``) and
``set_storage_layout``; each refusal with MAAS's status and words, per machine state and per permission."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from simtools import ADMIN_KEY, ALICE_KEY, BOB_KEY, client, sid

from capmaas_dev.simulator import Inventory, Simulator

INVENTORY: dict[str, Any] = {
    "fabrics": [
        {"name": "fabric-0", "vlans": [{"vid": 0}, {"vid": 100, "name": "storage"}, {"vid": 200}]},
        {"name": "oob", "class_type": "1G", "vlans": [{"vid": 300}]},
    ],
    "subnets": [
        {"cidr": "10.0.0.0/24", "name": "lan", "gateway_ip": "10.0.0.1"},
        {"cidr": "10.100.0.0/24", "name": "storage", "vid": 100, "space": "storage"},
        {"cidr": "10.30.0.0/24", "name": "oob", "fabric": "oob", "vid": 300},
    ],
    "users": [{"username": "alice", "api_key": ALICE_KEY}, {"username": "bob", "api_key": BOB_KEY}],
    "machines": [
        {
            "hostname": f"m{n}",
            "disks": [{"name": "sda", "size": "100G"}, {"name": "sdb", "size": "500G", "tags": ["ssd"]}],
            "interfaces": [
                {"name": "eth0", "mac": f"52:54:00:00:0{n}:01", "subnet": "lan", "ip": f"10.0.0.{10 + n}"},
                {"name": "eth1", "mac": f"52:54:00:00:0{n}:02"},
                {"name": "eth2", "mac": f"52:54:00:00:0{n}:03", "subnet": "storage"},
            ],
        }
        for n in (1, 2, 3)
    ]
    + [
        {"hostname": "dep", "status": "deployed", "interfaces": [{"name": "eth0", "subnet": "lan"}]},
        {
            "hostname": "o1",
            "interfaces": [
                {"name": "eth0", "subnet": "lan", "ip": "10.0.0.40"},
                {"name": "eth1", "fabric": "oob", "vid": 300},
            ],
        },
    ],
}
STATE_409 = "Cannot {} interface because the machine is not New, Ready, Allocated, or Broken."
BOND_DEFAULTS = {  # M forms/interface.py:519-560 initials; enum.py BOND_*_CHOICES[0]
    "bond_mode": "balance-rr",
    "bond_miimon": 100,
    "bond_downdelay": 0,
    "bond_updelay": 0,
    "bond_num_grat_arp": 1,
    "bond_lacp_rate": "fast",
    "bond_xmit_hash_policy": "layer2",
}


@pytest.fixture
def sim() -> Simulator:
    return Simulator(Inventory(INVENTORY), api_key=ADMIN_KEY)


@pytest.fixture
async def admin(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim, ADMIN_KEY) as c:
        yield c


@pytest.fixture
async def alice(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim, ALICE_KEY) as c:
        yield c


@pytest.fixture
async def bob(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim, BOB_KEY) as c:
        yield c


def iface_id(sim: Simulator, hostname: str, name: str) -> int:
    return next(i.id for i in sim.state.by_hostname[hostname].interfaces if i.name == name)


def disk_id(sim: Simulator, hostname: str, name: str) -> int:
    return next(d.id for d in sim.state.by_hostname[hostname].disks if d.name == name)


async def bond(c: httpx.AsyncClient, sim: Simulator, host: str, *parents: str, **data: Any) -> httpx.Response:
    form = {"name": "bond0", "parents": [iface_id(sim, host, p) for p in parents], **data}
    return await c.post(f"nodes/{sid(sim, host)}/interfaces/", params={"op": "create_bond"}, data=form)


async def vlan(c: httpx.AsyncClient, sim: Simulator, host: str, parent: str, **data: Any) -> httpx.Response:
    form = {"parent": iface_id(sim, host, parent), **data}
    return await c.post(f"nodes/{sid(sim, host)}/interfaces/", params={"op": "create_vlan"}, data=form)


async def allocate(c: httpx.AsyncClient, sim: Simulator, host: str) -> None:
    r = await c.post("machines/", params={"op": "allocate"}, data={"system_id": sid(sim, host)})
    assert r.status_code == 200, r.text


async def machine(c: httpx.AsyncClient, sim: Simulator, host: str) -> dict[str, Any]:
    body: dict[str, Any] = (await c.get(f"machines/{sid(sim, host)}/")).json()
    return body


def by_name(m: dict[str, Any], name: str) -> dict[str, Any]:
    return next(i for i in m["interface_set"] if i["name"] == name)


async def disk_op(
    c: httpx.AsyncClient, sim: Simulator, host: str, disk: str, op: str, **data: str
) -> httpx.Response:
    url = f"nodes/{sid(sim, host)}/blockdevices/{disk_id(sim, host, disk)}/"
    return await c.post(url, params={"op": op}, data=data)


# -- fabrics -------------------------------------------------------------------------------------------------
async def test_fabrics_carry_their_tagged_vlans_with_ids_apart_from_their_vids(
    admin: httpx.AsyncClient,
) -> None:
    fabrics = (await admin.get("fabrics/")).json()
    assert [(f["id"], f["name"], f["class_type"]) for f in fabrics] == [
        (0, "fabric-0", None),
        (1, "oob", "1G"),
    ]
    assert [(v["id"], v["vid"], v["name"], v["fabric"]) for v in fabrics[0]["vlans"]] == [
        (5000, 0, "untagged", "fabric-0"),
        (5100, 100, "storage", "fabric-0"),
        (5200, 200, "200", "fabric-0"),
    ]
    assert [(v["id"], v["vid"], v["fabric_id"]) for v in fabrics[1]["vlans"]] == [
        (10000, 0, 1),
        (10300, 300, 1),
    ]
    assert (await admin.get("vlans/10300/")).json()["fabric"] == "oob"
    assert (await admin.get("fabrics/oob/vlans/300/")).json()["id"] == 10300


async def test_a_nic_is_on_its_subnets_vlan(sim: Simulator, admin: httpx.AsyncClient) -> None:
    m = await machine(admin, sim, "m1")
    assert [(i["name"], i["vlan"]["vid"], i["vlan"]["id"]) for i in m["interface_set"]] == [
        ("eth0", 0, 5000),
        ("eth1", 0, 5000),
        ("eth2", 100, 5100),
    ]


async def test_allocation_filters_see_every_fabric(sim: Simulator, admin: httpx.AsyncClient) -> None:
    async def hosts(**query: str) -> list[str]:
        return sorted(m["hostname"] for m in (await admin.get("machines/", params=query)).json())

    assert await hosts(fabrics="oob") == ["o1"]
    assert await hosts(fabric_classes="1G") == ["o1"]
    assert "o1" not in await hosts(not_fabrics="oob")
    assert await hosts(vlans="name:storage") == ["m1", "m2", "m3"]
    assert await hosts(vlans="10300") == ["o1"]
    r = await admin.post("machines/", params={"op": "allocate"}, data={"interfaces": "oob:fabric=oob"})
    assert (r.status_code, r.json()["hostname"]) == (200, "o1")


async def test_an_unlinked_nic_on_a_declared_vlan_links_only_its_subnets(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    eth1 = by_name(await machine(admin, sim, "o1"), "eth1")
    assert (eth1["vlan"]["fabric"], eth1["vlan"]["vid"], eth1["links"]) == ("oob", 300, [])
    url = f"nodes/{sid(sim, 'o1')}/interfaces/eth1/"
    r = await admin.post(url, params={"op": "link_subnet"}, data={"mode": "auto", "subnet": "lan"})
    assert r.status_code == 400
    r = await admin.post(url, params={"op": "link_subnet"}, data={"mode": "auto", "subnet": "oob"})
    assert r.status_code == 200, r.text
    assert r.json()["links"][0]["subnet"]["name"] == "oob"


# -- create_bond ---------------------------------------------------------------------------------------------
async def test_a_bond_takes_maas_defaults_and_clears_its_parents_links(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert "10.0.0.11" in sim.state.used_ips
    r = await bond(admin, sim, "m1", "eth0", "eth1")
    assert r.status_code == 200, r.text
    b = r.json()
    assert (b["type"], b["name"], b["parents"], b["mac_address"]) == (
        "bond",
        "bond0",
        ["eth0", "eth1"],
        "52:54:00:00:01:01",
    )
    assert b["params"] == BOND_DEFAULTS
    assert b["links"] == [{"id": b["id"], "mode": "link_up"}]
    assert b["vlan"]["id"] == 5000
    m = await machine(admin, sim, "m1")
    assert by_name(m, "eth0")["links"] == [] == by_name(m, "eth1")["links"]  # the STATIC link went too
    assert by_name(m, "eth0")["children"] == ["bond0"]
    assert "10.0.0.11" not in sim.state.used_ips
    assert "10.0.0.11" not in m["ip_addresses"]
    assert sim.counters[("POST", "/MAAS/api/2.0/nodes/{system_id}/interfaces/", "create_bond")] == 1


async def test_bond_settings_given_are_kept(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await bond(
        admin,
        sim,
        "m1",
        "eth0",
        "eth1",
        bond_mode="802.3ad",
        bond_lacp_rate="slow",
        bond_xmit_hash_policy="layer3+4",
        mtu="9000",
        tags="a,b",
    )
    assert r.status_code == 200, r.text
    assert r.json()["params"] == {
        **BOND_DEFAULTS,
        "bond_mode": "802.3ad",
        "bond_lacp_rate": "slow",
        "bond_xmit_hash_policy": "layer3+4",
        "mtu": 9000,
    }
    assert r.json()["effective_mtu"] == 9000
    assert r.json()["tags"] == ["a", "b"]


async def test_create_bond_without_anything_names_every_missing_field(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    r = await admin.post(f"nodes/{sid(sim, 'm1')}/interfaces/", params={"op": "create_bond"})
    # M api/tests/test_interfaces.py test_create_bond_requires_name_vlan_and_parents
    assert (r.status_code, r.json()) == (
        400,
        {
            "mac_address": ["This field cannot be blank."],
            "name": ["This field is required."],
            "parents": ["A bond interface must have one or more parents."],
        },
    )


@pytest.mark.parametrize(
    ("parents", "extra", "errors"),
    [
        (("eth0", "eth2"), {}, {"parents": ["All parents must belong to the same VLAN."]}),
        (
            ("eth0",),
            {"bond_mode": "lacp"},
            {
                "bond_mode": [
                    "'lacp' is not a valid bond_mode.  It should be one of: 'balance-rr', 'active-backup', "
                    "'balance-xor', 'broadcast', '802.3ad', 'balance-tlb', 'balance-alb'."
                ]
            },
        ),
        (("eth0",), {"mtu": "500"}, {"mtu": ["Ensure this value is greater than or equal to 552."]}),
        (
            ("eth0",),
            {"name": "a-name-far-too-long"},
            {
                "name": [
                    "The interface name must be 1 to 15 characters long and can only contain alphanumeric "
                    "characters, hyphens ('-'), underscores ('_'), periods ('.'), and colons (':')."
                ]
            },
        ),
        (
            ("eth0",),
            {"vlan": "100"},
            {"vlan": ["Select a valid choice. That choice is not one of the available choices."]},
        ),
    ],
)
async def test_bond_form_refusals(
    sim: Simulator, admin: httpx.AsyncClient, parents: tuple[str, ...], extra: dict[str, str], errors: Any
) -> None:
    before = [(i.name, i.subnet_id, i.ip) for i in sim.state.by_hostname["m1"].interfaces]
    r = await bond(admin, sim, "m1", *parents, **extra)
    assert (r.status_code, r.json()) == (400, errors)
    assert [(i.name, i.subnet_id, i.ip) for i in sim.state.by_hostname["m1"].interfaces] == before


async def test_a_parent_already_in_a_bond_or_vlan_is_in_use(sim: Simulator, admin: httpx.AsyncClient) -> None:
    assert (await bond(admin, sim, "m1", "eth0")).status_code == 200
    assert (await vlan(admin, sim, "m1", "eth2", vlan="5100")).status_code == 200
    r = await bond(admin, sim, "m1", "eth0", "eth2", name="bond1")
    assert r.status_code == 400
    assert r.json()["parents"][0] == "Interfaces already in-use: eth0, eth2."


async def test_only_physical_interfaces_bond_and_a_name_is_taken_once(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await bond(admin, sim, "m1", "eth0")).status_code == 200
    r = await bond(admin, sim, "m1", "bond0", name="bond1")
    assert (r.status_code, r.json()) == (400, {"parents": ["Only physical interfaces can be bonded."]})
    r = await bond(admin, sim, "m1", "eth1", name="eth2")
    assert r.status_code == 400
    assert r.json() == {"__all__": ["Interface with this Node config and Name already exists."]}


# -- create_vlan ---------------------------------------------------------------------------------------------
async def test_a_vlan_interface_takes_the_vlans_id_and_is_named_after_its_tag(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    r = await vlan(admin, sim, "m1", "eth0", vlan="5200")
    assert r.status_code == 200, r.text
    v = r.json()
    assert (v["type"], v["name"], v["parents"], v["mac_address"]) == (
        "vlan",
        "eth0.200",
        ["eth0"],
        "52:54:00:00:01:01",
    )
    assert (v["vlan"]["id"], v["vlan"]["vid"], v["vlan"]["fabric"]) == (5200, 200, "fabric-0")
    assert v["links"] == [{"id": v["id"], "mode": "link_up"}]
    m = await machine(admin, sim, "m1")
    assert by_name(m, "eth0")["links"][0]["ip_address"] == "10.0.0.11"  # a VLAN leaves its parent's links


@pytest.mark.parametrize(
    ("parent", "data", "errors"),
    [
        ("eth0", {}, {"vlan": ["A VLAN interface must be connected to a tagged VLAN."]}),
        ("eth0", {"vlan": "5000"}, {"vlan": ["A VLAN interface can only belong to a tagged VLAN."]}),
        (
            "eth0",
            {"vlan": "100"},
            {
                "vlan": [  # the 802.1Q tag is not a VLAN id
                    "Select a valid choice. That choice is not one of the available choices."
                ]
            },
        ),
        (
            "eth0",
            {"vlan": "10300"},
            {
                "vlan": [
                    "A VLAN interface can only belong to a tagged VLAN on the same fabric as its parent "
                    "interface."
                ]
            },
        ),
        (
            "eth0",
            {"vlan": "5100", "name": "eth1"},
            {"name": ["Node {sid} (m1) already has an interface named 'eth1'."]},
        ),
    ],
)
async def test_vlan_form_refusals(
    sim: Simulator, admin: httpx.AsyncClient, parent: str, data: dict[str, str], errors: dict[str, list[str]]
) -> None:
    r = await vlan(admin, sim, "m1", parent, **data)
    expected = {k: [v.format(sid=sid(sim, "m1")) for v in vs] for k, vs in errors.items()}
    assert (r.status_code, r.json()) == (400, expected)


async def test_vlan_parent_rules(sim: Simulator, admin: httpx.AsyncClient) -> None:
    assert (await bond(admin, sim, "m1", "eth1")).status_code == 200
    r = await vlan(admin, sim, "m1", "eth1", vlan="5200")
    assert r.json() == {"parent": ["A VLAN interface can't have a parent that is already in a bond."]}
    assert (await vlan(admin, sim, "m1", "eth0", vlan="5200")).status_code == 200
    r = await vlan(admin, sim, "m1", "eth0.200", vlan="5100")
    assert r.json() == {"parent": ["A VLAN interface can't have another VLAN interface as parent."]}
    r = await vlan(admin, sim, "m1", "eth0", vlan="5200")
    assert r.json() == {"name": [f"Node {sid(sim, 'm1')} (m1) already has an interface named 'eth0.200'."]}
    r = await admin.post(
        f"nodes/{sid(sim, 'm1')}/interfaces/", params={"op": "create_vlan"}, data={"vlan": "5100"}
    )
    assert r.json() == {"parent": ["A VLAN interface must have exactly one parent."]}
    r = await admin.post(f"nodes/{sid(sim, 'm1')}/interfaces/", params={"op": "create_vlan"})
    # M api/tests/test_interfaces.py test_create_vlan_requires_vlan_and_parent
    assert (r.status_code, r.json()) == (
        400,
        {
            "vlan": ["A VLAN interface must be connected to a tagged VLAN."],
            "parent": ["A VLAN interface must have exactly one parent."],
        },
    )


# -- gates ---------------------------------------------------------------------------------------------------
async def test_interface_ops_refuse_a_deployed_machine_with_maas_words(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    r = await bond(admin, sim, "dep", "eth0")
    assert (r.status_code, r.text) == (409, STATE_409.format("create bond"))
    r = await vlan(admin, sim, "dep", "eth0", vlan="5100")
    assert (r.status_code, r.text) == (409, STATE_409.format("create VLAN"))
    r = await admin.delete(f"nodes/{sid(sim, 'dep')}/interfaces/eth0/")
    assert (r.status_code, r.text) == (409, STATE_409.format("delete interface"))


async def test_interface_ops_need_an_admin_even_for_the_owner(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    await allocate(alice, sim, "m1")
    assert (await bond(alice, sim, "m1", "eth0", "eth1")).status_code == 403
    assert (await vlan(alice, sim, "m1", "eth0", vlan="5100")).status_code == 403
    assert (await alice.delete(f"nodes/{sid(sim, 'm1')}/interfaces/eth1/")).status_code == 403
    link = await alice.post(
        f"nodes/{sid(sim, 'm1')}/interfaces/eth1/",
        params={"op": "link_subnet"},
        data={"mode": "auto", "subnet": "lan"},
    )
    assert link.status_code == 403
    assert len(sim.state.by_hostname["m1"].interfaces) == 3
    assert (await bond(admin, sim, "m1", "eth0", "eth1")).status_code == 200  # Allocated is an editable state


# -- links on bonds and VLANs, deploy and release ------------------------------------------------------------
async def test_a_bond_links_only_subnets_of_its_vlan_and_its_parents_no_longer_link(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    b = (await bond(admin, sim, "m1", "eth0", "eth1")).json()
    url = f"nodes/{sid(sim, 'm1')}/interfaces/{b['id']}/"
    r = await admin.post(url, params={"op": "link_subnet"}, data={"mode": "auto", "subnet": "storage"})
    assert (r.status_code, r.json()) == (
        400,
        {"subnet": ["Select a valid choice. That choice is not one of the available choices."]},
    )
    r = await admin.post(
        f"nodes/{sid(sim, 'm1')}/interfaces/eth0/",
        params={"op": "link_subnet"},
        data={"mode": "auto", "subnet": "lan"},
    )
    assert (r.status_code, r.json()) == (
        400,
        {"bond": ["Cannot link interface(eth0) when interface is in a bond(bond0)."]},
    )


async def test_auto_links_on_a_bond_and_a_vlan_get_addresses_at_deploy_and_survive_release(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    await allocate(admin, sim, "m1")
    b = (await bond(admin, sim, "m1", "eth0", "eth1")).json()
    v = (await vlan(admin, sim, "m1", "bond0", vlan="5100")).json()
    assert v["name"] == "bond0.100"
    node = f"nodes/{sid(sim, 'm1')}/interfaces"
    for iface, subnet in ((b["id"], "lan"), (v["id"], "storage")):
        r = await admin.post(
            f"{node}/{iface}/", params={"op": "link_subnet"}, data={"mode": "auto", "subnet": subnet}
        )
        assert r.status_code == 200, r.text
        assert r.json()["links"][0]["mode"] == "auto"
        assert "ip_address" not in r.json()["links"][0]
    assert (await admin.post(f"machines/{sid(sim, 'm1')}/", params={"op": "deploy"})).status_code == 200
    m = await machine(admin, sim, "m1")
    assert m["status_name"] == "Deployed"
    bond_ip = by_name(m, "bond0")["links"][0]["ip_address"]
    vlan_ip = by_name(m, "bond0.100")["links"][0]["ip_address"]
    assert bond_ip.startswith("10.0.0.")
    assert vlan_ip.startswith("10.100.0.")
    assert set(m["ip_addresses"]) >= {bond_ip, vlan_ip}
    assert (await admin.post(f"machines/{sid(sim, 'm1')}/", params={"op": "release"})).status_code == 200
    m = await machine(admin, sim, "m1")
    assert m["status_name"] == "Ready"
    assert [i["name"] for i in m["interface_set"]] == ["eth0", "eth1", "eth2", "bond0", "bond0.100"]
    assert [lk["mode"] for lk in by_name(m, "bond0")["links"]] == ["auto"]
    assert "ip_address" not in by_name(m, "bond0")["links"][0]
    assert bond_ip not in sim.state.used_ips
    assert vlan_ip not in sim.state.used_ips


async def test_deleting_a_bond_takes_its_vlan_interfaces_along(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    b = (await bond(admin, sim, "m1", "eth0", "eth1")).json()
    assert (await vlan(admin, sim, "m1", "bond0", vlan="5200")).status_code == 200
    r = await admin.delete(f"nodes/{sid(sim, 'm1')}/interfaces/{b['id']}/")
    assert r.status_code == 204
    m = await machine(admin, sim, "m1")
    assert [(i["name"], i["children"], i["links"]) for i in m["interface_set"][:2]] == [
        ("eth0", [], []),
        ("eth1", [], []),
    ]
    assert [i["name"] for i in m["interface_set"]] == ["eth0", "eth1", "eth2"]
    assert (await admin.delete(f"nodes/{sid(sim, 'm1')}/interfaces/{b['id']}/")).status_code == 404


# -- block devices -------------------------------------------------------------------------------------------
async def test_the_owner_formats_and_mounts_on_an_allocated_machine_and_release_drops_it(
    sim: Simulator, alice: httpx.AsyncClient
) -> None:
    await allocate(alice, sim, "m1")
    r = await disk_op(alice, sim, "m1", "sdb", "format", fstype="xfs")
    assert r.status_code == 200, r.text
    assert (r.json()["filesystem"]["fstype"], r.json()["used_for"]) == (
        "xfs",
        "Unmounted xfs formatted filesystem",
    )
    r = await disk_op(alice, sim, "m1", "sdb", "mount", mount_point="/srv/data", mount_options="noatime")
    assert r.status_code == 200, r.text
    sdb = r.json()
    assert (sdb["filesystem"]["mount_point"], sdb["filesystem"]["mount_options"]) == ("/srv/data", "noatime")
    assert (sdb["used_for"], sdb["used_size"], sdb["available_size"]) == (
        "xfs formatted filesystem mounted at /srv/data",
        sdb["size"],
        0,
    )
    m = await machine(alice, sim, "m1")
    assert m["blockdevice_set"][1] == sdb
    assert m["boot_disk"]["name"] == "sda"
    assert (await alice.post(f"machines/{sid(sim, 'm1')}/", params={"op": "release"})).status_code == 200
    m = await machine(alice, sim, "m1")
    assert (m["status_name"], m["blockdevice_set"][1]["filesystem"], m["blockdevice_set"][1]["used_for"]) == (
        "Ready",
        None,
        "Unused",
    )
    # gone, not just hidden while Ready: the next allocation would otherwise see it again
    assert sim.state.by_hostname["m1"].disks[1].acquired_fs is None


async def test_a_ready_format_persists_and_allocated_changes_touch_a_copy(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await disk_op(admin, sim, "m1", "sdb", "format", fstype="ext4")).status_code == 200
    assert (await disk_op(admin, sim, "m1", "sdb", "mount", mount_point="/data")).status_code == 200
    await allocate(admin, sim, "m1")
    assert (await disk_op(admin, sim, "m1", "sdb", "unmount")).json()["filesystem"]["mount_point"] is None
    assert (await disk_op(admin, sim, "m1", "sdb", "unformat")).json()["filesystem"] is None
    await admin.post(f"machines/{sid(sim, 'm1')}/", params={"op": "release"})
    fs = (await machine(admin, sim, "m1"))["blockdevice_set"][1]["filesystem"]
    assert (fs["fstype"], fs["mount_point"]) == ("ext4", "/data")


async def test_block_device_gates_by_state_and_permission(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    r = await disk_op(alice, sim, "m1", "sdb", "format", fstype="ext4")  # Ready, not an admin
    assert (r.status_code, r.text) == (
        403,
        "Cannot format block device because you don't have the permissions on a Ready machine.",
    )
    for op in ("mount", "unmount", "unformat"):
        r = await disk_op(alice, sim, "m1", "sdb", op, mount_point="/x")
        assert (r.status_code, r.text) == (
            403,
            f"Cannot {op} block device because you don't have the permissions on a Ready machine.",
        )
    dep = sim.state.by_hostname["dep"]
    r = await admin.post(
        f"nodes/{dep.system_id}/blockdevices/{dep.disks[0].id}/",
        params={"op": "format"},
        data={"fstype": "ext4"},
    )
    assert (r.status_code, r.text) == (
        409,
        "Cannot format block device because the machine is not Ready or Allocated.",
    )
    await allocate(alice, sim, "m2")
    r = await disk_op(bob, sim, "m2", "sdb", "format", fstype="ext4")  # somebody else's machine
    assert (r.status_code, r.text) == (403, "")
    assert sim.state.by_hostname["m2"].disks[1].acquired_fs is None


@pytest.mark.parametrize(
    ("disk", "op", "data", "body"),
    [
        (
            "sda",
            "format",
            {"fstype": "ext4"},
            {"__all__": ["Cannot format block device with a partition table."]},
        ),
        ("sdb", "format", {}, {"fstype": ["This field is required."]}),
        (
            "sdb",
            "format",
            {"fstype": "ntfs"},
            {"fstype": ["Select a valid choice. ntfs is not one of the available choices."]},
        ),
        (
            "sdb",
            "mount",
            {"mount_point": "/data"},
            {"__all__": ["Cannot mount an unformatted partition or block device."]},
        ),
        ("sdb", "unmount", {}, "Block device is not formatted."),
        ("sdb", "unformat", {}, "Block device is not formatted."),
    ],
)
async def test_block_device_refusals(
    sim: Simulator, admin: httpx.AsyncClient, disk: str, op: str, data: dict[str, str], body: Any
) -> None:
    r = await disk_op(admin, sim, "m1", disk, op, **data)
    assert r.status_code == 400
    assert (r.json() if isinstance(body, dict) else r.text) == body


async def test_mounted_and_unmounted_filesystem_refusals(sim: Simulator, admin: httpx.AsyncClient) -> None:
    await disk_op(admin, sim, "m1", "sdb", "format", fstype="ext4")
    r = await disk_op(admin, sim, "m1", "sdb", "unmount")
    assert (r.status_code, r.text) == (400, "Filesystem is already unmounted.")
    r = await disk_op(admin, sim, "m1", "sdb", "mount")
    assert (r.status_code, r.json()) == (400, {"mount_point": ["This field is required."]})
    await disk_op(admin, sim, "m1", "sdb", "mount", mount_point="/data")
    r = await disk_op(admin, sim, "m1", "sdb", "unformat")
    assert (r.status_code, r.text) == (
        400,
        "Filesystem is mounted and cannot be unformatted. Unmount the filesystem before unformatting the "
        "block device.",
    )


# -- set_storage_layout --------------------------------------------------------------------------------------
async def test_set_storage_layout_is_ready_only_and_admin_only(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    url = f"machines/{sid(sim, 'm1')}/"
    r = await alice.post(url, params={"op": "set_storage_layout"}, data={"storage_layout": "blank"})
    assert r.status_code == 403
    r = await admin.post(url, params={"op": "set_storage_layout"}, data={"storage_layout": "blank"})
    assert r.status_code == 200, r.text
    assert (r.json()["boot_disk"]["partitions"], r.json()["boot_disk"]["used_for"]) == ([], "Unused")
    await allocate(admin, sim, "m1")
    r = await admin.post(url, params={"op": "set_storage_layout"}, data={"storage_layout": "flat"})
    assert (r.status_code, r.text) == (
        409,
        "Cannot change the storage layout on a machine that is not Ready.",
    )
    await admin.post(url, params={"op": "release"})
    r = await admin.post(url, params={"op": "set_storage_layout"}, data={"storage_layout": "flat"})
    assert len(r.json()["boot_disk"]["partitions"]) == 2
