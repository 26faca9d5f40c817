"""Leader fencing: the clients every write of this process goes through, refusing while it does not hold the
Lease (:mod:`capmaas.operator.leader` decides that; this module only asks).

Why wrappers and not checks in the reconcilers: a reconcile that started as leader may still be running
when the Lease is lost (a starved loop, a slow MAAS answer); every Kubernetes write (:class:`FencedKubeHttp`),
Event and workload-Node patch (:class:`FencedKubeAdapter`) and every MAAS request (:class:`FencedTransport`,
the pollers' reads too) asks the fence right before it is sent, so a stale leader stops at its next request
wherever it is. A request already on the wire is not covered: the reconcilers' crash safety is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from capmaas.operator.events import BURST
from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError
from capmaas.reconcilers.ports import Body, EventType, NodePatch, NodePatchResult

Fence = Callable[[], bool]  # True while this process may write (the Lease holder, or no leader election)


def always() -> bool:
    """The fence without leader election: one process, always allowed."""
    return True


class NotLeaderError(httpx.ConnectError):
    """A MAAS request refused before it is sent: this process no longer holds the Lease. A connect error to
    the MAAS client (nothing reached MAAS), so a reconcile sees it as MAAS unreachable, never as a crash."""


class FencedKubeHttp(KubeHttp):
    """:class:`KubeHttp` that sends no write unless ``fence()`` says this process holds the Lease."""

    def __init__(
        self, cfg: Any, *, fence: Fence, connections: int, field_validation: str | None = None
    ) -> None:
        super().__init__(cfg, connections=connections, field_validation=field_validation)
        self._fence = fence

    async def request(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        if method != "GET" and not self._fence():
            raise KubeHttpError(0, f"{method} {path}: not sent, this process is not the leader")
        return await super().request(method, path, **options)


class FencedTransport(httpx.AsyncBaseTransport):
    """Every MAAS request (the pollers' reads too) only while ``fence()`` holds."""

    def __init__(self, inner: httpx.AsyncBaseTransport, fence: Fence) -> None:
        self._inner, self._fence = inner, fence

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self._fence():
            raise NotLeaderError("not sent: this process is not the leader", request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class FencedKubeAdapter(KubeAdapter):
    """The Events and workload-cluster Node writes, fenced like the rest (the patches are, in KubeHttp)."""

    def __init__(
        self,
        store: Store,
        http: KubeHttp,
        *,
        secret_ttl: float,
        fence: Fence,
        watch_filter: str | None,
        events_level: int = logging.INFO,
        events_burst: int = BURST,
    ) -> None:
        super().__init__(
            store,
            http,
            secret_ttl=secret_ttl,
            watch_filter=watch_filter,
            events_level=events_level,
            events_burst=events_burst,
        )
        self._fence = fence

    async def set_node_provider_id(
        self, kubeconfig: bytes, node_name: str, provider_id: str, labels: Mapping[str, str]
    ) -> NodePatch:
        if not self._fence():
            return NodePatch(NodePatchResult.UNREACHABLE, "not the leader")
        return await super().set_node_provider_id(kubeconfig, node_name, provider_id, labels)

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        if self._fence():
            super().emit_event(obj, type, reason, message)
