"""The Go provider's LXD manifests, applied unchanged, provision on a running operator.

``tests/k8s/go_provider/`` holds the Maas* objects of spectrocloud/cluster-api-provider-maas's templates
and examples (commit in each file's header; ``tests/k8s/test_go_provider_manifests.py`` shows every one
applies, or is refused naming the fields the Go provider's own CRDs lack). This test runs the ones that ask
for LXD on ``capmaas run`` with the real apiserver and the simulator:

- ``templates/cluster-template-lxd.yaml``: the MaasCluster and both MaasMachineTemplates, exactly as in the
  file. The test plays Cluster API core: each Machine's MaasMachine is the template's ``template.spec``
  copied, as CAPI's template cloning does, so the control-plane MaasMachines carry the Go provider's
  ``spec.lxd`` (``enabled``, ``vmConfig.diskSize: 60``) unchanged. They become LXD VMs composed on the
  simulator's VM hosts in ``lxd-pool`` (4 cores, 8192 MiB, a 60 GB disk); the worker is a bare-metal machine
  in pool ``default``. All reach Ready with the Go provider's custom image; deleting them decomposes the VMs
  and releases the machine: nothing is left on the VM hosts or held in MAAS.
- ``templates/cluster-template-hcp.yaml``: its MaasCluster's ``lxdConfig`` (``enabled: true``; storage
  settings MAAS has no equivalent for) turns the cluster's bare-metal machines into LXD VM hosts as they
  deploy (MAAS ``register_vmhost``), and the cluster says which fields it does not apply. Deleting such a
  machine removes the VM host it registered (no VM is on it), then releases it: MAAS refuses to release a
  machine that hosts a VM host unless asked to ``force`` it, which capmaas never does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import Harness

from capmaas.api import conditions as C
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

pytestmark = pytest.mark.k8s

GO_PROVIDER = Path(__file__).resolve().parents[1] / "k8s" / "go_provider"
#: The Go provider's custom image, as a Spectro user's MAAS has it uploaded.
IMAGE = "u-2204-0-k-1313-0"


Objects = dict[tuple[str, str], dict[str, Any]]  # (kind, name) -> object


def go_objects(fixture: str) -> dict[tuple[str, str], dict[str, Any]]:  # (kind, name) -> object
    docs = yaml.safe_load_all((GO_PROVIDER / fixture).read_text())
    return {(o["kind"], o["metadata"]["name"]): o for o in docs if o}


def inventory() -> Inventory:
    """Zones az1 and default (the templates' failure domains), two LXD VM hosts in pool lxd-pool in each,
    three bare-metal machines per zone in pool default, and the Go provider's custom image."""
    machines: list[dict[str, Any]] = []
    hosts: list[dict[str, Any]] = []
    for z in ("az1", "default"):
        for i in range(2):
            machines.append(
                {"hostname": f"kvm-{z}-{i}", "zone": z, "status": "deployed", "owner": "admin",
                 "cpu_count": 16, "memory": 65536, "disks": [{"name": "sda", "size": "1T"}]}
            )  # fmt: skip
            hosts.append(
                {"name": f"lxd-{z}-{i}", "host": f"kvm-{z}-{i}", "pool": "lxd-pool",
                 "cpu_over_commit_ratio": 1.0, "memory_over_commit_ratio": 1.0, "tags": ["capmaas-shared"],
                 "storage_pools": [{"name": "default", "size": "500G", "default": True}]}
            )  # fmt: skip
        for i in range(3):
            machines.append(
                {"hostname": f"metal-{z}-{i}", "zone": z, "cpu_count": 8, "memory": 16384,
                 "disks": [{"name": "sda", "size": "960G"}]}
            )  # fmt: skip
    return Inventory(
        {
            "zones": [{"name": "az1"}],
            "pools": [{"name": "lxd-pool"}],
            "boot_resources": [
                {"name": "ubuntu/jammy", "architecture": "amd64/generic"},
                {"name": IMAGE, "architecture": "amd64/generic", "type": "uploaded"},
            ],
            "machines": machines,
            "vm_hosts": hosts,
        }
    )


@pytest.fixture
def sim() -> Simulator:
    return Simulator(inventory(), timings=Timings(commission=0.5, deploy=1.0, release=0.3), faults=Faults())


async def go_cluster(h: Harness, fixture: str, name: str = "go-demo") -> Objects:
    """The fixture's MaasCluster (unchanged, owned by a Cluster) Ready, and its MaasMachineTemplates
    applied unchanged."""
    objs = go_objects(fixture)
    mc = copy.deepcopy(objs[("MaasCluster", name)])
    await h.cluster(name, maascluster=mc, within=90)
    for (kind, _), obj in objs.items():
        if kind == "MaasMachineTemplate":
            await h.apply(copy.deepcopy(obj))
    return objs


async def machine_from_template(h: Harness, objs: Objects, template: str, name: str, *, cp: bool) -> None:
    """What CAPI does for a Machine of a MachineDeployment or control plane: the Machine, its bootstrap
    Secret, and a MaasMachine whose spec is the MaasMachineTemplate's ``template.spec`` as stored."""
    cluster = "go-demo"
    await h.apply(
        demo.bootstrap_secret(f"{name}-bootstrap", h.namespace, cluster),
        demo.machine(name, h.namespace, cluster, control_plane=cp, bootstrap=f"{name}-bootstrap"),
    )
    muid = await h.uid("machines.cluster.x-k8s.io", name)
    stored = await h.get("maasmachinetemplates", template)
    assert stored is not None
    # What the user wrote is what is stored (nothing pruned), so the clone carries the Go provider's fields.
    written = objs[("MaasMachineTemplate", template)]["spec"]["template"]["spec"]
    for key, value in written.items():
        assert stored["spec"]["template"]["spec"][key] == value, key
    mm = demo.maasmachine(name, h.namespace, cluster, control_plane=cp, machine_uid=muid)
    mm["spec"] = copy.deepcopy(stored["spec"]["template"]["spec"])
    await h.apply(mm)


async def ready(h: Harness, names: list[str]) -> bool:
    return all([await h.field("maasmachines", n, "status", "ready") for n in names])


def held(sim: Simulator) -> dict[str, tuple[str, str | None]]:
    """Every machine that is not a VM host's own host: hostname -> (status, owner)."""
    return {
        m["hostname"]: (m["status_name"], m["owner"])
        for m in (sim.machine(sid) for sid in sim.state.machines)
        if not m["hostname"].startswith("kvm-")
    }


async def delete_all(h: Harness) -> None:
    await h.k("delete", "maasmachines", "--all", "-n", h.namespace, "--wait=false")

    async def gone() -> bool:
        return not await h.items("maasmachines")

    await h.wait("MaasMachines deleted", gone, within=90)


async def test_cluster_template_lxd_objects_unchanged_become_lxd_vms_and_leave_nothing(
    harness: Harness,
) -> None:
    h = harness
    before = held(h.sim)
    h.operator.start()
    objs = await go_cluster(h, "templates__cluster-template-lxd.yaml")
    cps = ["go-demo-control-plane-0", "go-demo-control-plane-1", "go-demo-control-plane-2"]
    for n in cps:
        await machine_from_template(h, objs, "go-demo-control-plane", n, cp=True)
    await machine_from_template(h, objs, "go-demo-md-0", "go-demo-md-0-0", cp=False)
    names = [*cps, "go-demo-md-0-0"]
    await h.wait("3 LXD control planes and the worker Ready", lambda: ready(h, names), within=150)

    hosts = {x.id: x for x in h.sim.state.vm_hosts.values()}
    for n in cps:
        mm = await h.get("maasmachines", n)
        assert mm is not None
        assert mm["spec"]["lxd"] == {"enabled": True, "vmConfig": {"diskSize": 60, "autoStart": True}}
        spec, st = mm["spec"], mm["status"]
        assert st["provisioningMode"] == "lxd"
        assert spec["providerID"] == f"maas-lxd://{st['failureDomain']}/{spec['systemID']}"
        assert st["vmResourceUsage"] == {"allocatedCores": 4, "allocatedMemory": 8192, "allocatedDisk": 60}
        vm = h.sim.machine(spec["systemID"])
        assert vm["pod"] is not None, vm
        host = next(x for x in hosts.values() if x.name == vm["pod"]["name"])
        assert h.sim.state.pools[host.pool_id].name == "lxd-pool"
        assert st["lxdHost"] == host.name
        assert vm["status_name"] == "Deployed"
        assert vm["osystem"] == "custom"
        assert vm["distro_series"] == IMAGE
        assert st["failureDomain"] in ("az1", "default")
    worker = await h.get("maasmachines", "go-demo-md-0-0")
    assert worker is not None
    assert worker["status"]["provisioningMode"] == "bare-metal"
    metal = h.sim.machine(worker["spec"]["systemID"])
    assert metal["pod"] is None
    assert metal["pool"]["name"] == "default"
    assert metal["hostname"].startswith("metal-")

    await delete_all(h)
    assert [m for m in h.sim.state.machines.values() if m.pod_id is not None] == []  # every VM decomposed
    for host in h.sim.state.vm_hosts.values():
        cores, memory, storage = host.used()
        assert (cores, memory, sum(storage.values())) == (0, 0, 0), host.name
    after = held(h.sim)
    assert after == before, {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
    assert h.sim.check_invariants() == []


async def test_cluster_template_hcp_cluster_turns_its_machines_into_vm_hosts(harness: Harness) -> None:
    h = harness
    h.operator.env["CAPMAAS_LXD__VM_HOST_NAMESPACES"] = h.namespace  # the admin lets it register hosts
    h.operator.start()
    objs = await go_cluster(h, "templates__cluster-template-hcp.yaml")
    cond = await h.condition("maasclusters", "go-demo", C.SETTINGS_APPLIED_CONDITION)
    assert cond is not None
    assert cond["reason"] == C.NO_MAAS_EQUIVALENT_REASON
    assert "spec.lxdConfig.storageBackend" in cond["message"]
    assert "spec.lxdConfig.storageSize" in cond["message"]
    # The template asks for pool lxd-pool: make one bare-metal machine of it available there.
    spare = next(m for m in h.sim.state.machines.values() if m.hostname == "metal-az1-0")
    spare.pool_id = next(p.id for p in h.sim.state.pools.values() if p.name == "lxd-pool")
    hosts_before = len(h.sim.state.vm_hosts)
    await machine_from_template(h, objs, "go-demo-control-plane", "go-demo-control-plane-0", cp=True)
    await h.wait("the control plane Ready", lambda: ready(h, ["go-demo-control-plane-0"]), within=90)
    sid = await h.field("maasmachines", "go-demo-control-plane-0", "spec", "systemID")
    assert sid == spare.system_id
    registered = h.sim.state.hosts_of(sid)
    assert len(registered) == 1, "lxdConfig.enabled: the deployed machine must be registered as a VM host"
    assert registered[0].type == "lxd"
    assert len(h.sim.state.vm_hosts) == hosts_before + 1
    assert h.sim.check_invariants() == []

    await delete_all(h)
    assert h.sim.machine(sid)["status_name"] == "Ready"
    assert h.sim.state.hosts_of(sid) == []
    assert len(h.sim.state.vm_hosts) == hosts_before
    assert h.sim.check_invariants() == []
