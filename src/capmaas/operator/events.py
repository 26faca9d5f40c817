"""Kubernetes Events on our objects, posted by the operator itself on the async client.

Why not ``kopf.event``: it finds its queue through context variables that only a kopf handler's task has;
the reconcile loops are tasks a handler *started*, so they merely inherit that context (and would keep a
dead queue if kopf ever replaced it). The recorder is ours, owned by the runtime: fire and forget, bounded
(at most ``max_pending`` posts in flight; more are dropped with a log line, never queued without bound),
at the lowest write priority (an Event never delays a status write), with kopf's Event shape (so
``kubectl describe`` shows them the same way).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from capmaas.operator.kubehttp import KubeHttp, KubeHttpError
from capmaas.reconcilers.ports import Body, EventType

log = logging.getLogger(__name__)

#: The Event API's own limit is 1 KiB of message; longer ones are cut (the condition has the whole text).
MAX_MESSAGE = 1000
#: Posts in flight before more are dropped: a burst of a thousand machines queues about three Events each
#: behind the writes (each ~1 KiB of memory while it waits); kopf's own queue had no bound at all.
MAX_PENDING = 8192
#: Write priority of Event posts in :class:`~capmaas.operator.kubehttp.PrioritySlots` (after every write).
PRIORITY = 2


def event_body(
    obj: Body, type: EventType, reason: str, message: str, *, component: str, instance: str
) -> dict[str, Any]:
    """A core/v1 Event about ``obj``."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    now = datetime.datetime.now(datetime.UTC).isoformat()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": namespace, "generateName": f"{component}-event-"},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": namespace,
            "uid": meta.get("uid"),
        },
        "action": reason,
        "type": type,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "reportingComponent": component,
        "reportingInstance": instance,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": now,
    }


class EventRecorder:
    """Posts Events through ``http``; :meth:`post` returns at once."""

    def __init__(
        self,
        http: KubeHttp,
        *,
        component: str = "capmaas",
        max_pending: int = MAX_PENDING,
        instance: str = "",
    ) -> None:
        self._http = http
        self._component = component
        self._instance = instance or socket.gethostname()
        self._max = max_pending
        self._pending: set[asyncio.Task[None]] = set()
        self.dropped = 0

    def post(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        if len(self._pending) >= self._max:
            self.dropped += 1
            log.info("event not posted (%d in flight): %s %s: %s", len(self._pending), type, reason, message)
            return
        body = event_body(obj, type, reason, message, component=self._component, instance=self._instance)
        task = asyncio.get_running_loop().create_task(self._send(body), name=f"capmaas event {reason}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, body: Mapping[str, Any]) -> None:
        namespace = quote(str(body["metadata"]["namespace"]))
        try:
            await self._http.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/events",
                body=body,
                content_type="application/json",
                priority=PRIORITY,
            )
        except KubeHttpError as exc:  # an Event is best effort: the conditions say the same
            log.info("event %s not posted: %s", body.get("reason"), exc)

    async def drain(self) -> None:
        """Wait for the posts in flight (shutdown)."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
