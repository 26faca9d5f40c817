"""LXD MaasMachines end to end: ``capmaas run`` against the real apiserver and the simulator on loopback.

The test plays Cluster API core (Clusters, Machines, bootstrap Secrets), as in the other operator tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from operator_harness import Harness

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers.lxd_placer import vm_hostname
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

pytestmark = pytest.mark.k8s

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


def inventory(hosts_per_zone: int = 2, cores: int = 8, metal: int = 2) -> Inventory:
    """3 zones, ``hosts_per_zone`` LXD hosts each (over-commit 1.0, tagged ``capmaas-shared``: an admin's
    hosts for every namespace), ``metal`` bare-metal machines each."""
    zones = ["az1", "az2", "az3"]
    machines: list[dict[str, Any]] = []
    hosts: list[dict[str, Any]] = []
    for z in zones:
        for i in range(hosts_per_zone):
            machines.append(
                {"hostname": f"kvm-{z}-{i}", "zone": z, "status": "deployed", "owner": "admin",
                 "cpu_count": cores, "memory": 32768, "disks": [{"name": "sda", "size": "1T"}]}
            )  # fmt: skip
            hosts.append(
                {"name": f"lxd-{z}-{i}", "host": f"kvm-{z}-{i}", "cpu_over_commit_ratio": 1.0,
                 "memory_over_commit_ratio": 1.0, "tags": ["capmaas-shared"],
                 "storage_pools": [{"name": "default", "size": "300G", "default": True}]}
            )  # fmt: skip
        for i in range(metal):
            machines.append(
                {"hostname": f"metal-{z}-{i}", "zone": z, "cpu_count": 16, "memory": 65536,
                 "disks": [{"name": "sda", "size": "960G"}]}
            )  # fmt: skip
    return Inventory({"zones": [{"name": z} for z in zones], "machines": machines, "vm_hosts": hosts})


class Interceptor:
    """Wraps the simulator's ASGI app; ``on_compose`` runs after MAAS composed, before the answer is sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.on_compose: Callable[[], None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        hook = self.on_compose
        if hook is None or scope.get("type") != "http" or b"op=compose" not in scope.get("query_string", b""):
            await self.app(scope, receive, send)
            return
        held: list[Any] = []

        async def hold(message: Any) -> None:
            held.append(message)

        await self.app(scope, receive, hold)
        self.on_compose = None
        hook()  # the operator dies here: MAAS has the VM, the operator never hears of it
        for message in held:
            await send(message)


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Simulator:
    inv = getattr(request, "param", None) or inventory()
    s = Simulator(inv, timings=Timings(commission=0.5, deploy=1.0, release=0.3), faults=Faults())
    s.app = Interceptor(s.app)  # type: ignore[method-assign,assignment]
    return s


async def custom_machine(h: Harness, name: str, *, cp: bool, **spec: Any) -> None:
    """Like ``Harness.machine``, with extra MaasMachine spec fields from the start."""
    await h.apply(
        demo.bootstrap_secret(f"{name}-bootstrap", h.namespace, "c1"),
        demo.machine(name, h.namespace, "c1", control_plane=cp, bootstrap=f"{name}-bootstrap"),
    )
    muid = await h.uid("machines.cluster.x-k8s.io", name)
    mm = demo.maasmachine(name, h.namespace, "c1", control_plane=cp, machine_uid=muid)
    mm["spec"].update(spec)
    await h.apply(mm)


async def lxd_machine(h: Harness, name: str, *, cp: bool, lxd: dict[str, Any] | None = None) -> None:
    """An LXD MaasMachine (2 cores, 4096 MiB, 20 GB unless ``lxd.storage`` says otherwise)."""
    extra: dict[str, Any] = {"lxdConfig": lxd} if lxd is not None else {}
    await custom_machine(h, name, cp=cp, provisioningMode="lxd", minDiskSize=20, **extra)


def client(h: Harness) -> maas.MaasClient:
    return maas.MaasClient(h.url, api_key=h.sim.api_key)


