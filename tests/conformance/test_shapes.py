"""Every simulator answer of a resource has every key MAAS 3.7's own API examples have, with their JSON type.

The simulator is driven through the states and operations whose answers carry each resource (lists, reads,
allocate, deploy, release, compose, bridge, link, DNS, devices, tokens), so nested arrays (links, partitions,
storage pools, resource records) are non-empty and their element keys are checked too.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from shapes import EXCEPTIONS, NOT_MODELLED, NOT_SERVED, check, load_table, match, unexercised

from capmaas_dev.simulator import LXD_INVENTORY, Inventory, Simulator

ADMIN_KEY = "adminconsumer00000:admintoken00000000:adminsecret000000000000000000000"
BASE = "http://maas.test/MAAS/api/2.0/"


class PlainText(httpx.Auth):
    def __init__(self) -> None:
        self.n = 0

    def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
        consumer, token, secret = ADMIN_KEY.split(":")
        self.n += 1
        request.headers["Authorization"] = (
            f'OAuth realm="OAuth", oauth_nonce="shape{self.n}", oauth_timestamp="{_now()}", '
            f'oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="{consumer}", '
            f'oauth_token="{token}", oauth_signature="%26{secret}"'
        )
        yield request


def _now() -> int:
    import time

    return int(time.time())


def rich_simulator() -> Simulator:
    inventory = Inventory.from_yaml(LXD_INVENTORY)
    inventory.data = {
        **inventory.data,
        "subnets": [
            {**inventory.data["subnets"][0], "dns_servers": ["10.20.0.2"]},
            *inventory.data["subnets"][1:],
            {
                "cidr": "10.40.0.0/24",
                "name": "storage",
                "vid": 40,
                "space": "storage",
                "gateway_ip": "10.40.0.1",
                "dns_servers": ["10.40.0.2"],
                "ranges": [
                    {"type": "dynamic", "start": "10.40.0.100", "end": "10.40.0.199"},
                    {"type": "reserved", "start": "10.40.0.3", "end": "10.40.0.9", "comment": "infra"},
                ],
            },
        ],
        "boot_resources": [
            *inventory.data["boot_resources"],
            {"name": "custom-image", "architecture": "amd64/generic", "type": "uploaded", "title": "Custom"},
        ],
        "machines": [
            {**m, "devices": [GPU, {**GPU, "vendor_id": "046d", "product_id": "c52b", "bus": "USB"}]}
            if m["hostname"] == "metal-1"
            else {
                **m,
                "disks": [*m["disks"], {"name": "sdb", "size": "480G"}],
                "interfaces": [*m["interfaces"], {"name": "eth1"}],
            }
            if m["hostname"] == "metal-2"
            else m
            for m in inventory.data["machines"]
        ],
    }
    return Simulator(inventory, api_key=ADMIN_KEY)


GPU = {
    "vendor_id": "10de",
    "product_id": "2230",
    "vendor_name": "NVIDIA Corporation",
    "product_name": "GA102GL [RTX A6000]",
    "commissioning_driver": "nvidia",
    "hardware_type": "gpu",
}


async def collect(sim: Simulator) -> dict[str, list[Any]]:
    """The simulator's answers per resource of the shape table."""
    out: dict[str, list[Any]] = {}

    def add(resource: str, body: Any) -> None:
        out.setdefault(resource, []).extend(body if isinstance(body, list) else [body])

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=sim.app), base_url=BASE, auth=PlainText()
    ) as c:

        async def ok(method: str, url: str, **kw: Any) -> Any:
            r = await c.request(method, url, **kw)
            assert r.status_code == 200, f"{method} {url}: {r.status_code} {r.text}"
            return r.json()

        metal = sim.state.by_hostname["metal-1"].system_id
        # machines in several states, VM host and composed VM, a bridge with a static link
        allocated = await ok(
            "POST", "machines/", params={"op": "allocate"}, data={"name": "metal-2", "storage": "root:100"}
        )
        add("machine", allocated)
        add("machine", await ok("POST", f"machines/{metal}/", params={"op": "deploy"}))
        composed = await ok(
            "POST",
            "vm-hosts/1/",
            params={"op": "compose"},
            data={"storage": "root:20(fast)", "skip_commissioning": "true"},
        )
        add("vm_host_compose", composed)
        bridge = await ok(
            "POST",
            f"nodes/{allocated['system_id']}/interfaces/",
            params={"op": "create_bridge"},
            data={"parent": "eth0"},
        )
        add("interface", bridge)
        metal3 = sim.state.by_hostname["metal-3"].system_id
        br = await ok(
            "POST",
            f"nodes/{metal3}/interfaces/",
            params={"op": "create_bridge"},
            data={"parent": "eth0", "name": "br0"},
        )
        add(
            "interface",
            await ok(
                "POST",
                f"nodes/{metal3}/interfaces/{br['id']}/",
                params={"op": "link_subnet"},
                data={"mode": "static", "subnet": "2"},
            ),
        )
        # network and storage intent on the allocated machine: a bond, a VLAN on it with an AUTO link, a
        # whole disk formatted and mounted
        node = f"nodes/{allocated['system_id']}"
        eth1 = next(i for i in await ok("GET", f"{node}/interfaces/") if i["name"] == "eth1")
        bond = await ok("POST", f"{node}/interfaces/", params={"op": "create_bond"},
                        data={"name": "bond0", "parents": eth1["id"]})  # fmt: skip
        add("interface", bond)
        vlan = await ok("POST", f"{node}/interfaces/", params={"op": "create_vlan"},
                        data={"parent": bond["id"], "vlan": "5040"})  # fmt: skip
        add("interface", vlan)
        add("interface", await ok("POST", f"{node}/interfaces/{vlan['id']}/", params={"op": "link_subnet"},
                                  data={"mode": "auto", "subnet": "storage"}))  # fmt: skip
        sdb = next(d for d in await ok("GET", f"{node}/blockdevices/") if d["name"] == "sdb")
        disk = f"{node}/blockdevices/{sdb['id']}/"
        add("block_device", await ok("POST", disk, params={"op": "format"}, data={"fstype": "ext4"}))
        add("block_device", await ok("POST", disk, params={"op": "mount"}, data={"mount_point": "/srv"}))
        add("machine", await ok("GET", f"machines/{allocated['system_id']}/"))
        add("block_device", await ok("POST", disk, params={"op": "unmount"}))
        add("block_device", await ok("POST", disk, params={"op": "unformat"}))
        await ok("POST", disk, params={"op": "format"}, data={"fstype": "xfs", "label": "data"})
        add("machine", await ok("GET", "machines/"))
        for sid in sim.state.machines:
            add("machine", await ok("GET", f"machines/{sid}/"))
            add("interface", await ok("GET", f"nodes/{sid}/interfaces/"))
            add("block_device", await ok("GET", f"nodes/{sid}/blockdevices/"))
            for device in await ok("GET", f"nodes/{sid}/devices/"):
                add("node_device", device)
                add("node_device", await ok("GET", f"nodes/{sid}/devices/{device['id']}/"))
            add("power_state", await ok("GET", f"machines/{sid}/", params={"op": "query_power_state"}))
        add("machine", await ok("POST", f"machines/{allocated['system_id']}/", params={"op": "release"}))
        # VM hosts
        add("vm_host", await ok("GET", "vm-hosts/"))
        add("vm_host", await ok("GET", "pods/1/"))
        add("vm_host", await ok("POST", "vm-hosts/1/", params={"op": "add_tag"}, data={"tag": "x"}))
        add("vm_host", await ok("PUT", "vm-hosts/2/", data={"cpu_over_commit_ratio": "2"}))
        # zones, pools, tags, users, version, boot resources, subnets, domains
        add("tag", await ok("GET", "tags/"))
        add("tag", await ok("POST", "tags/", data={"name": "shape", "comment": "c"}))
        add("tag", await ok("PUT", "tags/shape/", data={"comment": "d"}))
        add(
            "tag_update_nodes",
            await ok("POST", "tags/shape/", params={"op": "update_nodes"}, data={"add": metal}),
        )
        add("tag_rebuild", await ok("POST", "tags/shape/", params={"op": "rebuild"}))
        add("user", await ok("GET", "users/"))
        add("user", await ok("GET", "users/", params={"op": "whoami"}))
        add("version", await ok("GET", "version/"))
        add("boot_resource", await ok("GET", "boot-resources/"))
        add("boot_resource_detail", await ok("GET", "boot-resources/1/"))
        add("subnet", await ok("GET", "subnets/"))
        add("subnet", await ok("GET", "subnets/1/"))
        add("domain", await ok("POST", "domains/", data={"name": "shape.example"}))
        add("domain", await ok("GET", "domains/"))
        # DNS: an explicit resource with an address and a record, plus implicit node records
        dns = await ok("POST", "dnsresources/", data={"fqdn": "api.maas", "ip_addresses": "10.20.0.200"})
        add(
            "dns_resource_record",
            await ok(
                "POST", "dnsresourcerecords/", data={"fqdn": "www.maas", "rrtype": "CNAME", "rrdata": "api"}
            ),
        )
        add("dns_resource_record", await ok("GET", "dnsresourcerecords/"))
        add("dns_resource", await ok("GET", f"dnsresources/{dns['id']}/"))
        listed = await ok("GET", "dnsresources/", params={"all": "true"})
        add("dns_resource", listed)
        add("dns_resource_record", [rr for r in listed if r["id"] != -1 for rr in r["resource_records"]])
        # addresses: a reservation (by subnet and by address) and the subnets' IP ranges
        add(
            "ip_address",
            await ok("POST", "ipaddresses/", params={"op": "reserve"}, data={"subnet": "storage"}),
        )
        add(
            "ip_address",
            await ok("POST", "ipaddresses/", params={"op": "reserve"}, data={"ip": "10.40.0.60"}),
        )
        add("ip_address", await ok("GET", "ipaddresses/"))
        ranges = await ok("GET", "ipranges/")
        add("ip_range", ranges)
        add("ip_range", await ok("GET", f"ipranges/{ranges[0]['id']}/"))
        # networks
        add("fabric", await ok("GET", "fabrics/"))
        add("vlan", await ok("GET", "fabrics/0/vlans/"))
        add("space", await ok("GET", "spaces/"))
        # devices and account
        add(
            "device",
            await ok("POST", "devices/", data={"mac_addresses": "02:00:00:00:00:09", "hostname": "cam"}),
        )
        add("device", await ok("GET", "devices/"))
        add("account_token", await ok("GET", "account/", params={"op": "list_authorisation_tokens"}))
        add(
            "account_new_token",
            await ok("POST", "account/", params={"op": "create_authorisation_token"}, data={"name": "n"}),
        )
    return out


