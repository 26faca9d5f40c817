"""The wake-up routing table (capmaas.operator.routing) as data: which loops an event of each watched kind
wakes besides its own, read from the same watch cache the operator keeps (its Store), without kopf."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from capmaas.operator import routing
from capmaas.operator.kube import Store
from capmaas.operator.routing import CAPI, INFRA, Event, Route, Router

NS = "team-a"
CP = "cluster.x-k8s.io/control-plane"
CLUSTER = "cluster.x-k8s.io/cluster-name"


def maasmachine(
    name: str, *, cluster: str = "c1", control_plane: bool = False, **meta: Any
) -> dict[str, Any]:
    labels = {CLUSTER: cluster, **({CP: ""} if control_plane else {})}
    return {"metadata": {"name": name, "namespace": NS, "uid": f"u-{name}", "labels": labels}}


def capi_cluster(name: str, infra: str | None) -> dict[str, Any]:
    spec = {"infrastructureRef": {"kind": "MaasCluster", "name": infra}} if infra else {}
    return {"metadata": {"name": name, "namespace": NS, "uid": f"u-{name}"}, "spec": spec}


def maascluster(name: str, owner: str | None, **meta: Any) -> dict[str, Any]:
    refs = [{"kind": "Cluster", "name": owner, "apiVersion": "cluster.x-k8s.io/v1beta2"}] if owner else []
    return {"metadata": {"name": name, "namespace": NS, "uid": f"u-{name}", "ownerReferences": refs, **meta}}


@pytest.fixture
def cache() -> Store:
    """Cluster c1 (its MaasCluster mc1) with a control-plane machine and two workers."""
    store = Store()
    store.put("clusters", capi_cluster("c1", "mc1"))
    store.put("maasclusters", maascluster("mc1", "c1"))
    for name, cp in (("cp0", True), ("w0", False), ("w1", False)):
        store.put("maasmachines", maasmachine(name, control_plane=cp))
    return store


def keys(cache: Store, group: str, plural: str, type: str | None, body: dict[str, Any]) -> list[str]:
    return Router().keys(group, plural, cache, Event(type, body))


def test_routing_needs_no_kopf() -> None:
    code = "import sys, capmaas.operator.routing; print('kopf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_control_plane_machine_wakes_its_maascluster(cache: Store) -> None:
    body = maasmachine("cp0", control_plane=True)
    assert keys(cache, INFRA, "maasmachines", "MODIFIED", body) == [f"maasclusters/{NS}/mc1"]


def test_a_worker_wakes_no_maascluster_unless_gone_while_it_is_deleted(cache: Store) -> None:
    body = maasmachine("w0")
    assert keys(cache, INFRA, "maasmachines", "MODIFIED", body) == []
    assert keys(cache, INFRA, "maasmachines", "DELETED", body) == []  # the MaasCluster is not being deleted
    deleting = maascluster("mc1", "c1", deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["f"])
    cache.put("maasclusters", {**deleting, "metadata": {**deleting["metadata"], "resourceVersion": "2"}})
    assert keys(cache, INFRA, "maasmachines", "DELETED", body) == [f"maasclusters/{NS}/mc1"]


def test_a_machine_of_an_unknown_cluster_wakes_nothing(cache: Store) -> None:
    body = maasmachine("x0", cluster="elsewhere", control_plane=True)
    assert keys(cache, INFRA, "maasmachines", "MODIFIED", body) == []


def test_a_maascluster_wakes_every_machine_of_its_cluster_but_not_when_deleted(cache: Store) -> None:
    body = maascluster("mc1", "c1")
    want = [f"maasmachines/{NS}/{n}" for n in ("cp0", "w0", "w1")]
    assert keys(cache, INFRA, "maasclusters", "MODIFIED", body) == want
    assert keys(cache, INFRA, "maasclusters", "DELETED", body) == []
    assert keys(cache, INFRA, "maasclusters", "MODIFIED", maascluster("mc2", None)) == []


def test_a_capi_machine_wakes_its_infrastructure_machine(cache: Store) -> None:
    body = {
        "metadata": {"name": "m0", "namespace": NS},
        "spec": {"clusterName": "c1", "infrastructureRef": {"kind": "MaasMachine", "name": "w0"}},
    }
    assert keys(cache, CAPI, "machines", None, body) == [f"maasmachines/{NS}/w0"]
    assert keys(cache, CAPI, "machines", "DELETED", body) == [f"maasmachines/{NS}/w0"]
    assert keys(cache, CAPI, "machines", None, {"metadata": {"name": "m1", "namespace": NS}}) == []


def test_a_capi_cluster_wakes_its_maascluster_then_its_machines(cache: Store) -> None:
    want = [f"maasclusters/{NS}/mc1", *(f"maasmachines/{NS}/{n}" for n in ("cp0", "w0", "w1"))]
    assert keys(cache, CAPI, "clusters", "MODIFIED", capi_cluster("c1", "mc1")) == want


def test_a_deleted_capi_cluster_is_read_from_the_cache_which_forgot_it(cache: Store) -> None:
    cache.forget("clusters", NS, "c1")  # what the handler does first with a DELETED Cluster
    want = [f"maasmachines/{NS}/{n}" for n in ("cp0", "w0", "w1")]
    assert keys(cache, CAPI, "clusters", "DELETED", capi_cluster("c1", "mc1")) == want


def test_another_controller_adds_its_routes() -> None:
    router = Router()
    router.add(Route(INFRA, "maasremediations", "maasmachines", lambda cache, ev: ["maasmachines/ns/m0"]))
    got = router.keys(INFRA, "maasremediations", Store(), Event("ADDED", {"metadata": {}}))
    assert got == ["maasmachines/ns/m0"]
    assert len(router.routes) == len(routing.ROUTES) + 1


def test_a_route_naming_a_key_of_another_kind_is_refused() -> None:
    router = Router([Route(CAPI, "machines", "maasclusters", routing.machine_to_maasmachine)])
    body = {"metadata": {"name": "m0", "namespace": NS}, "spec": {"infrastructureRef": {"name": "w0"}}}
    with pytest.raises(ValueError, match="not a maasclusters key"):
        router.keys(CAPI, "machines", Store(), Event(None, body))


def test_a_machine_wakes_its_remediation_only_when_there_is_one(cache: Store) -> None:
    machine = {"metadata": {"name": "w0", "namespace": NS, "uid": "u-m-w0"}, "spec": {}}
    assert keys(cache, CAPI, "machines", "MODIFIED", machine) == []
    cache.put("maasremediations", {"metadata": {"name": "w0", "namespace": NS, "uid": "u-r-w0"}})
    assert keys(cache, CAPI, "machines", "MODIFIED", machine) == ["maasremediations/team-a/w0"]
