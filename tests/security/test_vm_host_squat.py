"""Issue 21, attack 4: a tenant turns a machine it owns into a VM host, and another tenant's LXD control plane
is composed on it (the attacker has that machine's root: the victim's etcd and certificates with it).

One operator for every namespace, the default MAAS credentials allowed to both (the issue's precondition),
the chart's RBAC and admission policy installed, the attacker ``kubectl --as=mallory``. The victim's LXD
control-plane machine waits for a VM host (none in MAAS yet). Before the fix the attacker's
``registerVMHost`` machine was deployed, MAAS registered it, and the victim's waiting VM was composed on it
(``lxd_placer.fetch_listing`` offered every host the identity sees). Now:

- the attacker's namespace may register VM hosts only if the admin lists it (``lxd.vm_host_namespaces``):
  otherwise ``VMHostRegistrationNotAllowed`` and nothing allocated;
- listed, its host is tagged ``capmaas-ns-<attacker namespace>`` and the victim's placement leaves it out;
  the victim's VM goes to the victim's own registered host.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import Harness
from security_support import Installed, Tenant
from tenancy_support import (
    condition_as,
    get_as,
    labelled,
    metal_sim,
    start_operator,
    tenant_cluster,
    tenant_machine,
)

from capmaas_dev import demo
from capmaas_dev.simulator import Simulator

pytestmark = pytest.mark.k8s


@pytest.fixture
def sim() -> Simulator:
    return metal_sim()


async def victim_lxd_control_plane(h: Harness, token: str) -> None:
    await h.cluster(maascluster=labelled(demo.maascluster("c1", h.namespace), token))
    await h.apply(demo.bootstrap_secret("cp0-bootstrap", h.namespace, "c1"))
    await h.apply(demo.machine("cp0", h.namespace, "c1", control_plane=True, bootstrap="cp0-bootstrap"))
    muid = await h.uid("machines.cluster.x-k8s.io", "cp0")
    mm = demo.maasmachine("cp0", h.namespace, "c1", control_plane=True, machine_uid=muid)
    mm["spec"].update(provisioningMode="lxd", minDiskSize=20)
    await h.apply(labelled(mm, token))


def vms_on(h: Harness, host_id: int) -> list[str]:
    return sorted(h.sim.state.vm_hosts[host_id].vms)


async def test_a_tenants_vm_host_never_receives_another_tenants_vms(
    harness: Harness, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    token = start_operator(
        h,
        h.namespace,
        attacker.namespace,
        env={"CAPMAAS_LXD__VM_HOST_NAMESPACES": f"{h.namespace},{attacker.namespace}"},
    )
    await victim_lxd_control_plane(h, token)

    async def waiting() -> bool:
        c = await h.condition("maasmachines", "cp0", "LXDHostSelected")
        return c is not None and c["reason"] == "NoVMHostAvailable"

    await h.wait("the victim's VM waits for a VM host", waiting, within=60)

    # The attacker: a cluster of its own and a bare-metal machine it asks MAAS to make a VM host.
    await tenant_cluster(h, attacker, "a1", token)
    await tenant_machine(h, attacker, "trap", "a1", token, minCPU=16, minMemory=32768, registerVMHost=True)

    async def registered() -> bool:
        got = await get_as(attacker, "maasmachines", "trap")
        sid = ((got or {}).get("spec") or {}).get("systemID")
        return bool(sid and h.sim.state.hosts_of(sid))

    await h.wait("the attacker's machine registered as a VM host", registered, within=90)
    trap = await get_as(attacker, "maasmachines", "trap")
    assert trap is not None
    (host,) = h.sim.state.hosts_of(trap["spec"]["systemID"])

    # The victim's next placement sees the attacker's host and leaves it out (counted, not named); before
    # the fix it composed the victim's control plane there.
    async def decided() -> bool:
        if vms_on(h, host.id) or await h.field("maasmachines", "cp0", "spec", "systemID"):
            return True
        c = await h.condition("maasmachines", "cp0", "LXDHostSelected")
        return c is not None and "1 VM host(s) left out" in c["message"]

    await h.wait("the victim's placement after the attacker's host appeared", decided, within=90)
    assert vms_on(h, host.id) == [], "the victim's VM was composed on the attacker's VM host"
    assert await h.field("maasmachines", "cp0", "spec", "systemID") is None

    async def tagged() -> bool:
        return f"capmaas-ns-{attacker.namespace}" in host.tags

    await h.wait("the attacker's host tagged for the attacker's namespace only", tagged, within=30)
    assert f"capmaas-ns-{h.namespace}" not in host.tags
    assert "capmaas-shared" not in host.tags

    # The victim's own registered host takes the victim's VM.
    await h.apply(demo.bootstrap_secret("host0-bootstrap", h.namespace, "c1"))
    await h.apply(demo.machine("host0", h.namespace, "c1", control_plane=False, bootstrap="host0-bootstrap"))
    muid = await h.uid("machines.cluster.x-k8s.io", "host0")
    mm = demo.maasmachine("host0", h.namespace, "c1", control_plane=False, machine_uid=muid)
    mm["spec"].update(minCPU=16, minMemory=32768, registerVMHost=True)
    await h.apply(labelled(mm, token))

    async def victim_placed() -> bool:
        return bool(await h.field("maasmachines", "cp0", "spec", "systemID"))

    await h.wait("the victim's VM composed on its own host", victim_placed, within=120)
    sid = await h.field("maasmachines", "host0", "spec", "systemID")
    (own,) = h.sim.state.hosts_of(sid)
    assert vms_on(h, own.id) == [await h.field("maasmachines", "cp0", "spec", "systemID")]
    assert vms_on(h, host.id) == []


async def test_registering_a_vm_host_outside_the_admins_namespaces_is_refused(
    harness: Harness, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    token = start_operator(
        h, h.namespace, attacker.namespace, env={"CAPMAAS_LXD__VM_HOST_NAMESPACES": h.namespace}
    )
    await tenant_cluster(h, attacker, "a1", token)
    await tenant_machine(h, attacker, "trap", "a1", token, minCPU=16, minMemory=32768, registerVMHost=True)
    # The cluster-wide switch too (the Go provider's HCP mode): every bare-metal machine a VM host.
    await tenant_cluster(h, attacker, "a2", token, lxdConfig={"enabled": True})
    await tenant_machine(h, attacker, "trap2", "a2", token, minCPU=16, minMemory=32768)

    async def refused(name: str) -> dict[str, Any] | None:
        c = await condition_as(attacker, "maasmachines", name, "Ready")
        if c is not None and c["reason"] == "VMHostRegistrationNotAllowed":
            return c
        return None

    async def decided() -> bool:
        if h.sim.state.vm_hosts:
            return True  # registered: the attack went through
        return all([await refused("trap"), await refused("trap2")])

    await h.wait("both registrations decided", decided, within=90)
    assert h.sim.state.vm_hosts == {}, "the attacker's machine became a VM host"
    for name in ("trap", "trap2"):
        c = await refused(name)
        assert c is not None
        assert f"namespace {attacker.namespace} may not register VM hosts" in c["message"]
        got = await get_as(attacker, "maasmachines", name)
        assert got is not None
        assert not got["spec"].get("systemID")
        uid = got["metadata"]["uid"]
        held = [m.system_id for m in h.sim.state.machines.values() if m.agent_name == uid]
        assert held == [], "a machine was allocated"
