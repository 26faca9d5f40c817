"""Zones, pools, tags, domains, DNS resources, subnets, boot resources, users, version, describe, debug."""

from __future__ import annotations

import json

import httpx
import pytest

from capmaas_dev.simulator import Simulator

AUTH_METHODS = ("plaintext", "hmac")  # every admin/alice/ladmin test runs with both signatures


async def test_zones_crud(admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    assert [z["name"] for z in (await admin.get("zones/")).json()] == ["az1", "az2", "az3", "default"]
    r = await admin.post("zones/", data={"name": "az4", "description": "new"})
    assert r.json() == {
        "id": 5,
        "name": "az4",
        "description": "new",
        "resource_uri": "/MAAS/api/2.0/zones/az4/",
    }
    r = await admin.post("zones/", data={"name": "az4"})
    assert r.json() == {"name": ["Physical zone with this Name already exists."]}
    assert (await admin.post("zones/", data={})).status_code == 400
    assert (await admin.get("zones/az4/")).json()["description"] == "new"
    r = await admin.put("zones/az4/", data={"name": "az5", "description": "moved"})
    assert r.json()["resource_uri"] == "/MAAS/api/2.0/zones/az5/"
    assert (await admin.put("zones/az5/", data={"name": "az1"})).status_code == 400
    assert (await alice.put("zones/az5/", data={"name": "x"})).status_code == 403
    assert (await alice.delete("zones/az5/")).status_code == 403
    r = await admin.get("zones/nope/")
    assert (r.status_code, r.text) == (404, "No Zone matches the given query.")
    r = await admin.delete("zones/default/")
    assert (r.status_code, r.text) == (400, "This zone is the default zone, it cannot be deleted.")
    assert (await admin.delete("zones/az1/")).status_code == 204
    machines = (await admin.get("machines/", params={"zone": "default"})).json()
    assert "cp-1" in [m["hostname"] for m in machines]


async def test_pools_crud(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    assert [p["name"] for p in (await admin.get("resourcepools/")).json()] == [
        "control-plane",
        "default",
        "workers",
    ]
    assert (await admin.get("resourcepool/0/")).json() == {
        "id": 0,
        "name": "default",
        "description": "Default pool",
        "resource_uri": "/MAAS/api/2.0/resourcepool/0/",
    }
    assert (await admin.get("resourcepool/workers/")).json()["name"] == "workers"
    r = await admin.post("resourcepools/", data={"name": "spare"})
    pid = r.json()["id"]
    assert (await admin.post("resourcepools/", data={"name": "spare"})).json() == {
        "name": ["Resource pool with this Name already exists."]
    }
    assert (await admin.post("resourcepools/", data={})).status_code == 400
    assert (await alice.post("resourcepools/", data={"name": "x"})).status_code == 403
    assert (await admin.put(f"resourcepool/{pid}/", data={"name": "spare2", "description": "d"})).json()[
        "name"
    ] == "spare2"
    assert (await admin.put(f"resourcepool/{pid}/", data={"name": "workers"})).status_code == 400
    assert (await alice.put(f"resourcepool/{pid}/", data={})).status_code == 403
    r = await admin.delete("resourcepool/0/")
    assert (r.status_code, r.text) == (400, "This is the default pool, it cannot be deleted.")
    r = await admin.delete("resourcepool/workers/")
    assert (r.status_code, r.text) == (400, "Pool has machines in it, it cannot be deleted.")
    assert (await alice.delete(f"resourcepool/{pid}/")).status_code == 403
    assert (await admin.delete(f"resourcepool/{pid}/")).status_code == 204
    assert (await admin.get("resourcepool/99/")).text == "No ResourcePool matches the given query."


async def test_tags(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    assert "gpu" in [t["name"] for t in (await admin.get("tags/")).json()]
    r = await admin.post("tags/", data={"name": "fast", "comment": "c", "kernel_opts": "quiet"})
    assert r.json() == {
        "name": "fast",
        "definition": "",
        "comment": "c",
        "kernel_opts": "quiet",
        "resource_uri": "/MAAS/api/2.0/tags/fast/",
    }
    assert (await admin.post("tags/", data={"name": "fast"})).json() == {
        "name": ["Tag with this Name already exists."]
    }
    assert (await admin.post("tags/", data={"name": "bad name"})).status_code == 400
    assert (await admin.post("tags/", data={})).status_code == 400
    r = await admin.post("tags/", data={"name": "x", "definition": "//node[@id='a'"})
    assert r.json() == {"definition": ["Invalid xpath expression: //node[@id='a'"]}
    r = await alice.post("tags/", data={"name": "y"})
    assert (r.status_code, r.text) == (403, "")
    a, b = sim.state.by_hostname["cp-1"].system_id, sim.state.by_hostname["big-2"].system_id
    r = await admin.post("tags/fast/", params={"op": "update_nodes"}, data={"add": [a, b, "nosuch"]})
    assert r.json() == {"added": 2, "removed": 0}
    r = await admin.post("tags/fast/", params={"op": "update_nodes"}, data={"add": a, "remove": b})
    assert r.json() == {"added": 0, "removed": 1}
    r = await admin.post("tags/fast/", params={"op": "update_nodes"}, data={"add": b, "definition": "//x"})
    assert (r.status_code, r.text) == (409, "Definition supplied '//x' doesn't match current definition ''")
    assert (await alice.post("tags/fast/", params={"op": "update_nodes"}, data={"add": b})).status_code == 403
    assert [m["hostname"] for m in (await admin.get("tags/fast/", params={"op": "machines"})).json()] == [
        "cp-1"
    ]
    assert (await admin.get("machines/", params={"tags": "fast"})).json()[0]["hostname"] == "cp-1"
    r = await admin.put("tags/fast/", data={"comment": "new", "definition": "//node"})
    assert r.json()["comment"] == "new"
    assert r.json()["definition"] == "//node"
    assert (await alice.put("tags/fast/", data={"comment": "x"})).status_code == 403
    assert (await admin.post("tags/fast/", params={"op": "rebuild"})).json() == {"rebuilding": "fast"}
    assert (await alice.post("tags/fast/", params={"op": "rebuild"})).status_code == 403
    assert (await alice.delete("tags/fast/")).status_code == 403
    assert (await admin.delete("tags/fast/")).status_code == 204
    assert "fast" not in sim.state.by_hostname["cp-1"].tags
    assert (await admin.get("tags/fast/")).text == "No Tag matches the given query."


async def test_domains(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    domains = (await admin.get("domains/")).json()
    assert domains[0]["name"] == "maas"
    assert domains[0]["is_default"] is True
    assert domains[1]["resource_record_count"] == 1  # lab-1
    r = await admin.post("domains/", data={"name": "new.example", "ttl": "60", "authoritative": "false"})
    did = r.json()["id"]
    assert r.json()["ttl"] == 60
    assert r.json()["authoritative"] is False
    assert (await admin.post("domains/", data={"name": "new.example"})).status_code == 400
    assert (await admin.post("domains/", data={})).status_code == 400
    assert (await alice.post("domains/", data={"name": "z"})).status_code == 403
    assert (await admin.get("domains/new.example/")).json()["id"] == did
    assert (await admin.put(f"domains/{did}/", data={"name": "renamed.example", "ttl": "30"})).json()[
        "ttl"
    ] == 30
    assert (await alice.put(f"domains/{did}/", data={"ttl": "1"})).status_code == 403
    r = await admin.post(f"domains/{did}/", params={"op": "set_default"})
    assert r.json()["is_default"] is True
    assert (await alice.post(f"domains/{did}/", params={"op": "set_default"})).status_code == 403
    r = await admin.delete(f"domains/{did}/")
    assert (r.status_code, r.text) == (400, "This domain is the default domain, it cannot be deleted.")
    await admin.post("domains/0/", params={"op": "set_default"})
    r = await admin.delete("domains/lab.example/")
    # Node.domain is on_delete=PROTECT: Django's ProtectedError, which MAAS's middleware answers as a 500
    lab_id = sim.state.domain_by_name("lab.example").id  # type: ignore[union-attr]
    lab = next(m for m in sim.state.machines.values() if m.domain_id == lab_id)
    assert r.status_code == 500
    assert r.text.startswith(
        "(\"Cannot delete some instances of model 'Domain' because they are referenced through protected "
        "foreign keys: 'Node.domain'.\", {"
    )
    assert f"<Node: {lab.system_id} ({lab.hostname})>" in r.text
    assert (await alice.delete(f"domains/{did}/")).status_code == 403
    assert (await admin.delete(f"domains/{did}/")).status_code == 204
    assert (await admin.get("domains/99/")).status_code == 404


async def test_dns_resources(admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    r = await admin.post(
        "dnsresources/", data={"fqdn": "api.lab.example", "ip_addresses": "10.10.0.100 10.10.0.101"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    rid = body["id"]
    assert body["fqdn"] == "api.lab.example"
    assert [ip["ip"] for ip in body["ip_addresses"]] == ["10.10.0.100", "10.10.0.101"]
    assert body["ip_addresses"][0]["subnet"]["cidr"] == "10.10.0.0/24"
    assert body["ip_addresses"][0]["alloc_type_name"] == "User reserved"
    assert body["resource_uri"] == f"/MAAS/api/2.0/dnsresources/{rid}/"
    r = await admin.post(
        "dnsresources/", data={"name": "api", "domain": "lab.example", "ip_addresses": "1.2.3.4"}
    )
    assert r.json() == {"__all__": ["Labels must be unique within their zone."]}
    r = await admin.post(
        "dnsresources/", data={"name": "other", "ip_addresses": "192.0.2.1", "address_ttl": "5"}
    )
    assert r.json()["fqdn"] == "other.maas"
    assert r.json()["ip_addresses"][0]["subnet"] is None
    r = await admin.post("dnsresources/", data={"fqdn": "x.nowhere", "ip_addresses": "1.2.3.4"})
    assert (r.status_code, r.text) == (404, "No Domain matches the given query.")
    r = await admin.post("dnsresources/", data={"fqdn": "bad!name.maas"})
    assert r.json() == {"name": ["Invalid dnsresource name: bad!name."]}
    r = await admin.post("dnsresources/", data={"fqdn": "ok.maas", "ip_addresses": "300.1.1.1"})
    assert r.json() == {"ip_addresses": ["'300.1.1.1' is not a valid IP address."]}
    assert (await admin.post("dnsresources/", data={})).status_code == 400
    listed = (await admin.get("dnsresources/", params={"fqdn": "api.lab.example"})).json()
    assert [d["id"] for d in listed] == [rid]
    assert len((await admin.get("dnsresources/", params={"domain": "maas"})).json()) == 1
    assert len((await admin.get("dnsresources/", params={"name": "other"})).json()) == 1
    assert (await admin.get("dnsresources/", params={"rrtype": "TXT"})).json() == []
    r = await admin.put(f"dnsresources/{rid}/", data={"ip_addresses": "10.10.0.102", "address_ttl": "60"})
    assert [ip["ip"] for ip in r.json()["ip_addresses"]] == ["10.10.0.102"]
    assert r.json()["address_ttl"] == 60
    r = await admin.put(f"dnsresources/{rid}/", data={"name": "api2", "domain": "0"})
    assert r.json()["fqdn"] == "api2.maas"
    assert (await alice.put(f"dnsresources/{rid}/", data={"ip_addresses": "1.1.1.1"})).status_code == 403
    assert (await alice.delete(f"dnsresources/{rid}/")).status_code == 403
    assert (await admin.get(f"dnsresources/{rid}/")).json()["fqdn"] == "api2.maas"
    assert (await admin.delete(f"dnsresources/{rid}/")).status_code == 204
    assert (await admin.get(f"dnsresources/{rid}/")).text == "No DNSResource matches the given query."


async def test_subnets_boot_resources_users(admin: httpx.AsyncClient) -> None:
    subnets = (await admin.get("subnets/")).json()
    assert subnets[0]["cidr"] == "10.10.0.0/24"
    assert subnets[0]["vlan"]["vid"] == 0
    assert (await admin.get(f"subnets/{subnets[0]['id']}/")).json()["name"] == "lab"
    assert (await admin.get("subnets/cidr:10.10.0.0/24/")).status_code == 404  # the slash splits the path
    assert (await admin.get("subnets/lab/")).json()["id"] == subnets[0]["id"]
    assert (await admin.get("subnets/99/")).text == "No Subnet matches the given query."
    r = await admin.get("boot-resources/")
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    assert [(b["name"], b["architecture"], b["type"]) for b in r.json()][:2] == [
        ("ubuntu/jammy", "amd64/generic", "Synced"),
        ("ubuntu/noble", "amd64/generic", "Synced"),
    ]
    assert (await admin.get("boot-resources/", params={"type": "uploaded"})).json() == []
    r = await admin.get("boot-resources/", params={"type": "bogus"})
    assert (r.status_code, r.text) == (
        400,
        "'bogus' is not a valid boot resource type. Available types: ['synced', 'uploaded']",
    )
    assert "sets" in (await admin.get("boot-resources/1/")).json()
    assert (await admin.get("boot-resources/x/")).status_code == 404
    assert (await admin.get("boot-resources/", params={"op": "is_importing"})).json() is False
    assert [u["username"] for u in (await admin.get("users/")).json()] == ["admin", "alice"]
    assert (await admin.get("users/alice/")).json()["is_superuser"] is False
    assert (await admin.get("users/bob/")).status_code == 404


async def test_version_and_describe_are_anonymous(anon: httpx.AsyncClient) -> None:
    r = await anon.get("version/")
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    assert r.json()["version"] == "3.7.3"
    assert len(r.json()["capabilities"]) == 9
    assert r.json()["subversion"] == ""
    r = await anon.get("http://maas.test/MAAS/api/version/")
    assert (r.status_code, r.text) == (200, "2.0")
    r = await anon.get("describe/")
    assert r.headers["content-type"] == "application/json"
    doc = r.json()
    assert r.text == json.dumps(doc, sort_keys=True)
    names = [res["name"] for res in doc["resources"]]
    assert names == sorted(names)
    assert "MachinesHandler" in names
    assert "DebugHandler" not in names
    machines = next(res for res in doc["resources"] if res["name"] == "MachinesHandler")
    assert machines["anon"]["name"] == "AnonMachinesHandler"
    actions = {a["name"]: a for a in machines["auth"]["actions"]}
    assert actions["allocate"] == {
        "name": "allocate",
        "method": "POST",
        "op": "allocate",
        "restful": False,
        "doc": actions["allocate"]["doc"],
    }
    assert actions["read"]["restful"] is True
    assert actions["read"]["op"] is None
    machine = next(res for res in doc["resources"] if res["name"] == "MachineHandler")
    assert machine["auth"]["params"] == ["system_id"]
    assert machine["auth"]["path"] == "/MAAS/api/2.0/machines/{system_id}/"
    assert machine["auth"]["uri"] == "http://maas.test/MAAS/api/2.0/machines/{system_id}/"
    assert len(doc["hash"]) == 40
    assert r.headers["x-maas-api-hash"] == doc["hash"]
    assert (await anon.post("version/")).status_code == 400


async def test_unknown_paths(anon: httpx.AsyncClient) -> None:
    r = await anon.get("nothing/here/")
    assert (r.status_code, r.text) == (404, "Unknown API endpoint: /MAAS/api/2.0/nothing/here/.")
    assert (await anon.get("http://maas.test/elsewhere")).status_code == 404


async def test_debug_endpoint_counters_and_invariants(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sim.reset_counters()
    await admin.get("machines/")
    await admin.post("machines/", params={"op": "allocate"})
    counters = (await admin.get("debug/", params={"op": "counters"})).json()
    assert {"method": "POST", "endpoint": "/MAAS/api/2.0/machines/", "op": "allocate", "count": 1} in counters
    assert sim.counters[("GET", "/MAAS/api/2.0/machines/", None)] == 1
    assert (await admin.get("debug/", params={"op": "invariants"})).json() == {"ok": True, "violations": []}
    assert (await admin.post("debug/", params={"op": "reset_counters"})).json() == {"ok": True}
    assert sum(sim.counters.values()) == 0


@pytest.mark.parametrize(
    ("corrupt", "needle"),
    [
        ("double_agent", "agent_name 'x' is on 2 machines"),
        ("ready_owned", "is Ready but owned"),
        ("owned_without_owner", "without an owner"),
        ("overcommit", "over its over-committed capacity"),
        ("orphan_vm", "not backed by VM host"),
        ("phantom_charge", "which it does not host"),
        ("index", "missing from the"),
        ("violation", "acquired by"),
    ],
)
def test_check_invariants_detects_corruption(corrupt: str, needle: str) -> None:
    from simtools import lxd_sim

    from capmaas_dev.simulator import NodeStatus
    from capmaas_dev.simulator.models import StoragePool

    sim = lxd_sim()
    state = sim.state
    m1, m2 = state.by_hostname["metal-1"], state.by_hostname["metal-2"]
    if corrupt == "double_agent":
        state.set_agent(m1, "x")
        state.set_agent(m2, "x")
    elif corrupt == "ready_owned":
        m1.owner = "someone"
    elif corrupt == "owned_without_owner":
        state.set_status(m1, NodeStatus.ALLOCATED)
    elif corrupt == "overcommit":
        host = state.vm_hosts[3]
        host.vms["ghost"] = (1000, 10**7, {host.storage_pools[0].id: 10**15})
    elif corrupt == "orphan_vm":
        m1.pod_id = 1
    elif corrupt == "phantom_charge":
        state.vm_hosts[1].vms[m1.system_id] = (1, 1024, {})
    elif corrupt == "index":
        del state.by_status[NodeStatus.READY][m1.system_id]
    else:
        m1.owner = "bob"
        sim.acquire(m1, "alice")
    assert StoragePool  # imported for the overcommit case's types
    assert any(needle in p for p in sim.check_invariants()), sim.check_invariants()
