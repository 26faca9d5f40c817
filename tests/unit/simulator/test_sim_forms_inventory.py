"""Body parsing (urlencoded, multipart with base64 parts, malformed) and inventories (YAML, generator)."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from simtools import SAMPLE, multipart

from capmaas_dev.simulator import Inventory, InventoryError, Simulator
from capmaas_dev.simulator import inventory as inventory_module
from capmaas_dev.simulator.forms import FormData, FormError, parse_body, parse_bool
from capmaas_dev.simulator.inventory import LXD_INVENTORY, SAMPLE_INVENTORY, parse_memory, parse_size


def test_urlencoded_repeated_keys_in_order() -> None:
    form = parse_body("application/x-www-form-urlencoded", b"tags=a&zone=z&tags=b&empty=")
    assert form.getlist("tags") == ["a", "b"]
    assert form.get("tags") == "b"
    assert form.get("empty") == ""
    assert form.keys() == ["tags", "zone", "empty"]
    assert len(form) == 4
    assert "zone" in form
    assert form.grouped(exclude=["zone"]) == [("tags", ["a", "b"]), ("empty", [""])]
    assert list(form) == ["tags", "zone", "empty"]
    assert "FormData" in repr(form)


def test_multipart_base64_and_plain_parts() -> None:
    body, ctype = multipart([("a", "1"), ("a", "2"), ("user_data", "héllo")])
    body = body.replace(
        b"--XyZ--", b'--XyZ\r\nContent-Disposition: form-data; name="plain"\r\n\r\nraw\r\n--XyZ--'
    )
    form = parse_body(ctype, body)
    assert form.getlist("a") == ["1", "2"]
    assert form.get("user_data") == "héllo"
    assert form.get("plain") == "raw"


@pytest.mark.parametrize(
    ("ctype", "body", "message"),
    [
        ("multipart/form-data", b"--x\r\n", "Invalid boundary in multipart: None"),
        ("multipart/form-data; boundary=x", b"--x\r\nA: b\r\n\r\nv\r\n--x", "missing closing boundary"),
        (
            "multipart/form-data; boundary=x",
            b'--x\r\nContent-Disposition: form-data; name="a"\r\n'
            b"Content-Transfer-Encoding: base64\r\n\r\n@@@\r\n--x--",
            "Invalid base64",
        ),
        ("application/x-www-form-urlencoded", b"a=\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_bodies(ctype: str, body: bytes, message: str) -> None:
    with pytest.raises(FormError, match=message):
        parse_body(ctype, body)


@pytest.mark.parametrize(
    "body",
    [
        # libmaas / the MAAS CLI with no parameters: one empty part without headers (and no final CRLF)
        b"--x\r\n\r\n--x--",
        b"--x\r\n\r\n--x--\r\n",
        b"--x\r\nno headers here\r\n--x--",
        b"--x\r\nContent-Disposition: form-data\r\n\r\nv\r\n--x--",  # no name
        b"--x\r\nContent-Type: text/plain\r\n\r\nv\r\n--x--",  # no Content-Disposition
    ],
)
def test_multipart_parts_without_a_named_disposition_are_skipped_like_django(body: bytes) -> None:
    assert parse_body("multipart/form-data; boundary=x", body).items() == []


def test_multipart_skips_a_headerless_part_between_named_ones() -> None:
    body = (
        b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n'
        b"--x\r\n\r\n\r\n"
        b'--x\r\nContent-Disposition: form-data; name="b"\r\n\r\n2\r\n--x--'
    )
    assert parse_body("multipart/form-data; boundary=x", body).items() == [("a", "1"), ("b", "2")]


async def test_libmaas_empty_multipart_allocate_is_accepted() -> None:
    from simtools import ADMIN_KEY, client, sample_sim

    sim = sample_sim()
    async with client(sim, ADMIN_KEY) as c:
        body = b"--===============0928354324242815356==\r\n\r\n--===============0928354324242815356==--"
        ctype = 'multipart/form-data; boundary="===============0928354324242815356=="'
        headers = {"Content-Type": ctype}
        r = await c.post("machines/", params={"op": "allocate"}, content=body, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["status_name"] == "Allocated"
        r = await c.post(
            f"machines/{r.json()['system_id']}/",
            params={"op": "release"},
            content=body,
            headers=headers,
        )
        assert r.status_code == 200, r.text


def test_other_content_types_and_empty_bodies_are_empty_forms() -> None:
    assert len(parse_body("application/json", b'{"a": 1}')) == 0
    assert len(parse_body("multipart/form-data; boundary=x", b"")) == 0


def test_parse_bool() -> None:
    form = FormData([("t", "True"), ("f", "off"), ("e", ""), ("bad", "sure")])
    assert parse_bool(form, "t") is True
    assert parse_bool(form, "f") is False
    assert parse_bool(form, "e") is False
    assert parse_bool(form, "missing", default=True) is True
    with pytest.raises(FormError, match="Invalid bad: Value should be 'true' or 'false'"):
        parse_bool(form, "bad")


async def test_malformed_request_bodies_get_400(admin: httpx.AsyncClient) -> None:
    r = await admin.post(
        "machines/",
        params={"op": "allocate"},
        content=b"--x\r\n",
        headers={"content-type": "multipart/form-data"},
    )
    assert (r.status_code, r.text) == (400, "Invalid boundary in multipart: None")


@given(
    st.binary(max_size=200),
    st.sampled_from(["multipart/form-data; boundary=b", "application/x-www-form-urlencoded"]),
)
def test_garbage_bodies_never_crash_the_parser(body: bytes, ctype: str) -> None:
    try:
        form = parse_body(ctype, body)
    except FormError:
        return
    assert isinstance(form, FormData)


@given(
    st.lists(
        st.tuples(st.from_regex(r"[A-Za-z0-9_.-]{1,10}", fullmatch=True), st.text(max_size=20)), max_size=6
    )
)
def test_multipart_round_trip(fields: list[tuple[str, str]]) -> None:
    body, ctype = multipart(fields, boundary="b0undary")
    assert parse_body(ctype, body).items() == fields


# -- inventories ------------------------------------------------------------------------------------------
def test_sample_inventory_loads() -> None:
    state = Inventory.from_yaml(SAMPLE).build()
    assert len(state.machines) == 12
    assert {z.name for z in state.zones.values()} == {
        "default",
        "az1",
        "az2",
        "az3",
    }
    assert {p.name for p in state.pools.values()} == {"default", "control-plane", "workers"}
    assert state.by_hostname["worker-1"].disks[1].size == 2 * 1000**4
    assert state.by_hostname["big-1"].memory == 131072


def test_sizes() -> None:
    assert parse_size("500G", "x") == 500 * 1000**3
    assert parse_size("1.5T", "x") == 1_500_000_000_000
    assert parse_size("64GiB", "x") == 64 * 1024**3
    assert parse_size(1234, "x") == 1234
    assert parse_memory("16G", "x") == 16384
    assert parse_memory("512MiB", "x") == 512
    assert parse_memory(2048, "x") == 2048
    for bad in ("lots", True):
        with pytest.raises(InventoryError, match="not a size"):
            parse_size(bad, "where")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("machines: [{hostname: a}, {hostname: a}]", "duplicate hostname"),
        ("machines: [{hostname: a, system_id: x}, {hostname: b, system_id: x}]", "duplicate system_id"),
        ("machines: [{hostname: a, zone: nowhere}]", "unknown zone, pool or domain"),
        ("machines: [{hostname: a, status: sleeping}]", "unknown status"),
        ("machines: [{hostname: a, interfaces: [{subnet: 1.2.3.0/24}]}]", "unknown subnet"),
        ("machines: [{cpu_count: 1}]", "missing required field 'hostname'"),
        ("machines: [{hostname: a, disks: [{name: sda}]}]", "missing required field 'size'"),
        ("machines: nope", "expected a list of mappings"),
        ("subnets: [{cidr: not-a-cidr}]", "invalid cidr"),
        ("boot_resources: [{name: x, type: magic}]", "synced or uploaded"),
        ("vm_hosts: [{name: h, host: ghost}]", "unknown backing machine"),
        ("vm_hosts: [{name: h, zone: nowhere}]", "unknown zone or pool"),
        ("[1, 2]", "top level must be a mapping"),
        ("a: [", "invalid YAML"),
    ],
)
def test_bad_inventories(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError, match=message):
        Inventory.from_yaml(path)


@pytest.mark.parametrize("path", [SAMPLE_INVENTORY, LXD_INVENTORY], ids=["sample", "lxd"])
def test_shipped_inventories_parse_in_c_as_in_python(path: Path) -> None:
    """The inventory files are read with libyaml's safe loader where PyYAML has it (the pure-Python parser
    was most of a simulator's construction): the very data PyYAML's pure-Python safe loader gives."""
    assert inventory_module._LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    assert Inventory.from_yaml(path).data == yaml.load(path.read_text(), Loader=yaml.SafeLoader)


def test_full_featured_inventory(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        """
zones: [{name: z1}, {name: z1}]
pools: [{name: p1}, {name: p1}]
domains: [{name: d.example}, {name: d.example}]
tags: [{name: t1, definition: "//node", comment: c}]
subnets: [{cidr: 192.168.0.0/24}]
boot_resources: [{name: mycustom, type: uploaded, base_image: ubuntu/jammy}]
users: [{username: bob, admin: true, password: pw}]
machines:
  - {hostname: m1, status: deployed, zone: z1, pool: p1, domain: d.example, tags: [newtag],
     disks: [{size: 10G, tags: [fast]}],
     interfaces: [{subnet: 192.168.0.0/24, ip: 192.168.0.5, mac: "aa:bb:cc:dd:ee:ff"}]}
  - {hostname: m2, status: new}