def vm_host_usage(sim: Simulator) -> dict[str, tuple[int, int, int]]:
    out = {}
    for host in sim.state.vm_hosts.values():
        cores, memory, storage = host.used()
        out[host.name] = (cores, memory, sum(storage.values()))
    return out


async def all_ready(h: Harness, names: list[str]) -> bool:
    return all([await h.field("maasmachines", n, "status", "ready") for n in names])


async def delete_all_and_wait(h: Harness) -> None:
    await h.k("delete", "maasmachines", "--all", "-n", h.namespace, "--wait=false")

    async def gone() -> bool:
        return not await h.items("maasmachines")

    await h.wait("MaasMachines deleted", gone, within=60)


async def test_mixed_cluster_spreads_the_lxd_control_plane_skips_a_full_host_and_decomposes(
    harness: Harness,
) -> None:
    h = harness
    async with client(h) as c:
        hosts = {x.name: x for x in await c.vm_hosts.list()}
        await c.vm_hosts.compose(hosts["lxd-az1-0"].id, maas.ComposeRequest(cores=8, hostname="filler"))
    start = vm_host_usage(h.sim)
    h.operator.start()
    await h.cluster()
    cps = ["cp0", "cp1", "cp2"]
    for n in cps:
        await lxd_machine(h, n, cp=True, lxd={"storage": {"size": 25, "pool": "default"}})
    for n in ["w0", "w1"]:
        await h.machine(n, cp=False, min_memory=16384)  # bare metal; larger than any VM
    await h.wait(
        "3 LXD control planes and 2 bare-metal workers Ready", lambda: all_ready(h, [*cps, "w0", "w1"]), 120
    )

    zones, vm_hosts, messages = set(), set(), []
    for n in cps:
        mm = await h.get("maasmachines", n)
        assert mm is not None
        spec, st = mm["spec"], mm["status"]
        assert spec["providerID"] == f"maas-lxd://{st['failureDomain']}/{spec['systemID']}"
        assert st["provisioningMode"] == "lxd"
        assert st["vmResourceUsage"] == {"allocatedCores": 2, "allocatedMemory": 4096, "allocatedDisk": 25}
        vm = h.sim.machine(spec["systemID"])
        assert vm["pod"]["name"] == st["lxdHost"]
        assert vm["hostname"] == vm_hostname(n, mm["metadata"]["uid"])
        for t in (
            C.LXD_HOST_SELECTED_CONDITION,
            C.LXD_RESOURCES_ALLOCATED_CONDITION,
            C.LXD_VM_CREATED_CONDITION,
        ):
            cond = await h.condition("maasmachines", n, t)
            assert cond is not None
            assert cond["status"] == "True", cond
        messages.append(
            (await h.condition("maasmachines", n, C.LXD_HOST_SELECTED_CONDITION) or {})["message"]
        )
        zones.add(st["failureDomain"])
        vm_hosts.add(st["lxdHost"])
    assert zones == {"az1", "az2", "az3"}
    assert len(vm_hosts) == 3
    assert "lxd-az1-0" not in vm_hosts
    assert any("1 host in az1 lacks 2 free cores" in m for m in messages), messages
    for n in ["w0", "w1"]:
        mm = await h.get("maasmachines", n)
        assert mm is not None
        assert mm["spec"]["providerID"].startswith("maas://")
        assert mm["status"]["provisioningMode"] == "bare-metal"
        assert h.sim.machine(mm["spec"]["systemID"])["pod"] is None

    await delete_all_and_wait(h)
    assert vm_host_usage(h.sim) == start
    assert [m for m in h.sim.state.machines.values() if m.pod_id is not None and m.hostname != "filler"] == []
    assert h.sim.check_invariants() == []


