"""Each answer a real MAAS 3.7.3 region gave (``../shared/reference/maas-3.7.3-answers/``) is replayed against
the simulator set up like that region, and the simulator must answer with the same status, the same keys with
the same JSON types (recursively; ``int`` and ``float`` differ, as they do for Go clients)
and MAAS's own error text (a plain-text body or a JSON form error, word for word).

Nothing of the answers is copied here: the region's zones, pools, tags, subnet, boot resources and machines
(disk-less, ``manual`` power, an AUTO link on ``testnet1``) are read from its own list answers at test time,
and every expectation comes from the file being replayed. What is coded here is only what the region had done
*before* each request (e.g. "pch336 allocated and deploying"), in :data:`BEFORE`, and the few differences
that come from how the region was built rather than from MAAS (:data:`REGION_ONLY_NULLS`,
:data:`NO_RACK_NULLS`, :data:`UNCERTAIN_BODIES`), each with its reason.

The answers live beside the repository (``shared/`` next to the clone, as in CI); without them the module is
skipped with the path it looked for.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from simtools import BASE, OAuth

from capmaas_dev.simulator import Inventory, Simulator, Timings

REPO = Path(__file__).resolve().parents[3]
ANSWERS = REPO.parent / "shared" / "reference" / "maas-3.7.3-answers"
ADMIN = "realadmin000000000:realtoken000000000:realsecret0000000000000000000000"
BOB = "bobconsumer0000000:bobtoken0000000000:bobsecret00000000000000000000000"
#: The region's deploys never finished (no machine booted); its AUTO IPs came a moment after the deploy.
NEVER_BOOTS = Timings(deploy=86400.0)
FILES = sorted(p.name for p in ANSWERS.glob("*.json")) if ANSWERS.is_dir() else []

pytestmark = pytest.mark.skipif(not FILES, reason=f"no real MAAS answers at {ANSWERS}")

#: Keys the region answered with null only because its machines were never commissioned (they were made Ready
#: in its database; see the answers' README): hardware facts commissioning would have filled in. MAAS's own
#: ``api/examples/machines.json`` has strings there, and so does the simulator, which models commissioned
#: machines. Paths use ``[]`` for "any list element".
REGION_ONLY_NULLS = frozenset(
    {
        "bios_boot_method",
        "current_testing_result_id",  # no tests ever ran on them either
        "hardware_uuid",
        "boot_interface.discovered",
        "boot_interface.firmware_version",
        "boot_interface.product",
        "boot_interface.vendor",
        "interface_set[].discovered",
        "interface_set[].firmware_version",
        "interface_set[].product",
        "interface_set[].vendor",
    }
)
#: Null in the region because it had no rack controller (README): a VLAN's rack is null there, a MAAS that can
#: deploy (the one the simulator models) has one. Matched at the end of a path, wherever a VLAN is nested.
NO_RACK_NULLS = ("vlan.primary_rack",)
#: Answers shaped by the region's OAuth layer, which was not the one MAAS ships (README: "treat those as
#: uncertain"): only the status is compared.
UNCERTAIN_BODIES = frozenset(
    {"machines_badkey.json", "machines_badsecret.json", "zones_noauth.json", "machines_list_noauth.json"}
)


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ANSWERS / name).read_text())
    return data


def region_inventory(*, with_lab_domain: bool = True) -> Inventory:
    """The region as its own list answers show it."""
    machines = []
    for m in load("machines_list.json")["json"]:
        nics = [
            {"name": i["name"], "mac": i["mac_address"], "subnet": i["links"][0]["subnet"]["cidr"]}
            for i in m["interface_set"]
        ]
        machines.append(
            {
                "hostname": m["hostname"],
                "system_id": m["system_id"],
                "zone": m["zone"]["name"],
                "pool": m["pool"]["name"],
                "tags": m["tag_names"],
                "arch": m["architecture"],
                "cpu_count": m["cpu_count"],
                "memory": m["memory"],
                "power_type": m["power_type"],
                "power_state": m["power_state"],
                "disks": [],
                "interfaces": nics,
            }
        )
    subnets = [
        {"cidr": s["cidr"], "name": s["name"], "gateway_ip": s["gateway_ip"], "vid": s["vlan"]["vid"]}
        for s in load("subnets.json")["json"]
    ]
    boot = [
        {"name": b["name"], "architecture": b["architecture"], "title": b["title"]}
        for b in load("boot_resources.json")["json"]
    ]
    domains = [
        {"name": d["name"], "ttl": d["ttl"], "authoritative": d["authoritative"]}
        for d in load("domains.json")["json"]
        if d["name"] != "maas" and with_lab_domain
    ]
    return Inventory(
        {
            "zones": [
                {"name": z["name"], "description": z["description"]} for z in load("zones.json")["json"]
            ],
            "pools": [
                {"name": p["name"], "description": p["description"]}
                for p in load("resourcepools.json")["json"]
            ],
            "tags": [{"name": t["name"], "comment": t["comment"]} for t in load("tags.json")["json"]],
            "domains": domains,
            "subnets": subnets,
            "boot_resources": boot,
            "users": [{"username": "bob", "api_key": BOB, "admin": False}],
            "machines": machines,
        }
    )


class Region:
    """The simulator plus the admin and non-admin clients the answers were taken with."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        transport = httpx.ASGITransport(app=sim.app)
        self.admin = httpx.AsyncClient(transport=transport, base_url=BASE, auth=OAuth(ADMIN))
        self.bob = httpx.AsyncClient(transport=transport, base_url=BASE, auth=OAuth(BOB))
        self.anon = httpx.AsyncClient(transport=transport, base_url=BASE)

    async def aclose(self) -> None:
        for c in (self.admin, self.bob, self.anon):
            await c.aclose()

    async def post(self, path: str, **data: str) -> httpx.Response:
        op = data.pop("op")
        r = await self.admin.post(path, params={"op": op}, data=data)
        assert r.status_code == 200, (path, op, r.status_code, r.text)
        return r

    async def allocate(self, system_id: str) -> None:
        await self.post("machines/", op="allocate", system_id=system_id)

    async def deploy(self, system_id: str) -> None:
        await self.allocate(system_id)
        await self.post(f"machines/{system_id}/", op="deploy")
        await self.admin.get("version/")  # a later request: the AUTO IP is claimed by now

    async def dns_records(self) -> None:
        for r in load("dnsresources_list.json")["json"]:
            fields = {"fqdn": r["fqdn"], "ip_addresses": " ".join(a["ip"] for a in r["ip_addresses"])}
            if r["address_ttl"] is not None:
                fields["address_ttl"] = str(r["address_ttl"])
            if r["fqdn"] != "db.lab.test":  # the one dnsresource_create_with_temporal.json creates
                await self.admin.post("dnsresources/", data=fields)


