"""VM hosts whose machine has ``manual`` power (issue 16): MAAS never queries their power, so it reports
``unknown`` for a Deployed host that runs VMs all the same. Only ``off`` takes a host out of placement."""

from __future__ import annotations

from typing import Any

from reconciler_env import make_env
from test_lxd_lifecycle import add_lxd, lxd_sim

from capmaas import maas
from capmaas.reconcilers import lxd_placer


def host_machine(power: str) -> maas.Machine:
    return maas.Machine.model_validate(
        {"system_id": "abc123", "hostname": "kvm", "status": int(maas.NodeStatus.DEPLOYED),
         "power_state": power, "zone": {"id": 2, "name": "az2"}}
    )  # fmt: skip


def vm_host() -> maas.VmHost:
    return maas.VmHost.model_validate(
        {"id": 7, "name": "lxd-1", "type": "lxd", "capabilities": ["composable"],
         "host": {"system_id": "abc123"}, "total": {"cores": 16, "memory": 65536, "local_storage": 0},
         "used": {"cores": 0, "memory": 0, "local_storage": 0},
         "available": {"cores": 16, "memory": 65536, "local_storage": 0}, "zone": {"id": 2, "name": "az2"}}
    )  # fmt: skip


def test_only_a_host_reported_off_is_not_ready() -> None:
    ready = {
        p: lxd_placer.candidate(vm_host(), host_machine(p)).host_ready
        for p in ("on", "unknown", "error", "off")
    }
    assert ready == {"on": True, "unknown": True, "error": True, "off": False}


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


async def test_an_lxd_machine_goes_ready_on_manual_power_hosts() -> None:
    sim = lxd_sim()
    hosts = {h.host_system_id for h in sim.state.vm_hosts.values()}
    for sid in hosts:
        m = sim.state.machines[sid]
        m.power_type, m.power_state = "manual", "unknown"
        m.cached_json = None
    env = make_env(sim)
    try:
        await env.cluster()
        add_lxd(env, "cp0", cp=True)
        await env.drive(["cp0"], ready)
        b = env.kube.get("maasmachines", "cp0")
        assert b["status"]["lxdHost"].startswith("lxd-")
        assert {sim.state.machines[sid].power_state for sid in hosts} == {"unknown"}  # MAAS left them alone
    finally:
        await env.connections.aclose()
