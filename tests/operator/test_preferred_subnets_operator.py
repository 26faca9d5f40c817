"""Issue 15 part 2 on the real apiserver: the Go provider's ConfigMap ``maas-preferred-subnet`` picks which
address of a control-plane machine with two NICs goes into the API server's DNS record; junk in it is a
condition on the MaasCluster, not a traceback loop."""

from __future__ import annotations

import json
from typing import Any

import pytest
from operator_harness import Harness

from capmaas.api import conditions as C
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

pytestmark = pytest.mark.k8s

PXE, API = "10.40.0.0/24", "10.50.0.0/24"


@pytest.fixture
def sim() -> Simulator:
    """Machines with two AUTO-linked NICs: eth0 on the PXE network (listed first), eth1 on the API one."""
    inventory = Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": PXE, "name": "pxe"}, {"cidr": API, "name": "api"}],
            "boot_resources": [{"name": "ubuntu/jammy"}],
            "machines": [
                {"hostname": f"m{n}", "zone": "az1", "cpu_count": 4, "memory": 8192,
                 "interfaces": [{"name": "eth0", "subnet": "pxe"}, {"name": "eth1", "subnet": "api"}]}
                for n in range(3)
            ],
        }
    )  # fmt: skip
    return Simulator(inventory, timings=Timings(deploy=1.0, release=0.3), faults=Faults())


@pytest.fixture
def operator_env(operator_env: dict[str, str]) -> dict[str, str]:
    # Nothing watches ConfigMaps: a change is seen by the next pass of the MaasCluster (a control-plane
    # machine's change, or the resync interval, shortened here).
    operator_env["CAPMAAS_KUBE__RESYNC_INTERVAL"] = "2"
    return operator_env


def configmap(namespace: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "maas-preferred-subnet", "namespace": namespace},
        "data": {"preferredSubnets": value},
    }


async def test_the_configmap_picks_the_address_and_junk_in_it_is_a_condition(harness: Harness) -> None:
    h = harness
    await h.apply(configmap(h.namespace, f"{API}, not-a-subnet"))
    h.operator.start()
    await h.cluster(provision=False)

    async def invalid() -> bool:
        c = await h.condition("maasclusters", "c1", C.DNS_READY_CONDITION)
        return c is not None and c["reason"] == C.INVALID_PREFERRED_SUBNETS_REASON

    await h.wait("DNSReady=False/InvalidPreferredSubnets", invalid, within=60)
    c = await h.condition("maasclusters", "c1", C.DNS_READY_CONDITION)
    assert c is not None
    assert c["status"] == "False"
    assert "'not-a-subnet'" in c["message"]
    assert not await h.field("maasclusters", "c1", "status", "ready")
    assert "Traceback" not in h.operator.tail(400)

    await h.apply(configmap(h.namespace, f" {API} "))
    await h.wait("MaasCluster ready", lambda: h.field("maasclusters", "c1", "status", "ready"), within=60)
    status = {"status": {"initialization": {"infrastructureProvisioned": True}}}
    await h.k(
        "patch", "clusters.cluster.x-k8s.io", "c1", "-n", h.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    await h.machine("cp0", cp=True)
    fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))

    def record() -> list[str]:
        name = fqdn.split(".", maxsplit=1)[0]
        return next((sorted(r.ips) for r in h.sim.state.dns_resources.values() if r.name == name), [])

    async def listed() -> bool:
        return bool(record())

    await h.wait("the record lists the control plane", listed, within=90)
    sid = str(await h.field("maasmachines", "cp0", "spec", "systemID"))
    pxe_ip, api_ip = (i.ip for i in h.sim.state.machines[sid].interfaces)
    assert record() == [api_ip]
    assert pxe_ip not in record()

    # The record is written to MAAS first, the condition by the status write that ends the same pass.
    async def recorded() -> bool:
        c = await h.condition("maasclusters", "c1", C.DNS_READY_CONDITION)
        return c is not None and c["status"] == "True"

    await h.wait("DNSReady=True", recorded, within=30)
    c = await h.condition("maasclusters", "c1", C.DNS_READY_CONDITION)
    assert c is not None
    assert (c["status"], c["reason"], c["message"]) == ("True", C.DNS_RECORD_READY_REASON, api_ip)
