"""The siblings the zone spread reads: one is reused only for the very body at the very version it was parsed
from; a changed, new or gone sibling is seen as it is now."""

from __future__ import annotations

from typing import Any

from capmaas.reconcilers.siblings import SiblingZones


def body(name: str, rv: str | None, zone: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"failureDomain": zone}}


def test_an_unchanged_sibling_keeps_its_view() -> None:
    views = SiblingZones()
    a, b = body("a", "1", "z1"), body("b", "2", "z2")
    first = views.read("ns", "c", [a, b])
    again = views.read("ns", "c", [a, b])
    assert [v.failure_domain for v in again] == ["z1", "z2"]
    assert again[0] is first[0]
    assert again[1] is first[1]


def test_a_sibling_updated_in_place_is_parsed_again() -> None:
    views = SiblingZones()
    a = body("a", "1", None)
    views.read("ns", "c", [a])
    a["spec"]["failureDomain"] = "z3"
    a["metadata"]["resourceVersion"] = "7"
    assert views.read("ns", "c", [a])[0].failure_domain == "z3"


def test_a_new_body_of_the_same_sibling_is_parsed_again() -> None:
    views = SiblingZones()
    views.read("ns", "c", [body("a", "1", None)])
    assert views.read("ns", "c", [body("a", "1", "z2")])[0].failure_domain == "z2"


def test_a_body_without_resource_version_is_never_reused() -> None:
    views = SiblingZones()
    a = body("a", None, "z1")
    views.read("ns", "c", [a])
    a["spec"]["failureDomain"] = "z2"
    assert views.read("ns", "c", [a])[0].failure_domain == "z2"


def test_clusters_are_apart_and_gone_siblings_are_dropped() -> None:
    views = SiblingZones()
    a, b = body("a", "1", "z1"), body("b", "1", "z2")
    views.read("ns", "c1", [a, b])
    assert [v.uid for v in views.read("ns", "c2", [b])] == ["uid-b"]
    assert [v.uid for v in views.read("ns", "c1", [b])] == ["uid-b"]
    assert views.read("ns", "c1", []) == []
