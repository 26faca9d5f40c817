"""Issue 21, attack 5: a tenant pins a VM onto another tenant's VM host (``lxdConfig.vmHost`` is a free
string), and the victim's removal of that host then waits for ever (``VMHostInUse``: a VM is left on it).

One operator for every namespace, the default MAAS credentials allowed to both, the chart's RBAC and
admission policy installed, the attacker ``kubectl --as=mallory``. The victim registered a VM host
(``registerVMHost``; its namespace is in ``lxd.vm_host_namespaces``). Before the fix the attacker's pinned VM
was composed on it. Now the pin is refused with ``VMHostNotAllowed`` naming the host, nothing is composed,
and the victim's deletion of its host machine completes.
"""

from __future__ import annotations

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


async def test_a_pin_onto_another_tenants_vm_host_is_refused_and_the_host_stays_removable(
    harness: Harness, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    token = start_operator(
        h, h.namespace, attacker.namespace, env={"CAPMAAS_LXD__VM_HOST_NAMESPACES": h.namespace}
    )
    # The victim's VM host: a bare-metal machine of its cluster, registered by MAAS at deploy.
    await h.cluster(maascluster=labelled(demo.maascluster("c1", h.namespace), token))
    await h.apply(demo.bootstrap_secret("host0-bootstrap", h.namespace, "c1"))
    await h.apply(demo.machine("host0", h.namespace, "c1", control_plane=False, bootstrap="host0-bootstrap"))
    muid = await h.uid("machines.cluster.x-k8s.io", "host0")
    mm = demo.maasmachine("host0", h.namespace, "c1", control_plane=False, machine_uid=muid)
    mm["spec"].update(minCPU=16, minMemory=32768, registerVMHost=True)
    await h.apply(labelled(mm, token))

    async def registered() -> bool:
        sid = await h.field("maasmachines", "host0", "spec", "systemID")
        ready = await h.field("maasmachines", "host0", "status", "ready")
        return bool(sid and h.sim.state.hosts_of(sid) and ready)

    await h.wait("the victim's VM host registered", registered, within=90)
    sid = await h.field("maasmachines", "host0", "spec", "systemID")
    (host,) = h.sim.state.hosts_of(sid)

    # The attacker pins an LXD machine onto it.
    await tenant_cluster(h, attacker, "a1", token)
    await tenant_machine(
        h, attacker, "squat", "a1", token, provisioningMode="lxd", minDiskSize=20,
        lxdConfig={"vmHost": host.name},
    )  # fmt: skip

    async def decided() -> bool:
        if host.vms:
            return True  # composed: the attack went through
        c = await condition_as(attacker, "maasmachines", "squat", "LXDHostSelected")
        return c is not None and c["reason"] == "VMHostNotAllowed"

    await h.wait("the attacker's pin decided", decided, within=60)
    assert host.vms == {}, "the attacker's VM was composed on the victim's VM host"
    c = await condition_as(attacker, "maasmachines", "squat", "LXDHostSelected")
    assert c is not None
    assert c["status"] == "False"
    assert host.name in c["message"]
    squat = await get_as(attacker, "maasmachines", "squat")
    assert squat is not None
    assert not squat["spec"].get("systemID")

    # The victim removes its host: the VM host goes and the machine is released (before the fix this waited
    # for ever with VMHostInUse, the attacker's VM on it).
    await h.k("delete", "maasmachines", "host0", "-n", h.namespace, "--wait=false")

    async def removed() -> bool:
        return await h.get("maasmachines", "host0") is None

    await h.wait("the victim's host machine deleted", removed, within=90)
    assert h.sim.state.hosts_of(sid) == []
    assert h.sim.machine(sid)["status_name"] == "Ready"
