"""The operator's apiserver queue against a real (loopback) HTTP server: the write that completes a machine
(``status.ready: true``) overtakes queued writes of machines that are only starting, and a cached Secret that
expired is read once for all the passes asking at the same time (readiness lag at 1,000 machines)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import kubernetes
import pytest
from aiohttp import web
from fake_apiserver import Serve

from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp

NS = "ns"


class Apiserver:
    """Just enough of one: Secret GETs and MaasMachine merge patches, recorded in arrival order; requests
    are held while ``gate`` is clear."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.arrived = asyncio.Event()  # set by the first request to reach the server

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/v1/namespaces/{ns}/secrets/{name}", self.secret),
            web.patch("/apis/{group}/{version}/namespaces/{ns}/maasmachines/{name}", self.patch),
            web.patch("/apis/{group}/{version}/namespaces/{ns}/maasmachines/{name}/status", self.patch),
        ]

    async def secret(self, request: web.Request) -> web.Response:
        self.seen.append("GET " + request.match_info["name"])
        self.arrived.set()
        await self.gate.wait()
        return web.json_response({"data": {"k": base64.b64encode(b"v").decode()}})

    async def patch(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        self.seen.append(str(body.get("tag") or body.get("status", {}).get("tag")))
        self.arrived.set()
        await self.gate.wait()
        name = request.match_info["name"]
        return web.json_response({"metadata": {"name": name, "namespace": NS, "resourceVersion": "1"}})


@pytest.fixture
async def server(loopback: Serve) -> tuple[Apiserver, str]:
    api = Apiserver()
    return api, await loopback(api.routes())


def adapter(url: str, connections: int) -> KubeAdapter:
    cfg = kubernetes.client.Configuration(host=url)
    return KubeAdapter(
        Store(), KubeHttp(cfg, connections=connections, field_validation="Strict"), secret_ttl=30.0
    )


async def test_completing_status_write_overtakes_starting_writes(server: tuple[Apiserver, str]) -> None:
    api, url = server
    kube = adapter(url, connections=1)
    try:
        api.gate.clear()
        blocker = asyncio.create_task(kube.patch("maasmachines", NS, "a", {"tag": "blocker"}, status=False))
        await asyncio.wait_for(api.arrived.wait(), 5)  # the one connection is busy: everything below queues
        assert api.seen == ["blocker"]
        queued = [
            kube.patch("maasmachines", NS, "b", {"tag": "meta"}, status=False),
            kube.patch("maasmachines", NS, "c", {"status": {"tag": "deploying"}}, status=True),
            kube.patch("maasmachines", NS, "d", {"status": {"tag": "ready", "ready": True}}, status=True),
        ]
        tasks = [asyncio.create_task(c) for c in queued]
        await asyncio.sleep(0.1)
        api.gate.set()
        await asyncio.gather(blocker, *tasks)
        assert api.seen == ["blocker", "ready", "deploying", "meta"]
    finally:
        await kube.aclose()


async def test_an_expired_secret_is_read_once_for_every_pass_asking(server: tuple[Apiserver, str]) -> None:
    api, url = server
    kube = adapter(url, connections=4)
    try:
        api.gate.clear()
        readers = [asyncio.create_task(kube.get_secret(NS, "identity")) for _ in range(20)]
        await asyncio.wait_for(api.arrived.wait(), 5)
        await asyncio.sleep(0.1)  # room for any further GET to arrive
        api.gate.set()
        results = await asyncio.gather(*readers)
        assert api.seen == ["GET identity"]
        assert all(r == {"k": b"v"} for r in results)
    finally:
        await kube.aclose()
