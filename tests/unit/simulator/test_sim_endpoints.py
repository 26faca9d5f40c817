"""Endpoints other clients touch: a node's interfaces (bridge, link, unlink) and block devices, machine
power_parameters/details, fabrics/VLANs/spaces, devices, account tokens, DNS resource records, implicit DNS
records, and domain deletion while records remain."""

from __future__ import annotations

import struct

import httpx
from simtools import ALICE_KEY, client, sid

from capmaas_dev.simulator import Simulator

AUTH_METHODS = ("plaintext", "hmac")  # every admin/alice/ladmin test runs with both signatures


# -- interfaces -------------------------------------------------------------------------------------------
async def test_interfaces_read_and_resource_uris_resolve(sim: Simulator, admin: httpx.AsyncClient) -> None:
    machine = (await admin.get(f"machines/{sid(sim, 'cp-1')}/")).json()
    listed = (await admin.get(f"nodes/{machine['system_id']}/interfaces/")).json()
    assert listed == machine["interface_set"]
    one = (await admin.get(machine["interface_set"][0]["resource_uri"].removeprefix("/MAAS/api/2.0/"))).json()
    assert one == listed[0]
    assert one["params"] == {}
    by_name = await admin.get(f"nodes/{machine['system_id']}/interfaces/eth0/")
    assert by_name.json()["id"] == one["id"]
    r = await admin.get(f"nodes/{machine['system_id']}/interfaces/999/")
    assert (r.status_code, r.text) == (404, "No Interface matches the given query.")
    r = await admin.get("nodes/nosuch/interfaces/")
    assert (r.status_code, r.text) == (404, "No Node matches the given query.")


