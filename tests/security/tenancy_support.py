"""Helpers of the VM-host and DNS tenancy attacks (issue 21, attacks 4-7): one operator for every namespace
(its watch filter keeps it to the test's objects), the victim in the harness namespace (objects written by
the admin, as CAPI would), the attacker ``mallory`` in a namespace of its own writing with ``kubectl --as``.

The tests name conditions and tags by their strings, not by constants of the fix, so they run (and fail)
on the code from before it."""

from __future__ import annotations

import json
import secrets
from typing import Any

from operator_harness import Harness
from security_support import Tenant

from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

FILTER_KEY = "capmaas-test-tenancy"


def big_metal_inventory(machines: int = 6) -> Inventory:
    """Bare-metal machines big enough to become VM hosts (32 cores, 64 GiB, 1 TB), no VM host yet."""
    return Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": "10.60.0.0/24", "name": "metal", "gateway_ip": "10.60.0.1"}],
            "boot_resources": [{"name": "ubuntu/jammy", "architecture": "amd64/generic"}],
            "machines": [
                {"hostname": f"metal-{n}", "zone": "az1", "cpu_count": 32, "memory": 65536,
                 "disks": [{"name": "sda", "size": "1T"}]}
                for n in range(machines)
            ],
        }
    )  # fmt: skip


def metal_sim() -> Simulator:
    return Simulator(
        big_metal_inventory(), timings=Timings(commission=0.5, deploy=1.0, release=0.3), faults=Faults()
    )


def labelled(obj: dict[str, Any], token: str) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[FILTER_KEY] = token
    return obj


def start_operator(h: Harness, *namespaces: str, env: dict[str, str] | None = None) -> str:
    """One operator for every namespace; ``namespaces`` may use the default credentials. Returns the watch
    filter token the objects must carry."""
    token = f"t{secrets.token_hex(4)}"  # a letter first: "12e45678" would be a YAML number to kubectl
    h.operator.cluster_wide = True
    h.operator.extra_args += ["--watch-filter", f"{FILTER_KEY}={token}"]
    h.operator.env["CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES"] = ",".join(namespaces)
    h.operator.env.update(env or {})
    h.operator.start()
    return token


async def get_as(t: Tenant, plural: str, name: str) -> dict[str, Any] | None:
    return await t.read(plural, name)


async def condition_as(t: Tenant, plural: str, name: str, type_: str) -> dict[str, Any] | None:
    obj = await get_as(t, plural, name)
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


async def tenant_cluster(
    h: Harness, t: Tenant, name: str, token: str, *, provision: bool = True, **spec: Any
) -> dict[str, Any]:
    """The tenant's Cluster and MaasCluster (default credentials unless ``spec`` says otherwise), written as
    the tenant; once the MaasCluster is ready the admin marks the Cluster provisioned (CAPI's part)."""
    ns = t.namespace
    await t.apply(demo.cluster(name, ns))
    cluster = await get_as(t, "clusters.cluster.x-k8s.io", name)
    assert cluster is not None
    mc = labelled(demo.maascluster(name, ns, cluster_uid=cluster["metadata"]["uid"]), token)
    mc["spec"].update(spec)
    await t.apply(mc)
    if provision:

        async def ready() -> bool:
            got = await get_as(t, "maasclusters", name)
            return bool(((got or {}).get("status") or {}).get("ready"))

        await h.wait(f"{ns}/{name} MaasCluster ready", ready, within=60)
        status = {"status": {"initialization": {"infrastructureProvisioned": True}}}
        await h.k(
            "patch", "clusters.cluster.x-k8s.io", name, "-n", ns, "--subresource=status",
            "--type=merge", "-p", json.dumps(status),
        )  # fmt: skip
    got = await get_as(t, "maasclusters", name)
    assert got is not None
    return got


async def tenant_machine(
    h: Harness, t: Tenant, name: str, cluster: str, token: str, *, cp: bool = False, **spec: Any
) -> None:
    """A Machine (with its bootstrap Secret) and its MaasMachine, written as the tenant."""
    ns = t.namespace
    await t.apply(
        demo.bootstrap_secret(f"{name}-bootstrap", ns, cluster),
        demo.machine(name, ns, cluster, control_plane=cp, bootstrap=f"{name}-bootstrap"),
    )
    machine = await get_as(t, "machines.cluster.x-k8s.io", name)
    assert machine is not None
    mm = labelled(
        demo.maasmachine(name, ns, cluster, control_plane=cp, machine_uid=machine["metadata"]["uid"]), token
    )
    mm["spec"].update(spec)
    await t.apply(mm)
