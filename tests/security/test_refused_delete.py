"""Issue 21, item 6: an object that holds no MAAS reference deletes without contacting MAAS.

Seen against a real MAAS 3.7.3 region: MaasMachines and a MaasCluster whose namespace was refused the default
identity stayed stuck in deletion (finalizer held for 130 s and on) although nothing had ever been allocated
for them: the MaasMachine's deletion connected first (refused, ``DefaultIdentityNotAllowed``, retried for
ever) and the MaasCluster waited for its MaasMachines. Here the tenant's namespace may not use the default
credentials (the operator's allow-list is empty); the tenant creates a Cluster, a MaasCluster without
``identityRef`` and a MaasMachine, both refused, then deletes them: both go, and the shared MAAS gets no
request.
"""

from __future__ import annotations

from typing import Any

import pytest
from identity_support import condition, get, provision, tenant_machine
from operator_harness import Harness
from security_support import Installed, Tenant

from capmaas.api import conditions as C
from capmaas_dev import demo


@pytest.fixture
def operator_env(operator_env: dict[str, str]) -> dict[str, str]:
    operator_env.pop("CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES", None)  # no namespace may use them
    return operator_env


pytestmark = pytest.mark.k8s


async def test_refused_objects_delete_without_maas(
    harness: Harness, policy: Installed, tenant: Tenant
) -> None:
    h = harness
    h.operator.start()
    ns = tenant.namespace
    await tenant.apply(demo.cluster("c1", ns))
    cluster = await get(tenant, "clusters.cluster.x-k8s.io", "c1")
    assert cluster is not None
    await tenant.apply(demo.maascluster("c1", ns, cluster_uid=cluster["metadata"]["uid"]))
    await provision(tenant, "c1")
    await tenant_machine(tenant, "c1", "w0")

    async def refused() -> bool:
        mc = await condition(tenant, "maasclusters", "c1", C.MAAS_CONNECTED_CONDITION)
        mm = await condition(tenant, "maasmachines", "w0", C.READY_CONDITION)
        objs: list[dict[str, Any] | None] = [
            await get(tenant, "maasclusters", "c1"),
            await get(tenant, "maasmachines", "w0"),
        ]
        return (
            mc is not None
            and mc["reason"] == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON
            and mm is not None
            and mm["reason"] == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON
            and all(o is not None and o["metadata"].get("finalizers") for o in objs)
        )

    await h.wait("both refused the default identity, finalizers on", refused, within=90)
    requests = dict(h.sim.counters)
    await tenant.ak("delete", "maasmachines", "w0", "--wait=false")
    await tenant.ak("delete", "maasclusters", "c1", "--wait=false")

    async def gone() -> bool:
        return (
            await get(tenant, "maasmachines", "w0") is None
            and await get(tenant, "maasclusters", "c1") is None
        )

    await h.wait("both deleted", gone, within=60)
    assert dict(h.sim.counters) == requests, "MAAS was contacted to delete objects that hold nothing there"