async def test_bridge_on_a_ready_machine_then_link_and_unlink(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    node = sid(sim, "worker-1")
    eth0 = (await admin.get(f"nodes/{node}/interfaces/eth0/")).json()
    r = await admin.post(
        f"nodes/{node}/interfaces/",
        params={"op": "create_bridge"},
        data={"name": "br0", "parent": str(eth0["id"]), "bridge_stp": "true", "bridge_fd": "0"},
    )
    assert r.status_code == 200, r.text
    br0 = r.json()
    assert (br0["type"], br0["parents"], br0["mac_address"]) == ("bridge", ["eth0"], eth0["mac_address"])
    assert br0["params"] == {"bridge_type": "standard", "bridge_stp": True, "bridge_fd": 0}
    assert [link["mode"] for link in br0["links"]] == ["link_up"]  # the parent's static address was reset
    eth0 = (await admin.get(f"nodes/{node}/interfaces/eth0/")).json()
    assert (eth0["children"], eth0["links"]) == (["br0"], [])
    assert "10.10.0.31" not in (await admin.get(f"machines/{node}/")).json()["ip_addresses"]
    r = await admin.post(
        f"nodes/{node}/interfaces/{br0['id']}/",
        params={"op": "link_subnet"},
        data={"mode": "STATIC", "subnet": "1", "ip_address": "10.10.0.200"},
    )
    assert r.status_code == 200, r.text
    link = r.json()["links"][0]
    assert (link["mode"], link["ip_address"], link["subnet"]["cidr"]) == (
        "static",
        "10.10.0.200",
        "10.10.0.0/24",
    )
    assert "10.10.0.200" in (await admin.get(f"machines/{node}/")).json()["ip_addresses"]
    r = await admin.post(
        f"nodes/{node}/interfaces/{br0['id']}/", params={"op": "unlink_subnet"}, data={"id": str(link["id"])}
    )
    assert (r.status_code, r.json()["links"]) == (200, [])
    r = await admin.post(
        f"nodes/{node}/interfaces/{br0['id']}/", params={"op": "unlink_subnet"}, data={"id": "1"}
    )
    assert r.status_code == 400
    r = await admin.post(
        f"nodes/{node}/interfaces/{br0['id']}/",
        params={"op": "link_subnet"},
        data={"mode": "auto", "subnet": "1"},
    )
    assert r.json()["links"][0]["mode"] == "auto"
    r = await admin.post(
        f"nodes/{node}/interfaces/{br0['id']}/", params={"op": "link_subnet"}, data={"mode": "dhcp"}
    )
    assert r.json()["links"][0]["mode"] == "dhcp"
    assert (await admin.delete(f"nodes/{node}/interfaces/{br0['id']}/")).status_code == 204
    assert (await admin.get(f"nodes/{node}/interfaces/eth0/")).json()["children"] == []


async def test_bridge_on_an_allocated_machine_moves_the_parent_link(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    r = await admin.post("machines/", params={"op": "allocate"}, data={"name": "cp-2"})
    node = r.json()["system_id"]
    r = await admin.post(f"nodes/{node}/interfaces/", params={"op": "create_bridge"}, data={"parent": "eth0"})
    assert r.status_code == 200, r.text
    bridge = r.json()
    assert bridge["name"] == "br-eth0"
    assert [(x["mode"], x["ip_address"]) for x in bridge["links"]] == [("static", "10.10.0.12")]
    assert (await admin.get(f"nodes/{node}/interfaces/eth0/")).json()["links"] == []


async def test_interface_form_errors_and_states(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    node = sid(sim, "cp-3")
    url = f"nodes/{node}/interfaces/"
    r = await admin.post(url, params={"op": "create_bridge"}, data={})
    assert r.json() == {"parent": ["A bridge interface must have exactly one parent."]}
    r = await admin.post(
        url,
        params={"op": "create_bridge"},
        data={"parent": "eth0", "name": "eth0", "bridge_type": "x", "bridge_fd": "-1"},
    )
    body = r.json()
    assert body["name"] == ["Node cp-3 already has an interface named 'eth0'."]
    assert body["bridge_type"] == ["'x' is not a valid bridge_type.  It should be one of: 'standard', 'ovs'."]
    assert body["bridge_fd"] == ["Ensure this value is greater than or equal to 0."]
    r = await admin.post(
        url, params={"op": "create_bridge"}, data={"parent": "eth0", "bridge_fd": "x", "bridge_stp": "maybe"}
    )
    assert r.status_code == 400
    br = (await admin.post(url, params={"op": "create_bridge"}, data={"parent": "eth0"})).json()
    r = await admin.post(url, params={"op": "create_bridge"}, data={"parent": str(br["id"])})
    assert r.json() == {"parent": ["A bridge interface can't have another bridge interface as parent."]}
    r = await admin.post(url, params={"op": "create_bridge"}, data={"parent": "eth0", "name": "br9"})
    assert r.json() == {
        "parent": ["A bridge interface can't have a parent that is already in a bond or a bridge."]
    }
    one = f"{url}{br['id']}/"
    r = await admin.post(one, params={"op": "link_subnet"}, data={})
    assert r.json() == {"mode": ["This field is required."]}
    r = await admin.post(one, params={"op": "link_subnet"}, data={"mode": "bogus", "subnet": "99"})
    assert r.json()["mode"] == [
        "'bogus' is not a valid mode.  It should be one of: 'auto', 'dhcp', 'static', 'link_up'."
    ]
    assert r.json()["subnet"] == ["Select a valid choice. That choice is not one of the available choices."]
    r = await admin.post(one, params={"op": "link_subnet"}, data={"mode": "static"})
    assert r.json() == {"subnet": ["This field is required."]}
    for ip, message in (
        ("192.0.2.1", "IP address is not in the given subnet 'lab:10.10.0.0/24(vid=0)'."),  # Subnet.__str__
        ("not-an-ip", "Enter a valid IPv4 or IPv6 address."),
    ):
        r = await admin.post(
            one, params={"op": "link_subnet"}, data={"mode": "static", "subnet": "1", "ip_address": ip}
        )
        assert r.json() == {"ip_address": [message]}
    # an address in use is a model error (StaticIPAddressUnavailable): 404 text, not a form error
    r = await admin.post(
        one, params={"op": "link_subnet"}, data={"mode": "static", "subnet": "1", "ip_address": "10.10.0.11"}
    )
    assert (r.status_code, r.text) == (404, "IP address is already in use.")
    r = await admin.post(one, params={"op": "link_subnet"}, data={"mode": "static", "subnet": "10.10.0.0/24"})
    assert r.json()["links"][0]["ip_address"].startswith("10.10.0.")
    r = await admin.post(one, params={"op": "link_subnet"}, data={"mode": "link_up"})
    assert "Cannot configure interface to link up" in r.json()["mode"][0]
    r = await admin.post(one, params={"op": "link_subnet"}, data={"mode": "link_up", "force": "true"})
    assert r.json()["links"][0]["mode"] == "link_up"
    assert (await alice.post(url, params={"op": "create_bridge"}, data={"parent": "eth0"})).status_code == 403
    assert (await alice.post(one, params={"op": "link_subnet"}, data={"mode": "dhcp"})).status_code == 403
    deployed = sim.state.machines[node]
    sim.state.set_status(deployed, type(deployed.status).DEPLOYED, check=False)
    r = await admin.post(one, params={"op": "link_subnet"}, data={"mode": "dhcp"})
    assert (r.status_code, r.text) == (
        409,
        "Cannot link subnet interface because the machine is not New, Ready, Allocated, or Broken.",
    )


# -- block devices, power parameters, details -------------------------------------------------------------
async def test_block_devices_read(sim: Simulator, admin: httpx.AsyncClient) -> None:
    node = sid(sim, "worker-1")
    machine = (await admin.get(f"machines/{node}/")).json()
    listed = (await admin.get(f"nodes/{node}/blockdevices/")).json()
    assert listed == machine["blockdevice_set"]
    assert [d["name"] for d in listed] == ["sda", "sdb"]
    one = await admin.get(listed[1]["resource_uri"].removeprefix("/MAAS/api/2.0/"))
    assert one.json() == listed[1]
    assert (await admin.get(f"nodes/{node}/blockdevices/sda/")).json()["id"] == listed[0]["id"]
    r = await admin.get(f"nodes/{node}/blockdevices/9999/")
    assert (r.status_code, r.text) == (404, "No BlockDevice matches the given query.")


async def test_power_parameters_admin_only(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    node = sid(sim, "cp-1")
    r = await admin.get(f"machines/{node}/", params={"op": "power_parameters"})
    assert r.status_code == 200
    assert {"power_address", "power_user", "power_pass", "power_driver"} <= set(r.json())
    assert (await admin.get(f"machines/{sid(sim, 'lab-1')}/", params={"op": "power_parameters"})).json() == {}
    r = await alice.get(f"machines/{node}/", params={"op": "power_parameters"})
    assert (r.status_code, r.text) == (403, "")


async def test_vm_power_parameters(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    r = await ladmin.post(
        "vm-hosts/1/", params={"op": "compose"}, data={"hostname": "vm-p", "skip_commissioning": "1"}
    )
    params = (
        await ladmin.get(f"machines/{r.json()['system_id']}/", params={"op": "power_parameters"})
    ).json()
    assert params == {"power_address": "https://lxd-az1:8443", "instance_name": "vm-p", "project": "default"}


def _bson(data: bytes) -> dict[str, bytes | None]:
    """A minimal BSON reader for documents of binary and null values (independent of the writer)."""
    (length,) = struct.unpack("<i", data[:4])
    assert length == len(data)
    assert data[-1:] == b"\x00"
    out: dict[str, bytes | None] = {}
    pos = 4
    while data[pos] != 0:
        kind = data[pos]
        end = data.index(b"\x00", pos + 1)
        name = data[pos + 1 : end].decode()
        pos = end + 1
        if kind == 0x0A:
            out[name] = None
            continue
        assert kind == 0x05
        (size,) = struct.unpack("<i", data[pos : pos + 4])
        assert data[pos + 4] == 0  # generic binary subtype
        out[name] = data[pos + 5 : pos + 5 + size]
        pos += 5 + size
    return out


async def test_details_is_bson(sim: Simulator, admin: httpx.AsyncClient) -> None:
    from capmaas_dev.simulator.nodes import bson_document

    r = await admin.get(f"machines/{sid(sim, 'cp-1')}/", params={"op": "details"})
    assert (r.status_code, r.headers["content-type"]) == (200, "application/bson")
    doc = _bson(r.content)
    assert set(doc) == {"lshw", "lldp"}
    assert b"<list>" in (doc["lshw"] or b"")
    assert _bson(bson_document({"a": None, "b": b"x"})) == {"a": None, "b": b"x"}


# -- fabrics, VLANs, spaces -------------------------------------------------------------------------------
async def test_fabrics_vlans_spaces(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    from capmaas_dev.simulator.models import Subnet

    lsim.state.subnets[9] = Subnet(9, "storage", "10.30.0.0/24", vid=30, space="storage")
    fabrics = (await ladmin.get("fabrics/")).json()
    assert [f["name"] for f in fabrics] == ["fabric-0"]
    assert [v["vid"] for v in fabrics[0]["vlans"]] == [0, 30]
    assert (await ladmin.get("fabrics/0/")).json() == fabrics[0]
    assert (await ladmin.get("fabrics/fabric-0/")).json() == fabrics[0]
    assert (await ladmin.get("fabrics/7/")).status_code == 404
    vlans = (await ladmin.get("fabrics/0/vlans/")).json()
    assert vlans == fabrics[0]["vlans"]
    v30 = (await ladmin.get("fabrics/0/vlans/30/")).json()
    assert (v30["id"], v30["space"], v30["name"]) == (5030, "storage", "30")
    assert (await ladmin.get("vlans/5030/")).json() == v30
    assert (await ladmin.get("vlans/17/")).status_code == 404
    assert (await ladmin.get("fabrics/0/vlans/99/")).status_code == 404
    spaces = (await ladmin.get("spaces/")).json()
    assert [(s["id"], s["name"]) for s in spaces] == [(1, "storage"), (-1, "undefined")]
    assert [s["cidr"] for s in spaces[0]["subnets"]] == ["10.30.0.0/24"]
    assert [v["vid"] for v in spaces[1]["vlans"]] == [0]
    assert spaces[1]["resource_uri"] == "/MAAS/api/2.0/spaces/undefined/"
    assert (await ladmin.get("spaces/1/")).json() == spaces[0]
    assert (await ladmin.get("spaces/storage/")).json() == spaces[0]
    assert (await ladmin.get("spaces/-1/")).json() == spaces[1]
    assert (await ladmin.get("spaces/5/")).status_code == 404


# -- devices and account ----------------------------------------------------------------------------------
async def test_devices(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    r = await alice.post("devices/", data={"mac_addresses": "02:00:00:00:00:01", "hostname": "printer"})
    assert r.status_code == 200, r.text
    device = r.json()
    assert (device["node_type_name"], device["owner"], device["fqdn"]) == ("Device", "alice", "printer.maas")
    assert device["interface_set"][0]["mac_address"] == "02:00:00:00:00:01"
    did = device["system_id"]
    assert (await admin.get(f"devices/{did}/")).json() == device
    assert [d["system_id"] for d in (await admin.get("devices/")).json()] == [did]
    assert (await admin.get("devices/", params={"hostname": "other"})).json() == []
    assert len((await admin.get("devices/", params={"mac_address": "02:00:00:00:00:01"})).json()) == 1
    assert (await admin.get("devices/", params={"domain": "lab.example"})).json() == []
    assert len((await admin.get("devices/", params={"zone": "default"})).json()) == 1
    r = await alice.put(
        f"devices/{did}/",
        data={"description": "2nd floor", "domain": "lab.example", "parent": sid(sim, "cp-1")},
    )
    assert (r.json()["description"], r.json()["fqdn"], r.json()["parent"]) == (
        "2nd floor",
        "printer.lab.example",
        sid(sim, "cp-1"),
    )
    assert (await alice.put(f"devices/{did}/", data={"domain": "nope"})).status_code == 400
    r = await admin.delete("domains/lab.example/")
    assert r.status_code == 500
    assert f"<Node: {did} (printer)>" in r.text
    errors = (
        await admin.post(
            "devices/", data={"mac_addresses": "zz", "hostname": "bad_name!", "domain": "x", "parent": "y"}
        )
    ).json()
    assert set(errors) == {"mac_addresses", "hostname", "domain", "parent"}
    assert (await admin.post("devices/", data={})).json()["mac_addresses"] == ["This field is required."]
    r = await admin.post("devices/", data={"mac_addresses": "02:00:00:00:00:01", "hostname": "cp-1"})
    assert r.json() == {
        "mac_addresses": ["MAC address 02:00:00:00:00:01 already in use."],
        "hostname": ['Node with hostname "cp-1" already exists'],
    }
    assert (await admin.get("devices/nosuch/")).status_code == 404
    assert (await alice.delete(f"devices/{did}/")).status_code == 204
    assert (await admin.get(f"devices/{did}/")).status_code == 404


async def test_account_tokens(sim: Simulator, alice: httpx.AsyncClient) -> None:
    tokens = (await alice.get("account/", params={"op": "list_authorisation_tokens"})).json()
    assert tokens == [{"name": "MAAS consumer", "token": ALICE_KEY}]
    r = await alice.post("account/", params={"op": "create_authorisation_token"}, data={"name": "ci"})
    new = r.json()
    assert set(new) == {"token_key", "token_secret", "consumer_key", "name"}
    key = f"{new['consumer_key']}:{new['token_key']}:{new['token_secret']}"
    async with client(sim, key) as c:
        assert (await c.get("users/", params={"op": "whoami"})).json()["username"] == "alice"
        listed = (await c.get("account/", params={"op": "list_authorisation_tokens"})).json()
        assert {"name": "ci", "token": key} in listed
        r = await c.post(
            "account/", params={"op": "delete_authorisation_token"}, data={"token_key": new["token_key"]}
        )
        assert r.status_code == 204
        r = await c.get("users/", params={"op": "whoami"})
        r = await c.get("users/", params={"op": "whoami"})
        # delete_authorisation_token deletes the token's consumer too
        assert (r.status_code, r.text) == (401, "Authorization Error: Invalid API key.")

    r = await alice.post("account/", params={"op": "delete_authorisation_token"}, data={})
    assert (r.status_code, r.text) == (400, "No provided token_key!")
    r = await alice.post(
        "account/", params={"op": "delete_authorisation_token"}, data={"token_key": "unknown"}
    )
    assert (r.status_code, r.text) == (404, "No Token matches the given query.")


# -- DNS resource records ---------------------------------------------------------------------------------
async def test_dns_resource_records(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    r = await admin.post(
        "dnsresourcerecords/", data={"fqdn": "www.lab.example", "rrtype": "cname", "rrdata": "cp-1"}
    )
    assert r.status_code == 200, r.text
    rec = r.json()
    assert {k: rec[k] for k in ("fqdn", "rrtype", "rrdata", "ttl")} == {
        "fqdn": "www.lab.example",
        "rrtype": "CNAME",
        "rrdata": "cp-1",
        "ttl": None,
    }
    assert (await admin.get(f"dnsresourcerecords/{rec['id']}/")).json() == rec
    assert (await admin.get("dnsresourcerecords/")).json() == [rec]
    assert (await admin.get("dnsresourcerecords/", params={"fqdn": "www.lab.example"})).json() == [rec]
    assert (await admin.get("dnsresourcerecords/", params={"rrtype": "TXT"})).json() == []
    assert (await admin.get("dnsresourcerecords/", params={"domain": "maas"})).json() == []
    assert (await admin.get("dnsresourcerecords/", params={"domain": "nosuch"})).status_code == 404
    res = next(x for x in (await admin.get("dnsresources/")).json() if x["fqdn"] == "www.lab.example")
    assert res["resource_records"] == [rec]
    r = await admin.post(
        "dnsresourcerecords/", data={"name": "www", "domain": "lab.example", "rrtype": "TXT", "rrdata": "x"}
    )
    assert r.json() == {"__all__": ["CNAME records for a name cannot coexist with non-CNAME records."]}
    r = await admin.post(
        "dnsresourcerecords/", data={"name": "www", "domain": "1", "rrtype": "CNAME", "rrdata": "b"}
    )
    assert r.json() == {"__all__": ["Only one CNAME can be associated with a name."]}
    r = await admin.post("dnsresourcerecords/", data={"fqdn": "t.maas", "rrtype": "A", "rrdata": "1.2.3.4"})
    assert r.json() == {"rrtype": ["A is not one of CNAME MX NS SRV SSHFP TXT."]}
    r = await admin.post("dnsresourcerecords/", data={"fqdn": "t.maas", "rrtype": "CNAME", "rrdata": "a b"})
    assert r.json() == {"__all__": ["Invalid CNAME: Should be '<server>'."]}
    assert (
        await admin.post("dnsresourcerecords/", data={"fqdn": "t.maas"})
    ).text == "rrtype must be provided."
    assert (
        await admin.post("dnsresourcerecords/", data={"rrtype": "TXT"})
    ).text == "rrdata must be provided."
    r = await admin.post("dnsresourcerecords/", data={"rrtype": "TXT", "rrdata": "x"})
    assert r.text == "Either name and domain (or fqdn) must be specified"
    r = await alice.post("dnsresourcerecords/", data={"fqdn": "t.maas", "rrtype": "TXT", "rrdata": "x"})
    assert (r.status_code, r.text) == (403, "This method is reserved for admin users.")
    r = await admin.put(f"dnsresourcerecords/{rec['id']}/", data={"rrdata": "cp-2", "ttl": "60"})
    assert (r.json()["rrdata"], r.json()["ttl"]) == ("cp-2", 60)
    assert (await alice.put(f"dnsresourcerecords/{rec['id']}/", data={"ttl": "1"})).status_code == 403
    assert (await alice.delete(f"dnsresourcerecords/{rec['id']}/")).status_code == 403
    assert (await admin.delete(f"dnsresourcerecords/{rec['id']}/")).status_code == 204
    assert (await admin.get(f"dnsresourcerecords/{rec['id']}/")).status_code == 404
    assert all(x["fqdn"] != "www.lab.example" for x in (await admin.get("dnsresources/")).json())


async def test_dnsresources_all_adds_implicit_node_records(sim: Simulator, admin: httpx.AsyncClient) -> None:
    plain = (await admin.get("dnsresources/")).json()
    assert all(x["id"] != -1 for x in plain)
    everything = (await admin.get("dnsresources/", params={"all": "true"})).json()
    implicit = [x for x in everything if x["id"] == -1]
    assert len(implicit) == len(sim.state.machines)
    cp1 = next(x for x in implicit if x["fqdn"] == "cp-1.maas")
    assert cp1["ip_addresses"] is None
    assert cp1["resource_records"] == [
        {
            "system_id": sid(sim, "cp-1"),
            "node_type": 0,
            "user_id": None,
            "dnsresource_id": None,
            "ttl": None,
            "rrtype": "A",
            "rrdata": "10.10.0.11",
            "dnsdata_id": None,
        }
    ]
    only_lab = (await admin.get("dnsresources/", params={"all": "1", "domain": "lab.example"})).json()
    assert [x["fqdn"] for x in only_lab if x["id"] == -1] == ["lab-1.lab.example"]
    named = (await admin.get("dnsresources/", params={"all": "1", "fqdn": "cp-2.maas"})).json()
    assert [x["fqdn"] for x in named] == ["cp-2.maas"]
    assert (await admin.get("dnsresources/", params={"all": "true", "rrtype": "AAAA"})).json() == []
    assert (await admin.get("dnsresources/", params={"all": "maybe"})).status_code == 400
