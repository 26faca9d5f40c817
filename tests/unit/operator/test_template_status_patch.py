"""The MaasMachineTemplate status write is a compare-and-set: nothing when the cached status is what is
wanted, a merge patch of what differs otherwise (a dropped capacity key set to None), and the MaasCapacity
condition's lastTransitionTime kept while its status stays."""

from __future__ import annotations

from typing import Any

from capmaas.api import conditions as C
from capmaas.operator.templates import cluster_of, status_patch

WANT = {
    "capacity": {"cpu": "16", "memory": "65536Mi", "nvidia.com/gpu": "2"},
    "nodeInfo": {"architecture": "amd64"},
}
COUNTED = (True, C.COUNTED_IN_MAAS_REASON, "matching servers Ready in MAAS: 2")


def body(status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "t", "namespace": "ns", "generation": 1, **meta}, "status": status or {}}


def test_a_status_that_is_right_is_not_written_again() -> None:
    first = status_patch(body(), {**WANT, "available": 2}, COUNTED)
    assert first is not None
    assert first["available"] == 2
    assert first["capacity"] == WANT["capacity"]
    (cond,) = first["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        C.MAAS_CAPACITY_CONDITION, "True", C.COUNTED_IN_MAAS_REASON, 1,
    )  # fmt: skip
    assert status_patch(body(first), {**WANT, "available": 2}, COUNTED) is None


def test_a_change_patches_only_what_differs_and_keeps_the_transition_time() -> None:
    old = status_patch(body(), {**WANT, "available": 2}, COUNTED)
    assert old is not None
    old["conditions"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    one_left = (True, C.COUNTED_IN_MAAS_REASON, "matching servers Ready in MAAS: 1")
    want = {"capacity": {"cpu": "32", "memory": "65536Mi"}, "nodeInfo": WANT["nodeInfo"], "available": 1}
    patch = status_patch(body(old), want, one_left)
    assert patch is not None
    assert set(patch) == {"capacity", "available", "conditions"}
    assert patch["capacity"] == {"cpu": "32", "memory": "65536Mi", "nvidia.com/gpu": None}
    assert patch["conditions"][0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"  # still True
    none = (False, C.NO_MATCHING_SERVERS_REASON, "none matches")
    patch = status_patch(body(old), {**want, "available": 0}, none)
    assert patch is not None
    assert patch["conditions"][0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"


def test_untied_again_the_count_and_condition_go() -> None:
    old = status_patch(body(), {**WANT, "available": 2}, COUNTED)
    patch = status_patch(body(old), WANT, None)
    assert patch == {"available": None, "conditions": None}


def test_a_template_belongs_to_the_cluster_of_its_label_or_its_owner() -> None:
    assert cluster_of(body(labels={"cluster.x-k8s.io/cluster-name": "c1"})) == "c1"
    owner = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c2", "uid": "u"}
    assert cluster_of(body(ownerReferences=[owner])) == "c2"
    other = {**owner, "apiVersion": "example.com/v1"}
    assert cluster_of(body(ownerReferences=[other])) is None
    assert cluster_of(body()) is None
