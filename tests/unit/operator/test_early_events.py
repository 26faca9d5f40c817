"""The watch events of MaasMachines and MaasClusters, done before kopf (capmaas.operator.early): once kopf has
run a kind's handler, its ADDED and MODIFIED events of an object the watch filter keeps, and the DELETED event
of an object's last state, become BOOKMARKs after the handler's work for them; everything else reaches kopf
unchanged. And kopf does with a BOOKMARK what that relies on: notes its resourceVersion for the watch's
continuation and hands it to no handler."""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Mapping
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import api as kopf_api
from kopf._cogs.clients import watching
from kopf._core.reactor import queueing

from capmaas.config import OperatorConfig
from capmaas.operator import jsonbodies, kopfsettings
from capmaas.operator.early import EarlyEvents
from capmaas.operator.kube import Store

API = "infrastructure.cluster.x-k8s.io/v1beta1"
GONE = "2026-01-01T00:00:00Z"


def obj(kind: str = "MaasMachine", name: str = "m1", rv: str = "7", **meta: Any) -> dict[str, Any]:
    m = {"name": name, "namespace": "ns", "uid": "u-" + name, "resourceVersion": rv, **meta}
    return {"apiVersion": API, "kind": kind, "metadata": m, "status": {"ready": True}}


class Seen:
    def __init__(self) -> None:
        self.handled: list[tuple[str, str, str]] = []
        self.counted: list[tuple[str, str, bool]] = []
        self.outside: set[str] = set()

    def handle(self, plural: str, type: str, body: Mapping[str, Any]) -> None:
        self.handled.append((plural, type, body["metadata"]["name"]))

    def count(self, plural: str, type: str, echo: bool) -> None:
        self.counted.append((plural, type, echo))

    def in_shard(self, body: Mapping[str, Any]) -> bool:
        return body["metadata"]["name"] not in self.outside


def early_events(store: Store, seen: Seen) -> EarlyEvents:
    return EarlyEvents(store, in_shard=seen.in_shard, handle=seen.handle, counted=seen.count)


@pytest.fixture
def setup() -> tuple[Store, Seen, EarlyEvents]:
    store, seen = Store(), Seen()
    store.put("maasmachines", obj())
    store.put("maasclusters", obj("MaasCluster", "c1", "8"))
    early = early_events(store, seen)
    early.open("maasmachines")
    early.open("maasclusters")
    return store, seen, early


def bookmark(kind: str, rv: str) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"apiVersion": API, "kind": kind, "metadata": {"resourceVersion": rv}},
    }


def test_the_echo_of_a_write_is_done_here_and_kopf_gets_a_bookmark(
    setup: tuple[Store, Seen, EarlyEvents],
) -> None:
    _, seen, early = setup
    assert early({"type": "MODIFIED", "object": obj()}) == bookmark("MaasMachine", "7")
    cluster = obj("MaasCluster", "c1", "8")
    assert early({"type": "MODIFIED", "object": cluster}) == bookmark("MaasCluster", "8")
    assert seen.handled == [("maasmachines", "MODIFIED", "m1"), ("maasclusters", "MODIFIED", "c1")]
    assert seen.counted == [("maasmachines", "MODIFIED", True), ("maasclusters", "MODIFIED", True)]


@pytest.mark.parametrize(
    ("event", "name"),
    [
        ({"type": "ADDED", "object": obj(name="m2")}, "m2"),  # a new object
        ({"type": "MODIFIED", "object": obj(rv="9")}, "m1"),  # a newer version: news
        ({"type": "MODIFIED", "object": obj(rv="6")}, "m1"),  # an older one: the handler's store decides
        ({"type": "MODIFIED", "object": obj(uid="u-other")}, "m1"),  # recreated under the same name
        ({"type": "MODIFIED", "object": obj(name="m2")}, "m2"),  # not cached
        ({"type": "MODIFIED", "object": obj(rv="10", deletionTimestamp=GONE, finalizers=["f"])}, "m1"),
        ({"type": "MODIFIED", "object": obj(rv="11", deletionTimestamp=GONE)}, "m1"),  # its last state
        ({"type": "DELETED", "object": obj(deletionTimestamp=GONE)}, "m1"),  # a deletion, no read needed
        ({"type": "DELETED", "object": obj(deletionTimestamp=GONE, finalizers=[])}, "m1"),
        ({"type": "ADDED", "object": obj("MaasCluster", "c2")}, "c2"),
    ],
)
def test_the_other_events_of_our_kinds_are_done_here_and_not_counted_as_echoes(
    setup: tuple[Store, Seen, EarlyEvents], event: dict[str, Any], name: str
) -> None:
    _, seen, early = setup
    body = event["object"]
    assert early(event) == bookmark(body["kind"], body["metadata"]["resourceVersion"])
    ((plural, type, handled),) = seen.handled
    assert (type, handled) == (event["type"], name)
    assert seen.counted == [(plural, event["type"], False)]


