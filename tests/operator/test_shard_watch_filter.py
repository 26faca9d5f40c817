"""A shard (``--watch-filter``) on the real apiserver: it caches only the CAPI Machines and Clusters that
carry its label, and a labelled MaasMachine whose Machine lacks the label still goes Ready (its Machine read
directly), with one Warning Event naming the Machine and the label."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from operator_harness import Harness
from prometheus_client.parser import text_string_to_metric_families

from capmaas import demo

pytestmark = pytest.mark.k8s

KEY, VALUE = "cluster.x-k8s.io/watch-filter", "shard-a"
LABEL = f"{KEY}={VALUE}"
BOOT = "w0-bootstrap"


def labelled(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[KEY] = VALUE
    return obj


async def cached(h: Harness) -> dict[str, float]:
    port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    return {
        s.labels["kind"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "capmaas_watch_cache_objects"
    }


async def owner_warnings(h: Harness, name: str) -> list[dict[str, Any]]:
    r = await h.k(
        "get", "events", "-n", h.namespace, "-o", "json",
        "--field-selector", f"involvedObject.name={name},reason=OwnerNotWatched",
    )  # fmt: skip
    return list(json.loads(r.stdout)["items"])


async def shard_cluster(h: Harness) -> None:
    """Cluster c1 and its MaasCluster, both labelled; its infrastructure provisioned (as CAPI would)."""
    await h.apply(labelled(demo.cluster("c1", h.namespace)))
    uid = await h.uid("clusters.cluster.x-k8s.io", "c1")
    await h.apply(labelled(demo.maascluster("c1", h.namespace, cluster_uid=uid)))
    await h.wait("MaasCluster ready", lambda: h.field("maasclusters", "c1", "status", "ready"), 60)
    status = {"status": {"initialization": {"infrastructureProvisioned": True}}}
    await h.k(
        "patch", "clusters.cluster.x-k8s.io", "c1", "-n", h.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip


async def ready(h: Harness, name: str) -> bool:
    return bool(await h.field("maasmachines", name, "status", "ready"))


async def test_a_shard_caches_only_its_labelled_machines_and_clusters(harness: Harness) -> None:
    h = harness
    h.operator.extra_args = ["--watch-filter", LABEL]
    # Another shard's Cluster and Machines, there before the operator starts (its initial listing) and after.
    await h.apply(demo.cluster("other", h.namespace))
    for i in range(3):
        await h.apply(demo.machine(f"other{i}", h.namespace, "other", control_plane=False, bootstrap=None))
    h.operator.start()
    await shard_cluster(h)
    await h.apply(demo.bootstrap_secret("w0-bootstrap", h.namespace, "c1"))
    await h.apply(labelled(demo.machine("w0", h.namespace, "c1", control_plane=False, bootstrap=BOOT)))
    muid = await h.uid("machines.cluster.x-k8s.io", "w0")
    await h.apply(labelled(demo.maasmachine("w0", h.namespace, "c1", control_plane=False, machine_uid=muid)))
    for i in range(3, 5):
        await h.apply(demo.machine(f"other{i}", h.namespace, "other", control_plane=False, bootstrap=None))
    await h.wait("w0 Ready", lambda: ready(h, "w0"), within=90)
    await asyncio.sleep(2)  # the other shard's late Machines' watch events have long arrived by now
    counts = await cached(h)
    assert counts == {"maasmachines": 1, "maasclusters": 1, "machines": 1, "clusters": 1}, counts
    assert await owner_warnings(h, "w0") == []  # its owners are labelled: nothing to warn about

    # A Machine whose label is removed leaves the cache; labelled again, it is back.
    await h.k("label", "machines.cluster.x-k8s.io", "w0", "-n", h.namespace, f"{KEY}-")

    async def machines_cached(n: int) -> bool:
        return (await cached(h)).get("machines") == n

    await h.wait("w0's Machine out of the cache", lambda: machines_cached(0), within=30)
    await h.k("label", "machines.cluster.x-k8s.io", "w0", "-n", h.namespace, LABEL)
    await h.wait("w0's Machine back in the cache", lambda: machines_cached(1), within=30)


async def test_a_labelled_maasmachine_whose_machine_lacks_the_label_goes_ready_with_one_warning(
    harness: Harness,
) -> None:
    h = harness
    h.operator.extra_args = ["--watch-filter", LABEL]
    h.operator.start()
    await shard_cluster(h)
    await h.apply(demo.bootstrap_secret("w0-bootstrap", h.namespace, "c1"))
    # The Machine without the shard's label (a MachineSet template that labels only the infrastructure).
    await h.apply(demo.machine("w0", h.namespace, "c1", control_plane=False, bootstrap="w0-bootstrap"))
    muid = await h.uid("machines.cluster.x-k8s.io", "w0")
    await h.apply(labelled(demo.maasmachine("w0", h.namespace, "c1", control_plane=False, machine_uid=muid)))
    await h.wait("w0 Ready though its Machine is outside the watch", lambda: ready(h, "w0"), within=90)

    async def warned() -> bool:
        return bool(await owner_warnings(h, "w0"))

    await h.wait("the OwnerNotWatched Warning on w0", warned, within=30)
    await asyncio.sleep(12)  # past a recheck of the Ready machine: still one Event
    events = await owner_warnings(h, "w0")
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["kind"] == "MaasMachine"
    assert "Machine w0" in events[0]["message"]
    assert LABEL in events[0]["message"]
    assert (await cached(h)).get("machines") == 0
