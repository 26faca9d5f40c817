"""``spec.releaseOptions.scripts`` and ``.force`` (issue 24 item 4), against the simulator.

MAAS 3.7's ``ReleaseForm`` takes release scripts by name or tag (``wipe-disks``; ``none``) and refuses a name
it does not know in Django's words; ``force`` makes MAAS remove the VM hosts on the machine (whoever
registered them, with their VMs), so capmaas sends it only once no VM is on them."""

from __future__ import annotations

import contextlib

from reconciler_env import Env
from test_vmhost_delete import ready, ready_condition, start_deleting, vm_host_deletes, vm_host_env

from capmaas.api import conditions as C
from capmaas.reconcilers.errors import TransientError


def release_requests(env: Env) -> int:
    return sum(n for k, n in env.sim.counters.items() if k[0] == "POST" and k[2] == "release")


async def delete(env: Env, name: str, rounds: int = 12) -> None:
    env.kube.get("maasmachines", name)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(rounds):
        if ("maasmachines", "ns", name) not in env.kube.objects:
            return
        with contextlib.suppress(TransientError):
            await env.step(name)
        await env.settle()


async def test_a_release_script_by_name_runs_on_release(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    env.kube.get("maasmachines", "w0")["spec"]["releaseOptions"] = {"scripts": ["wipe-disks"]}
    await env.drive(["w0"], ready)
    sid = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await env.step("w0")
    assert env.sim.machine(sid)["status_name"] == "Disk erasing"  # wipe-disks ran: MAAS erases
    await delete(env, "w0")
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Ready"


async def test_a_script_maas_does_not_know_keeps_the_machine_held_and_says_maas_words(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    env.kube.get("maasmachines", "w0")["spec"]["releaseOptions"] = {"scripts": ["wipe-everything"]}
    await env.drive(["w0"], ready)
    sid = env.kube.get("maasmachines", "w0")["spec"]["systemID"]
    await delete(env, "w0", rounds=3)
    assert ("maasmachines", "ns", "w0") in env.kube.objects  # the finalizer stays: nothing is leaked
    assert env.sim.machine(sid)["status_name"] == "Deployed"
    c = ready_condition(env, "w0")
    assert c["reason"] == C.RELEASE_REFUSED_REASON
    assert (
        "scripts: Select a valid choice. wipe-everything is not one of the available choices." in c["message"]
    )
    refusals = [e for e in env.kube.events if e[2] == C.RELEASE_REFUSED_REASON]
    assert len(refusals) == 1, env.kube.events  # said once, not on every retry
    # Fixed by a person: the release goes through.
    env.kube.get("maasmachines", "w0")["spec"]["releaseOptions"] = {"scripts": ["none"]}
    await delete(env, "w0")
    assert ("maasmachines", "ns", "w0") not in env.kube.objects
    assert env.sim.machine(sid)["status_name"] == "Ready"


async def test_force_waits_while_a_vm_is_on_a_host_it_would_remove() -> None:
    """A VM host someone else registered on the machine carries a VM: force would have MAAS remove it with
    that VM. Nothing is sent; the deletion says why and waits."""
    env, sid = await vm_host_env(register=False)
    try:
        host = env.sim.register_vm_host(env.sim.state.machines[sid])
        env.kube.get("maasmachines", "host0")["spec"]["releaseOptions"] = {"force": True}
        pool = host.storage_pools[0]
        vm = env.sim.compose(
            host, cores=1, memory=1024, disks=[("root", 10 * 10**9, pool)], hostname="someones-vm",
            zone_id=host.zone_id, pool_id=host.pool_id, architecture="amd64/generic",
        )  # fmt: skip
        env.sim.reset_counters()
        await start_deleting(env, "host0")
        c = ready_condition(env, "host0")
        assert c["reason"] == C.VM_HOST_IN_USE_REASON
        assert "someones-vm" in c["message"]
        assert release_requests(env) == 0
        assert vm_host_deletes(env) == []
        assert env.sim.machine(sid)["status_name"] == "Deployed"
        assert vm.system_id in env.sim.state.machines  # the VM is still there
    finally:
        await env.connections.aclose()


async def test_force_removes_an_empty_host_record_with_the_release() -> None:
    """Without force MAAS refuses the release (VMHostInUse, waiting for a person); with force and no VM on
    it, MAAS removes the VM host record and releases."""
    env, sid = await vm_host_env(register=False)
    try:
        env.sim.register_vm_host(env.sim.state.machines[sid])
        env.kube.get("maasmachines", "host0")["spec"]["releaseOptions"] = {"force": True}
        await delete(env, "host0")
        assert ("maasmachines", "ns", "host0") not in env.kube.objects
        assert env.sim.state.hosts_of(sid) == []
        assert env.sim.machine(sid)["status_name"] == "Ready"
    finally:
        await env.connections.aclose()
