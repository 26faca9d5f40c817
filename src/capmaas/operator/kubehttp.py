"""An async Kubernetes client for the operator's own hot path: merge patches of our objects and Secret reads.

Why not the ``kubernetes`` package for these: it is synchronous, so every write went through a thread pool,
and each call also runs its argument validation and (de)serialisation layers; at scale those threads cost a
noticeable share of the operator's CPU and contended for the GIL with the event loop that runs every
reconcile. Why aiohttp and not httpx: kopf is built on aiohttp (so it is installed with kopf), and per request
it costs less CPU than httpx (the figures are in docs/benchmarks/README.md). The operator's own credentials
are loaded by the ``kubernetes`` package from the service account or the kubeconfig, so every auth method it
supports keeps working, token refresh included. A workload cluster's apiserver (the Node step) is reached
through the same client, built from a :class:`~capmaas.operator.kubeconfig.WorkloadKubeconfig` (inline
credentials only, never the ``kubernetes`` loader: see that module). kopf keeps its own session for watching
and Events.

Retries, as kopf's own client does them: a 429 or a 5xx answer is retried after a backoff from a short list,
lengthened to the server's ``Retry-After`` (capped, so a server cannot park a caller for long); the connection
slot is given back while waiting. Anything else (4xx, no answer) goes straight to the caller, whose reconcile
backoff takes over.

The connections are handed out by :class:`~capmaas.operator.slots.PrioritySlots`: the namespaces in a
request's path take turns, by priority inside a namespace, and one namespace holds at most all but an eighth
of them (one tenant's burst must not hold the others' requests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import ssl
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from capmaas import __version__
from capmaas.operator import jsonbodies
from capmaas.operator.slots import PrioritySlots

__all__ = ["KubeHttp", "KubeHttpError", "PrioritySlots", "Retries", "Target", "load_configuration"]

JSON = "application/json"  # a POST without it is refused (HTTP 415)
MERGE = "application/merge-patch+json"
#: Sent with every request: the apiserver names the field manager of a write without ``fieldManager`` after
#: the agent's first word (``capmaas`` in ``kubectl get -o yaml --show-managed-fields``, not aiohttp's
#: ``Python``), and audit logs name the client.
USER_AGENT = f"capmaas/{__version__}"

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Retries:
    """Backoffs (seconds) before each retry of a 429/5xx answer; a ``Retry-After`` longer than the backoff
    replaces it, up to ``max_retry_after`` seconds."""

    backoffs: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    max_retry_after: float = 15.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        backoff = self.backoffs[attempt]
        server = _seconds(retry_after)
        return backoff if server is None else max(backoff, min(server, self.max_retry_after))


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return None if math.isnan(seconds) or seconds < 0 else seconds


@dataclasses.dataclass(frozen=True)
class Target:
    """An apiserver to talk to: base URL, TLS, and how to authorize (called per request: tokens rotate)."""

    base_url: str
    tls: ssl.SSLContext | bool
    authorization: Callable[[], str | None] = dataclasses.field(default=lambda: None)


class KubeHttpError(Exception):
    """A non-2xx answer (``status``) or no answer at all (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


def load_configuration() -> Any:
    """The in-cluster service account, else the kubeconfig (``KUBECONFIG``), as a ``kubernetes``
    Configuration: for the kubeconfigs :mod:`capmaas.operator.apiserver` leaves to that package (imported
    here, only then)."""
    import kubernetes

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


def config_target(cfg: Any) -> Target:
    """The :class:`Target` of a ``kubernetes`` Configuration (the operator's own apiserver)."""
    base = str(cfg.host).rstrip("/")

    def authorization() -> str | None:
        token: str | None = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            return token
        if cfg.username or cfg.password:
            return str(cfg.get_basic_auth_token())
        return None

    return Target(base, _ssl_context(cfg) if base.startswith("https") else False, authorization)


class KubeHttp:
    """Merge patches and GETs against one apiserver (``cfg``: a ``kubernetes`` Configuration, or a
    :class:`Target`), at most ``connections`` at a time."""

    def __init__(
        self,
        cfg: Any,
        *,
        connections: int = 16,
        timeout: float = 30.0,
        retries: Retries | None = None,
        field_validation: str | None = None,
        per_namespace: int | None = None,
    ) -> None:
        target = cfg if isinstance(cfg, Target) else config_target(cfg)
        self._field_validation = f"?fieldValidation={field_validation}" if field_validation else ""
        self._base = target.base_url.rstrip("/")
        self._ssl: ssl.SSLContext | bool = target.tls
        self._authorization = target.authorization
        self._retries = retries if retries is not None else Retries()
        self._connections = connections
        # Per socket operation, not in total: a burst of a thousand patches waits for one of the connections
        # for as long as it takes; only an apiserver that stops answering times out.
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        # One tenant may hold all but an eighth of the connections (14 of 16): the rest are always there for
        # the other namespaces' requests; a small client (2 connections) is not capped.
        cap = per_namespace if per_namespace is not None else connections - connections // 8
        self._slots = PrioritySlots(connections, per_namespace=cap)
        self._session: aiohttp.ClientSession | None = None  # made on first use, inside the event loop

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl),
                timeout=self._timeout,
                trust_env=False,
                headers={"User-Agent": USER_AGENT},
            )
        return self._session

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        authorization = self._authorization()
        if authorization:
            headers["Authorization"] = authorization
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
        namespace = namespace_of(path)
        attempt = 0
        while True:
            try:
                async with (
                    self._slots.slot(priority, namespace),
                    self._client().request(
                        method, self._base + path, data=content, headers=self._headers(content_type)
                    ) as response,
                ):
                    status, text = response.status, await response.text()
                    retry_after = response.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise KubeHttpError(0, f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            if (status != 429 and status < 500) or attempt >= len(self._retries.backoffs):
                break
            delay = self._retries.delay(attempt, retry_after)
            attempt += 1
            log.warning(
                "Kubernetes %s %s: HTTP %d; retry %d/%d in %.1fs",
                method,
                path,
                status,
                attempt,
                len(self._retries.backoffs),
                delay,
            )
            await asyncio.sleep(delay)  # outside the slot: a waiting retry holds no connection
        if status >= 300:
            raise KubeHttpError(status, f"{method} {path}: {_message(text)}")
        try:
            data = jsonbodies.loads(text)  # no managedFields (capmaas.operator.jsonbodies)
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
        path += ("/status" if status else "") + self._field_validation
        priority = -1 if status and done else 0 if status else 1
        return await self.request("PATCH", path, body=body, content_type=MERGE, priority=priority)

    async def get_object(
        self, api: str, plural: str, namespace: str, name: str, *, priority: int = 0
    ) -> dict[str, Any]:
        """GET ``api`` (``group/version``) object ``plural/name`` (after a 409: the current version)."""
        path = f"/apis/{api}/namespaces/{quote(namespace)}/{plural}/{quote(name)}"
        return await self.request("GET", path, priority=priority)

    async def list_objects(
        self,
        api: str,
        plural: str,
        namespace: str,
        *,
        label_selector: str,
        limit: int | None = None,
        priority: int = 0,
    ) -> list[dict[str, Any]]:
        """The objects a LIST of ``api`` (``group/version``) ``plural`` in ``namespace`` matching
        ``label_selector`` returns now (the first ``limit`` of them, when given)."""
        params = {"labelSelector": label_selector, **({"limit": str(limit)} if limit else {})}
        path = f"/apis/{api}/namespaces/{quote(namespace)}/{plural}?{urlencode(params)}"
        items = (await self.request("GET", path, priority=priority)).get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def create_object(
        self, api: str, plural: str, namespace: str, body: Mapping[str, Any], *, priority: int = 1
    ) -> dict[str, Any]:
        """POST a new ``api`` (``group/version``) object into ``plural`` (409: one of that name exists)."""
        path = f"/apis/{api}/namespaces/{quote(namespace)}/{plural}" + self._field_validation
        return await self.request("POST", path, body=body, content_type=JSON, priority=priority)

    async def delete_object(
        self, api: str, plural: str, namespace: str, name: str, *, priority: int = 1
    ) -> dict[str, Any]:
        """DELETE ``api`` object ``plural/name`` (404: gone already)."""
        path = f"/apis/{api}/namespaces/{quote(namespace)}/{plural}/{quote(name)}"
        return await self.request("DELETE", path, priority=priority)

    async def get_secret(self, namespace: str, name: str, *, priority: int = 1) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace)}/secrets/{quote(name)}"
        return await self.request("GET", path, priority=priority)

    async def get_configmap(self, namespace: str, name: str, *, priority: int = 1) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}"
        return await self.request("GET", path, priority=priority)

    async def get_node(self, name: str) -> dict[str, Any]:
        return await self.request("GET", f"/api/v1/nodes/{quote(name, safe='')}")

    async def patch_node(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request(
            "PATCH", f"/api/v1/nodes/{quote(name, safe='')}", body=body, content_type=MERGE
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def namespace_of(path: str) -> str:
    """The namespace a request is for, from its path (``…/namespaces/<ns>/…``, or the Namespace itself);
    "" for a cluster-scoped one. What the request slots take turns by."""
    start = path.find("/namespaces/")
    if start < 0:
        return ""
    start += len("/namespaces/")
    end = path.find("/", start)
    name = path[start:] if end < 0 else path[start:end]
    return name.partition("?")[0]


def _message(text: str) -> str:
    """The ``Status`` message the apiserver sends with an error, else the start of the body."""
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])[:500]
    return text[:200]
