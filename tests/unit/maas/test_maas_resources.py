"""Zones, pools, tags, DNS, domains, subnets, boot resources, users, version: paths, forms and models."""

from __future__ import annotations

from maas_fakes import FakeMaas, form_of, ok, query_of, text

from capmaas.maas import MaasClient


async def test_version_and_whoami(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "version/", None, ok({"version": "3.7.3", "subversion": "", "capabilities": ["a"]}))
    fake.route("GET", "users/", "whoami", ok({"username": "admin", "email": "a@b", "is_superuser": True}))
    assert (await client.version()).version == "3.7.3"
    me = await client.whoami()
    assert me.username == "admin"
    assert me.is_superuser is True


async def test_users_list_and_get(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "users/", None, ok([{"username": "a"}, {"username": "b"}]))
    fake.route("GET", "users/a/", None, ok({"username": "a"}))
    assert [u.username for u in await client.users.list()] == ["a", "b"]
    assert (await client.users.get("a")).username == "a"


async def test_zones_and_pools(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "zones/", None, ok([{"id": 1, "name": "default", "description": ""}]))
    fake.route("GET", "zones/z1/", None, ok({"id": 2, "name": "z1"}))
    fake.route(
        "GET", "resourcepools/", None, ok([{"id": 0, "name": "default", "description": "Default pool"}])
    )
    fake.route("GET", "resourcepool/0/", None, ok({"id": 0, "name": "default"}))
    assert [z.name for z in await client.zones.list()] == ["default"]
    assert (await client.zones.get("z1")).id == 2
    [pool] = await client.pools.list()
    assert pool.description == "Default pool"
    assert (await client.pools.get(0)).name == "default"


async def test_tags(client: MaasClient, fake: FakeMaas) -> None:
    tag = {"name": "gpu", "definition": "", "comment": "c", "kernel_opts": None}
    fake.route("GET", "tags/", None, ok([tag]))
    fake.route("GET", "tags/gpu/", None, ok(tag))
    fake.route("POST", "tags/", None, ok(tag))
    fake.route("POST", "tags/gpu/", "update_nodes", ok({"added": 2, "removed": 1}))
    assert [t.name for t in await client.tags.list()] == ["gpu"]
    assert (await client.tags.get("gpu")).comment == "c"
    await client.tags.create("gpu", comment="c", definition="//node", kernel_opts="quiet")
    assert query_of(fake.last) == []
    assert form_of(fake.last) == [
        ("name", "gpu"),
        ("comment", "c"),
        ("definition", "//node"),
        ("kernel_opts", "quiet"),
    ]
    await client.tags.create("gpu")
    assert form_of(fake.last) == [("name", "gpu")]
    result = await client.tags.update_nodes("gpu", add=["a", "b"], remove=["c"], definition="")
    assert (result.added, result.removed) == (2, 1)
    assert form_of(fake.last) == [("add", "a"), ("add", "b"), ("remove", "c"), ("definition", "")]


async def test_dns_resources(client: MaasClient, fake: FakeMaas) -> None:
    record = {
        "id": 5,
        "fqdn": "api.c1.maas",
        "address_ttl": None,
        "ip_addresses": [{"ip": "10.0.0.5", "alloc_type": 4}, {"ip": "10.0.0.6"}],
        "resource_records": [],
    }
    fake.route("GET", "dnsresources/", None, ok([record]))
    fake.route("POST", "dnsresources/", None, ok(record))
    fake.route("PUT", "dnsresources/5/", None, ok(record))
    fake.route("DELETE", "dnsresources/5/", None, text(204))
    [listed] = await client.dns_resources.list(fqdn="api.c1.maas", domain="maas")
    assert listed.ips == ("10.0.0.5", "10.0.0.6")
    assert query_of(fake.last) == [("fqdn", "api.c1.maas"), ("domain", "maas")]
    await client.dns_resources.create("api.c1.maas", ["10.0.0.5", "10.0.0.6"], address_ttl=30)
    assert form_of(fake.last) == [
        ("fqdn", "api.c1.maas"),
        ("ip_addresses", "10.0.0.5 10.0.0.6"),
        ("address_ttl", "30"),
    ]
    await client.dns_resources.create("api.c1.maas", ["10.0.0.5"])
    assert form_of(fake.last) == [("fqdn", "api.c1.maas"), ("ip_addresses", "10.0.0.5")]
    await client.dns_resources.update(5, ["10.0.0.7"])
    assert fake.last.method == "PUT"
    assert form_of(fake.last) == [("ip_addresses", "10.0.0.7")]
    await client.dns_resources.delete(5)
    assert fake.last.method == "DELETE"


async def test_domains_subnets_boot_resources(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "domains/", None, ok([{"id": 0, "name": "maas", "ttl": None, "is_default": True}]))
    fake.route(
        "GET",
        "subnets/",
        None,
        ok(
            [
                {
                    "id": 1,
                    "name": "10.0.0.0/24",
                    "cidr": "10.0.0.0/24",
                    "vlan": {"id": 5001, "vid": 0, "fabric": "fabric-0"},
                    "gateway_ip": "10.0.0.1",
                    "dns_servers": [],
                    "space": "undefined",
                    "rdns_mode": 2,
                }
            ]
        ),
    )
    boot = {
        "id": 9,
        "type": "Synced",
        "name": "ubuntu/jammy",
        "architecture": "amd64/ga-22.04",
        "subarches": "x",
    }
    fake.route("GET", "boot-resources/", None, ok([boot]))
    [domain] = await client.domains.list()
    assert domain.is_default is True
    [subnet] = await client.subnets.list()
    assert subnet.vlan is not None
    assert subnet.vlan.fabric == "fabric-0"
    assert subnet.gateway_ip == "10.0.0.1"
    [image] = await client.boot_resources.list()
    assert image.name == "ubuntu/jammy"
    assert query_of(fake.last) == []
    await client.boot_resources.list(type="uploaded")
    assert query_of(fake.last) == [("type", "uploaded")]
