"""Kubernetes Events on our objects, posted by the operator itself on the async client.

Why not ``kopf.event``: it finds its queue through context variables that only a kopf handler's task has;
the reconcile loops are tasks a handler *started*, so they merely inherit that context (and would keep a
dead queue if kopf ever replaced it). The recorder is ours, owned by the runtime: fire and forget, bounded
(at most ``max_pending`` posts in flight; more are dropped with a log line, never queued without bound),
at the lowest write priority (an Event never delays a status write), with kopf's Event shape (so
``kubectl describe`` shows them the same way).

An Event that repeats is written as a series, the way client-go's EventCorrelator and events.k8s.io series
do: the same object, type, reason and message again within :data:`SERIES_WINDOW` of its last occurrence is
not posted again; the first Event's ``count`` and ``lastTimestamp`` are patched, the second occurrence at
once (a reader sees that it repeats), later ones at most once per :data:`SERIES_FLUSH` (and at shutdown).
Each post is a write and a watch event for every reader of Events: a thousand passes saying the same thing
cost one POST and a few PATCHes (docs/scaling.md, "Kubernetes writes per machine").
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from capmaas.operator.kubehttp import MERGE, KubeHttp, KubeHttpError
from capmaas.reconcilers.ports import Body, EventType

log = logging.getLogger(__name__)

#: The Event API's own limit is 1 KiB of message; longer ones are cut (the condition has the whole text).
MAX_MESSAGE = 1000
#: Posts in flight before more are dropped: a burst of a thousand machines queues about three Events each
#: behind the writes (each ~1 KiB of memory while it waits); kopf's own queue had no bound at all.
MAX_PENDING = 8192
#: Write priority of Event posts in :class:`~capmaas.operator.kubehttp.PrioritySlots` (after every write).
PRIORITY = 2
#: Seconds after its last occurrence that an Event still counts as repeated (client-go's EventCorrelator
#: aggregates within 10 minutes).
SERIES_WINDOW = 600.0
#: A series' count is patched at most once per this many seconds after the second occurrence.
SERIES_FLUSH = 60.0
#: Series remembered, least recently seen forgotten first (client-go's EventCorrelator keeps 4,096).
SERIES_CACHE = 4096

#: What makes two Events the same: involved object (UID, else namespace/name), type, reason, message.
SeriesKey = tuple[str, str, str, str]


@dataclass(slots=True)
class _Series:
    """One posted Event and its repeats: what the apiserver has (``written``) and what is due."""

    key: SeriesKey
    namespace: str
    seen: float
    last: str
    count: int = 1
    written: int = 1
    #: The Event's name, once its POST is answered (None: in flight, or failed).
    name: str | None = None
    posting: asyncio.Task[None] | None = None
    flushing: bool = False


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
        series_window: float = SERIES_WINDOW,
        series_flush: float = SERIES_FLUSH,
        clock: Callable[[], float] = time.monotonic,
        level: int = logging.INFO,
    ) -> None:
        self._http = http
        #: Normal Events are posted at INFO (``logging.events_level``), Warnings at WARNING.
        self._level = level
        self._component = component
        self._instance = instance or socket.gethostname()
        self._max = max_pending
        self._pending: set[asyncio.Task[None]] = set()
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        self._window, self._flush_every, self._clock = series_window, series_flush, clock
        self._now: asyncio.Event | None = None  # set at shutdown: due counts are written at once
        self.dropped = 0
        #: Occurrences counted on an earlier Event instead of posted.
        self.aggregated = 0

    def post(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        if (logging.WARNING if type == "Warning" else logging.INFO) < self._level:
            return
        meta: Mapping[str, Any] = obj.get("metadata") or {}
        message = message[:MAX_MESSAGE]
        key = (str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"), type, reason, message)
        now = self._clock()
        series = self._series.get(key)
        if series is not None and now - series.seen <= self._window:
            self._repeat(key, series, now)
            return
        if len(self._pending) >= self._max:
            self.dropped += 1
            log.info("event not posted (%d in flight): %s %s: %s", len(self._pending), type, reason, message)
            return
        body = event_body(obj, type, reason, message, component=self._component, instance=self._instance)
        series = _Series(key, namespace=body["metadata"]["namespace"], seen=now, last=body["lastTimestamp"])
        self._series[key] = series
        self._series.move_to_end(key)
        while len(self._series) > SERIES_CACHE:
            self._series.popitem(last=False)
        series.posting = self._start(self._send(body, series), f"capmaas event {reason}")

    def _start(self, work: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    def _repeat(self, key: SeriesKey, series: _Series, now: float) -> None:
        """Count a repeat on the posted Event; its count is patched (at once for the first repeat)."""
        self.aggregated += 1
        series.count += 1
        series.seen = now
        series.last = datetime.datetime.now(datetime.UTC).isoformat()
        self._series.move_to_end(key)
        if not series.flushing:
            series.flushing = True
            delay = 0.0 if series.written == 1 else self._flush_every
            self._start(self._flush(series, delay), f"capmaas event series {key[2]}")

    async def _send(self, body: Mapping[str, Any], series: _Series) -> None:
        namespace = quote(str(body["metadata"]["namespace"]))
        try:
            answer = await self._http.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/events",
                body=body,
                content_type="application/json",
                priority=PRIORITY,
            )
        except KubeHttpError as exc:  # an Event is best effort: the conditions say the same
            log.info("event %s not posted: %s", body.get("reason"), exc)
            self._forget(series)  # a repeat is posted anew
            return
        finally:
            series.posting = None
        series.name = str((answer.get("metadata") or {}).get("name") or "") or None

    async def _flush(self, series: _Series, delay: float) -> None:
        """Write a series' count after ``delay`` seconds (at once when shutting down)."""
        if delay > 0:
            self._now = self._now or asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), delay)
        if series.posting is not None:
            await asyncio.gather(series.posting, return_exceptions=True)
        series.flushing = False
        if series.name is None:  # the first post failed: nothing to count on
            return
        count = series.count
        path = f"/api/v1/namespaces/{quote(series.namespace)}/events/{quote(series.name)}"
        try:
            await self._http.request(
                "PATCH",
                path,
                body={"count": count, "lastTimestamp": series.last},
                content_type=MERGE,
                priority=PRIORITY,
            )
        except KubeHttpError as exc:  # expired (the apiserver's Event TTL) or refused: best effort
            log.info("event series %s not updated: %s", series.name, exc)
            self._forget(series)
            return
        series.written = max(series.written, count)
        if series.count > series.written and not series.flushing:
            series.flushing = True
            self._start(self._flush(series, self._flush_every), "capmaas event series")

    def _forget(self, series: _Series) -> None:
        if self._series.get(series.key) is series:
            del self._series[series.key]

    async def drain(self) -> None:
        """Write the counts due and wait for the posts in flight (shutdown)."""
        self._now = self._now or asyncio.Event()
        self._now.set()
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
