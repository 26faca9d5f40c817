"""Fixed addresses (``spec.addresses``, issue 23 item 1), the MaasMachine side of Cluster API's IPAM contract,
against the real simulator (MAAS 3.7.3's reservedips rules and texts): a claim per pool entry, nothing
allocated in MAAS until the address exists, the address pinned to the interface's MAC before deploy and
given to its AUTO link at deploy, the pin deleted before release and the claim after it; what MAAS or the
server refuses in a condition, the server released (not broken), the claim kept.

Here the test plays the IPAM provider (it writes the IPAddress and the claim's status as any provider would:
the MaasMachine side is contract-level); capmaas's own MaasIPPool fulfils claims in the operator tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from reconciler_env import ENDPOINT, Env, make_env

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers import addresses
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, PINNED
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings
from capmaas_dev.simulator.models import NodeStatus

POOL = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasIPPool", "name": "workers"}

INVENTORY: dict[str, Any] = {
    "subnets": [
        {
            "cidr": "10.0.0.0/24",
            "name": "main",
            "gateway_ip": "10.0.0.1",
            "ranges": [
                {"type": "dynamic", "start": "10.0.0.100", "end": "10.0.0.199"},
                {"type": "reserved", "start": "10.0.0.50", "end": "10.0.0.59"},
            ],
        }
    ],
    # One NIC each, an AUTO link on the subnet (MAAS's default after commissioning).
    "machines": [
        {
            "hostname": f"m{n}",
            "cpu_count": 4,
            "memory": 8192,
            "interfaces": [{"name": "eth0", "subnet": "main"}],
        }
        for n in range(1, 4)
    ],
}


@pytest.fixture
async def aenv() -> AsyncIterator[Env]:
    e = make_env(Simulator(Inventory(INVENTORY), timings=Timings.fast(), faults=Faults()))
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def machine_with(env: Env, name: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    env.machine(name)
    mm = env.kube.get("maasmachines", name)
    mm["spec"]["addresses"] = entries
    return mm


def provide(env: Env, claim_name: str, ip: str) -> None:
    """What an IPAM provider does: the IPAddress named after the claim, then the claim's addressRef."""
    claim = env.kube.get("ipaddressclaims", claim_name)
    env.kube.add(
        "ipaddresses",
        {
            "apiVersion": addresses.IPAM_API,
            "kind": "IPAddress",
            "metadata": {"name": claim_name},
            "spec": {"claimRef": {"name": claim_name}, "poolRef": POOL, "address": ip, "prefix": 24},
        },
    )
    claim["status"] = {
        "addressRef": {"name": claim_name},
        "conditions": [{"type": "Ready", "status": "True"}],
    }


