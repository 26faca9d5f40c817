"""Issue 21, attack 9 (orphaning): a tenant must not leave MAAS machines held with no object to release them.

Before: ``clusterctl.cluster.x-k8s.io/delete-for-move`` was honoured on sight, so a tenant (``kubectl
--as=mallory``, full rights on its namespace's objects, the chart's RBAC and admission policy installed) set
it and deleted its objects: the finalizers went, nothing was released, and the machines stayed allocated in
MAAS (quota and pool exhaustion outliving the tenant). Removing the finalizer by hand did the same.

Now, on the real apiserver with the operator as a process:

- the admission policy refuses a non-privileged write of the annotation and a non-privileged removal of a
  capmaas finalizer (naming the field and the user);
- the operator honours the annotation only while the owning Cluster is paused (``clusterctl move`` pauses it
  first): set by a privileged user on an unpaused Cluster, the deletion still releases the MAAS machine, with
  a ``DeleteForMoveIgnored`` Warning saying why;
- what is orphaned anyway (an admin strips a finalizer while no operator runs) is reported by the orphan
  report after a restart (the leak audit, which follows deletions it saw, cannot see it): the metric
  ``capmaas_orphans{kind="machine"}`` and an ``OrphanedInMaas`` Warning; the machine is not released.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from operator_harness import Harness
from security_support import Installed, Tenant, wait_policy_active

pytestmark = pytest.mark.k8s

DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"
MACHINE_FINALIZER = "maasmachine.infrastructure.cluster.x-k8s.io"
CLUSTER_FINALIZER = "maascluster.infrastructure.cluster.x-k8s.io"


async def ready(h: Harness, name: str) -> bool:
    return bool(await h.field("maasmachines", name, "status", "ready"))


async def gone(h: Harness, name: str) -> bool:
    return await h.get("maasmachines", name) is None


async def released(h: Harness, sid: str) -> bool:
    """MAAS gave the machine back (the release may still run when the object is gone)."""
    m = h.sim.state.machines[sid]
    return m.owner is None and h.sim.machine(sid)["status_name"] == "Ready"


async def events(h: Harness, reason: str) -> list[dict[str, Any]]:
    r = await h.k("get", "events", "-A", "--field-selector", f"reason={reason}", "-o", "json")
    return list(json.loads(r.stdout)["items"])


async def orphans(h: Harness, kind: str) -> float:
    port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    try:
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    except httpx.TransportError:
        return -1.0  # the process is (re)starting
    for line in text.splitlines():
        if line.startswith(f'capmaas_orphans{{kind="{kind}"}} '):
            return float(line.split()[-1])
    return -1.0  # not exported


async def test_a_tenant_can_neither_hand_its_machines_on_nor_strip_the_finalizer(
    harness: Harness, policy: Installed, tenant: Tenant
) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("w0 Ready", lambda: ready(h, "w0"), within=90)
    sid = await h.field("maasmachines", "w0", "spec", "systemID")

    # The annotation clusterctl puts on what it moves: refused on the tenant's MaasMachine and MaasCluster.
    probe = ["annotate", "--dry-run=server", "maasmachine", "w0", f"{DELETE_FOR_MOVE}="]
    wait_policy_active(lambda: tenant.k(*probe, check=False).returncode != 0)
    for kind, name in (("maasmachine", "w0"), ("maascluster", "c1")):
        r = await tenant.ak("annotate", kind, name, f"{DELETE_FOR_MOVE}=", check=False)
        assert r.returncode != 0, kind
        assert f"metadata.annotations[{DELETE_FOR_MOVE}]" in r.stderr
        assert "mallory" in r.stderr

    # The finalizer, on the live object and once it is being deleted (paused by the tenant itself, so the
    # operator keeps its hands off and the finalizer stays while the tenant tries).
    strip = [
        ("--type=merge", '{"metadata":{"finalizers":null}}'),
        ("--type=json", '[{"op":"replace","path":"/metadata/finalizers","value":[]}]'),
    ]
    for kind, name, finalizer in (
        ("maasmachine", "w0", MACHINE_FINALIZER),
        ("maascluster", "c1", CLUSTER_FINALIZER),
    ):
        for how, patch in strip:
            r = await tenant.ak("patch", kind, name, how, "-p", patch, check=False)
            assert r.returncode != 0, (kind, how)
            assert f"metadata.finalizers[{finalizer}]" in r.stderr
            assert "mallory" in r.stderr
    await tenant.ak("annotate", "maasmachine", "w0", "cluster.x-k8s.io/paused=")

    async def paused() -> bool:
        c = await h.condition("maasmachines", "w0", "Paused")
        return bool(c and c.get("status") == "True")

    await h.wait("w0 paused", paused)
    await tenant.ak("delete", "maasmachine", "w0", "--wait=false")
    r = await tenant.ak(
        "patch", "maasmachine", "w0", "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False
    )
    assert r.returncode != 0
    assert f"metadata.finalizers[{MACHINE_FINALIZER}]" in r.stderr
    assert await h.get("maasmachines", "w0") is not None
    assert h.sim.machine(sid)["status_name"] == "Deployed"

    # The tenant's only way out is the operator's: unpaused, the deletion gives the machine back.
    await tenant.ak("annotate", "maasmachine", "w0", "cluster.x-k8s.io/paused-")
    await h.wait("w0 gone", lambda: gone(h, "w0"), within=60)
    await h.wait("w0's machine released in MAAS", lambda: released(h, sid))


async def test_delete_for_move_on_an_unpaused_cluster_still_releases(
    harness: Harness, kubectl: Any, policy: Installed
) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("w0 Ready", lambda: ready(h, "w0"), within=90)
    sid = await h.field("maasmachines", "w0", "spec", "systemID")
    # A privileged user (system:masters, as clusterctl runs) may write the annotation; the Cluster is not
    # paused, so this is no move: the deletion releases as usual and says why the annotation was ignored.
    await h.k("annotate", "maasmachine", "w0", "-n", h.namespace, f"{DELETE_FOR_MOVE}=")
    await h.k("delete", "maasmachine", "w0", "-n", h.namespace, "--wait=false")
    await h.wait("w0 gone", lambda: gone(h, "w0"), within=60)
    await h.wait("w0's machine released in MAAS", lambda: released(h, sid))

    async def warned() -> bool:
        return any(
            e["involvedObject"].get("name") == "w0" and "Cluster c1 is not paused" in e["message"]
            for e in await events(h, "DeleteForMoveIgnored")
        )

    await h.wait("DeleteForMoveIgnored Event", warned)


async def test_the_orphan_report_counts_a_machine_whose_object_is_gone(
    harness: Harness, kubectl: Any, policy: Installed
) -> None:
    h = harness
    h.operator.env["CAPMAAS_POLLING__ORPHAN_REPORT_INTERVAL"] = "0.5"
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("w0 Ready", lambda: ready(h, "w0"), within=90)
    sid = await h.field("maasmachines", "w0", "spec", "systemID")

    async def counted(n: int) -> bool:
        return await orphans(h, "machine") == n

    await h.wait("nothing orphaned while w0 lives", lambda: counted(0))
    # While no operator runs, an admin ends w0 by stripping its finalizer (privileged: admitted).
    h.operator.stop()
    await h.k("delete", "maasmachine", "w0", "-n", h.namespace, "--wait=false")
    await h.k(
        "patch", "maasmachine", "w0", "-n", h.namespace, "--type=merge", "-p",
        '{"metadata":{"finalizers":null}}',
    )  # fmt: skip
    await h.wait("w0 gone", lambda: gone(h, "w0"))
    # A fresh process never saw the deletion (its leak audit cannot know); the report finds the machine.
    h.operator.start()
    await h.wait("w0's machine reported orphaned", lambda: counted(1), within=60)

    async def reported() -> bool:
        return any(sid in e["message"] for e in await events(h, "OrphanedInMaas"))

    await h.wait("OrphanedInMaas Event", reported)
    assert h.sim.machine(sid)["status_name"] == "Deployed"  # reported, never released
    assert h.sim.state.machines[sid].owner is not None