@pytest.mark.parametrize("sim", [inventory(hosts_per_zone=1, cores=4, metal=0)], indirect=True, ids=["full"])
async def test_all_hosts_full_waits_with_the_reason_and_proceeds_when_capacity_frees(
    harness: Harness,
) -> None:
    h = harness
    async with client(h) as c:
        fillers = {
            x.zone.name if x.zone else "": await c.vm_hosts.compose(x.id, maas.ComposeRequest(cores=4))
            for x in await c.vm_hosts.list()
        }
        h.operator.start()
        await h.cluster()
        await lxd_machine(h, "cp0", cp=True)

        async def waiting() -> bool:
            cond = await h.condition("maasmachines", "cp0", C.LXD_HOST_SELECTED_CONDITION)
            return cond is not None and cond["reason"] == C.NO_VM_HOST_AVAILABLE_REASON

        await h.wait("NoVMHostAvailable", waiting, within=60)
        ready = await h.condition("maasmachines", "cp0", C.READY_CONDITION)
        assert ready is not None
        assert ready["reason"] == C.NO_VM_HOST_AVAILABLE_REASON
        for zone in ("az1", "az2", "az3"):
            assert f"1 host in {zone} lacks 2 free cores" in ready["message"], ready["message"]
        assert "waiting for capacity" in ready["message"]
        assert await h.field("maasmachines", "cp0", "spec", "systemID") is None
        await c.machines.delete(fillers["az2"].system_id)
    await h.wait("cp0 Ready once az2 has room", lambda: all_ready(h, ["cp0"]), within=60)
    assert await h.field("maasmachines", "cp0", "status", "lxdHost") == "lxd-az2-0"
    assert h.sim.check_invariants() == []


@pytest.mark.parametrize("sim", [inventory(hosts_per_zone=0, metal=1)], indirect=True, ids=["metal"])
async def test_register_vm_host_makes_a_deployed_machine_a_vm_host_that_receives_vms(
    harness: Harness,
) -> None:
    h = harness
    h.operator.env["CAPMAAS_LXD__VM_HOST_NAMESPACES"] = h.namespace  # the admin lets it register hosts
    h.operator.start()
    await h.cluster()
    await custom_machine(h, "host0", cp=False, minCPU=16, minMemory=65536, registerVMHost=True)
    await h.wait("host0 Ready", lambda: all_ready(h, ["host0"]), within=60)
    sid = await h.field("maasmachines", "host0", "spec", "systemID")
    registered = h.sim.state.hosts_of(sid)
    assert len(registered) == 1
    assert registered[0].type == "lxd"

    async def tagged() -> bool:
        return f"capmaas-ns-{h.namespace}" in registered[0].tags  # the namespace's host (issue 21)

    await h.wait("the VM host tagged for the namespace", tagged, within=30)
    await lxd_machine(h, "cp0", cp=True)
    await h.wait("cp0 Ready on the new VM host", lambda: all_ready(h, ["cp0"]), within=60)
    vm = h.sim.machine(await h.field("maasmachines", "cp0", "spec", "systemID"))
    assert vm["pod"]["id"] == registered[0].id
    assert await h.field("maasmachines", "cp0", "status", "lxdHost") == registered[0].name


async def test_operator_killed_between_compose_and_status_write_adopts_the_vm(harness: Harness) -> None:
    h = harness
    interceptor = h.sim.app
    assert isinstance(interceptor, Interceptor)
    killed = asyncio.Event()

    def kill() -> None:
        h.operator.stop(kill=True)
        killed.set()

    interceptor.on_compose = kill
    h.operator.start()
    await h.cluster()
    await lxd_machine(h, "cp0", cp=True)
    await asyncio.wait_for(killed.wait(), timeout=60)
    uid = await h.uid("maasmachines", "cp0")
    hostname = vm_hostname("cp0", uid)

    def vms() -> list[str]:
        return [m.system_id for m in h.sim.state.machines.values() if m.hostname == hostname]

    assert len(vms()) == 1  # MAAS composed it ...
    assert (
        await h.field("maasmachines", "cp0", "spec", "systemID") is None
    )  # ... the operator never recorded it
    h.operator.start()
    await h.wait("cp0 Ready after the restart", lambda: all_ready(h, ["cp0"]), within=60)
    assert vms() == [await h.field("maasmachines", "cp0", "spec", "systemID")]
    assert h.sim.check_invariants() == []
    assert len([m for m in h.sim.state.machines.values() if m.pod_id is not None]) == 1