async def delete(env: Env, name: str) -> None:
    """Delete the MaasMachine and reconcile until its finalizer is gone (the fake drops the object then)."""
    env.kube.get("maasmachines", name)["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    for _ in range(30):
        if ("maasmachines", "ns", name) not in env.kube.objects:
            return
        await env.step(name)
        await env.settle()
    raise AssertionError(env.kube.get("maasmachines", name).get("status"))


def cond(mm: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in mm["status"]["conditions"] if c["type"] == C.MACHINE_PROVISIONED_CONDITION)


def allocates(env: Env) -> int:
    return sum(n for (method, _, op), n in env.sim.counters.items() if op == "allocate")


def pins_posted(env: Env) -> int:
    return sum(
        n for (method, tmpl, _), n in env.sim.counters.items() if method == "POST" and "reservedips" in tmpl
    )


async def test_pool_address_claimed_pinned_deployed_and_given_back(aenv: Env) -> None:
    env = aenv
    await env.cluster()
    machine_with(env, "w1", [{"interface": "eth0", "poolRef": POOL}])
    await env.step("w1")
    # The claim, as the contract wants it; nothing allocated in MAAS while it has no address.
    claim = env.kube.get("ipaddressclaims", "w1-eth0")
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "MaasMachine", "w1", True, True,
    )  # fmt: skip
    assert owner["uid"] == env.kube.get("maasmachines", "w1")["metadata"]["uid"]
    assert claim["spec"] == {"clusterName": "c1", "poolRef": POOL}
    assert cond(env.kube.get("maasmachines", "w1"))["reason"] == C.WAITING_FOR_IP_ADDRESS_REASON
    # The provider says why it has none (its Ready condition): the MaasMachine says it too.
    claim["status"] = {
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "PoolExhausted", "message": "all 3 in use"}
        ]
    }
    await env.step("w1")
    c = cond(env.kube.get("maasmachines", "w1"))
    assert c["reason"] == C.WAITING_FOR_IP_ADDRESS_REASON
    assert "PoolExhausted: all 3 in use" in c["message"]
    assert allocates(env) == 0
    # The address comes: allocate, pin to eth0's MAC, deploy; the AUTO link gets exactly it.
    provide(env, "w1-eth0", "10.0.0.55")
    await env.drive(["w1"], lambda b: bool(b.get("status", {}).get("ready")))
    mm = env.kube.get("maasmachines", "w1")
    sid = mm["spec"]["systemID"]
    m = env.sim.state.machines[sid]
    assert m.interfaces[0].ip == "10.0.0.55"
    assert {"type": "InternalIP", "address": "10.0.0.55"} in mm["status"]["addresses"]
    (pin,) = env.sim.state.reserved_ips.values()
    assert (pin.ip, pin.mac_address) == ("10.0.0.55", m.interfaces[0].mac_address)
    assert mm["metadata"]["annotations"][ANNOTATION_PREFIX + PINNED] == f"10.0.0.55@{pin.mac_address}"
    for _ in range(3):  # passes after Ready send no second pin
        await env.step("w1")
    assert pins_posted(env) == 1
    # Delete: the pin goes before the release, the claim after it; MAAS is left clean.
    await delete(env, "w1")
    assert not env.sim.state.reserved_ips
    assert env.sim.state.machines[sid].status == NodeStatus.READY
    assert env.sim.state.machines[sid].interfaces[0].ip is None
    assert ("ipaddressclaims", "ns", "w1-eth0") not in env.kube.objects


async def maas_call(env: Env, call: Any) -> Any:
    """One MAAS call out of band (an admin's), through the client, on the simulator."""
    async with maas.MaasClient(
        ENDPOINT, api_key=env.sim.api_key, transport=httpx.ASGITransport(app=env.sim.app)
    ) as client:
        return await call(client)


#: Refusals of a literal address (MAAS 3.7.3's forms/reservedip.py texts), what sets each up, and the words
#: the condition must quote.
PIN_ELSEWHERE = {"ip": "10.0.0.54", "mac_address": "52:54:00:ff:ff:ff"}
REFUSALS = [
    pytest.param("10.0.0.150", None, "ip: The reserved IP 10.0.0.150 must be outside the dynamic range "
                 "10.0.0.100 - 10.0.0.199.", id="dynamic-range"),
    pytest.param("10.0.0.20", lambda c: c.ip_addresses.reserve(ip="10.0.0.20"),
                 "ip: The ip 10.0.0.20 is already in use by another machine.", id="in-use"),
    pytest.param("10.0.0.54", lambda c: c.reserved_ips.create(**PIN_ELSEWHERE),
                 "ip: Reserved IP with this IP address already exists.", id="pinned-elsewhere"),
    # Not sent to MAAS: the server's NIC has no link on a subnet holding it (capmaas's own check).
    pytest.param("10.99.0.5", None, "interface eth0 of MAAS machine", id="not-on-the-nics-subnet"),
]  # fmt: skip


