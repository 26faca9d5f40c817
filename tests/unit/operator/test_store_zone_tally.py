"""The watch cache keeps each cluster's zone tally with its MaasMachines: what the zone spread counts follows
every store, change, relabel and deletion, and reading it does not walk the cluster's listing."""

from __future__ import annotations

from typing import Any

from capmaas.operator.kube import KubeAdapter, Store

CLUSTER = "cluster.x-k8s.io/cluster-name"


def mm(
    name: str, rv: int, zone: str | None, *, cluster: str = "c1", ns: str = "ns", **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name, "namespace": ns, "uid": f"u-{name}", "resourceVersion": str(rv),
            "labels": {CLUSTER: cluster}, **meta,
        },
        "spec": {"failureDomain": zone} if zone else {},
    }  # fmt: skip


def counts(store: Store, cluster: str = "c1", ns: str = "ns", leave_out: str = "") -> dict[str, int]:
    return store.zone_tally(ns, cluster).counts(leave_out=leave_out, chosen=lambda uid: None, chosen_uids=())


def test_the_tally_follows_stores_changes_and_deletions() -> None:
    store = Store()
    store.put("maasmachines", mm("a", 1, None))
    store.put("maasmachines", mm("b", 1, "z1"))
    assert counts(store) == {"z1": 1}
    store.put("maasmachines", mm("a", 2, "z2"))  # its allocation written
    assert counts(store) == {"z1": 1, "z2": 1}
    store.put("maasmachines", mm("a", 1, None))  # an older version: not stored, not counted
    assert counts(store) == {"z1": 1, "z2": 1}
    assert counts(store, leave_out="u-a") == {"z1": 1}
    store.delete("maasmachines", "ns", "b", uid="u-b")
    assert counts(store) == {"z2": 1}
    store.put("maasmachines", mm("a", 3, "z2", deletionTimestamp="now", finalizers=[]))  # gone with it
    assert counts(store) == {}


def test_a_relabelled_or_forgotten_machine_leaves_its_cluster() -> None:
    store = Store()
    store.put("maasmachines", mm("a", 1, "z1"))
    store.put("maasmachines", mm("b", 1, "z1", ns="other"))
    store.put("maasmachines", mm("a", 2, "z1", cluster="c2"))
    assert counts(store) == {}
    assert counts(store, "c2") == {"z1": 1}
    assert counts(store, ns="other") == {"z1": 1}
    store.forget("maasmachines", "ns", "a")
    assert counts(store, "c2") == {}
    assert counts(store, "none-such") == {}


def test_other_kinds_are_not_counted() -> None:
    store = Store()
    store.put("machines", mm("a", 1, "z1"))
    assert counts(store) == {}


def test_the_adapter_reads_the_tally_without_listing_the_cluster() -> None:
    store = Store()
    for i in range(5):
        store.put("maasmachines", mm(f"m{i}", 1, f"z{i % 2}"))
    kube = KubeAdapter.__new__(KubeAdapter)
    kube.store = store
    kube.list_maasmachines = None  # type: ignore[assignment,method-assign]  # a walk would fail the test
    tally = kube.zone_tally("ns", "c1")
    assert tally.counts(leave_out="u-m0", chosen=lambda uid: None, chosen_uids=()) == {"z0": 2, "z1": 2}
