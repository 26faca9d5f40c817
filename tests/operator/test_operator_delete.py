"""Deleting a cluster whose Cluster object goes first (found by the chaos test)."""

from __future__ import annotations

import pytest
from operator_harness import Harness

pytestmark = pytest.mark.k8s


async def test_maascluster_deletion_finishes_when_the_cluster_went_first(harness: Harness) -> None:
    # MaasMachines going away wake their MaasCluster through the Cluster; with the Cluster deleted first,
    # nothing did, and the MaasCluster kept its finalizer until the resync interval (5 minutes by default).
    h = harness
    h.operator.start()
    await h.cluster()
    for n in ("w0", "w1"):
        await h.machine(n, cp=False)

    async def ready() -> bool:
        return all([await h.field("maasmachines", n, "status", "ready") for n in ("w0", "w1")])

    await h.wait("Ready", ready, within=60)
    await h.k("delete", "clusters.cluster.x-k8s.io/c1", "maasclusters/c1", "-n", h.namespace, "--wait=false")
    await h.k("delete", "maasmachines", "--all", "-n", h.namespace, "--wait=false")

    async def machines_gone() -> bool:
        return not await h.items("maasmachines")

    await h.wait("MaasMachines deleted", machines_gone, within=60)

    async def cluster_gone() -> bool:
        return await h.get("maasclusters", "c1") is None

    await h.wait("MaasCluster deleted soon after its machines", cluster_gone, within=20)
    assert h.sim.state.by_agent == {}
    assert h.sim.check_invariants() == []