@pytest.mark.parametrize(
    "event",
    [
        # A DELETED event that may be a hand-off (relabelled out of the shard): the handler reads it back.
        {"type": "DELETED", "object": obj()},
        {"type": "DELETED", "object": obj(deletionTimestamp=GONE, finalizers=["f"])},
        {"type": "MODIFIED", "object": obj(rv="")},
        {"type": None, "object": obj()},  # a listing
        {"type": "MODIFIED", "object": {**obj(), "kind": "Machine"}},
        {"type": "ADDED", "object": {**obj(), "apiVersion": "example.com/v1"}},
        {"type": "MODIFIED", "object": {**obj(), "metadata": "odd"}},
        {"type": "MODIFIED", "object": []},
        {"type": "ERROR", "object": {"code": 410}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
    ],
)
def test_anything_else_reaches_kopf_as_it_came(
    setup: tuple[Store, Seen, EarlyEvents], event: dict[str, Any]
) -> None:
    _, seen, early = setup
    before = copy.deepcopy(event)
    assert early(event) is event
    assert event == before
    assert seen.handled == seen.counted == []


@pytest.mark.parametrize("type", ["ADDED", "MODIFIED"])
def test_an_object_outside_the_watch_filter_goes_to_kopf(
    setup: tuple[Store, Seen, EarlyEvents], type: str
) -> None:
    _, seen, early = setup
    seen.outside.add("m1")
    event = {"type": type, "object": obj()}
    assert early(event) is event  # its handler counts it
    assert seen.handled == []


def test_nothing_is_taken_before_kopf_ran_the_kinds_handler() -> None:
    """kopf holds its handlers until the CAPI Machines and Clusters are indexed; an event taken before that
    would start a loop that finds no owner in the cache."""
    store, seen = Store(), Seen()
    store.put("maasmachines", obj())
    early = early_events(store, seen)
    events = [
        {"type": "ADDED", "object": obj(name="m2")},
        {"type": "MODIFIED", "object": obj()},
        {"type": "DELETED", "object": obj(deletionTimestamp=GONE)},
        {"type": "ADDED", "object": obj("MaasCluster", "c1")},
    ]
    assert [early(e) for e in events] == events
    early.open("maasclusters")
    assert early(events[0]) is events[0]  # still held: only the MaasClusters' handler ran
    assert early(events[3])["type"] == "BOOKMARK"
    early.open("maasmachines")
    assert early(events[0])["type"] == "BOOKMARK"
    assert seen.handled == [("maasclusters", "ADDED", "c1"), ("maasmachines", "ADDED", "m2")]


def test_an_event_whose_work_fails_goes_to_kopf(setup: tuple[Store, Seen, EarlyEvents]) -> None:
    store, seen, _ = setup

    def fails(plural: str, type: str, body: Mapping[str, Any]) -> None:
        raise ValueError("a routing bug")

    early = EarlyEvents(store, in_shard=lambda body: True, handle=fails, counted=seen.count)
    early.open("maasmachines")
    for event in ({"type": "MODIFIED", "object": obj()}, {"type": "ADDED", "object": obj(name="m2")}):
        assert early(event) is event  # its handler runs (and reports) it
    assert seen.counted == []


def test_the_installed_decoder_hands_watch_lines_to_the_filter(
    monkeypatch: pytest.MonkeyPatch, setup: tuple[Store, Seen, EarlyEvents]
) -> None:
    _, seen, early = setup
    monkeypatch.setattr(kopf_api, "json", json)
    monkeypatch.setattr(kopf_api, "get", kopf_api.get)  # restored after, whatever install sets
    assert jsonbodies.install_in_kopf()
    try:
        jsonbodies.take_watch_events(early)
        line = json.dumps({"type": "MODIFIED", "object": obj()})
        assert kopf_api.json.loads(line) == bookmark("MaasMachine", "7")
        jsonbodies.take_watch_events(None)
        assert kopf_api.json.loads(line)["type"] == "MODIFIED"
    finally:
        jsonbodies.take_watch_events(None)
    assert len(seen.handled) == 1


def test_kopf_notes_a_bookmarks_version_and_hands_it_to_no_handler() -> None:
    """What the early events rely on in the installed kopf: its watch keeps the resourceVersion of every event
    it yields (a BOOKMARK's included) to continue from, and its queue drops BOOKMARKs before any handler."""
    source = inspect.getsource(watching.continuous_watch)
    assert "'BOOKMARK'" in source
    assert "resource_version = body.get('metadata', {}).get('resourceVersion', resource_version)" in source
    worker = inspect.getsource(queueing.watcher)
    assert "if raw_event.get('type') == 'BOOKMARK':\n                continue" in worker
    assert worker.index("'BOOKMARK'") < worker.index("backlog.put(raw_event)")


def test_the_operator_lists_before_it_watches() -> None:
    """With kopf's initial streaming a BOOKMARK ends its initial listing: the early events need the
    LIST-then-watch mode, which the operator's settings pin (whatever kopf's default becomes)."""
    registry = kopf.OperatorRegistry()
    kopfsettings.register(registry, OperatorConfig())
    settings = kopf.OperatorSettings()
    settings.watching.initial_streaming = True
    (configure,) = [h for h in registry._activities.get_all_handlers() if h.id.endswith("configure")]
    configure.fn(settings=settings)
    assert settings.watching.initial_streaming is False