Before = Callable[[Region], Awaitable[None]]


async def nothing(region: Region) -> None:
    return None


#: What the region had been through before each request (by the answers' own story: node-04 is pch336 and
#: node-02 64ngcy; see each file's request and the README).
BEFORE: dict[str, Before] = {
    "allocate_409_taken.json": lambda r: r.allocate("64ngcy"),
    "deploy_allocated.json": lambda r: r.allocate("pch336"),
    "deploy_with_temporal.json": lambda r: r.allocate("64ngcy"),
    "dnsresource_create_dup.json": lambda r: r.dns_records(),
    "dnsresources_list.json": lambda r: r.dns_records(),
    "machine_get_after_deploy.json": lambda r: r.deploy("pch336"),
    "machine_get_after_release.json": lambda r: released_after_deploy(r, "pch336"),
    "machine_get.json": lambda r: released_after_deploy(r, "64ngcy"),
    "machine_get_allocated.json": lambda r: r.allocate("pch336"),
    "release_after_deploy.json": lambda r: r.deploy("pch336"),
    "release_again_ready.json": lambda r: released_after_deploy(r, "pch336"),
    "release_from_allocated.json": lambda r: r.allocate("pch336"),
    "release_from_deploying_with_temporal.json": lambda r: r.deploy("64ngcy"),
}
AS_BOB = frozenset(
    {
        "dnsresource_create_403_nonadmin.json",
        "zone_create_403_nonadmin.json",
        "release_ready_machine_by_nonowner_200.json",
    }
)


async def released_after_deploy(region: Region, system_id: str) -> None:
    await region.deploy(system_id)
    await region.post(f"machines/{system_id}/", op="release")


def skeleton(value: Any, path: str = "") -> dict[str, str]:
    """``{path: JSON type}`` for every value inside ``value``; list elements are merged under ``[]`` and an
    empty list says nothing about its elements."""
    out: dict[str, str] = {}
    if isinstance(value, dict):
        out[path] = "object"
        for key, item in value.items():
            out.update(skeleton(item, f"{path}.{key}" if path else key))
    elif isinstance(value, list):
        out[path] = "array"
        for item in value:
            for sub, kind in skeleton(item, f"{path}[]").items():
                kinds = set(out[sub].split("|")) | {kind} if sub in out else {kind}
                out[sub] = "|".join(sorted(kinds))
    else:
        kinds = {bool: "boolean", int: "int", float: "float", str: "string", type(None): "null"}
        out[path] = kinds[type(value)]
    return out


