"""A shard (``--watch-filter``) on the real apiserver: it caches only the CAPI Machines and Clusters that
carry its label, and a labelled MaasMachine whose Machine lacks the label still goes Ready (its Machine read
directly), with one Warning Event naming the Machine and the label."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from operator_harness import Harness
from prometheus_client.parser import text_string_to_metric_families

from capmaas_dev import demo
from capmaas_dev.devcluster.tools import kubectl_path

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


def other_shard(obj: dict[str, Any], value: str = "shard-b") -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[KEY] = value
    return obj


async def test_other_shards_maasmachines_and_maasclusters_are_not_even_sent(harness: Harness) -> None:
    """The MaasMachine and MaasCluster watches carry the filter as a label selector: the apiserver does not
    send a shard the other shards' objects (before, it sent every one and kopf's handler filter dropped them
    after they had been received and parsed). ``capmaas_watch_events_outside_filter_total`` counts what
    arrives outside the filter."""
    h = harness
    h.operator.extra_args = ["--watch-filter", LABEL]
    port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    # Another shard's MaasCluster and MaasMachines, there before the operator starts (its initial listing)
    # and created after.
    await h.apply(other_shard(demo.maascluster("oc", h.namespace)))
    n = 10
    others = [
        other_shard(demo.maasmachine(f"om{i}", h.namespace, "oc", control_plane=False, machine_uid=None))
        for i in range(2 * n)
    ]
    await h.apply(*others[:n])
    h.operator.start()
    await shard_cluster(h)  # the operator's watches are up: its own MaasCluster is Ready
    await h.apply(*others[n:])
    await h.apply(other_shard(demo.maascluster("oc2", h.namespace)))
    await h.apply(
        labelled(demo.maasmachine("mine", h.namespace, "c1", control_plane=False, machine_uid=None))
    )

    async def mine_cached() -> bool:
        return (await cached(h)).get("maasmachines") == 1

    await h.wait("the shard's own MaasMachine cached", mine_cached, within=30)
    await asyncio.sleep(3)  # the other shard's late objects' events, had they been sent, have arrived
    families = text_string_to_metric_families(await metrics_at(port))
    outside = {
        s.labels["kind"]: s.value
        for f in families
        for s in f.samples
        if s.name == "capmaas_watch_events_outside_filter_total"
    }
    print("watch events received for another shard's objects:", outside)
    assert outside == {"maasmachines": 0, "maasclusters": 0}, outside
    counts = await cached(h)
    assert counts["maasmachines"] == 1, counts
    assert counts["maasclusters"] == 1, counts


async def metrics_at(port: str) -> str:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://127.0.0.1:{port}/metrics")).text


async def cached_at(port: str) -> dict[str, float]:
    return {
        s.labels["kind"]: s.value
        for f in text_string_to_metric_families(await metrics_at(port))
        for s in f.samples
        if s.name == "capmaas_watch_cache_objects"
    }


async def leaked(port: str) -> float:
    families = text_string_to_metric_families(await metrics_at(port))
    return sum(s.value for f in families for s in f.samples if s.name == "capmaas_machines_leaked")


async def handed_off(port: str) -> dict[str, float]:
    families = text_string_to_metric_families(await metrics_at(port))
    return {
        s.labels["kind"]: s.value
        for f in families
        for s in f.samples
        if s.name == "capmaas_objects_handed_off_total"
    }


def allocations(h: Harness) -> int:
    return sum(n for (_, _, op), n in h.sim.counters.items() if op == "allocate")


async def watch_deleted(h: Harness) -> tuple[asyncio.subprocess.Process, asyncio.Task[dict[str, Any]]]:
    """A ``kubectl get --watch`` on the shard's label selector, and a task that ends with the object of its
    first DELETED event (kubectl prints the apiserver's watch events as a stream of JSON documents)."""
    proc = await asyncio.create_subprocess_exec(
        str(kubectl_path()), f"--kubeconfig={h.kube.kubeconfig}", "get", "maasmachines", "-n", h.namespace,
        "-l", LABEL, "--watch", "--output-watch-events", "-o", "json",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip

    async def first_deleted() -> dict[str, Any]:
        assert proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        while chunk := await proc.stdout.read(65536):
            buffer += chunk.decode()
            while buffer.strip():
                try:
                    event, end = decoder.raw_decode(buffer.lstrip())
                except json.JSONDecodeError:
                    break  # the rest of this document is still to come
                buffer = buffer.lstrip()[end:]
                if event.get("type") == "DELETED":
                    return dict(event["object"])
        raise AssertionError("the watch ended without a DELETED event")

    return proc, asyncio.create_task(first_deleted())


async def test_a_cluster_relabelled_to_another_shard_is_handed_off_and_a_real_delete_still_releases(
    harness: Harness, tmp_path: Path
) -> None:
    """Cluster c1 (Cluster, MaasCluster, Machine, MaasMachine) moves from shard a to shard b by relabelling.
    Shard a gets DELETED events for its MaasCluster and MaasMachine (they left its label selector): it hands
    them off, releasing nothing and counting no leak; shard b picks them up and keeps the machine Ready on
    the same MAAS machine, without an allocate. Then a real delete (in shard b) releases the machine."""
    h = harness
    h.operator.extra_args = ["--watch-filter", LABEL]
    h.operator.env["CAPMAAS_POLLING__LEAK_AUDIT_INTERVAL"] = "2"  # an object taken as deleted shows at once
    b = h.operator.replica(
        "shard-b", tmp_path / "shard-b.log", extra_args=["--watch-filter", f"{KEY}=shard-b"]
    )
    a_port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    b_port = b.env["CAPMAAS_SERVER__METRICS_PORT"]
    h.operator.start()
    b.start()
    proc: asyncio.subprocess.Process | None = None
    try:
        await shard_cluster(h)
        await h.apply(demo.bootstrap_secret(BOOT, h.namespace, "c1"))
        await h.apply(labelled(demo.machine("w0", h.namespace, "c1", control_plane=False, bootstrap=BOOT)))
        muid = await h.uid("machines.cluster.x-k8s.io", "w0")
        await h.apply(
            labelled(demo.maasmachine("w0", h.namespace, "c1", control_plane=False, machine_uid=muid))
        )
        await h.wait("w0 Ready in shard a", lambda: ready(h, "w0"), within=90)
        mm = await h.get("maasmachines", "w0")
        assert mm is not None
        sid = str(mm["spec"]["systemID"])
        before = allocations(h)
        assert before >= 1

        proc, deleted = await watch_deleted(h)
        await asyncio.sleep(1)  # its initial listing
        for kind, name in (
            ("clusters.cluster.x-k8s.io", "c1"),
            ("maasclusters", "c1"),
            ("machines.cluster.x-k8s.io", "w0"),
            ("maasmachines", "w0"),
        ):
            await h.k("label", "--overwrite", kind, name, "-n", h.namespace, f"{KEY}=shard-b")
        # How the apiserver reports "left the selector": DELETED, with the object as it was *before* the
        # change (still carrying this shard's label), so the operator cannot tell by the event alone.
        gone = await asyncio.wait_for(deleted, 30)
        print("the DELETED event's object carries the labels", gone["metadata"].get("labels"))
        assert gone["metadata"]["uid"] == mm["metadata"]["uid"]

        async def in_cache(port: str, kind: str, n: int) -> bool:
            return (await cached_at(port)).get(kind) == n

        await h.wait("shard a dropped w0", lambda: in_cache(a_port, "maasmachines", 0), within=30)
        await h.wait("shard a dropped c1", lambda: in_cache(a_port, "maasclusters", 0), within=30)
        await h.wait("shard b holds w0", lambda: in_cache(b_port, "maasmachines", 1), within=30)
        await asyncio.sleep(12)  # past several leak audit passes and shard b's recheck of the Ready machine
        assert await ready(h, "w0")
        assert allocations(h) == before, "shard b allocated again"
        assert h.sim.machine(sid)["status_name"] == "Deployed"  # shard a released nothing
        assert await leaked(a_port) == 0
        assert await leaked(b_port) == 0
        assert h.sim.check_invariants() == []
        assert "handed off" in h.operator.tail(400)
        assert await handed_off(a_port) == {"maasmachines": 1, "maasclusters": 1}
        assert await handed_off(b_port) == {"maasmachines": 0, "maasclusters": 0}

        # A real delete of the labelled MaasMachine (in shard b now) still releases its machine.
        await h.k("delete", "maasmachines", "w0", "-n", h.namespace, "--wait=false")

        async def released() -> bool:
            return await h.get("maasmachines", "w0") is None and h.sim.machine(sid)["status_name"] == "Ready"

        await h.wait("w0 deleted and its machine released", released, within=60)
        assert allocations(h) == before
        assert await leaked(b_port) == 0
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        b.stop()
