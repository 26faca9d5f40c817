"""The echoes of the operator's own writes, taken before kopf (capmaas.operator.echoes): exactly the MODIFIED
events of a MaasMachine or MaasCluster at the cached UID and resourceVersion become BOOKMARKs, after the
handler's work for them; everything else reaches kopf unchanged. And kopf does with a BOOKMARK what that
relies on: notes its resourceVersion for the watch's continuation and hands it to no handler."""

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
from capmaas.operator.echoes import Echoes
from capmaas.operator.kube import Store, object_key

API = "infrastructure.cluster.x-k8s.io/v1beta1"


def obj(kind: str = "MaasMachine", name: str = "m1", rv: str = "7", **meta: Any) -> dict[str, Any]:
    m = {"name": name, "namespace": "ns", "uid": "u-" + name, "resourceVersion": rv, **meta}
    return {"apiVersion": API, "kind": kind, "metadata": m, "status": {"ready": True}}


class Seen:
    def __init__(self) -> None:
        self.echoed: list[tuple[str, str]] = []
        self.outside: set[str] = set()

    def echo(self, plural: str, key: str, body: Mapping[str, Any]) -> None:
        self.echoed.append((plural, key))

    def in_shard(self, body: Mapping[str, Any]) -> bool:
        return body["metadata"]["name"] not in self.outside


@pytest.fixture
def setup() -> tuple[Store, Seen, Echoes]:
    store, seen = Store(), Seen()
    store.put("maasmachines", obj())
    store.put("maasclusters", obj("MaasCluster", "c1", "8"))
    return store, seen, Echoes(store, in_shard=seen.in_shard, echo=seen.echo)


def bookmark(kind: str, rv: str) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"apiVersion": API, "kind": kind, "metadata": {"resourceVersion": rv}},
    }


def test_the_echo_of_a_write_is_done_here_and_kopf_gets_a_bookmark(setup: tuple[Store, Seen, Echoes]) -> None:
    _, seen, echoes = setup
    assert echoes({"type": "MODIFIED", "object": obj()}) == bookmark("MaasMachine", "7")
    assert echoes({"type": "MODIFIED", "object": obj("MaasCluster", "c1", "8")}) == bookmark(
        "MaasCluster", "8"
    )
    assert seen.echoed == [
        ("maasmachines", object_key("maasmachines", "ns", "m1")),
        ("maasclusters", object_key("maasclusters", "ns", "c1")),
    ]


@pytest.mark.parametrize(
    "event",
    [
        {"type": "MODIFIED", "object": obj(rv="9")},  # a newer version: news
        {"type": "MODIFIED", "object": obj(rv="6")},  # an older one: the handler decides
        {"type": "MODIFIED", "object": obj(uid="u-other")},  # recreated under the same name
        {"type": "MODIFIED", "object": obj(name="m2")},  # not cached
        {"type": "MODIFIED", "object": obj(rv="")},
        {"type": "ADDED", "object": obj()},
        {"type": "DELETED", "object": obj()},
        {"type": None, "object": obj()},  # a listing
        {"type": "MODIFIED", "object": obj(deletionTimestamp="2026-01-01T00:00:00Z")},  # its last event
        {"type": "MODIFIED", "object": {**obj(), "kind": "Machine"}},
        {"type": "MODIFIED", "object": {**obj(), "apiVersion": "example.com/v1"}},
        {"type": "MODIFIED", "object": {**obj(), "metadata": "odd"}},
        {"type": "MODIFIED", "object": []},
        {"type": "ERROR", "object": {"code": 410}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
    ],
)
def test_anything_else_reaches_kopf_as_it_came(
    setup: tuple[Store, Seen, Echoes], event: dict[str, Any]
) -> None:
    _, seen, echoes = setup
    before = copy.deepcopy(event)
    assert echoes(event) is event
    assert event == before
    assert seen.echoed == []


def test_a_deleting_object_with_finalizers_still_echoes(setup: tuple[Store, Seen, Echoes]) -> None:
    store, _, echoes = setup
    deleting = obj(rv="10", deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["f"])
    store.put("maasmachines", deleting)
    assert echoes({"type": "MODIFIED", "object": copy.deepcopy(deleting)})["type"] == "BOOKMARK"


def test_an_object_outside_the_watch_filter_goes_to_kopf(setup: tuple[Store, Seen, Echoes]) -> None:
    _, seen, echoes = setup
    seen.outside.add("m1")
    event = {"type": "MODIFIED", "object": obj()}
    assert echoes(event) is event
    assert seen.echoed == []


def test_an_echo_whose_work_fails_goes_to_kopf(setup: tuple[Store, Seen, Echoes]) -> None:
    store, _, _ = setup

    def fails(plural: str, key: str, body: Mapping[str, Any]) -> None:
        raise ValueError("a routing bug")

    echoes = Echoes(store, in_shard=lambda body: True, echo=fails)
    event = {"type": "MODIFIED", "object": obj()}
    assert echoes(event) is event  # its handler runs (and reports) it


def test_the_installed_decoder_hands_watch_lines_to_the_filter(
    monkeypatch: pytest.MonkeyPatch, setup: tuple[Store, Seen, Echoes]
) -> None:
    _, seen, echoes = setup
    monkeypatch.setattr(kopf_api, "json", json)
    monkeypatch.setattr(kopf_api, "get", kopf_api.get)  # restored after, whatever install sets
    assert jsonbodies.install_in_kopf()
    try:
        jsonbodies.take_watch_events(echoes)
        line = json.dumps({"type": "MODIFIED", "object": obj()})
        assert kopf_api.json.loads(line) == bookmark("MaasMachine", "7")
        jsonbodies.take_watch_events(None)
        assert kopf_api.json.loads(line)["type"] == "MODIFIED"
    finally:
        jsonbodies.take_watch_events(None)
    assert len(seen.echoed) == 1


def test_kopf_notes_a_bookmarks_version_and_hands_it_to_no_handler() -> None:
    """What the echoes rely on in the installed kopf: its watch keeps the resourceVersion of every event it
    yields (a BOOKMARK's included) to continue from, and its queue drops BOOKMARKs before any handler."""
    source = inspect.getsource(watching.continuous_watch)
    assert "'BOOKMARK'" in source
    assert "resource_version = body.get('metadata', {}).get('resourceVersion', resource_version)" in source
    worker = inspect.getsource(queueing.watcher)
    assert "if raw_event.get('type') == 'BOOKMARK':\n                continue" in worker
    assert worker.index("'BOOKMARK'") < worker.index("backlog.put(raw_event)")


def test_the_operator_lists_before_it_watches() -> None:
    """With kopf's initial streaming a BOOKMARK ends its initial listing: the echoes need the LIST-then-watch
    mode, which the operator's settings pin (whatever kopf's default becomes)."""
    registry = kopf.OperatorRegistry()
    kopfsettings.register(registry, OperatorConfig())
    settings = kopf.OperatorSettings()
    settings.watching.initial_streaming = True
    (configure,) = [h for h in registry._activities.get_all_handlers() if h.id.endswith("configure")]
    configure.fn(settings=settings)
    assert settings.watching.initial_streaming is False