def shape_differences(real: Any, simulated: Any) -> list[str]:
    want, got = skeleton(real), skeleton(simulated)
    problems = []
    for path in sorted(want.keys() | got.keys()):
        w, g = want.get(path), got.get(path)
        if w == g:
            continue
        bare = path.lstrip("[]").lstrip(".")
        if w and g and (bare in REGION_ONLY_NULLS or bare.endswith(NO_RACK_NULLS)):
            w = "|".join(k for k in w.split("|") if k != "null") or g  # the region's null says nothing
            if w == g:
                continue
        if (w is None and _under_empty_list(path, want)) or (g is None and _under_empty_list(path, got)):
            continue
        problems.append(f"{path or '<root>'}: MAAS {w}, simulator {g}")
    return problems


def _under_empty_list(path: str, shape: dict[str, str]) -> bool:
    """``a[].b`` is absent on one side because ``a`` is an empty list there: nothing to compare."""
    cut = path.rfind("[]")
    while cut != -1:
        parent = path[:cut]
        if shape.get(parent) == "array" and not any(k.startswith(parent + "[]") for k in shape):
            return True
        cut = path.rfind("[]", 0, cut)
    return False


@pytest.mark.parametrize("name", FILES)
async def test_the_simulator_answers_as_the_real_region_did(name: str) -> None:
    answer = load(name)
    request = answer["request"]
    sim = Simulator(
        region_inventory(with_lab_domain=name != "domain_create.json"),
        api_key=ADMIN,
        timings=NEVER_BOOTS,
        dynamic_compose=False,
    )
    region = Region(sim)
    client = region.admin
    try:
        await BEFORE.get(name, nothing)(region)
        client = region.bob if name in AS_BOB else region.admin if request["authenticated"] else region.anon
        if name == "machines_badkey.json":
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=sim.app), base_url=BASE, auth=OAuth("x:nosuchtoken:y")
            )
        elif name == "machines_badsecret.json":
            consumer, token, _ = ADMIN.split(":")
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=sim.app),
                base_url=BASE,
                auth=OAuth(f"{consumer}:{token}:bad"),
            )
        path = request["path"].removeprefix("/MAAS/api/2.0/")
        params = [tuple(p) for p in request["params"]]
        op = [(k, v) for k, v in params if k == "op"]
        rest = [(k, v) for k, v in params if k != "op"]
        if request["method"] == "GET":
            r = await client.get(path, params=params)
        else:
            r = await client.request(request["method"], path, params=op, data=dict(rest))
        assert r.status_code == answer["status"], (r.status_code, r.text[:300])
        if name in UNCERTAIN_BODIES:
            return
        if "json" in answer and answer["status"] >= 400:  # a form error: MAAS's own words, exactly
            assert r.json() == answer["json"]
        elif "json" in answer:
            assert shape_differences(answer["json"], r.json()) == []
        else:
            assert r.text == answer["text"]
        assert sim.check_invariants() == []
    finally:
        await region.aclose()
        if client not in (region.admin, region.bob, region.anon):
            await client.aclose()


async def test_each_answer_with_a_machine_has_its_status_power_and_addresses() -> None:
    """Beyond shapes: where a real answer is a machine, the values the lifecycle decides match too."""
    checked = 0
    for name in FILES:
        answer = load(name)
        body = answer.get("json")
        if not isinstance(body, dict) or "system_id" not in body or answer["status"] != 200:
            continue
        sim = Simulator(region_inventory(), api_key=ADMIN, timings=NEVER_BOOTS, dynamic_compose=False)
        region = Region(sim)
        try:
            await BEFORE.get(name, nothing)(region)
            request = answer["request"]
            client = region.bob if name in AS_BOB else region.admin
            path = request["path"].removeprefix("/MAAS/api/2.0/")
            params = [tuple(p) for p in request["params"]]
            if request["method"] == "GET":
                r = await client.get(path, params=params)
            else:
                op = [(k, v) for k, v in params if k == "op"]
                r = await client.post(path, params=op, data={k: v for k, v in params if k != "op"})
            got = r.json()
            keys = ("status_name", "power_state", "owner", "osystem", "distro_series", "ip_addresses")
            want = {k: body[k] for k in keys}
            if want["ip_addresses"]:  # which address the subnet hands out first is the region's business
                want["ip_addresses"] = [type(a).__name__ for a in want["ip_addresses"]]
                got["ip_addresses"] = [type(a).__name__ for a in got["ip_addresses"]]
            if want["owner"] is not None:
                want["owner"] = "owner"
                got["owner"] = "owner" if got["owner"] == "admin" else got["owner"]
            assert {k: got[k] for k in keys} == want, name
            if body["status_name"] == "Deploying":
                assert got["ephemeral_deploy"] is body["ephemeral_deploy"] is True, name
            checked += 1
        finally:
            await region.aclose()
    assert checked >= 10
