"""Normal Events of many MaasMachines of one cluster are combined into one Event on its MaasCluster
(client-go's EventAggregator, keyed by cluster; ``logging.events_burst``): a burst of more than ``burst``
within the hold is one Event with their count and a sample of their messages; up to ``burst`` are posted on
their own objects as before; Warnings never are combined; nothing held is lost at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

import kubernetes
import pytest
from aiohttp import web
from fake_apiserver import Serve

from capmaas.operator import events
from capmaas.operator.events import COMBINED, EventRecorder, cluster_object
from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp

#: A hold short enough for a test, long enough for a loop of posts to fit in it.
HOLD = 0.2


class Apiserver:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self._names = itertools.count()
        self.arrived = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/v1/namespaces/{ns}/events", self.post),
            web.patch("/api/v1/namespaces/{ns}/events/{name}", self.patch),
        ]

    async def post(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.events.append(body)
        self.arrived.set()
        return web.json_response({"metadata": {"name": f"e{next(self._names)}"}}, status=201)

    async def patch(self, request: web.Request) -> web.Response:
        self.patches.append((request.match_info["name"], await request.json()))
        return web.json_response({})

    def on(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["involvedObject"]["name"] == name]


@pytest.fixture
async def api(loopback: Serve) -> AsyncIterator[tuple[Apiserver, KubeHttp]]:
    server = Apiserver()
    http = KubeHttp(kubernetes.client.Configuration(host=await loopback(server.routes())))
    try:
        yield server, http
    finally:
        await http.aclose()


def store(cluster: str = "c1", machines: int = 30) -> Store:
    """A Cluster, its MaasCluster and ``machines`` MaasMachines in the watch caches."""
    s = Store()
    s.put("clusters", {
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": cluster, "namespace": "ns", "uid": f"u-{cluster}", "resourceVersion": "1"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster",
                                       "name": f"{cluster}-maas"}},
    })  # fmt: skip
    s.put("maasclusters", {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasCluster",
        "metadata": {"name": f"{cluster}-maas", "namespace": "ns", "uid": f"u-{cluster}-maas",
                     "resourceVersion": "1"},
    })  # fmt: skip
    for i in range(machines):
        s.put("maasmachines", machine(f"{cluster}-m{i}", cluster))
    return s


def machine(name: str, cluster: str | None = "c1") -> dict[str, Any]:
    labels = {"cluster.x-k8s.io/cluster-name": cluster} if cluster else {}
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "MaasMachine",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"u-{name}",
            "labels": labels,
            "resourceVersion": "1",
        },
    }


async def posted(server: Apiserver, n: int, deadline: float = 10.0) -> None:
    """Waits until the fake apiserver has ``n`` Events (a loaded box may take a while to carry them), then a
    little longer, so an Event posted when it should not have been is there for the assertion that follows."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(deadline):
            while len(server.events) < n:
                server.arrived.clear()
                await server.arrived.wait()
    await asyncio.sleep(0.05)


def recorder(http: KubeHttp, s: Store, **kwargs: Any) -> EventRecorder:
    kwargs.setdefault("burst_hold", HOLD)
    return EventRecorder(http, group=lambda obj: cluster_object(s.find, obj), **kwargs)


def deploying(i: int) -> str:
    return f"allocated s{i} in zone az{i % 3}; deploying s{i} with cloud-config user data"


def scale_up(rec: EventRecorder, machines: range) -> None:
    """Each of c1's ``machines`` posts its MachineDeploying, one after another as a scale-up's passes do."""
    for i in machines:
        rec.post(machine(f"c1-m{i}"), "Normal", "MachineDeploying", deploying(i))


