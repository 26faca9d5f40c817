"""The client's address calls (``ipaddresses/``, ``reservedips/``, ``ipranges/``, ``link_subnet``) against the
simulator: typed answers, and MAAS's refusals as the right class with MAAS's own words in the message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from maas_fakes import FakeMaas, form_of, text

from capmaas.maas import (
    ApiError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    MaasClient,
    NotFoundError,
    ReservedIp,
    ReservedIpAddress,
    ServiceUnavailableError,
)
from capmaas_dev.simulator import Inventory, Simulator

ALICE = "alice00000000000000:alicetoken00000000:alicesecret000000000000000000000"
MAC1, MAC2 = "52:54:00:00:00:01", "52:54:00:00:00:02"
INVENTORY: dict[str, Any] = {
    "subnets": [
        {
            "cidr": "10.0.0.0/24",
            "name": "lan",
            "gateway_ip": "10.0.0.1",
            "ranges": [
                {"type": "reserved", "start": "10.0.0.2", "end": "10.0.0.9", "comment": "infra"},
                {"type": "dynamic", "start": "10.0.0.100", "end": "10.0.0.199"},
            ],
        },
        {"cidr": "10.1.0.0/30", "name": "p2p"},
    ],
    "users": [{"username": "alice", "api_key": ALICE}],
    "machines": [
        {"hostname": "m1", "interfaces": [{"name": "eth0", "mac": MAC1, "subnet": "lan"}]},
        {"hostname": "m2", "interfaces": [{"name": "eth0", "mac": MAC2}]},
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


def sid(sim: Simulator, hostname: str) -> str:
    return sim.state.by_hostname[hostname].system_id


async def test_reserve_list_release(alice: MaasClient, admin: MaasClient) -> None:
    vip = await alice.ip_addresses.reserve(subnet="lan", hostname="api")
    assert isinstance(vip, ReservedIpAddress)
    assert (vip.ip, vip.alloc_type, vip.alloc_type_name, vip.owner) == (
        "10.0.0.10",
        4,
        "User reserved",
        "alice",
    )
    assert vip.subnet is not None
    assert vip.subnet.cidr == "10.0.0.0/24"
    assert await alice.ip_addresses.list() == [vip]
    assert await alice.ip_addresses.list(ip="10.0.0.11") == []
    assert [a.ip for a in await admin.ip_addresses.list(all=True)] == ["10.0.0.10"]
    assert (await admin.dns_resources.list(fqdn="api.maas"))[0].ips == ("10.0.0.10",)
    explicit = await alice.ip_addresses.reserve(ip="10.0.0.50")
    assert explicit.ip == "10.0.0.50"
    await alice.ip_addresses.release("10.0.0.50")
    await admin.ip_addresses.release("10.0.0.10", force=True)
    assert await alice.ip_addresses.list() == []


@pytest.mark.parametrize(
    ("kwargs", "cls", "text"),
    [
        ({"ip": "10.0.0.150"}, ForbiddenError, "IP address 10.0.0.150 belongs to an existing dynamic range."),
        (
            {"ip": "10.0.0.5"},
            NotFoundError,
            "10.0.0.5 is within the reserved range from 10.0.0.2 to 10.0.0.9",
        ),
        ({"ip": "192.0.2.1"}, BadRequestError, "No known subnet for IP address: 192.0.2.1."),
        ({}, BadRequestError, "Must supply either the 'subnet' or the 'ip' parameter."),
    ],
)
async def test_reserve_refusals_carry_maas_words(
    alice: MaasClient, kwargs: dict[str, str], cls: type[Exception], text: str
) -> None:
    with pytest.raises(cls) as info:
        await alice.ip_addresses.reserve(**kwargs)
    assert text in str(info.value)
    assert type(info.value) is cls


async def test_an_address_in_use_and_a_full_subnet(alice: MaasClient) -> None:
    await alice.ip_addresses.reserve(ip="10.0.0.20")
    with pytest.raises(NotFoundError, match=r"The IP address 10\.0\.0\.20 is already in use\."):
        await alice.ip_addresses.reserve(ip="10.0.0.20")
    await alice.ip_addresses.reserve(subnet="p2p")
    await alice.ip_addresses.reserve(subnet="p2p")
    with pytest.raises(ServiceUnavailableError, match=r"No more IPs available in subnet: 10\.1\.0\.0/30\."):
        await alice.ip_addresses.reserve(subnet="p2p")


async def test_release_and_list_refusals(alice: MaasClient, admin: MaasClient) -> None:
    await admin.ip_addresses.reserve(ip="10.0.0.20")
    with pytest.raises(BadRequestError, match="does not belong to the requesting user"):
        await alice.ip_addresses.release("10.0.0.20")
    with pytest.raises(ForbiddenError, match="Force-releasing an IP address requires admin privileges"):
        await alice.ip_addresses.release("10.0.0.20", force=True)
    with pytest.raises(ForbiddenError, match="Listing all IP addresses requires admin privileges"):
        await alice.ip_addresses.list(all=True)


async def test_reserved_ips_crud(sim: Simulator, admin: MaasClient, alice: MaasClient) -> None:
    pinned = await admin.reserved_ips.create(ip="10.0.0.30", mac_address=MAC1, comment="cp-0")
    assert isinstance(pinned, ReservedIp)
    assert (pinned.ip, pinned.mac_address, pinned.comment) == ("10.0.0.30", MAC1, "cp-0")
    assert pinned.subnet is not None
    assert pinned.subnet.name == "lan"
    assert await alice.reserved_ips.list() == [pinned]
    assert await alice.reserved_ips.get(pinned.id) == pinned
    with pytest.raises(ForbiddenError, match="This method is reserved for admin users"):
        await alice.reserved_ips.create(ip="10.0.0.31", mac_address=MAC2)
    with pytest.raises(BadRequestError) as info:
        await admin.reserved_ips.create(ip="10.0.0.30", mac_address=MAC2)
    assert info.value.field_errors == {"ip": ("Reserved IP with this IP address already exists.",)}
    assert "Reserved IP with this IP address already exists." in str(info.value)
    with pytest.raises(BadRequestError) as info:
        await admin.reserved_ips.create(ip="10.0.0.150", mac_address=MAC2, subnet="lan")
    assert "must be outside the dynamic range 10.0.0.100 - 10.0.0.199" in str(info.value)
    # the pin is what deployment gives the NIC
    machine = await admin.machines.deploy(sid(sim, "m1"))
    deployed = await admin.machines.get(machine.system_id)
    assert deployed.ip_addresses == ("10.0.0.30",)
    await admin.reserved_ips.delete(pinned.id)
    with pytest.raises(NotFoundError):
        await admin.reserved_ips.get(pinned.id)


async def test_ip_ranges(alice: MaasClient) -> None:
    ranges = await alice.ip_ranges.list()
    assert [(r.type, r.start_ip, r.end_ip, r.comment) for r in ranges] == [
        ("reserved", "10.0.0.2", "10.0.0.9", "infra"),
        ("dynamic", "10.0.0.100", "10.0.0.199", ""),
    ]
    assert {r.subnet.cidr for r in ranges if r.subnet} == {"10.0.0.0/24"}


async def test_link_and_unlink_subnet(sim: Simulator, admin: MaasClient) -> None:
    m2 = sid(sim, "m2")
    nic = await admin.interfaces.link_subnet(m2, "eth0", mode="static", subnet="lan", ip_address="10.0.0.40")
    [link] = nic.links
    assert (link.mode, link.ip_address) == ("static", "10.0.0.40")
    with pytest.raises(NotFoundError, match=r"IP address is already in use\."):
        await admin.interfaces.link_subnet(m2, nic.id, mode="static", subnet="lan", ip_address="10.0.0.40")
    with pytest.raises(BadRequestError) as info:
        await admin.interfaces.link_subnet(m2, "eth0", mode="static", subnet="lan", ip_address="10.0.0.120")
    assert info.value.field_errors == {
        "ip_address": ("IP address is inside a dynamic range 10.0.0.100 to 10.0.0.199.",)
    }
    assert "IP address is inside a dynamic range 10.0.0.100 to 10.0.0.199." in str(info.value)
    await admin.reserved_ips.create(ip="10.0.0.60", mac_address=MAC1)
    with pytest.raises(
        ConflictError, match=f"The static IP 10.0.0.60 is already reserved for the MAC address {MAC1}"
    ):
        await admin.interfaces.link_subnet(m2, "eth0", mode="static", subnet="lan", ip_address="10.0.0.60")
    unlinked = await admin.interfaces.unlink_subnet(m2, "eth0", link.id)
    assert unlinked.links == ()
    picked = await admin.interfaces.link_subnet(m2, "eth0", mode="static", subnet=1)
    assert picked.links[0].ip_address == "10.0.0.10"  # past the gateway and the reserved range
    auto = await admin.interfaces.link_subnet(m2, "eth0", mode="auto", subnet="lan", force=True)
    assert [(lk.mode, lk.ip_address) for lk in auto.links] == [("auto", None)]


@pytest.mark.parametrize(
    ("status", "body", "quoted"),
    [
        (404, "IP address is already in use.", "IP address is already in use."),
        (404, "The IP address 10.0.0.5 is already in use.", "The IP address 10.0.0.5 is already in use."),
        (409, "The static IP 10.0.0.5 is already reserved for the MAC address 52:54:00:00:00:01.", None),
        (400, "IP address 10.0.0.5 does not exist.", "IP address 10.0.0.5 does not exist."),
        # a server that is not MAAS cannot pass free text through a phrasing's placeholders or around it
        (404, "The IP address <a href=//evil> is already in use.", ""),
        (404, "IP address is already in use. Call +1 555 0100 to fix.", ""),
        (404, "The IP address 10.0.0.5 is already in use.\n<script>alert(1)</script>", ""),
        (503, "No more IPs available in subnet: everything.", ""),
    ],
)
async def test_only_maas_own_address_texts_reach_the_message(
    client: MaasClient, fake: FakeMaas, status: int, body: str, quoted: str | None
) -> None:
    fake.route("POST", "ipaddresses/", "reserve", text(status, body))
    with pytest.raises(ApiError) as info:
        await client.ip_addresses.reserve(subnet="lan")
    exc = info.value
    expected = body if quoted is None else quoted
    assert exc.body == body
    if expected:
        assert str(exc).endswith(f": {expected}")
        assert exc.maas_text == expected
    else:
        assert body not in str(exc)
        assert exc.maas_text is None


async def test_forms_sent(client: MaasClient, fake: FakeMaas) -> None:
    reply = {"ip": "10.0.0.9", "alloc_type": 4, "owner": {"username": "a"}, "subnet": None}
    fake.route("POST", "ipaddresses/", "reserve", httpx.Response(200, json=reply))
    fake.route("POST", "ipaddresses/", "release", text(204))
    await client.ip_addresses.reserve(ip="10.0.0.9", hostname="api.maas", mac="02:00:00:00:00:01")
    assert form_of(fake.last) == [("ip", "10.0.0.9"), ("hostname", "api.maas"), ("mac", "02:00:00:00:00:01")]
    await client.ip_addresses.release("10.0.0.9", force=True)
    assert form_of(fake.last) == [("ip", "10.0.0.9"), ("force", "true")]
