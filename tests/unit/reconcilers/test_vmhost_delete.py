"""Deleting a bare-metal MaasMachine whose machine MAAS registered as a VM host (``registerVMHost``, or the
MaasCluster's ``lxdConfig.enabled``), against the real simulator.

MAAS 3.7 refuses to release a machine that hosts VM hosts (400 ``The following VM hosts must be removed
first``). The operator waits while VMs are composed on the host (each is decomposed by its own deletion),
removes the VM host it registered, then releases; a VM host it did not register is never removed, and MAAS's
refusal is never reported as ``MaasUnreachable``."""

from __future__ import annotations

import contextlib
from typing import Any

from reconciler_env import Env, make_env
from test_lxd_lifecycle import add_lxd, delete_all, inventory, lxd_sim

from capmaas.api import conditions as C
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import MACHINE_FINALIZER
from capmaas_dev import demo


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def ready_condition(env: Env, name: str) -> dict[str, Any]:
    b = env.kube.get("maasmachines", name)
    return next(c for c in b["status"]["conditions"] if c["type"] == C.READY_CONDITION)


def vm_host_deletes(env: Env) -> list[tuple[str, ...]]:
    return [
        k for k in env.sim.counters if k[0] == "DELETE" and k[1].endswith(("/vm-hosts/{id}/", "/pods/{id}/"))
    ]


async def start_deleting(env: Env, name: str, rounds: int = 4) -> None:
    """Mark ``name`` deleted and run a few passes (the object stays: the caller checks why)."""
    env.kube.get("maasmachines", name)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(rounds):
        with contextlib.suppress(TransientError):  # the condition says why (checked by the caller)
            await env.step(name)
        await env.settle()


async def vm_host_env(*, register: bool = True, cluster_lxd: bool = False) -> tuple[Env, str]:
    """A cluster with one bare-metal machine ``host0`` deployed (and registered as a VM host when asked)."""
    env = make_env(lxd_sim(inv=inventory(hosts_per_zone=0)))
    await env.cluster()
    if cluster_lxd:
        env.kube.get("maasclusters", "c1")["spec"]["lxdConfig"] = {"enabled": True}
    env.machine("host0", min_cpu=16, min_memory=65536)
    env.kube.get("maasmachines", "host0")["spec"]["registerVMHost"] = register
    await env.drive(["host0"], ready)
    return env, env.kube.get("maasmachines", "host0")["spec"]["systemID"]


async def test_vm_host_without_vms_is_removed_and_the_machine_released() -> None:
    """Before: the release's 400 became MaasUnreachable, retried forever; the finalizer never went."""
    env, sid = await vm_host_env()
    try:
        assert len(env.sim.state.hosts_of(sid)) == 1
        env.sim.reset_counters()
        await delete_all(env, ["host0"])
        assert env.sim.machine(sid)["status_name"] == "Ready"
        assert env.sim.state.hosts_of(sid) == []
        assert env.sim.counters[vm_host_deletes(env)[0]] == 1  # the VM host removed once
        assert "VMHostRemoved" in env.kube.reasons()
        assert env.sim.check_invariants() == []
    finally:
        await env.connections.aclose()


async def test_cluster_lxd_enabled_host_is_removed_and_released_too() -> None:
    """The Go provider's HCP mode: the MaasCluster's lxdConfig.enabled made the machine a VM host."""
    env, sid = await vm_host_env(register=False, cluster_lxd=True)
    try:
        assert len(env.sim.state.hosts_of(sid)) == 1
        await delete_all(env, ["host0"])
        assert env.sim.machine(sid)["status_name"] == "Ready"
        assert env.sim.state.hosts_of(sid) == []
    finally:
        await env.connections.aclose()


async def test_deletion_waits_for_another_maasmachines_vm_then_releases() -> None:
    """A VM of another MaasMachine on the host: the deletion waits and says so, nothing is decomposed or
    removed; once that MaasMachine is deleted (its VM decomposed), the host goes and the machine is
    released."""
    env, sid = await vm_host_env()
    try:
        (host,) = env.sim.state.hosts_of(sid)
        add_lxd(env, "cp0", cp=True)
        await env.drive(["cp0"], ready)
        vm = env.kube.get("maasmachines", "cp0")["spec"]["systemID"]
        assert env.sim.machine(vm)["pod"]["id"] == host.id
        await start_deleting(env, "host0")
        cond = ready_condition(env, "host0")
        assert cond["reason"] == C.VM_HOST_IN_USE_REASON
        assert f"VM host {host.name} (id {host.id})" in cond["message"]
        assert "its 1 VM(s)" in cond["message"]
        assert ("maasmachines", "ns", "host0") in env.kube.objects
        assert env.sim.machine(sid)["status_name"] == "Deployed"
        assert env.sim.machine(vm)["status_name"] == "Deployed"
        assert env.sim.state.hosts_of(sid) == [host]
        assert vm_host_deletes(env) == []
        assert C.MAAS_UNREACHABLE_REASON not in env.kube.reasons()
        await delete_all(env, ["cp0"])
        await delete_all(env, ["host0"])
        assert env.sim.machine(sid)["status_name"] == "Ready"
        assert env.sim.state.hosts_of(sid) == []
        assert env.sim.check_invariants() == []
    finally:
        await env.connections.aclose()


async def test_forged_reference_to_a_vm_host_machine_removes_nothing() -> None:
    """A MaasMachine asking for a VM host whose spec.systemID names another MaasMachine's VM-host machine:
    deleting it removes no VM host, releases nothing, and forgets the reference."""
    env, sid = await vm_host_env()
    try:
        evil = demo.maasmachine("evil", "ns", "c1", control_plane=False)
        evil["metadata"]["finalizers"] = [MACHINE_FINALIZER]
        evil["spec"].update(systemID=sid, providerID=f"maas://az1/{sid}", registerVMHost=True)
        env.kube.add("maasmachines", evil)
        env.sim.reset_counters()
        await delete_all(env, ["evil"])
        assert vm_host_deletes(env) == []
        assert env.sim.machine(sid)["status_name"] == "Deployed"
        assert len(env.sim.state.hosts_of(sid)) == 1
        assert ("evil", "Warning", "MachineNotOurs") in [e[:3] for e in env.kube.events]
        assert ready(env.kube.get("maasmachines", "host0"))
    finally:
        await env.connections.aclose()


async def test_vm_host_this_maasmachine_did_not_register_is_left_with_a_clear_reason() -> None:
    """A VM host someone else registered on our machine (we never asked for one): it is not removed, and
    MAAS's refusal to release reads VMHostInUse naming it, never MaasUnreachable."""
    env, sid = await vm_host_env(register=False)
    try:
        m = env.sim.state.machines[sid]
        host = env.sim.register_vm_host(m)
        await start_deleting(env, "host0")
        cond = ready_condition(env, "host0")
        assert cond["reason"] == C.VM_HOST_IN_USE_REASON
        assert host.name in cond["message"]
        assert C.MAAS_UNREACHABLE_REASON not in env.kube.reasons()
        assert vm_host_deletes(env) == []
        assert env.sim.state.hosts_of(sid) == [host]
        assert env.sim.machine(sid)["status_name"] == "Deployed"
    finally:
        await env.connections.aclose()