async def test_a_burst_of_a_clusters_machines_is_one_event_on_its_maascluster(
    api: tuple[Apiserver, KubeHttp], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="capmaas.operator.events")
    server, http = api
    rec = recorder(http, store(), burst=10)
    scale_up(rec, range(25))
    await posted(server, 2)  # the cluster is quiet: the burst is posted without a shutdown
    assert len(server.events) == 2
    first, e = server.events  # the burst's first, posted at once on its machine; then the rest in one
    assert (first["involvedObject"]["name"], first["message"], first.get("count")) == (
        "c1-m0",
        deploying(0),
        None,
    )
    assert (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == ("MaasCluster", "c1-maas")
    assert e["involvedObject"]["uid"] == "u-c1-maas"
    assert (e["type"], e["reason"], e["count"]) == ("Normal", "MachineDeploying", 24)
    assert e["firstTimestamp"] < e["lastTimestamp"]  # from the first of them to the post
    assert e["message"].startswith(f"{COMBINED}: c1-m1: {deploying(1)}; c1-m2: ")
    assert e["message"].endswith(f"; and {24 - events.BURST_SAMPLE} more")
    assert len(e["message"]) <= events.MAX_MESSAGE
    assert rec.combined == 24
    assert "24 Normal MachineDeploying Events of MaasCluster ns/c1-maas combined into one" in caplog.text
    await rec.drain()
    assert len(server.events) == 2
    assert server.patches == []


async def test_through_the_adapter_a_burst_costs_two_posts(api: tuple[Apiserver, KubeHttp]) -> None:
    """The operator's wiring: KubeAdapter finds the group in its watch caches (``logging.events_burst``)."""
    server, http = api
    s = store(machines=20)
    kube = KubeAdapter(s, http, secret_ttl=30.0)
    for i in range(20):
        kube.emit_event(
            s.find("maasmachines", "ns", f"c1-m{i}") or {}, "Normal", "MachineReleased", f"s{i} released"
        )
    await kube.events.drain()
    assert [(e["involvedObject"]["name"], e.get("count")) for e in server.events] == [
        ("c1-m0", None),
        ("c1-maas", 19),
    ]


async def test_up_to_burst_each_machine_keeps_its_own_event(api: tuple[Apiserver, KubeHttp]) -> None:
    server, http = api
    rec = recorder(http, store(), burst=10)
    scale_up(rec, range(10))
    await posted(server, 10)
    assert sorted(e["involvedObject"]["name"] for e in server.events) == sorted(f"c1-m{i}" for i in range(10))
    assert all(e["message"] == deploying(int(e["involvedObject"]["name"][4:])) for e in server.events)
    assert all("count" not in e for e in server.events)
    assert rec.combined == 0


async def test_warnings_reach_every_object(api: tuple[Apiserver, KubeHttp]) -> None:
    server, http = api
    rec = recorder(http, store(), burst=2)
    for i in range(12):
        rec.post(machine(f"c1-m{i}"), "Warning", "MachineBroken", f"s{i} failed to deploy")
    await rec.drain()
    assert len(server.events) == 12
    assert {e["involvedObject"]["kind"] for e in server.events} == {"MaasMachine"}


async def test_other_normal_events_are_posted_at_once(api: tuple[Apiserver, KubeHttp]) -> None:
    """Only what every machine of a scale-up says is held: an adoption, a remediation step are not."""
    server, http = api
    rec = recorder(http, store(), burst=2, burst_hold=3600.0)
    for i in range(5):
        rec.post(machine(f"c1-m{i}"), "Normal", "MachineAdopted", f"adopted s{i}")
    await posted(server, 5)
    assert len(server.events) == 5
    await rec.drain()


@pytest.mark.parametrize("burst", [0])
async def test_zero_never_combines(api: tuple[Apiserver, KubeHttp], burst: int) -> None:
    server, http = api
    rec = recorder(http, store(), burst=burst)
    scale_up(rec, range(15))
    assert len(server.events) + len(rec._pending) >= 15  # not held: posted at once
    await rec.drain()
    assert len(server.events) == 15


async def test_clusters_reasons_and_machines_without_a_cluster_are_apart(
    api: tuple[Apiserver, KubeHttp],
) -> None:
    server, http = api
    s = store("c1")
    for plural in ("clusters", "maasclusters", "maasmachines"):
        for body in store("c2").values(plural):
            s.put(plural, body)
    rec = recorder(http, s, burst=3)
    for i in range(5):
        rec.post(machine(f"c1-m{i}"), "Normal", "MachineDeploying", deploying(i))
        rec.post(machine(f"c1-m{i}"), "Normal", "MachineReleased", f"s{i} released")
        rec.post(machine(f"c2-m{i}", "c2"), "Normal", "MachineDeploying", deploying(i))
        rec.post(machine(f"lone-{i}", None), "Normal", "MachineDeploying", deploying(i))
    await rec.drain()
    combined = sorted(
        (e["involvedObject"]["name"], e["reason"], e["count"]) for e in server.events if "count" in e
    )
    assert combined == [
        ("c1-maas", "MachineDeploying", 4),
        ("c1-maas", "MachineReleased", 4),
        ("c2-maas", "MachineDeploying", 4),
    ]
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in server.events if "count" not in e) == [
        ("c1-m0", "MachineDeploying"),
        ("c1-m0", "MachineReleased"),
        ("c2-m0", "MachineDeploying"),
    ] + [(f"lone-{i}", "MachineDeploying") for i in range(5)]


async def test_a_later_burst_adds_to_the_combined_events_count(api: tuple[Apiserver, KubeHttp]) -> None:
    server, http = api
    rec = recorder(http, store(), burst=3)
    scale_up(rec, range(5))
    await posted(server, 2)
    scale_up(rec, range(5, 12))
    await asyncio.sleep(HOLD * 3)
    # c1-m0 at once; c1-m1..4 combined (e1); the later burst, its first included, counted on e1
    assert [(e["involvedObject"]["name"], e.get("count")) for e in server.events] == [
        ("c1-m0", None),
        ("c1-maas", 4),
    ]
    assert server.patches == []  # the count waits for the series flush
    await rec.drain()  # ... or the shutdown
    assert len(server.events) == 2
    assert [(name, body["count"]) for name, body in server.patches] == [("e1", 11)]


