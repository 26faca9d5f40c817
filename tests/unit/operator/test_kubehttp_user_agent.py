"""The operator's Kubernetes client names itself: the apiserver takes a write's field manager from the
User-Agent's first word when the request gives none, so aiohttp's default (``Python/3.x aiohttp/…``) made
every field the operator writes show ``manager: Python`` in ``managedFields``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kubernetes
import pytest
from aiohttp import web
from fake_apiserver import Serve

from capmaas import __version__
from capmaas.operator.kubehttp import MERGE, KubeHttp

PATH = "/apis/g/v1/namespaces/ns/things/a"


class Agents:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def routes(self) -> list[web.RouteDef]:
        return [web.patch(PATH, self.patch)]

    async def patch(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("User-Agent", ""))
        return web.json_response({"metadata": {"name": "a"}})


@pytest.fixture
async def served(loopback: Serve) -> AsyncIterator[tuple[Agents, KubeHttp]]:
    agents = Agents()
    http = KubeHttp(kubernetes.client.Configuration(host=await loopback(agents.routes())))
    try:
        yield agents, http
    finally:
        await http.aclose()


async def test_every_request_says_capmaas_and_its_version(served: tuple[Agents, KubeHttp]) -> None:
    agents, http = served
    for _ in range(2):
        await http.request("PATCH", PATH, body={"metadata": {}}, content_type=MERGE)
    assert agents.seen == [f"capmaas/{__version__}"] * 2
    assert agents.seen[0].split("/")[0] == "capmaas"  # the field manager the apiserver derives from it