@pytest.fixture(scope="module")
def answers() -> dict[str, list[Any]]:
    import asyncio

    return asyncio.run(collect(rich_simulator()))


TABLE = load_table()
RESOURCES = sorted(r for r in TABLE if not r.startswith("_") and r not in NOT_SERVED)


@pytest.mark.parametrize("resource", RESOURCES)
def test_every_answer_has_maas_keys_and_types(resource: str, answers: dict[str, list[Any]]) -> None:
    assert answers.get(resource), f"no simulator answer collected for {resource}"
    report = check(resource, TABLE, answers[resource])
    assert report.problems == [], "\n".join(report.problems[:40])


@pytest.mark.parametrize("resource", RESOURCES)
def test_every_table_path_is_exercised(resource: str, answers: dict[str, list[Any]]) -> None:
    """A path no answer reaches would pass vacuously: each one is reached, or listed as not modelled."""
    report = check(resource, TABLE, answers[resource])
    assert unexercised(resource, TABLE, report) == []


def test_not_modelled_globs_still_match_table_paths() -> None:
    """A stale NOT_MODELLED entry (matching nothing) would hide nothing but mislead the figures."""
    for resource, globs in NOT_MODELLED.items():
        for glob in globs:
            assert any(match(p, glob) for p in TABLE[resource]["fields"]), (resource, glob)
    for resource, glob in EXCEPTIONS:
        assert any(match(p, glob) for p in TABLE[resource]["fields"]), (resource, glob)


def test_checker_catches_a_missing_key_a_wrong_type_and_a_stray_null() -> None:
    """The checker itself fails on what it must fail on (so a pass means something)."""
    table = {
        "thing": {
            "maps": [],
            "fields": {
                "id": {"types": ["integer"], "required": True},
                "size": {"types": ["float"], "required": True},
                "pool": {"types": ["string"], "required": True},
                "uuid": {"types": ["null"], "required": True},
                "links": {"types": ["array"], "required": True},
                "links[]": {"types": ["object"], "required": True},
                "links[].mode": {"types": ["string"], "required": True},
            },
        }
    }
    good = {"id": 1, "size": 3, "pool": "p", "uuid": "u", "links": [{"mode": "auto"}]}
    assert check("thing", table, [good]).problems == []
    bad = {"id": "1", "size": 3.5, "pool": None, "links": [{}]}
    problems = check("thing", table, [bad]).problems
    assert any("id is string" in p for p in problems)
    assert any("pool is null" in p for p in problems)
    assert any("uuid is missing" in p for p in problems)
    assert any("links[].mode is missing" in p for p in problems)
    assert check("thing", table, [{**good, "id": 1.0}]).problems != []  # a float where MAAS has an integer