async def test_after_a_combined_burst_even_a_few_are_counted_on_it(api: tuple[Apiserver, KubeHttp]) -> None:
    """As client-go's aggregator: once a key went over the limit, similar Events within the window add to
    the combined one."""
    server, http = api
    rec = recorder(http, store(), burst=3)
    scale_up(rec, range(5))
    await posted(server, 2)
    rec.post(machine("c1-m5"), "Normal", "MachineDeploying", deploying(5))
    await rec.drain()
    assert [(e["involvedObject"]["name"], e.get("count")) for e in server.events] == [
        ("c1-m0", None),  # the first of the burst, at once
        ("c1-maas", 4),
    ]
    assert [(name, body["count"]) for name, body in server.patches] == [("e1", 5)]


async def test_held_events_are_posted_at_shutdown(api: tuple[Apiserver, KubeHttp]) -> None:
    server, http = api
    rec = recorder(http, store(), burst=10, burst_hold=3600.0)
    rec.post(machine("c1-m0"), "Normal", "MachineDeploying", deploying(0))
    for i in range(1, 13):
        rec.post(machine(f"c1-m{i}"), "Normal", "MachineReleased", f"s{i} released")
    await posted(server, 2)
    # Each reason's first is posted at once; the eleven MachineReleased after c1-m1's are held.
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in server.events) == [
        ("c1-m0", "MachineDeploying"),
        ("c1-m1", "MachineReleased"),
    ]
    await rec.drain()
    assert sorted((e["involvedObject"]["name"], e["reason"], e.get("count")) for e in server.events) == [
        ("c1-m0", "MachineDeploying", None),
        ("c1-m1", "MachineReleased", None),
        ("c1-maas", "MachineReleased", 11),
    ]


async def test_the_bursts_held_are_bounded(
    api: tuple[Apiserver, KubeHttp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like the series: past the bound, the oldest burst is posted at once instead of held."""
    monkeypatch.setattr(events, "SERIES_CACHE", 2)
    server, http = api
    rec = recorder(http, store(), burst=10, burst_hold=3600.0)
    reasons = ["MachineDeploying", "MachineReleased", "NodeProviderIDSet"]
    for reason in reasons:
        rec.post(machine("c1-m0"), "Normal", reason, "m")  # each reason's first: posted at once
        rec.post(machine("c1-m1"), "Normal", reason, "m")  # held
    await posted(server, 4)
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in server.events) == sorted([
        ("c1-m0", reasons[0]),
        ("c1-m0", reasons[1]),
        ("c1-m1", reasons[0]),  # its burst evicted by the third: posted now, not held
        ("c1-m0", reasons[2]),
    ])  # fmt: skip
    await rec.drain()
    assert sorted((e["involvedObject"]["name"], e["reason"]) for e in server.events) == sorted(
        (m, r) for m in ("c1-m0", "c1-m1") for r in reasons
    )


async def test_a_machine_repeating_itself_is_its_own_series_not_a_burst(
    api: tuple[Apiserver, KubeHttp],
) -> None:
    server, http = api
    rec = recorder(http, store(), burst=3)
    for _ in range(8):
        rec.post(machine("c1-m0"), "Normal", "NodeProviderIDSet", "Node m0 providerID=maas://az1/s0")
    await rec.drain()
    # Posted at once (a burst's first), then its repeats are its own series' count, never a combined Event.
    assert [(e["involvedObject"]["name"], e.get("count")) for e in server.events] == [("c1-m0", None)]
    assert rec.combined == 0
    assert [body["count"] for _, body in server.patches][-1] == 8


def test_the_group_is_the_maascluster_else_the_cluster_else_none() -> None:
    s = store()
    assert (cluster_object(s.find, machine("c1-m0")) or {})["kind"] == "MaasCluster"
    s.delete("maasclusters", "ns", "c1-maas")
    assert (cluster_object(s.find, machine("c1-m0")) or {})["kind"] == "Cluster"
    assert cluster_object(s.find, machine("x", "c9")) is None  # no such Cluster in the cache
    assert cluster_object(s.find, machine("x", None)) is None  # no cluster label
    assert cluster_object(s.find, {**machine("x"), "kind": "MaasCluster"}) is None


async def test_a_lone_machines_lifecycle_event_is_posted_at_once(api: tuple[Apiserver, KubeHttp]) -> None:
    """A burst's first Event is never held: a machine deploying on its own (a scale-up by one, a replacement)
    has its Event on its object at once, not when the cluster has been quiet for the hold (the hold is an hour
    here). The next one of its cluster within the hold is held."""
    server, http = api
    rec = recorder(http, store(), burst=10, burst_hold=3600.0)
    rec.post(machine("c1-m0"), "Normal", "MachineDeploying", deploying(0))
    for _ in range(100):
        if server.events:
            break
        await asyncio.sleep(0.01)
    assert [(e["involvedObject"]["name"], e["reason"]) for e in server.events] == [
        ("c1-m0", "MachineDeploying")
    ]
    rec.post(machine("c1-m1"), "Normal", "MachineDeploying", deploying(1))
    await asyncio.sleep(0.1)
    assert len(server.events) == 1  # held: more may come
    await rec.drain()
    assert sorted(e["involvedObject"]["name"] for e in server.events) == ["c1-m0", "c1-m1"]
