"""LXD MaasMachines against the simulator: spread, skipped/full hosts, refusals, crash recovery, delete."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_env import Env, make_env

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers.errors import TerminalError, TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, COMPOSING
from capmaas.reconcilers.keys import MACHINE_FINALIZER as FINALIZER
from capmaas.reconcilers.lxd_placer import vm_hostname
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


def inventory(hosts_per_zone: int = 2, cores: int = 8, memory: int = 16384, disk: str = "200G") -> Inventory:
    """3 zones with ``hosts_per_zone`` LXD hosts each (over-commit 1.0, tagged ``capmaas-shared``: an admin's
    hosts every namespace may use) on 10.30.0.0/24, plus 6 bare-metal machines."""
    zones = ["az1", "az2", "az3"]
    machines: list[dict[str, Any]] = []
    hosts: list[dict[str, Any]] = []
    for z in zones:
        for i in range(hosts_per_zone):
            name = f"kvm-{z}-{i}"
            machines.append(
                {"hostname": name, "zone": z, "status": "deployed", "owner": "admin", "cpu_count": cores,
                 "memory": memory, "disks": [{"name": "sda", "size": "1T"}],
                 "interfaces": [{"name": "eth0", "subnet": "lxd", "ip": f"10.30.0.{100 + len(hosts)}"}]}
            )  # fmt: skip
            hosts.append(
                {"name": f"lxd-{z}-{i}", "host": name, "cpu_over_commit_ratio": 1.0,
                 "memory_over_commit_ratio": 1.0, "tags": ["capmaas-shared"],
                 "storage_pools": [{"name": "default", "size": disk, "default": True}]}
            )  # fmt: skip
        for i in range(2):
            machines.append(
                {"hostname": f"metal-{z}-{i}", "zone": z, "cpu_count": 16, "memory": 65536,
                 "disks": [{"name": "sda", "size": "960G"}]}
            )  # fmt: skip
    return Inventory(
        {
            "zones": [{"name": z} for z in zones],
            "subnets": [{"cidr": "10.30.0.0/24", "name": "lxd", "gateway_ip": "10.30.0.1"}],
            "machines": machines,
            "vm_hosts": hosts,
        }
    )


def lxd_sim(**kw: Any) -> Simulator:
    return Simulator(kw.pop("inv", None) or inventory(), timings=Timings.fast(), faults=Faults(), **kw)


@pytest.fixture
async def lenv() -> AsyncIterator[Env]:
    e = make_env(lxd_sim())
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def add_lxd(env: Env, name: str, *, cp: bool = False, lxd: dict[str, Any] | None = None, **spec: Any) -> None:
    env.machine(name, cp=cp)
    body = env.kube.get("maasmachines", name)
    body["spec"].update(provisioningMode="lxd", minDiskSize=20, **spec)
    if lxd is not None:
        body["spec"]["lxdConfig"] = lxd


LXD_CONDITIONS = (
    C.LXD_HOST_SELECTED_CONDITION,
    C.LXD_RESOURCES_ALLOCATED_CONDITION,
    C.LXD_VM_CREATED_CONDITION,
    C.LXD_VM_DEPLOYED_CONDITION,
    C.READY_CONDITION,
)


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def cond(b: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in b["status"]["conditions"] if c["type"] == type_)


def used(sim: Simulator) -> dict[str, tuple[int, int, int]]:
    out = {}
    for h in sim.state.vm_hosts.values():
        cores, memory, storage = h.used()
        out[h.name] = (cores, memory, sum(storage.values()))
    return out


async def delete_all(env: Env, names: list[str]) -> None:
    for n in names:
        env.kube.get("maasmachines", n)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(10):
        for n in names:
            if ("maasmachines", "ns", n) in env.kube.objects:
                await env.step(n)
        await env.settle()
    assert not [n for n in names if ("maasmachines", "ns", n) in env.kube.objects]


async def test_three_control_planes_land_one_per_zone_on_three_hosts_and_decompose_on_delete(
    lenv: Env,
) -> None:
    env = lenv
    await env.cluster()
    before = used(env.sim)
    names = ["cp0", "cp1", "cp2"]
    for n in names:
        add_lxd(env, n, cp=True, lxd={"project": "default", "storage": {"size": 30, "pool": "default"}})
    env.sim.reset_counters()
    await env.drive(names, ready)
    zones, hosts = set(), set()
    for n in names:
        b = env.kube.get("maasmachines", n)
        sid, st = b["spec"]["systemID"], b["status"]
        assert b["spec"]["providerID"] == f"maas-lxd://{st['failureDomain']}/{sid}"
        assert b["spec"]["failureDomain"] == st["failureDomain"]
        assert st["provisioningMode"] == "lxd"
        assert st["lxdProject"] == "default"
        assert st["vmResourceUsage"] == {"allocatedCores": 2, "allocatedMemory": 4096, "allocatedDisk": 30}
        vm = env.sim.machine(sid)
        assert vm["hostname"] == vm_hostname(n, b["metadata"]["uid"])
        assert vm["pod"]["name"] == st["lxdHost"]
        # The VM's NIC is on its host's network; the address MAAS gave it at deploy reaches the status.
        assert len(vm["ip_addresses"]) == 1
        assert vm["ip_addresses"][0].startswith("10.30.0."), vm["ip_addresses"]
        for kind in ("InternalIP", "ExternalIP"):
            assert {"type": kind, "address": vm["ip_addresses"][0]} in st["addresses"], st["addresses"]
        for t in LXD_CONDITIONS:
            assert cond(b, t)["status"] == "True", (t, cond(b, t))
        assert [m["system_id"] for m in env.sim.machines_by_agent(b["metadata"]["uid"])] == [sid]
        assert COMPOSING not in str(b["metadata"].get("annotations"))
        zones.add(st["failureDomain"])
        hosts.add(st["lxdHost"])
    assert zones == {"az1", "az2", "az3"}
    assert len(hosts) == 3
    # One listing served the three placements that ran in the same pass.
    listings = env.sim.counters[("GET", "/MAAS/api/2.0/vm-hosts/", None)]
    assert listings == 1, env.sim.counters
    await delete_all(env, names)
    assert used(env.sim) == before
    assert env.sim.check_invariants() == []


async def test_full_host_is_skipped_and_named_in_the_condition(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    client = next(iter(env.connections.sessions()), None) or await env.connections.connect(env.creds)
    hosts = {h.name: h for h in await client.list_vm_hosts()}
    # Fill lxd-az1-0 completely (8 cores) behind the operator's back.
    await client.compose(hosts["lxd-az1-0"].id, maas.ComposeRequest(cores=8, memory=2048, hostname="filler"))
    add_lxd(env, "cp0", cp=True, failureDomain="az1")
    await env.drive(["cp0"], ready)
    b = env.kube.get("maasmachines", "cp0")
    assert b["status"]["lxdHost"] == "lxd-az1-1"
    msg = cond(b, C.LXD_HOST_SELECTED_CONDITION)["message"]
    assert "skipped: 4 hosts are not in zone 'az1'; 1 host in az1 lacks 2 free cores" in msg, msg


async def test_all_full_waits_with_the_reason_and_proceeds_when_capacity_frees() -> None:
    env = make_env(lxd_sim(inv=inventory(hosts_per_zone=1, cores=4)))
    try:
        await env.cluster()
        session = await env.connections.connect(env.creds)
        fillers = []
        for h in await session.list_vm_hosts():
            fillers.append(await session.compose(h.id, maas.ComposeRequest(cores=4, hostname=f"fill-{h.id}")))
        add_lxd(env, "cp0", cp=True)
        with pytest.raises(TransientError) as err:
            await env.step("cp0")
        assert err.value.reason == C.NO_VM_HOST_AVAILABLE_REASON
        b = env.kube.get("maasmachines", "cp0")
        for t in (C.LXD_HOST_SELECTED_CONDITION, C.READY_CONDITION):
            c = cond(b, t)
            assert c["status"] == "False"
            assert c["reason"] == C.NO_VM_HOST_AVAILABLE_REASON
            assert "3 hosts" not in c["message"]  # per zone, not lumped together
            assert "1 host in az1 lacks 2 free cores" in c["message"], c["message"]
            assert "waiting for capacity" in c["message"]
        assert "systemID" not in b["spec"]
        assert len(env.machines.lxd.placer.book(env.creds.endpoint)) == 0  # waiting, not holding
        await session.delete_machine(fillers[1].system_id)
        env.machines.lxd.placer.invalidate(env.creds.endpoint)
        await env.drive(["cp0"], ready)
        assert env.kube.get("maasmachines", "cp0")["status"]["failureDomain"] == "az2"
    finally:
        await env.connections.aclose()


async def test_over_commit_503_on_a_stale_listing_retries_on_another_host(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    session = await env.connections.connect(env.creds)
    placer = env.machines.lxd.placer
    placer.max_age = 3600.0
    hosts = {h.name: h for h in await session.list_vm_hosts()}
    # A small VM makes lxd-az1-0 the best fit in the listing the operator caches...
    await session.compose(hosts["lxd-az1-0"].id, maas.ComposeRequest(cores=2, hostname="small"))
    await placer.listing(env.creds.endpoint, session)
    # ...then the host fills up behind its back.
    await session.compose(hosts["lxd-az1-0"].id, maas.ComposeRequest(cores=6, hostname="sneaky"))
    add_lxd(env, "cp0", cp=True, failureDomain="az1")
    await env.drive(["cp0"], ready)
    b = env.kube.get("maasmachines", "cp0")
    assert b["status"]["lxdHost"] == "lxd-az1-1"
    refused = [e for e in env.kube.events if e[2] == "VMComposeRefused"]
    assert len(refused) == 1, env.kube.events
    assert "lxd-az1-0" in refused[0][3], refused
    assert "overcommit" in refused[0][3], refused
    assert env.sim.check_invariants() == []


async def test_pinned_full_host_503_is_reported_and_host_gone_is_replaced(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    session = await env.connections.connect(env.creds)
    placer = env.machines.lxd.placer
    placer.max_age = 3600.0
    listing = await placer.listing(env.creds.endpoint, session)
    full = next(h for h in listing.hosts.values() if h.name == "lxd-az2-0")
    await session.compose(full.id, maas.ComposeRequest(cores=8, hostname="sneaky"))
    add_lxd(env, "pinned", lxd={"vmHost": "lxd-az2-0"})
    with pytest.raises(TransientError) as err:
        await env.step("pinned")
    # The stale listing sent it to the host; MAAS said 503; the fresh listing shows the host full.
    assert err.value.reason == C.NO_VM_HOST_AVAILABLE_REASON
    assert "lxd-az2-0 refused the compose" in err.value.message
    assert "overcommit" in err.value.message
    assert "VMComposeRefused" in env.kube.reasons()
    # A host that vanished after the listing: 404 on compose, placed elsewhere.
    hosts = {h.name: h for h in await session.list_vm_hosts()}
    await session.compose(hosts["lxd-az3-0"].id, maas.ComposeRequest(cores=2, hostname="small"))
    listing = await placer.listing(env.creds.endpoint, session, fresh=True)
    gone = next(h for h in listing.hosts.values() if h.name == "lxd-az3-0")
    env.sim.delete_vm_host(env.sim.state.vm_hosts[gone.id], decompose=True)
    add_lxd(env, "w0", failureDomain="az3")
    await env.drive(["w0"], ready)
    assert env.kube.get("maasmachines", "w0")["status"]["lxdHost"] == "lxd-az3-1"


async def test_crash_between_compose_and_spec_write_adopts_the_vm(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    add_lxd(env, "cp0", cp=True)
    b = env.kube.get("maasmachines", "cp0")
    uid = b["metadata"]["uid"]
    hostname = vm_hostname("cp0", uid)
    session = await env.connections.connect(env.creds)
    host = next(h for h in await session.list_vm_hosts() if h.name == "lxd-az2-1")
    # What a crashed pass leaves: the annotation written, the VM composed, nothing in spec.
    composed = await session.compose(
        host.id, maas.ComposeRequest(cores=2, memory=4096, storage="root:20(default)", hostname=hostname)
    )
    b["metadata"].setdefault("annotations", {})[ANNOTATION_PREFIX + COMPOSING] = str(host.id)
    await env.drive(["cp0"], ready)
    b = env.kube.get("maasmachines", "cp0")
    assert b["spec"]["systemID"] == composed.system_id
    assert b["status"]["lxdHost"] == "lxd-az2-1"
    assert "VMAdopted" in env.kube.reasons()
    assert len([m for m in env.sim.state.machines.values() if m.hostname == hostname]) == 1
    assert env.sim.check_invariants() == []


async def test_hostname_conflict_without_annotation_is_adopted_too(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    add_lxd(env, "w0", failureDomain="az1")
    uid = env.kube.get("maasmachines", "w0")["metadata"]["uid"]
    session = await env.connections.connect(env.creds)
    host = next(h for h in await session.list_vm_hosts() if h.name == "lxd-az1-0")
    await session.compose(host.id, maas.ComposeRequest(cores=2, memory=4096, hostname=vm_hostname("w0", uid)))
    await env.drive(["w0"], ready)
    assert "VMAdopted" in env.kube.reasons()
    assert len([m for m in env.sim.state.machines.values() if m.hostname == vm_hostname("w0", uid)]) == 1


async def test_maas4_answers_410_and_the_machine_gets_a_terminal_condition() -> None:
    env = make_env(lxd_sim(maas4=True))
    try:
        await env.cluster()
        add_lxd(env, "cp0", cp=True)
        with pytest.raises(TerminalError) as err:
            await env.step("cp0")
        assert err.value.reason == C.VM_HOSTS_UNSUPPORTED_REASON
        b = env.kube.get("maasmachines", "cp0")
        c = cond(b, C.LXD_HOST_SELECTED_CONDITION)
        assert c["reason"] == C.VM_HOSTS_UNSUPPORTED_REASON
        assert "MAAS 4.0" in c["message"]
        assert cond(b, C.READY_CONDITION)["reason"] == C.VM_HOSTS_UNSUPPORTED_REASON
    finally:
        await env.connections.aclose()


async def test_register_vm_host_turns_a_bare_metal_machine_into_a_host_that_receives_vms() -> None:
    inv = inventory(hosts_per_zone=0)
    env = make_env(lxd_sim(inv=inv))
    try:
        await env.cluster()
        env.machine("host0", min_cpu=16, min_memory=65536)
        env.kube.get("maasmachines", "host0")["spec"]["registerVMHost"] = True
        await env.drive(["host0"], ready)
        sid = env.kube.get("maasmachines", "host0")["spec"]["systemID"]
        registered = env.sim.state.hosts_of(sid)
        assert len(registered) == 1
        assert registered[0].type == "lxd"
        add_lxd(env, "cp0", cp=True)
        await env.drive(["cp0"], ready)
        b = env.kube.get("maasmachines", "cp0")
        assert b["status"]["lxdHost"] == registered[0].name
        assert env.sim.machine(b["spec"]["systemID"])["pod"]["id"] == registered[0].id
    finally:
        await env.connections.aclose()


async def test_concurrent_placements_share_one_listing_and_never_overcommit() -> None:
    env = make_env(lxd_sim(inv=inventory(hosts_per_zone=1, cores=4)))
    try:
        await env.cluster()
        names = [f"w{i}" for i in range(8)]  # room for 6 (3 hosts x 4 cores / 2)
        for n in names:
            add_lxd(env, n)
        env.sim.reset_counters()
        results = await asyncio.gather(*(env.step(n) for n in names), return_exceptions=True)
        waiting = [r for r in results if isinstance(r, TransientError)]
        assert len(waiting) == 2, results
        assert {w.reason for w in waiting} == {C.NO_VM_HOST_AVAILABLE_REASON}
        listings = env.sim.counters[("GET", "/MAAS/api/2.0/vm-hosts/", None)]
        assert listings == 1, env.sim.counters
        assert env.sim.check_invariants() == []
    finally:
        await env.connections.aclose()


async def test_delete_before_compose_just_drops_the_finalizer(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    add_lxd(env, "w0", lxd={"vmHost": "no-such-host"})
    with pytest.raises(TransientError):
        await env.step("w0")
    b = env.kube.get("maasmachines", "w0")
    assert "not the pinned host 'no-such-host'" in cond(b, C.LXD_HOST_SELECTED_CONDITION)["message"]
    assert FINALIZER in b["metadata"]["finalizers"]
    await delete_all(env, ["w0"])


async def test_bare_metal_allocate_never_takes_a_commissioned_vm_waiting_for_its_owner(lenv: Env) -> None:
    env = lenv
    await env.cluster()
    add_lxd(env, "cp0", cp=True, failureDomain="az1")
    await env.step("cp0")  # composed, commissioning
    vm = env.kube.get("maasmachines", "cp0")["spec"]["systemID"]
    env.sim.tick()
    assert env.sim.machine(vm)["status_name"] == "Ready"
    # A loose bare-metal MaasMachine in the same zone: the 2-core VM is the cheapest Ready match there.
    env.machine("w0", failure_domain="az1")
    await env.drive(["w0"], ready)
    metal = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    assert metal != vm
    assert env.sim.machine(metal)["pod"] is None
    assert env.sim.machine(vm)["status_name"] == "Ready"
    await env.drive(["cp0"], ready)
    assert env.kube.get("maasmachines", "cp0")["spec"]["systemID"] == vm
    assert env.sim.check_invariants() == []


async def test_storage_size_with_units_composes_a_vm_of_that_size(lenv: Env) -> None:
    """``lxdConfig.storage.size: "20G"`` (the CRD accepts units) is a 20 GB disk, not a ValueError loop."""
    env = lenv
    await env.cluster()
    add_lxd(env, "w0", lxd={"storage": {"size": "20G", "pool": "default"}})
    env.kube.get("maasmachines", "w0")["spec"]["minDiskSize"] = 10  # the 20 GB comes from storage.size
    await env.drive(["w0"], ready)
    b = env.kube.get("maasmachines", "w0")
    st = b["status"]
    assert st["provisioningMode"] == "lxd"
    assert st["vmResourceUsage"]["allocatedDisk"] == 20
    assert used(env.sim)[st["lxdHost"]] == (2, 4096, 20 * 10**9)  # bytes on the host
    assert env.sim.machine(b["spec"]["systemID"])["pod"]["name"] == st["lxdHost"]
    assert cond(b, C.READY_CONDITION)["status"] == "True"
    await delete_all(env, ["w0"])


async def test_go_provider_spelling_composes_an_lxd_vm(lenv: Env) -> None:
    """``spec.lxd.enabled: true`` with ``vmConfig`` (the Go provider's form, no provisioningMode) is an LXD
    VM: disk from vmConfig.diskSize, NIC on the vmConfig.network subnet, a maas-lxd:// providerID."""
    env = lenv
    await env.cluster()
    env.machine("w0")
    body = env.kube.get("maasmachines", "w0")
    assert "provisioningMode" not in body["spec"]
    body["spec"].update(lxd={"enabled": True, "vmConfig": {"diskSize": 25, "network": "lxd"}}, minDiskSize=10)
    await env.drive(["w0"], ready)
    b = env.kube.get("maasmachines", "w0")
    sid, st = b["spec"]["systemID"], b["status"]
    assert st["provisioningMode"] == "lxd"
    assert b["spec"]["providerID"] == f"maas-lxd://{st['failureDomain']}/{sid}"
    assert st["vmResourceUsage"]["allocatedDisk"] == 25
    vm = env.sim.machine(sid)
    assert vm["pod"]["name"] == st["lxdHost"]
    assert vm["ip_addresses"][0].startswith("10.30.0."), vm["ip_addresses"]
    await delete_all(env, ["w0"])
