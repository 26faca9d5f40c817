"""Hardware selection (issue 25 item 1): a MaasMachine's architecture, notTags, devices, interfaces,
rootDiskTags and extraDisks become MAAS allocate constraints, MAAS (the simulator, MAAS 3.7.3's parser)
picks only matching servers, and what MAAS refuses shows in the condition in MAAS's words."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from reconciler_env import Env, make_env

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.v1beta1 import MaasMachineSpec, MaasMachineTemplate
from capmaas.reconcilers import facts
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

GPU = {
    "vendor_id": "10de",
    "product_id": "2230",
    "vendor_name": "NVIDIA Corporation",
    "product_name": "GA102GL [RTX A6000]",
    "commissioning_driver": "nvidia",
    "hardware_type": "gpu",
}


def _machine(n: int, **kw: Any) -> dict[str, Any]:
    return {
        "hostname": f"m{n}",
        "cpu_count": 4,
        "memory": 8192,
        "interfaces": [{"name": "eth0", "subnet": "10.0.0.0/24", "ip": f"10.0.0.{10 + n}"}],
        **kw,
    }


INVENTORY: dict[str, Any] = {
    "subnets": [{"cidr": "10.0.0.0/24", "name": "main", "space": "api", "gateway_ip": "10.0.0.1"}],
    "boot_resources": [
        {"name": "ubuntu/jammy", "architecture": "amd64/generic"},
        {"name": "ubuntu/jammy", "architecture": "arm64/generic"},
    ],
    "machines": [
        _machine(1),  # the cheapest: what an unconstrained allocate gets
        _machine(2),
        _machine(3, cpu_count=16, memory=65536, devices=[GPU]),
        _machine(4, cpu_count=16, memory=65536, devices=[GPU]),
        _machine(5, arch="arm64/generic", cpu_count=8),
        _machine(
            6,
            cpu_count=24,
            disks=[
                {"name": "sda", "size": "240G", "tags": ["ssd"]},
                {"name": "sdb", "size": "2T", "tags": ["ssd"]},
            ],
        ),
    ],
}


@pytest.fixture
async def henv() -> AsyncIterator[Env]:
    e = make_env(Simulator(Inventory(INVENTORY), timings=Timings.fast(), faults=Faults()))
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def spec(**kw: Any) -> MaasMachineSpec:
    return MaasMachineSpec.model_validate({"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096, **kw})


def cond(b: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in b["status"]["conditions"] if c["type"] == type_)


def allocated_host(env: Env, name: str) -> str | None:
    sid = env.kube.get("maasmachines", name)["spec"].get("systemID")
    return env.sim.state.machines[sid].hostname if sid else None


async def selecting(env: Env, name: str, rounds: int = 3, **fields: Any) -> dict[str, Any]:
    """A MaasMachine with these spec fields, reconciled a few rounds (until it holds a machine)."""
    env.machine(name)
    env.kube.get("maasmachines", name)["spec"].update(fields)
    for _ in range(rounds):
        with contextlib.suppress(Exception):  # recorded in conditions; the caller checks them
            await env.step(name)
        await env.settle()
        if env.kube.get("maasmachines", name)["spec"].get("systemID"):
            break
    return env.kube.get("maasmachines", name)


# -- the constraints built from the spec ---------------------------------------------------------
def test_min_disk_size_alone_is_still_root_n() -> None:
    assert facts.selection(spec(minDiskSize=40)) == {"storage": "root:40"}
    assert facts.selection(spec()) == {}


def test_each_field_maps_to_its_maas_constraint() -> None:
    got = facts.selection(
        spec(
            architecture="arm64/generic",
            notTags=["broken-nic", "spare"],
            devices=[
                {"vendorID": "10de", "productName": "GA102GL [RTX A6000]", "commissioningDriver": "nvidia"}
            ],
            interfaces=[
                {"label": "api", "space": "api", "linkSpeed": 10000},
                {"label": "st", "fabric": "storage", "vid": 20, "tags": ["sriov", "fast"]},
            ],
            minDiskSize=100,
            rootDiskTags=["ssd"],
            extraDisks=[{"label": "data", "size": "2T", "tags": ["nvme"]}, {"label": "scratch", "size": 500}],
        )
    )
    assert got == {
        "arch": "arm64/generic",
        "not_tags": ("broken-nic", "spare"),
        "devices": "vendor_id=10de,product_name=GA102GL [RTX A6000],commissioning_driver=nvidia",
        "interfaces": "api:space=api,link_speed=10000;st:fabric=storage,vid=20,tag=sriov&&fast",
        "storage": "root:100(ssd),data:2000(nvme),scratch:500",
    }
    form = maas.AllocateConstraints(**got).to_form()
    assert ("devices", got["devices"]) in form
    assert [v for k, v in form if k == "not_tags"] == ["broken-nic", "spare"]


def test_extra_disks_without_min_disk_size_still_put_root_first() -> None:
    assert facts.selection(spec(extraDisks=[{"label": "data", "size": 100}])) == {
        "storage": "root:0,data:100"
    }


# -- against MAAS (the simulator) ------------------------------------------------------------
async def test_a_gpu_template_allocates_only_gpu_servers(henv: Env) -> None:
    await henv.cluster()
    for n in range(2):
        await selecting(henv, f"gpu{n}", devices=[{"vendorID": "10de"}])
    assert {allocated_host(henv, "gpu0"), allocated_host(henv, "gpu1")} == {"m3", "m4"}
    b = await selecting(henv, "gpu2", devices=[{"vendorID": "10de"}])  # both GPU servers are taken
    assert "systemID" not in b["spec"]
    c = cond(b, C.MACHINE_PROVISIONED_CONDITION)
    assert c["reason"] == C.NO_MACHINE_AVAILABLE_REASON
    assert "devices=vendor_id=10de" in c["message"]  # what was asked, and MAAS's own words about it
    assert "No available machine matches constraints:" in c["message"]
    assert henv.sim.state.by_hostname["m1"].owner is None  # the cheaper plain servers were never handed out


async def test_an_arm64_template_allocates_the_arm64_server(henv: Env) -> None:
    await henv.cluster()
    await selecting(henv, "arm", architecture="arm64")
    assert allocated_host(henv, "arm") == "m5"


async def test_storage_and_not_tags_select_by_disks(henv: Env) -> None:
    await henv.cluster()
    henv.sim.state.by_hostname["m3"].tags.add("gpu")
    await selecting(
        henv, "st", minDiskSize=200, rootDiskTags=["ssd"], extraDisks=[{"label": "data", "size": "1T"}]
    )
    assert allocated_host(henv, "st") == "m6"
    await selecting(henv, "nogpu", notTags=["gpu"], minCPU=16)  # m3 is tagged gpu, m4 is not
    assert allocated_host(henv, "nogpu") == "m4"


async def test_a_constraint_maas_refuses_shows_maas_s_text(henv: Env) -> None:
    await henv.cluster()
    b = await selecting(henv, "ppc", architecture="ppc64el")  # no boot image for it: MAAS knows no such arch
    c = cond(b, C.MACHINE_PROVISIONED_CONDITION)
    assert c["reason"] == C.CONSTRAINTS_REFUSED_REASON
    assert "arch: Architecture not recognised." in c["message"]
    assert "systemID" not in b["spec"]
    assert "ConstraintsRefused" in henv.kube.reasons()
    b = await selecting(henv, "dev", devices=[{"vendorName": "NVIDIA Corporation"}])
    assert allocated_host(henv, "dev") in ("m3", "m4")  # a name with a space is sent and matched as is


async def test_interfaces_select_by_space(henv: Env) -> None:
    await henv.cluster()
    await selecting(henv, "net", interfaces=[{"label": "api", "space": "api"}], minCPU=8)
    assert allocated_host(henv, "net") == "m5"  # every NIC is on space api: the cheapest with 8 cores
    b = await selecting(henv, "none", interfaces=[{"label": "st", "space": "storage"}])
    assert cond(b, C.MACHINE_PROVISIONED_CONDITION)["reason"] == C.NO_MACHINE_AVAILABLE_REASON


def test_the_example_templates_mean_what_their_comments_say() -> None:
    path = (
        Path(__file__).resolve().parents[3] / "examples/manifests/maasmachinetemplate-hardware-selection.yaml"
    )
    specs = {
        d["metadata"]["name"]: MaasMachineTemplate.from_body(d).spec.template.spec
        for d in yaml.safe_load_all(path.read_text())
        if d
    }
    assert facts.selection(specs["gpu-workers-v1"]) == {
        "devices": "vendor_id=10de,commissioning_driver=nvidia",
        "not_tags": ("maintenance",),
    }
    assert facts.selection(specs["arm64-workers-v1"]) == {"arch": "arm64/generic"}
    assert facts.selection(specs["storage-workers-v1"]) == {
        "storage": "root:200(ssd),data:2000(nvme),scratch:4000",
        "interfaces": "api:space=api;storage:space=storage,link_speed=25000",
    }
