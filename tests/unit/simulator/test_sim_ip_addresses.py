"""MAAS 3.7.3's address rules in the simulator: IP ranges, ``ipaddresses/`` reservations, ``reservedips/``
pins, STATIC links and the AUTO claim at deploy, with MAAS's status codes and texts (read from
``api/ip_addresses.py``, ``api/reservedip.py``, ``forms/reservedip.py``, ``forms/interface_link.py``,
``models/interface.py``, ``models/staticipaddress.py``, ``models/subnet.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from simtools import ADMIN_KEY, ALICE_KEY, BOB_KEY, client, sid

from capmaas_dev.simulator import Inventory, InventoryError, Simulator

MAC = {n: f"52:54:00:00:00:0{n}" for n in range(1, 7)}
INVENTORY: dict[str, Any] = {
    "subnets": [
        {
            "cidr": "10.0.0.0/24",
            "name": "lan",
            "gateway_ip": "10.0.0.1",
            "dns_servers": ["10.0.0.2"],
            "ranges": [
                {"type": "reserved", "start": "10.0.0.3", "end": "10.0.0.9", "comment": "infra"},
                {"type": "dynamic", "start": "10.0.0.100", "end": "10.0.0.199"},
            ],
        },
        {"cidr": "10.1.0.0/24", "name": "san", "gateway_ip": "10.1.0.1"},
        {
            "cidr": "10.2.0.0/29",
            "name": "tiny",
            "gateway_ip": "10.2.0.1",
            "ranges": [{"type": "reserved", "start": "10.2.0.2", "end": "10.2.0.5"}],
        },
    ],
    "users": [
        {"username": "alice", "api_key": ALICE_KEY},
        {"username": "bob", "api_key": BOB_KEY},
    ],
    "machines": [
        {"hostname": "auto-1", "interfaces": [{"name": "eth0", "mac": MAC[1], "subnet": "lan"}]},
        {"hostname": "auto-2", "interfaces": [{"name": "eth0", "mac": MAC[2], "subnet": "lan"}]},
        {
            "hostname": "static-1",
            "interfaces": [{"name": "eth0", "mac": MAC[4], "subnet": "lan", "ip": "10.0.0.10"}],
        },
        {"hostname": "free-1", "interfaces": [{"name": "eth0", "mac": MAC[5]}]},
        {"hostname": "free-2", "interfaces": [{"name": "eth0", "mac": MAC[6]}]},
    ],
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


def ips_of(sim: Simulator, hostname: str) -> list[str | None]:
    return [i.ip for i in sim.state.by_hostname[hostname].interfaces]


async def deploy(c: httpx.AsyncClient, system_id: str) -> httpx.Response:
    return await c.post(f"machines/{system_id}/", params={"op": "deploy"})


async def settle(c: httpx.AsyncClient, system_id: str) -> dict[str, Any]:
    """The machine after its timers (zero in Timings.fast) ran: any request ticks the simulator."""
    body: dict[str, Any] = (await c.get(f"machines/{system_id}/")).json()
    return body


async def link(c: httpx.AsyncClient, sim: Simulator, host: str, **data: str) -> httpx.Response:
    return await c.post(f"nodes/{sid(sim, host)}/interfaces/eth0/", params={"op": "link_subnet"}, data=data)


async def reserve(c: httpx.AsyncClient, **data: str) -> httpx.Response:
    return await c.post("ipaddresses/", params={"op": "reserve"}, data=data)


async def pin(c: httpx.AsyncClient, **data: str) -> httpx.Response:
    return await c.post("reservedips/", data=data)


# -- ranges -----------------------------------------------------------------------------------------------
async def test_ip_ranges_are_served_from_the_inventory(
    admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    listed = (await alice.get("ipranges/")).json()
    assert [(r["type"], r["start_ip"], r["end_ip"], r["subnet"]["cidr"]) for r in listed] == [
        ("reserved", "10.0.0.3", "10.0.0.9", "10.0.0.0/24"),
        ("dynamic", "10.0.0.100", "10.0.0.199", "10.0.0.0/24"),
        ("reserved", "10.2.0.2", "10.2.0.5", "10.2.0.0/29"),
    ]
    assert listed[0]["comment"] == "infra"
    assert listed[0]["user"]["username"] == "admin"
    assert (await admin.get(f"ipranges/{listed[1]['id']}/")).json() == listed[1]
    r = await admin.get("ipranges/99/")
    assert (r.status_code, r.text) == (404, "No IPRange matches the given query.")


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"type": "static", "start": "10.0.0.3", "end": "10.0.0.9"}, "type must be dynamic or reserved"),
        ({"type": "dynamic", "start": "10.0.0.9", "end": "10.0.0.3"}, "not an ordered range"),
        ({"type": "dynamic", "start": "10.0.0.3", "end": "10.9.0.9"}, "not an ordered range"),
        ({"type": "dynamic", "start": "10.0.0.3"}, "missing required field 'end'"),
    ],
)
def test_inventory_refuses_a_bad_range(entry: dict[str, str], words: str) -> None:
    inventory = Inventory({"subnets": [{"cidr": "10.0.0.0/24", "ranges": [entry]}]})
    with pytest.raises(InventoryError, match=words):
        inventory.build()


# -- the AUTO claim at deploy and STATIC links -------------------------------------------------------------
async def test_auto_claim_skips_gateway_dns_ranges_and_used_addresses(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    # .1 gateway, .2 DNS server, .3-.9 a reserved range, .10 static-1's address
    assert (await deploy(admin, sid(sim, "auto-1"))).status_code == 200
    assert ips_of(sim, "auto-1") == [None]  # the claim comes after the answer
    await settle(admin, sid(sim, "auto-1"))
    assert ips_of(sim, "auto-1") == ["10.0.0.11"]


async def test_auto_claim_and_static_pick_stay_out_of_a_dynamic_range(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    lan = sim.state.subnets[1]
    sim.state.used_ips.update(f"10.0.0.{n}" for n in range(11, 100))  # everything below the dynamic range
    r = await link(admin, sim, "free-1", mode="static", subnet="lan")
    assert r.json()["links"][0]["ip_address"] == "10.0.0.200"
    assert sim.state.free_ip(lan) == "10.0.0.201"
    assert (await deploy(admin, sid(sim, "auto-1"))).status_code == 200
    await settle(admin, sid(sim, "auto-1"))
    assert ips_of(sim, "auto-1") == ["10.0.0.201"]


async def test_static_pick_in_a_full_subnet_is_503(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await link(admin, sim, "free-1", mode="static", subnet="tiny")
    assert r.json()["links"][0]["ip_address"] == "10.2.0.6"  # .1 gateway, .2-.5 reserved
    r = await link(admin, sim, "free-2", mode="static", subnet="tiny")
    assert (r.status_code, r.text) == (503, "No more IPs available in subnet: 10.2.0.0/29.")


async def test_auto_claim_in_a_full_subnet_fails_the_deploy_with_503(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await link(admin, sim, "free-1", mode="static", subnet="tiny")).status_code == 200
    assert (await link(admin, sim, "free-2", mode="auto", subnet="tiny")).status_code == 200
    r = await deploy(admin, sid(sim, "free-2"))
    assert (r.status_code, r.text) == (503, "No more IPs available in subnet: 10.2.0.0/29.")
    assert sim.state.by_hostname["free-2"].status.name == "ALLOCATED"


async def test_explicit_static_rules(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.150")
    assert (r.status_code, r.json()) == (
        400,
        {"ip_address": ["IP address is inside a dynamic range 10.0.0.100 to 10.0.0.199."]},
    )
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.1.0.5")
    assert r.json() == {"ip_address": ["IP address is not in the given subnet 'lan:10.0.0.0/24(vid=0)'."]}
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.10")  # static-1's
    assert (r.status_code, r.text) == (404, "IP address is already in use.")
    assert (await reserve(alice, ip="10.0.0.40")).status_code == 200
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.40")  # reserved
    assert (r.status_code, r.text) == (404, "IP address is already in use.")
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.5")  # reserved range
    assert r.status_code == 200
    assert r.json()["links"][0]["ip_address"] == "10.0.0.5"
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.5")  # its own
    assert (r.status_code, r.text) == (404, "IP address is already in use.")
    for spec in ("cidr:10.0.0.0/24", "name:lan", "ip:10.0.0.77"):  # subnet specifiers
        r = await link(admin, sim, "free-2", mode="auto", subnet=spec)
        assert r.json()["links"][0]["subnet"]["name"] == "lan"


async def test_static_link_collisions_with_reserved_ips_are_409(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await pin(admin, ip="10.0.0.50", mac_address=MAC[1])).status_code == 200
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.50")
    assert (r.status_code, r.text) == (
        409,
        f"The static IP 10.0.0.50 is already reserved for the MAC address {MAC[1]}.",
    )
    assert (await pin(admin, ip="10.0.0.60", mac_address=MAC[5])).status_code == 200
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.61")
    assert (r.status_code, r.text) == (
        409,
        f"The static IP 10.0.0.61 does not match the reserved IP 10.0.0.60 for the MAC address {MAC[5]}.",
    )
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.50")
    assert (r.status_code, r.text) == (
        409,
        f"The MAC address {MAC[5]} or the static IP 10.0.0.50 are associated with a reserved IP and cannot "
        "be used.",
    )
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.60")  # its own pin
    assert r.status_code == 200


async def test_static_links_survive_release_and_auto_addresses_do_not(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (
        await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.77")
    ).status_code == 200
    for host in ("free-1", "auto-1"):
        assert (await deploy(admin, sid(sim, host))).status_code == 200
        assert (await settle(admin, sid(sim, host)))["status_name"] == "Deployed"
    assert ips_of(sim, "auto-1") == ["10.0.0.11"]
    for host in ("free-1", "auto-1"):
        assert (await admin.post(f"machines/{sid(sim, host)}/", params={"op": "release"})).status_code == 200
        assert (await settle(admin, sid(sim, host)))["status_name"] == "Ready"
    assert ips_of(sim, "free-1") == ["10.0.0.77"]
    assert ips_of(sim, "auto-1") == [None]
    assert "10.0.0.11" not in sim.state.used_ips
    assert "10.0.0.77" in sim.state.used_ips
    links = (await admin.get(f"nodes/{sid(sim, 'auto-1')}/interfaces/eth0/")).json()["links"]
    assert [(lk["mode"], "ip_address" in lk) for lk in links] == [("auto", False)]


# -- ipaddresses/ -----------------------------------------------------------------------------------------
async def test_reserve_an_address_owned_by_the_caller(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    r = await reserve(alice, ip="10.0.0.40")
    body = r.json()
    assert r.status_code == 200
    assert {k: body[k] for k in ("ip", "alloc_type", "alloc_type_name", "interface_set")} == {
        "ip": "10.0.0.40",
        "alloc_type": 4,
        "alloc_type_name": "User reserved",
        "interface_set": [],
    }
    assert "id" not in body
    assert body["owner"]["username"] == "alice"
    assert body["subnet"]["cidr"] == "10.0.0.0/24"
    assert "10.0.0.40" in sim.state.used_ips
    r = await reserve(admin, ip="10.0.0.40")
    assert (r.status_code, r.text) == (404, "The IP address 10.0.0.40 is already in use.")
    r = await reserve(admin, ip="10.0.0.10")  # a machine's
    assert (r.status_code, r.text) == (404, "The IP address 10.0.0.10 is already in use.")


async def test_reserve_by_subnet_picks_outside_the_ranges_and_machines_never_get_it(
    sim: Simulator, alice: httpx.AsyncClient, admin: httpx.AsyncClient
) -> None:
    for spec in ("lan", "10.0.0.0/24", "cidr:10.0.0.0/24", "1", "name:lan"):
        assert (await reserve(alice, subnet=spec)).status_code == 200
    assert sorted(sim.state.user_reserved) == [f"10.0.0.{n}" for n in range(11, 16)]
    assert (await deploy(admin, sid(sim, "auto-1"))).status_code == 200
    await settle(admin, sid(sim, "auto-1"))
    assert ips_of(sim, "auto-1") == ["10.0.0.16"]
    assert (await reserve(alice, subnet="tiny")).json()["ip"] == "10.2.0.6"
    r = await reserve(alice, subnet="tiny")
    assert (r.status_code, r.text) == (503, "No more IPs available in subnet: 10.2.0.0/29.")


@pytest.mark.parametrize(
    ("data", "status", "text"),
    [
        (
            {"ip": "10.0.0.150"},
            403,
            "IP address 10.0.0.150 belongs to an existing dynamic range. To reserve this IP "
            "address, a MAC address is required. (Create a device instead.)",
        ),
        (
            {"ip": "10.0.0.150", "mac": "02:00:00:00:00:99"},
            403,
            "IP address 10.0.0.150 belongs to an existing dynamic range. To reserve this IP address, a MAC "
            "address is required. (Create a device instead.)",
        ),
        ({"ip": "10.0.0.4"}, 404, "10.0.0.4 is within the reserved range from 10.0.0.3 to 10.0.0.9"),
        ({"ip": "192.0.2.1"}, 400, "No known subnet for IP address: 192.0.2.1."),
        ({"subnet": "nope"}, 400, "Unable to identify subnet: nope."),
        ({}, 400, "Must supply either the 'subnet' or the 'ip' parameter."),
        (
            {"ip": "10.0.0.41", "mac": MAC[1]},
            400,
            f"MAC address {MAC[1]} already belongs to auto-1. Use of the "
            "interface API is required, for an interface that belongs to a node.",
        ),
    ],
)
async def test_reserve_refusals(
    alice: httpx.AsyncClient, data: dict[str, str], status: int, text: str
) -> None:
    r = await reserve(alice, **data)
    assert (r.status_code, r.text) == (status, text)


async def test_reserve_with_a_mac_keeps_it_on_the_address(sim: Simulator, alice: httpx.AsyncClient) -> None:
    body = (await reserve(alice, ip="10.0.0.41", mac="02-00-00-00-00-99")).json()
    assert [(n["type"], n["mac_address"]) for n in body["interface_set"]] == [
        ("unknown", "02:00:00:00:00:99")
    ]
    r = await reserve(alice, ip="10.0.0.41", mac="02:00:00:00:00:98")
    assert (r.status_code, r.text) == (404, "IP address is already in use.")


async def test_reserve_with_hostname_creates_or_extends_the_dns_resource(
    sim: Simulator, alice: httpx.AsyncClient, admin: httpx.AsyncClient
) -> None:
    assert (await reserve(alice, ip="10.0.0.40", hostname="api")).status_code == 200
    assert (await reserve(alice, ip="10.0.0.41", hostname="api.maas")).status_code == 200
    [record] = (await admin.get("dnsresources/", params={"fqdn": "api.maas"})).json()
    assert [a["ip"] for a in record["ip_addresses"]] == ["10.0.0.40", "10.0.0.41"]
    r = await reserve(alice, ip="10.0.0.42", hostname="api.nowhere")
    assert (r.status_code, r.text) == (404, "No Domain matches the given query.")
    assert "10.0.0.42" not in sim.state.used_ips
    assert (
        await alice.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.40"})
    ).status_code == 204
    [record] = (await admin.get("dnsresources/", params={"fqdn": "api.maas"})).json()
    assert [a["ip"] for a in record["ip_addresses"]] == ["10.0.0.41"]


async def test_release_rules(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    assert (await reserve(alice, ip="10.0.0.40")).status_code == 200
    assert (await reserve(alice, ip="10.0.0.41")).status_code == 200
    r = await bob.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.40"})
    assert (r.status_code, r.text) == (
        400,
        "IP address 10.0.0.40 does not exist, is not the correct type of address, or does not belong to the "
        "requesting user.\nIf you are sure you want to release this address, use force=true as a MAAS "
        "administrator.",
    )
    r = await bob.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.40", "force": "true"})
    assert (r.status_code, r.text) == (403, "Force-releasing an IP address requires admin privileges.")
    r = await alice.post("ipaddresses/", params={"op": "release"}, data={})
    assert (r.status_code, r.text) == (400, "No provided ip!")
    assert (
        await alice.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.40"})
    ).status_code == 204
    assert "10.0.0.40" not in sim.state.used_ips
    r = await admin.post(
        "ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.41"}
    )  # not the admin's
    assert r.status_code == 400
    r = await admin.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.41", "force": "true"})
    assert r.status_code == 204
    r = await admin.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.42", "force": "true"})
    assert (r.status_code, r.text) == (400, "IP address 10.0.0.42 does not exist.")
    # force also takes a machine's address: the link goes
    r = await admin.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.10", "force": "true"})
    assert r.status_code == 204
    assert ips_of(sim, "static-1") == [None]
    assert (await reserve(alice, ip="10.0.0.10")).status_code == 200


async def test_listing_rules(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    assert (await reserve(alice, ip="10.0.0.40")).status_code == 200
    assert (await reserve(bob, ip="10.0.0.41")).status_code == 200
    assert [a["ip"] for a in (await alice.get("ipaddresses/")).json()] == ["10.0.0.40"]
    assert [a["ip"] for a in (await alice.get("ipaddresses/", params={"ip": "10.0.0.41"})).json()] == []
    assert (await admin.get("ipaddresses/")).json() == []
    r = await alice.get("ipaddresses/", params={"all": "true"})
    assert (r.status_code, r.text) == (403, "Listing all IP addresses requires admin privileges.")
    r = await alice.get("ipaddresses/", params={"owner": "bob"})
    assert (r.status_code, r.text) == (403, "Listing another user's IP addresses requires admin privileges.")
    r = await alice.get("ipaddresses/", params={"ip": "nope"})
    assert (r.status_code, r.text) == (400, "Parameter 'ip' must contain an IP address.")
    assert [a["ip"] for a in (await admin.get("ipaddresses/", params={"owner": "bob"})).json()] == [
        "10.0.0.41"
    ]
    everything = (await admin.get("ipaddresses/", params={"all": "true"})).json()
    by_ip = {
        a["ip"]: (a["alloc_type"], a["alloc_type_name"], (a["owner"] or {}).get("username"))
        for a in everything
    }
    assert by_ip == {
        "10.0.0.40": (4, "User reserved", "alice"),
        "10.0.0.41": (4, "User reserved", "bob"),
        "10.0.0.10": (1, "Static", None),
    }


# -- reservedips/ -----------------------------------------------------------------------------------------
async def test_reserved_ips_crud_and_permissions(admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    r = await pin(alice, ip="10.0.0.50", mac_address=MAC[1])
    assert (r.status_code, r.text) == (403, "This method is reserved for admin users.")
    r = await pin(admin, ip="10.0.0.50", mac_address=MAC[1].upper(), comment="cp")
    created = r.json()
    assert r.status_code == 200
    assert {k: created[k] for k in ("ip", "mac_address", "comment")} == {
        "ip": "10.0.0.50",
        "mac_address": MAC[1],
        "comment": "cp",
    }
    assert created["subnet"]["name"] == "lan"
    assert (await alice.get("reservedips/")).json() == [created]
    assert (await alice.get(f"reservedips/{created['id']}/")).json() == created
    one = f"reservedips/{created['id']}/"
    assert (await alice.put(one, data={"comment": "x"})).status_code == 403
    assert (await alice.delete(one)).status_code == 403
    r = await admin.put(one, data={"comment": "control plane"})
    assert r.json()["comment"] == "control plane"
    for change in ({"ip": "10.0.0.51"}, {"mac_address": MAC[2]}, {"subnet": "1"}):
        r = await admin.put(one, data={**change, "comment": "y"})
        assert (r.status_code, r.json()) == (
            400,
            {
                "__all__": [
                    "The ip, mac_address and the subnet of a reserved IP are immutable. Delete the entry "
                    "and recreate it."
                ]
            },
        )
    assert (await admin.delete(one)).status_code == 204
    r = await admin.get(one)
    assert (r.status_code, r.text) == (404, "No ReservedIP matches the given query.")


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        ({"ip": "10.0.0.50"}, {"mac_address": ["This field is required."]}),
        ({"mac_address": MAC[1]}, {"ip": ["This field is required."]}),
        ({"ip": "10.0.0.50", "mac_address": "zz"}, {"mac_address": ["'zz' is not a valid MAC address."]}),
        (
            {"ip": "10.0.0.150", "mac_address": MAC[1]},
            {"ip": ["The reserved IP 10.0.0.150 must be outside the dynamic range 10.0.0.100 - 10.0.0.199."]},
        ),
        (
            {"ip": "10.1.0.5", "mac_address": MAC[1], "subnet": "lan"},
            {"ip": ["10.1.0.5 is not part of the subnet."]},
        ),
        (
            {"ip": "192.0.2.5", "mac_address": MAC[1]},
            {"subnet": ["There is no subnet for 192.0.2.5. Create the subnet and try again."]},
        ),
        (
            {"ip": "10.0.0.10", "mac_address": MAC[1]},
            {"ip": ["The ip 10.0.0.10 is already in use by another machine."]},
        ),
        ({"ip": "10.0.0.0", "mac_address": MAC[1]}, {"ip": ["The network address cannot be a reserved IP."]}),
    ],
)
async def test_reserved_ip_form_errors(
    admin: httpx.AsyncClient, data: dict[str, str], errors: dict[str, list[str]]
) -> None:
    r = await pin(admin, **data)
    assert (r.status_code, r.json()) == (400, errors)


async def test_reserved_ip_uniqueness(admin: httpx.AsyncClient) -> None:
    assert (await pin(admin, ip="10.0.0.50", mac_address=MAC[1])).status_code == 200
    r = await pin(admin, ip="10.0.0.50", mac_address=MAC[2])
    assert r.json() == {"ip": ["Reserved IP with this IP address already exists."]}
    r = await pin(admin, ip="10.0.0.51", mac_address=MAC[1])
    assert r.json() == {"__all__": ["Reserved IP with this MAC address and Subnet already exists."]}
    assert (await pin(admin, ip="10.1.0.51", mac_address=MAC[1])).status_code == 200  # another subnet
    # the machine holding an address may pin it to its own MAC
    assert (await pin(admin, ip="10.0.0.10", mac_address=MAC[4])).status_code == 200


async def test_a_pinned_mac_gets_its_address_on_every_deploy(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await pin(admin, ip="10.0.0.5", mac_address=MAC[1])).status_code == 200  # inside a reserved range
    assert (await pin(admin, ip="10.0.0.11", mac_address="02:00:00:00:00:99")).status_code == 200
    for _ in range(2):
        for host in ("auto-1", "auto-2"):
            assert (await deploy(admin, sid(sim, host))).status_code == 200
            assert (await settle(admin, sid(sim, host)))["status_name"] == "Deployed"
        assert ips_of(sim, "auto-1") == ["10.0.0.5"]
        assert ips_of(sim, "auto-2") == ["10.0.0.12"]  # .11 is pinned to another MAC
        for host in ("auto-1", "auto-2"):
            assert (
                await admin.post(f"machines/{sid(sim, host)}/", params={"op": "release"})
            ).status_code == 200
            assert (await settle(admin, sid(sim, host)))["status_name"] == "Ready"
        assert ips_of(sim, "auto-1") == [None]
    assert len((await admin.get("reservedips/")).json()) == 2  # the entries survive release


async def test_a_pin_on_a_subnet_the_nic_has_no_auto_link_on_fails_the_deploy(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await pin(admin, ip="10.1.0.50", mac_address=MAC[1])).status_code == 200
    r = await deploy(admin, sid(sim, "auto-1"))
    assert (r.status_code, r.text) == (
        404,
        f"This interface {MAC[1]} has a reserved ip 10.1.0.50 but it does not have a link to that subnet",
    )
    machine = await settle(admin, sid(sim, "auto-1"))
    assert (machine["status_name"], machine["owner"]) == ("Allocated", "admin")
    assert ips_of(sim, "auto-1") == [None]


async def test_a_pinned_address_taken_by_a_reservation_fails_the_deploy(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    assert (await reserve(admin, ip="10.0.0.50")).status_code == 200
    assert (await pin(admin, ip="10.0.0.50", mac_address=MAC[1])).status_code == 400  # in use, not by MAC[1]
    assert (
        await admin.post("ipaddresses/", params={"op": "release"}, data={"ip": "10.0.0.50"})
    ).status_code == 204
    assert (await pin(admin, ip="10.0.0.50", mac_address=MAC[1])).status_code == 200
    assert (await reserve(admin, ip="10.0.0.50")).status_code == 200  # a reservation ignores pins
    r = await deploy(admin, sid(sim, "auto-1"))
    assert (r.status_code, r.text) == (404, "The IP address 10.0.0.50 is already in use.")


async def test_linking_a_subnet_needs_admin_even_for_the_owner(
    sim: Simulator, alice: httpx.AsyncClient
) -> None:
    # get_interface_or_404(..., NodePermission.admin): owning the machine does not give "admin" on it
    r = await alice.post("machines/", params={"op": "allocate"}, data={"name": "free-1"})
    assert (r.status_code, r.json()["owner"]) == (200, "alice")
    r = await link(alice, sim, "free-1", mode="static", subnet="lan")
    assert r.status_code == 403
    r = await alice.post(
        f"nodes/{sid(sim, 'free-1')}/interfaces/eth0/", params={"op": "unlink_subnet"}, data={"id": "1"}
    )
    assert r.status_code == 403


async def test_a_dns_record_reserves_its_new_addresses(sim: Simulator, admin: httpx.AsyncClient) -> None:
    # DNSResourceForm.save: get_or_create a USER_RESERVED row per address; it then blocks a STATIC link
    r = await admin.post("dnsresources/", data={"fqdn": "api.maas", "ip_addresses": "10.0.0.40 10.0.0.10"})
    assert r.status_code == 200
    listed = (await admin.get("ipaddresses/")).json()
    assert [(a["ip"], a["alloc_type"], a["owner"]["username"]) for a in listed] == [("10.0.0.40", 4, "admin")]
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.40")
    assert (r.status_code, r.text) == (404, "IP address is already in use.")
    # deleting the record deletes the rows only it held (static-1's 10.0.0.10 stays with the machine)
    assert (await admin.delete(f"dnsresources/{r_id(sim)}/")).status_code == 204
    assert (await admin.get("ipaddresses/")).json() == []
    assert "10.0.0.10" in sim.state.used_ips
    r = await link(admin, sim, "free-1", mode="static", subnet="lan", ip_address="10.0.0.40")
    assert r.status_code == 200


def r_id(sim: Simulator) -> int:
    return next(iter(sim.state.dns_resources))
