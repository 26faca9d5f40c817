"""An async Kubernetes client for the operator's own hot path: merge patches of our objects and Secret reads.

Why not the ``kubernetes`` package for these: it is synchronous, so every write went through a thread pool,
and each call also runs its argument validation and (de)serialisation layers. At 1,000 machines those
threads were a tenth of the operator's CPU and contended for the GIL with the event loop that runs every
reconcile. Why aiohttp and not httpx: kopf is built on aiohttp (so it is installed with kopf), and per request
it costs a fraction of httpx's CPU (measured in the benchmark: httpx on the event loop cost more than the
threads did). The credentials are loaded by the ``kubernetes`` package from the service account or the
kubeconfig, so every auth method it supports keeps working, token refresh included. The ``kubernetes`` client
stays for the rare calls (workload-cluster Nodes), and kopf keeps its own session for watching and Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import kubernetes

MERGE = "application/merge-patch+json"


class KubeHttpError(Exception):
    """A non-2xx answer (``status``) or no answer at all (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


def load_configuration() -> Any:
    """The in-cluster service account, else the kubeconfig (``KUBECONFIG``), as a ``kubernetes``
    Configuration."""
    cfg = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return cfg


def _ssl_context(cfg: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if getattr(cfg, "ca_cert_data", None):
        data = cfg.ca_cert_data
        ctx.load_verify_locations(cadata=data.decode() if isinstance(data, bytes) else data)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class PrioritySlots:
    """At most ``n`` holders; waiters are let in by ``priority`` (lower first), then in arrival order.

    Why priorities: in a burst the apiserver is the bottleneck and writes queue here. A machine's Ready status
    must not wait behind the metadata patches of a thousand machines that are only starting (readiness lag),
    so status writes (priority 0) go before metadata writes and Secret reads (priority 1): finishing work goes
    before starting more. Priority -1 goes before both: the status write that completes an object (``ready``)
    and the one shared read of a cached Secret that every pass waits on."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def acquire(self, priority: int) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1

    @contextlib.asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()


class KubeHttp:
    """Merge patches and GETs against the apiserver ``cfg`` points at, at most ``connections`` at a time."""

    def __init__(self, cfg: Any, *, connections: int = 16, timeout: float = 30.0) -> None:
        self._cfg = cfg
        self._base = str(cfg.host).rstrip("/")
        self._ssl: ssl.SSLContext | bool = _ssl_context(cfg) if self._base.startswith("https") else False
        self._connections = connections
        # Per socket operation, not in total: a burst of a thousand patches waits for one of the connections
        # for as long as it takes; only an apiserver that stops answering times out.
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._slots = PrioritySlots(connections)
        self._session: aiohttp.ClientSession | None = None  # made on first use, inside the event loop

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl),
                timeout=self._timeout,
                trust_env=False,
            )
        return self._session

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        elif self._cfg.username or self._cfg.password:
            headers["Authorization"] = self._cfg.get_basic_auth_token()
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        priority: int = 1,
    ) -> dict[str, Any]:
        content = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        try:
            async with (
                self._slots.slot(priority),
                self._client().request(
                    method, self._base + path, data=content, headers=self._headers(content_type)
                ) as response,
            ):
                status, text = response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeHttpError(0, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if status >= 300:
            raise KubeHttpError(status, f"{method} {path}: {_message(text)}")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise KubeHttpError(status, f"{method} {path}: not JSON") from exc
        if not isinstance(data, dict):
            raise KubeHttpError(status, f"{method} {path}: not a JSON object")
        return data

    async def merge_patch(
        self,
        api: str,
        plural: str,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        status: bool,
        done: bool = False,
    ) -> dict[str, Any]:
        """Merge-patch ``api`` (``group/version``) object ``plural/name`` (``status``: its subresource;
        ``done``: the write that completes the object's work, first in the queue)."""
        path = f"/apis/{api}/namespaces/{quote(namespace)}/{plural}/{quote(name)}"
        path += "/status" if status else ""
        priority = -1 if status and done else 0 if status else 1
        return await self.request("PATCH", path, body=body, content_type=MERGE, priority=priority)

    async def get_secret(self, namespace: str, name: str, *, priority: int = 1) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace)}/secrets/{quote(name)}"
        return await self.request("GET", path, priority=priority)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _message(text: str) -> str:
    """The ``Status`` message the apiserver sends with an error, else the start of the body."""
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])[:500]
    return text[:200]