@pytest.mark.parametrize(("ip", "setup", "said"), REFUSALS)
async def test_an_address_maas_refuses_releases_the_server_and_retries_later(
    aenv: Env, ip: str, setup: Any, said: str
) -> None:
    env = aenv
    await env.cluster()
    if setup is not None:
        await maas_call(env, setup)
    machine_with(env, "w1", [{"interface": "eth0", "ipAddress": ip}])
    await env.step("w1")
    await env.settle()
    mm = env.kube.get("maasmachines", "w1")
    c = cond(mm)
    assert c["reason"] == C.IP_ADDRESS_REFUSED_REASON
    assert said in c["message"]  # MAAS's own words
    assert "not marked broken" in c["message"]
    assert not mm["spec"].get("systemID")
    assert all(m.owner is None for m in env.sim.state.machines.values())
    assert all(m.status == NodeStatus.READY for m in env.sim.state.machines.values())
    assert C.IP_ADDRESS_REFUSED_REASON in env.kube.reasons()
    # The next server only after the backoff: a pass now sends no allocate.
    before = allocates(env)
    await env.step("w1")
    assert allocates(env) == before


async def test_server_without_the_interface_is_given_back(aenv: Env) -> None:
    env = aenv
    await env.cluster()
    machine_with(env, "w1", [{"interface": "eth1", "ipAddress": "10.0.0.56"}])
    await env.step("w1")
    c = cond(env.kube.get("maasmachines", "w1"))
    assert c["reason"] == C.IP_ADDRESS_REFUSED_REASON
    assert "has no interface eth1" in c["message"]
    assert all(m.owner is None for m in env.sim.state.machines.values())
    assert pins_posted(env) == 0


async def test_a_forged_pinned_ips_annotation_never_deletes_another_servers_pin(aenv: Env) -> None:
    """Security: ``…/pinned-ips`` is a field anyone who may edit the MaasMachine can write. Naming another
    server's pin there must not make the deletion of this MaasMachine delete that pin."""
    env = aenv
    await env.cluster()
    machine_with(env, "a", [{"interface": "eth0", "ipAddress": "10.0.0.51"}])
    machine_with(env, "b", [{"interface": "eth0", "ipAddress": "10.0.0.52"}])
    await env.drive(["a", "b"], lambda b: bool(b.get("status", {}).get("ready")))
    theirs = next(p for p in env.sim.state.reserved_ips.values() if p.ip == "10.0.0.52")
    mine = env.kube.get("maasmachines", "a")
    key = ANNOTATION_PREFIX + PINNED
    mine["metadata"]["annotations"][key] += f",10.0.0.52@{theirs.mac_address}"
    await delete(env, "a")
    assert [p.ip for p in env.sim.state.reserved_ips.values()] == ["10.0.0.52"]


async def test_a_claim_of_another_owner_is_never_used(aenv: Env) -> None:
    env = aenv
    await env.cluster()
    env.kube.add(
        "ipaddressclaims",
        {
            "metadata": {
                "name": "w1-eth0",
                "ownerReferences": [{"kind": "MaasMachine", "uid": "x", "controller": True}],
            },
            "spec": {"clusterName": "c1", "poolRef": POOL},
        },
    )
    provide(env, "w1-eth0", "10.0.0.57")
    machine_with(env, "w1", [{"interface": "eth0", "poolRef": POOL}])
    await env.step("w1")
    c = cond(env.kube.get("maasmachines", "w1"))
    assert c["reason"] == C.WAITING_FOR_IP_ADDRESS_REASON
    assert "not this MaasMachine's" in c["message"]
    assert allocates(env) == 0


def test_claim_names_stay_valid_object_names() -> None:
    from capmaas.api.v1beta1 import InterfaceAddress

    entry = InterfaceAddress.model_validate({"interface": "enp1s0f0.100", "ipAddress": "10.0.0.9"})
    assert addresses.claim_name("w1", entry) == "w1-enp1s0f0-100"
    long = addresses.claim_name("x" * 250, entry)
    assert len(long) == 253
    assert long != addresses.claim_name("x" * 251, entry)
