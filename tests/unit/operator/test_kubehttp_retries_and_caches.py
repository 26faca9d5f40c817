"""The operator's own Kubernetes client and caches against a loopback HTTP server playing just enough of an
apiserver: 429/5xx retried as kopf's client does (``Retry-After`` honoured, bounded), bootstrap Secrets never
kept, other Secrets and workload clients in a bounded cache with a TTL, and a workload kubeconfig used only
from CAPI's kubeconfig Secret and only with inline credentials."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import kubernetes
import pytest
import yaml
from aiohttp import web
from loopback_server import serve

from capmaas.operator.kube import (
    CAPI_SECRET_TYPE,
    KubeAdapter,
    SecretOrigin,
    SecretValue,
    Store,
    trust_problem,
)
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError, Retries
from capmaas.operator.ttlcache import TtlLru
from capmaas.reconcilers.ports import NodePatchResult


class Server:
    """Answers from a per-path script (a list of (status, headers, body)); records each request."""

    def __init__(self) -> None:
        self.script: dict[str, list[tuple[int, dict[str, str], Any]]] = {}
        self.seen: list[tuple[str, str, float]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path, time.monotonic()))
        replies = self.script.get(request.path) or [(404, {}, {"message": "not found"})]
        status, headers, body = replies.pop(0) if len(replies) > 1 else replies[0]
        return web.json_response(body, status=status, headers=headers)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    srv = Server()
    async with serve(srv.handle) as url:
        yield srv, url


def http(url: str, **kwargs: Any) -> KubeHttp:
    return KubeHttp(kubernetes.client.Configuration(host=url), **kwargs)


SECRET = "/api/v1/namespaces/ns/secrets/s"


def secret_body(value: bytes, type_: str = "Opaque", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "type": type_,
        "metadata": {"labels": labels or {}},
        "data": {"value": base64.b64encode(value).decode()},
    }


async def test_429_is_retried_after_the_servers_retry_after(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.script[SECRET] = [(429, {"Retry-After": "0.4"}, {"message": "slow down"}), (200, {}, {"data": {}})]
    client = http(url, retries=Retries(backoffs=(0.05,)))
    try:
        assert await client.get_secret("ns", "s") == {"data": {}}
    finally:
        await client.aclose()
    assert len(srv.seen) == 2
    assert srv.seen[1][2] - srv.seen[0][2] >= 0.35  # the server's 0.4 s, not the 0.05 s backoff


async def test_retry_after_is_capped(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.script[SECRET] = [(503, {"Retry-After": "3600"}, {}), (200, {}, {"data": {}})]
    client = http(url, retries=Retries(backoffs=(0.05,), max_retry_after=0.2))
    started = time.monotonic()
    try:
        await client.get_secret("ns", "s")
    finally:
        await client.aclose()
    assert time.monotonic() - started < 2


async def test_5xx_retries_are_bounded_and_other_errors_are_not_retried(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.script[SECRET] = [(500, {}, {"message": "etcd down"})]
    srv.script["/api/v1/namespaces/ns/secrets/gone"] = [(404, {}, {"message": "gone"})]
    client = http(url, retries=Retries(backoffs=(0.01, 0.01, 0.01)))
    try:
        with pytest.raises(KubeHttpError) as err:
            await client.get_secret("ns", "s")
        assert err.value.status == 500
        assert "etcd down" in str(err.value)
        assert len(srv.seen) == 4  # the first try and three retries
        with pytest.raises(KubeHttpError) as err:
            await client.get_secret("ns", "gone")
        assert err.value.status == 404
        assert len(srv.seen) == 5
    finally:
        await client.aclose()


async def test_a_waiting_retry_holds_no_connection(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.script[SECRET] = [(503, {"Retry-After": "0.5"}, {}), (200, {}, {"data": {}})]
    srv.script["/api/v1/namespaces/ns/secrets/other"] = [(200, {}, {"data": {}})]
    client = http(url, connections=1, retries=Retries(backoffs=(0.5,)))
    try:
        slow = asyncio.create_task(client.get_secret("ns", "s"))
        await asyncio.sleep(0.1)  # the first answer (503) is in: it now waits for its retry
        started = time.monotonic()
        await client.get_secret("ns", "other")
        assert time.monotonic() - started < 0.3
        await slow
    finally:
        await client.aclose()


def test_retries_delay_takes_the_longer_of_backoff_and_retry_after() -> None:
    r = Retries(backoffs=(1.0, 2.0), max_retry_after=10.0)
    assert r.delay(0, None) == 1.0
    assert r.delay(0, "0.2") == 1.0
    assert r.delay(1, "5") == 5.0
    assert r.delay(1, "99") == 10.0
    assert r.delay(0, "soon") == 1.0
    assert r.delay(0, "-3") == 1.0
    assert r.delay(0, "nan") == 1.0


# --- caches ------------------------------------------------------------------------------------------------


async def test_bootstrap_reads_are_never_kept(server: tuple[Server, str]) -> None:
    srv, url = server
    srv.script[SECRET] = [(200, {}, secret_body(b"join-token"))]
    kube = KubeAdapter(Store(), http(url), secret_ttl=30.0)
    try:
        for _ in range(2):
            data = await kube.read_secret_fresh("ns", "s")
            assert data is not None
            assert data["value"] == b"join-token"
        assert len(srv.seen) == 2
        assert len(kube._secrets) == 0
    finally:
        await kube.aclose()


async def test_cached_secrets_are_bounded_and_expire(server: tuple[Server, str]) -> None:
    srv, url = server
    for name in ("a", "b", "c"):
        srv.script[f"/api/v1/namespaces/ns/secrets/{name}"] = [(200, {}, secret_body(name.encode()))]
    kube = KubeAdapter(Store(), http(url), secret_ttl=0.3, secret_cache_size=2)
    try:
        for name in ("a", "b", "a", "c"):  # c pushes out b (a was used more recently)
            await kube.get_secret("ns", name)
        assert [p for _, p, _ in srv.seen] == [f"/api/v1/namespaces/ns/secrets/{n}" for n in "abc"]
        assert len(kube._secrets) == 2
        await kube.get_secret("ns", "a")
        assert len(srv.seen) == 3  # still cached
        await asyncio.sleep(0.35)
        await kube.get_secret("ns", "a")
        assert len(srv.seen) == 4  # expired: read again
        assert len(kube._secrets) == 1  # and the expired c left memory with that read
        assert await kube.get_secret("ns", "missing") is None
        assert await kube.get_secret("ns", "missing") is None
        assert len(srv.seen) == 5  # "does not exist" is cached too
    finally:
        await kube.aclose()


def test_ttl_lru_evicts_and_reports_every_leaving_value() -> None:
    now = [0.0]
    gone: list[str] = []
    cache: TtlLru[str, str] = TtlLru(2, 10.0, clock=lambda: now[0], on_evict=gone.append)
    cache.put("a", "A")
    cache.put("b", "B")
    cache.put("a", "A2")  # replaced: the old value leaves
    cache.put("c", "C")  # b is the least recently used
    assert gone == ["A", "B"]
    now[0] = 10.0
    assert cache.get("a") is None  # expired
    cache.expire()
    assert gone == ["A", "B", "A2", "C"]
    cache.put("d", "D")
    cache.pop("d")
    cache.pop("d")
    cache.put("e", "E")
    cache.clear()
    assert gone[-2:] == ["D", "E"]
    assert len(cache) == 0


# --- the workload kubeconfig --------------------------------------------------------------------------------


def origin(
    type_: str = CAPI_SECRET_TYPE, name: str = "c1-kubeconfig", label: str | None = "c1"
) -> SecretOrigin:
    labels = {"cluster.x-k8s.io/cluster-name": label} if label is not None else {}
    return SecretOrigin("ns", name, type_, labels)


def test_only_capis_kubeconfig_secret_of_the_cluster_is_trusted() -> None:
    assert trust_problem(SecretValue(b"x", origin())) is None
    assert "not read from a Secret" in (trust_problem(b"x") or "")
    problem = trust_problem(SecretValue(b"x", origin(type_="Opaque")))
    assert problem is not None
    assert "field type is 'Opaque'" in problem
    assert "ns/c1-kubeconfig" in problem
    problem = trust_problem(SecretValue(b"x", origin(label="victim")))
    assert problem is not None
    assert "metadata.labels[cluster.x-k8s.io/cluster-name]" in problem
    assert trust_problem(SecretValue(b"x", origin(label=None))) is not None
    assert trust_problem(SecretValue(b"x", origin(name="c1-other"))) is not None


def kubeconfig(server: str, user: dict[str, Any]) -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()


async def test_a_rejected_kubeconfig_names_the_field_and_sends_nothing(server: tuple[Server, str]) -> None:
    srv, url = server
    kube = KubeAdapter(Store(), http(url), secret_ttl=30.0)
    try:
        raw = kubeconfig("https://127.0.0.1:1", {"token": "t", "tokenFile": "/etc/hostname"})
        done = await kube.set_node_provider_id(SecretValue(raw, origin()), "n1", "maas:///a/b", {})
        result, text = done.result, done.current
        assert result is NodePatchResult.REJECTED
        assert "users[0].user.tokenFile" in text
        assert "ns/c1-kubeconfig" in text
        done = await kube.set_node_provider_id(
            SecretValue(kubeconfig("https://127.0.0.1:1", {"token": "t"}), origin(type_="Opaque")),
            "n1",
            "p",
            {},
        )
        result, text = done.result, done.current
        assert result is NodePatchResult.REJECTED
        assert "field type" in text
    finally:
        await kube.aclose()
    assert srv.seen == []


async def test_workload_clients_are_bounded_and_closed_when_they_leave() -> None:
    kube = KubeAdapter(Store(), http("http://127.0.0.1:1"), secret_ttl=30.0, workload_cache_size=2)
    try:
        for i in range(3):
            raw = kubeconfig("https://127.0.0.1:1", {"token": f"t{i}"})
            done = await kube.set_node_provider_id(SecretValue(raw, origin()), "n1", "p", {})
            assert done.result is NodePatchResult.UNREACHABLE  # nothing listens there
        assert len(kube._workload) == 2
        await asyncio.sleep(0)
        assert not kube._closing  # the evicted client was closed
    finally:
        await kube.aclose()
