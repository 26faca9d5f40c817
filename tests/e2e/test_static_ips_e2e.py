"""Static IPs through Cluster API's IPAM contract, end to end (issue 23 item 1): the real CAPI core manager
(its IPAM CRDs and webhooks), the capmaas operator as the infrastructure provider *and* as the IPAM provider
(MaasIPPool), the MAAS simulator (MAAS 3.7.3's reservedips rules), the workload stand-in registering a Node
per deployed machine with the addresses MAAS gave it (the kubelet's part).

A MachineDeployment of 3 with a pool of 3 addresses: each Node's InternalIP is from the pool and MAAS shows
each server with its address; a 4th replica waits (pool exhausted) with nothing allocated in MAAS; an address
MAAS refuses (in use) shows MAAS's words, the server is released and the next one tried; deleting the
MachineDeployment puts every address back in the pool and leaves MAAS clean (no pin, no machine held).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import pytest
from e2e_support import (
    DEPLOYMENT_NAME_LABEL,
    INFRA_API,
    ProviderStack,
    apply,
    condition,
    get,
    items,
    maasmachinetemplate,
    machinedeployment,
)

from capmaas import maas
from capmaas_dev.simulator import Inventory
from capmaas_dev.simulator.inventory import generate_data

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

POOL_ADDRESSES = ["10.0.200.10", "10.0.200.11", "10.0.200.12"]


def _inventory() -> Inventory:
    """The e2e inventory, with every server's NIC on an AUTO link (MAAS's default after commissioning: what a
    pinned address needs) and a MAAS reserved range for the pool (AUTO never hands those out)."""
    data = generate_data(machines=10, zones=3, vmhosts=0, seed=23)
    for m in data["machines"]:
        for nic in m.get("interfaces") or ():
            nic.pop("ip", None)
    (subnet,) = data["subnets"]
    subnet["ranges"] = [{"type": "reserved", "start": "10.0.200.1", "end": "10.0.200.30"}]
    return Inventory(data)


#: Read by the ``provider_stack`` fixture (tests/e2e/conftest.py).
E2E_INVENTORY = _inventory


def _pool(name: str, namespace: str, cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasIPPool",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "spec": {"subnet": "10.0.0.0/16", "addresses": ["10.0.200.10-10.0.200.12"]},
    }


def _in_maas(stack: ProviderStack, call: Any) -> Any:
    """One call of the MAAS API, as an admin would make it out of band (the capmaas client, the simulator)."""

    async def go() -> Any:
        async with maas.MaasClient(stack.sim.url, api_key=stack.sim.api_key) as client:
            return await call(client)

    return asyncio.run(go())


def _mm_address(mm: dict[str, Any]) -> str | None:
    ips = [a["address"] for a in (mm.get("status") or {}).get("addresses") or () if a["type"] == "InternalIP"]
    pool = [ip for ip in ips if ip in POOL_ADDRESSES]
    return pool[0] if pool else None


def test_machinedeployment_gets_its_addresses_from_a_maas_ip_pool(provider_stack: ProviderStack) -> None:
    stack = provider_stack
    ns = stack.namespace
    cluster = f"ipam-{secrets.token_hex(3)}"
    md = f"{cluster}-workers"
    pool = f"{cluster}-pool"
    with stack.stage("Cluster + a control-plane Machine Running"):
        stack.create_cluster(cluster)
    apply(stack.kubectl, _pool(pool, ns, cluster))
    stack.wait_for(
        lambda: (
            (c := condition(get(stack.kubectl, "maasippool", pool, "-n", ns), "Ready"))
            and c["status"] == "True"
        ),
        f"MaasIPPool {pool} Ready (its MAAS subnet found)",
    )
    # An address of the pool is in use in MAAS (an admin gave it to a DNS record of something else, which
    # MAAS allows anywhere): MAAS will refuse to pin it.
    taken = POOL_ADDRESSES[2]
    record = _in_maas(stack, lambda c: c.dns_resources.create(f"printer-{cluster}.maas", [taken]))
    template = f"{cluster}-static"
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasIPPool", "name": pool}
    apply(stack.kubectl, maasmachinetemplate(template, ns, addresses=[{"interface": "eth0", "poolRef": ref}]))
    apply(
        stack.kubectl,
        machinedeployment(md, ns, cluster, template, replicas=3, bootstrap_secret=f"{cluster}-userdata"),
    )
    selector = f"{DEPLOYMENT_NAME_LABEL}={md}"

    def refused() -> dict[str, Any] | None:
        for mm in stack.maasmachines(cluster, selector):
            c = condition(mm, "MachineProvisioned")
            if c and c["reason"] == "IPAddressRefused":
                return c
        return None

    with stack.stage("the MAAS-refused address: condition in MAAS's words, server released"):
        said = stack.wait_for(refused, f"a MaasMachine with IPAddressRefused for {taken}", timeout=120)
    assert f"The ip {taken} is already in use by another machine." in said["message"]
    assert "not marked broken" in said["message"]
    _in_maas(stack, lambda c: c.dns_resources.delete(record.id))  # the admin frees it: a retry takes it

    with stack.stage("MachineDeployment of 3: each server deployed with its pool address"):
        machines = stack.wait_for(
            lambda: stack.running_machines(cluster, selector, 3),
            "3 Machines Running with a nodeRef",
            timeout=240,
        )
    states = stack.machine_states()
    got: dict[str, str] = {}
    for mm in stack.maasmachines(cluster, selector):
        ip = _mm_address(mm)
        assert ip is not None, mm.get("status")
        sid = mm["spec"]["systemID"]
        # MAAS shows the server with the address, and the Node the kubelet registered has it as InternalIP.
        assert ip in states[sid]["ip_addresses"], states[sid]
        node = stack.workload.node(states[sid]["hostname"])
        assert node is not None
        assert {"type": "InternalIP", "address": ip} in node["status"]["addresses"]
        claim = get(
            stack.kubectl, "ipaddressclaims.ipam.cluster.x-k8s.io", f"{mm['metadata']['name']}-eth0", "-n", ns
        )
        assert claim is not None
        owner = claim["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "MaasMachine",
            mm["metadata"]["uid"],
            True,
        )
        got[mm["metadata"]["name"]] = ip
    assert sorted(got.values()) == POOL_ADDRESSES
    assert len(machines) == 3
    pins = _in_maas(stack, lambda c: c.reserved_ips.list())
    assert sorted(p.ip for p in pins) == POOL_ADDRESSES

    with stack.stage("scale 3 -> 4: the 4th waits for an address, nothing allocated in MAAS for it"):
        held = len(stack.allocations())
        stack.kubectl(
            "patch",
            "machinedeployment",
            md,
            "-n",
            ns,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"replicas": 4}}),
        )

        def waiting() -> dict[str, Any] | None:
            for mm in stack.maasmachines(cluster, selector):
                c = condition(mm, "MachineProvisioned")
                if c and c["reason"] == "WaitingForIPAddress" and "PoolExhausted" in c["message"]:
                    return mm
            return None

        fourth = stack.wait_for(waiting, "the 4th MaasMachine waiting: pool exhausted", timeout=120)
    assert not fourth["spec"].get("systemID")
    assert len(stack.allocations()) == held
    pool_status = (get(stack.kubectl, "maasippool", pool, "-n", ns) or {}).get("status") or {}
    assert (pool_status.get("used"), pool_status.get("free")) == (3, 0)

    with stack.stage("delete the MachineDeployment: addresses back in the pool, MAAS clean"):
        stack.kubectl("delete", "machinedeployment", md, "-n", ns, "--wait=false")
        stack.wait_for(lambda: not stack.maasmachines(cluster, selector), "the workers' MaasMachines gone")
        try:
            stack.wait_for(
                lambda: not items(stack.kubectl, "ipaddresses.ipam.cluster.x-k8s.io", ns),
                "every IPAddress of the pool gone",
                timeout=60,
            )
        except AssertionError as exc:
            left = [
                (o["kind"], o["metadata"]["name"], o["metadata"].get("finalizers"), o.get("status"))
                for o in items(stack.kubectl, "ipaddresses.ipam.cluster.x-k8s.io", ns)
                + items(stack.kubectl, "ipaddressclaims.ipam.cluster.x-k8s.io", ns)
            ]
            raise AssertionError(f"{exc}\nleft: {left}") from exc
        stack.wait_for(
            lambda: (
                ((get(stack.kubectl, "maasippool", pool, "-n", ns) or {}).get("status") or {}).get("free")
                == 3
            ),
            "the pool's 3 addresses free again",
            timeout=60,
        )
    assert _in_maas(stack, lambda c: c.reserved_ips.list()) == []
    assert not items(stack.kubectl, "ipaddressclaims.ipam.cluster.x-k8s.io", ns)
    states = stack.machine_states()
    assert not any(set(POOL_ADDRESSES) & set(m["ip_addresses"]) for m in states.values())
    stack.delete_cluster(cluster)
    assert stack.invariants() == []
