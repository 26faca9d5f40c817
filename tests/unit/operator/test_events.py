"""Events are posted by the operator's own recorder on its async client, from any task (no kopf context
needed), bounded, at the lowest write priority; a failed post is logged, never raised into a reconcile."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kubernetes
import pytest
from aiohttp import web
from fake_apiserver import Serve

from capmaas.operator.events import MAX_MESSAGE, EventRecorder
from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp

OBJ = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
    "kind": "MaasMachine",
    "metadata": {"name": "m1", "namespace": "ns", "uid": "u-1"},
}


class Apiserver:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.queries: list[str] = []
        self.status = 201

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/api/v1/namespaces/{ns}/events", self.event),
            web.patch("/apis/{group}/{version}/namespaces/{ns}/maasmachines/{name}", self.patch),
        ]

    async def event(self, request: web.Request) -> web.Response:
        if request.content_type != "application/json":  # what the apiserver answers (415) to anything else
            return web.json_response({"message": "unsupported media type"}, status=415)
        self.events.append(await request.json())
        return web.json_response({}, status=self.status)

    async def patch(self, request: web.Request) -> web.Response:
        self.queries.append(request.query_string)
        return web.json_response({"metadata": {"name": "m1", "namespace": "ns"}})


@pytest.fixture
async def server(loopback: Serve) -> tuple[Apiserver, str]:
    api = Apiserver()
    return api, await loopback(api.routes())


def http(url: str, **kwargs: Any) -> KubeHttp:
    return KubeHttp(kubernetes.client.Configuration(host=url), **kwargs)


async def test_an_event_from_a_plain_task_reaches_the_apiserver(server: tuple[Apiserver, str]) -> None:
    api, url = server
    kube = KubeAdapter(Store(), http(url), secret_ttl=30.0)

    async def reconcile_loop() -> None:  # a task of our own, not a kopf handler's
        kube.emit_event(OBJ, "Warning", "MachineBroken", "x" * 5000)

    await asyncio.get_running_loop().create_task(reconcile_loop())
    await kube.aclose()  # drains the posts in flight
    assert len(api.events) == 1
    e = api.events[0]
    assert e["involvedObject"] == {
        "apiVersion": OBJ["apiVersion"],
        "kind": "MaasMachine",
        "name": "m1",
        "namespace": "ns",
        "uid": "u-1",
    }
    assert (e["type"], e["reason"], e["metadata"]["namespace"]) == ("Warning", "MachineBroken", "ns")
    assert len(e["message"]) == MAX_MESSAGE
    assert e["source"] == {"component": "capmaas"}


async def test_posts_in_flight_are_bounded_and_failures_are_only_logged(
    server: tuple[Apiserver, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="capmaas.operator.events")
    api, url = server
    api.status = 403  # e.g. no RBAC for events
    client = http(url)
    recorder = EventRecorder(client, max_pending=3)
    for i in range(5):
        recorder.post(OBJ, "Normal", f"R{i}", "m")
    assert recorder.dropped == 2
    await recorder.drain()
    await client.aclose()
    assert [e["reason"] for e in api.events] == ["R0", "R1", "R2"]
    assert "not posted" in caplog.text


async def test_patches_carry_the_field_validation_asked_for(server: tuple[Apiserver, str]) -> None:
    api, url = server
    for value in ("Strict", None):
        client = http(url, field_validation=value)
        await client.merge_patch("g/v1", "maasmachines", "ns", "m1", {"spec": {}}, status=False)
        await client.aclose()
    assert api.queries == ["fieldValidation=Strict", ""]