vm_hosts:
  - {name: free-standing}
  - {name: on-m1, host: m1, pool: p1}
"""
    )
    sim = Simulator(Inventory.from_yaml(path))
    state = sim.state
    m1 = state.by_hostname["m1"]
    assert (m1.owner, m1.osystem, m1.power_state) == ("admin", "ubuntu", "on")
    assert "newtag" in state.tags
    assert "fast" in state.tags
    assert len(state.zones) == 2
    assert state.vm_hosts[1].host_system_id is None
    assert state.vm_hosts[2].pool_id == 1
    assert sim.auth.users["bob"].is_superuser
    assert sim.state.boot_resources[1].type == "Uploaded"
    assert sim.check_invariants() == []


def test_empty_inventory_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert Inventory.from_yaml(path).build().machines == {}


def test_generator_is_deterministic_and_shaped() -> None:
    a = Inventory.generate(machines=300, zones=3, vmhosts=6, seed=4).build()
    b = Inventory.generate(machines=300, zones=3, vmhosts=6, seed=4).build()
    assert list(a.machines) == list(b.machines)
    assert [m.cpu_count for m in a.machines.values()] == [m.cpu_count for m in b.machines.values()]
    c = Inventory.generate(machines=300, zones=3, vmhosts=6, seed=5).build()
    assert [m.cpu_count for m in a.machines.values()] != [m.cpu_count for m in c.machines.values()]
    assert len(a.machines) == 300
    assert len(a.vm_hosts) == 6
    assert {a.zones[h.zone_id].name for h in a.vm_hosts.values()} == {"az1", "az2", "az3"}
    ips = [i.ip for m in a.machines.values() for i in m.interfaces]
    assert len(set(ips)) == 300
    assert all(
        a.machines[h.host_system_id].status.label == "Deployed"
        for h in a.vm_hosts.values()
        if h.host_system_id
    )
    with pytest.raises(InventoryError):
        Inventory.generate(machines=1, vmhosts=2)


def test_user_data_base64_round_trip_through_deploy() -> None:
    assert base64.b64decode(base64.b64encode(b"x")) == b"x"
