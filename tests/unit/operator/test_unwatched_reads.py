"""Owners outside the watch filter are read by a bounded GET: one request shared by every pass that asks at
once, kept for a few seconds (also "not found"), none at all without a watch filter or for a labelled object
(the watch brings that one). Against a loopback HTTP server that answers like the apiserver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kubernetes
import pytest
from aiohttp import web
from loopback_server import serve

from capmaas.operator.kube import CAPI_API, KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp

FILTER = "cluster.x-k8s.io/watch-filter=shard-0"
CLUSTERS = f"/apis/{CAPI_API}/namespaces/ns/clusters"


class Apiserver:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.gets: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.gets.append(request.path)
        await asyncio.sleep(0.05)  # passes asking meanwhile must wait for this one answer
        body = self.objects.get(request.path)
        if body is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(body)


@pytest.fixture
async def apiserver() -> AsyncIterator[tuple[Apiserver, str]]:
    srv = Apiserver()
    async with serve(srv.handle, "GET") as url:
        yield srv, url


def adapter(url: str, watch_filter: str | None) -> KubeAdapter:
    http = KubeHttp(kubernetes.client.Configuration(host=url))
    return KubeAdapter(Store(), http, secret_ttl=30.0, watch_filter=watch_filter)


def cluster(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"kind": "Cluster", "metadata": {"name": name, "namespace": "ns", "labels": labels}}


async def test_one_get_for_many_passes_and_kept_for_a_while(apiserver: tuple[Apiserver, str]) -> None:
    srv, url = apiserver
    srv.objects[f"{CLUSTERS}/c1"] = cluster("c1", {})
    kube = adapter(url, FILTER)
    try:
        got = await asyncio.gather(*(kube.read_unwatched("clusters", "ns", "c1") for _ in range(50)))
        assert srv.gets == [f"{CLUSTERS}/c1"]
        assert {g.label for g in got if g is not None} == {FILTER}
        assert all(g is not None and g.body["metadata"]["name"] == "c1" for g in got)
        assert await kube.read_unwatched("clusters", "ns", "c1") is not None
        assert len(srv.gets) == 1  # served from the short-lived cache
        assert await kube.read_unwatched("clusters", "ns", "gone") is None
        assert await kube.read_unwatched("clusters", "ns", "gone") is None
        assert srv.gets.count(f"{CLUSTERS}/gone") == 1  # "not found" is kept too
    finally:
        await kube.aclose()


async def test_labelled_objects_and_no_filter_are_left_to_the_watch(apiserver: tuple[Apiserver, str]) -> None:
    srv, url = apiserver
    srv.objects[f"{CLUSTERS}/mine"] = cluster("mine", {"cluster.x-k8s.io/watch-filter": "shard-0"})
    srv.objects[f"{CLUSTERS}/other"] = cluster("other", {"cluster.x-k8s.io/watch-filter": "shard-1"})
    kube = adapter(url, FILTER)
    unfiltered = adapter(url, None)
    try:
        assert await kube.read_unwatched("clusters", "ns", "mine") is None  # the watch brings it
        other = await kube.read_unwatched("clusters", "ns", "other")
        assert other is not None  # another shard's value is not this shard's label
        assert other.label == FILTER
        before = len(srv.gets)
        assert await unfiltered.read_unwatched("clusters", "ns", "other") is None
        assert len(srv.gets) == before  # without a watch filter a cache miss is a miss: no request
        present = adapter(url, "cluster.x-k8s.io/watch-filter")  # key only: any value
        try:
            assert await present.read_unwatched("clusters", "ns", "other") is None
        finally:
            await present.aclose()
    finally:
        await kube.aclose()
        await unfiltered.aclose()
