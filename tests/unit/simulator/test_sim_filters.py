"""Machine read filters MAAS 3.7's ReadNodesForm accepts (``not_*`` forms, network, storage, devices, speed,
deployment target) and the same FilterNodeForm fields on allocate."""

from __future__ import annotations

import httpx
import pytest

from capmaas_dev.simulator import Simulator
from capmaas_dev.simulator.models import Subnet

AUTH_METHODS = ("plaintext", "hmac")  # every admin/alice/ladmin test runs with both signatures


async def hostnames(c: httpx.AsyncClient, **params: str | list[str]) -> list[str]:
    r = await c.get("machines/", params=params)
    assert r.status_code == 200, r.text
    return sorted(m["hostname"] for m in r.json())


ALL = [
    "arm-1",
    "big-1",
    "big-2",
    "cp-1",
    "cp-2",
    "cp-3",
    "gpu-1",
    "lab-1",
    "small-1",
    "worker-1",
    "worker-2",
    "worker-3",
]


async def test_not_forms(sim: Simulator, admin: httpx.AsyncClient) -> None:
    cp1 = sim.state.by_hostname["cp-1"]
    assert await hostnames(admin, not_id=cp1.system_id) == [h for h in ALL if h != "cp-1"]
    assert await hostnames(admin, not_hostname=["cp-1", "cp-2"]) == [
        h for h in ALL if h not in ("cp-1", "cp-2")
    ]
    assert await hostnames(admin, not_domain="maas") == ["lab-1"]
    assert await hostnames(admin, system_id=cp1.system_id) == ["cp-1"]
    r = await admin.post("machines/", params={"op": "allocate"}, data={"name": "cp-2", "agent_name": "a1"})
    assert r.status_code == 200
    assert await hostnames(admin, owner="admin") == ["cp-2"]
    assert await hostnames(admin, not_owner="admin") == [h for h in ALL if h != "cp-2"]
    assert await hostnames(admin, not_agent_name="a1") == [h for h in ALL if h != "cp-2"]
    assert await hostnames(admin, not_status="ready") == ["cp-2"]
    assert await hostnames(admin, not_simple_status="=ready") == ["cp-2"]
    assert await hostnames(admin, status="=allocated") == ["cp-2"]
    assert await hostnames(admin, not_arch="arm64") == [h for h in ALL if h != "arm-1"]
    assert await hostnames(admin, not_arch="arm64/generic", arch="amd64") == [h for h in ALL if h != "arm-1"]
    assert await hostnames(admin, power_state="on") == []
    assert await hostnames(admin, not_power_state="=on") == ALL


async def test_network_storage_speed_and_target_filters(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sim.state.subnets[7] = Subnet(7, "storage", "10.70.0.0/24", vid=70, space="storage")
    gpu = sim.state.by_hostname["gpu-1"]
    gpu.interfaces[0].subnet_id, gpu.interfaces[0].ip = 7, "10.70.0.5"
    gpu.cached_json = None
    assert await hostnames(admin, fabrics="fabric-0") == ALL
    assert await hostnames(admin, fabrics="fabric-9") == []
    assert await hostnames(admin, not_fabrics="fabric-0") == []
    assert await hostnames(admin, fabric_classes="10g") == []
    assert await hostnames(admin, not_fabric_classes="10g") == ALL
    assert await hostnames(admin, vlans="vid:70") == ["gpu-1"]
    assert await hostnames(admin, vlans="id:5070") == ["gpu-1"]
    assert await hostnames(admin, vlans="name:untagged") == [h for h in ALL if h != "gpu-1"]
    assert await hostnames(admin, not_vlans="5070") == [h for h in ALL if h != "gpu-1"]
    assert await hostnames(admin, subnets="10.70.0.0/24") == ["gpu-1"]
    assert await hostnames(admin, subnets=["space:storage", "id:7"]) == ["gpu-1"]
    assert await hostnames(admin, subnets=["space:storage", "lab"]) == []  # every value must match
    assert await hostnames(admin, not_subnets="lab") == ["gpu-1"]
    assert await hostnames(admin, link_speed="10000") == ALL
    assert await hostnames(admin, link_speed="40000") == []
    # The first (here only) storage entry is the disk holding / (MAAS nodes_by_storage): the workers' 2T sdb
    # is not their root disk.
    assert await hostnames(admin, storage="1500") == ["big-1", "big-2"]
    assert await hostnames(admin, storage="root:100(ssd)", cpu_count="16") == ["big-1", "gpu-1"]
    assert await hostnames(admin, interfaces="eth0:space=storage") == ["gpu-1"]
    assert await hostnames(admin, devices="vendor_id=8086") == []
    assert await hostnames(admin, cpu_speed="2400") == ALL
    assert await hostnames(admin, cpu_speed="2401") == []
    assert await hostnames(admin, deployment_target="disk") == ALL
    assert await hostnames(admin, deployment_target="memory") == []
    assert await hostnames(admin, not_deployment_target="=memory") == ALL
    assert await hostnames(admin, comment="ignored", dry_run="true") == ALL


@pytest.mark.parametrize(
    ("params", "errors"),
    [
        (
            {"not_status": "sleeping"},
            {"not_status": ["Select a valid choice. sleeping is not one of the available choices."]},
        ),
        (
            {"not_simple_status": "x"},
            {"not_simple_status": ["Select a valid choice. x is not one of the available choices."]},
        ),
        (
            {"power_state": "dim"},
            {"power_state": ["Select a valid choice. dim is not one of the available choices."]},
        ),
        (
            {"deployment_target": "cloud"},
            {"deployment_target": ["Select a valid choice. cloud is not one of the available choices."]},
        ),
        ({"not_arch": "sparc"}, {"not_arch": ["Architecture not recognised."]}),
        ({"link_speed": "fast"}, {"link_speed": ["Invalid link speed: number required."]}),
        ({"devices": "nonsense"}, {"devices": ["Unknown devices constraint: 'nonsense"]}),  # sic (l.195)
        ({"not_system_id": "x"}, {"not_system_id": ["No such constraint."]}),
    ],
)
async def test_filter_errors(
    admin: httpx.AsyncClient, params: dict[str, str], errors: dict[str, list[str]]
) -> None:
    r = await admin.get("machines/", params=params)
    assert (r.status_code, r.json()) == (400, errors)


async def test_allocate_takes_the_filter_fields(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await admin.post(
        "machines/", params={"op": "allocate"}, data={"not_arch": "amd64", "fabrics": "fabric-0"}
    )
    assert (r.status_code, r.json()["hostname"]) == (200, "arm-1")
    r = await admin.post("machines/", params={"op": "allocate"}, data={"devices": "vendor_id=10de"})
    assert r.status_code == 409
    assert "devices=vendor_id=10de" in r.text
    r = await admin.post(
        "machines/",
        params={"op": "allocate"},
        data={"not_owner": "nobody", "link_speed": "1000", "deployment_target": "disk"},
    )
    assert r.status_code == 200, r.text
