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

Normal Events of many machines of one cluster are combined the way client-go's EventAggregator combines
similar Events (same reason, other messages), keyed by the cluster instead of the object. A lifecycle Event
(:data:`LIFECYCLE_REASONS`, the ones every machine of a scale-up or scale-down says) on an object with a
cluster (``group``: a MaasMachine's MaasCluster, else its Cluster) is posted at once if it is the first of
its cluster and reason for a while (a burst's first, or a lone machine's); the ones that follow it wait until
the cluster has said no more of that reason for :data:`BURST_HOLD` (at most :data:`BURST_MAX_HOLD`). If no
more than ``burst`` machines said it in that time (its first counted), each Event is posted on its object as
it would have been; if more, one Event on the cluster's object says the held ones: its ``count`` is how
many, its message a sample of theirs (``(combined from
similar events)``, as client-go words it), and any later burst within :data:`SERIES_WINDOW` of it, however
small, adds to that count. A scale-up of a few machines keeps one Event per machine; a thousand machines
deploying at once cost one Event instead of a thousand. Warnings are never combined: each reaches its
object.
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
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from capmaas.operator.kubehttp import MERGE, KubeHttp, KubeHttpError
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL
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

#: The Normal Events each machine says once in a scale-up or scale-down, and so come in bursts: the ones held
#: and combined (any other Event is posted at once, as are these on an object without a cluster).
LIFECYCLE_REASONS = frozenset({
    "MachineAllocated", "MachineDeploying", "MachineReleased", "NodeProviderIDSet",
    "VMAllocated", "VMComposed", "VMDecomposing", "VMDecomposed",
})  # fmt: skip
#: Normal Events of one cluster, type and reason within a hold that are still posted one per object
#: (``logging.events_burst``; client-go's aggregator posts 10 similar Events before it combines them).
BURST = 10
#: Seconds a cluster's Normal Event waits for more of its kind (counted from the last one).
BURST_HOLD = 2.0
#: Seconds a burst is held at most, counted from its first Event (a steady stream is posted this often).
BURST_MAX_HOLD = 60.0
#: Messages of a combined burst quoted in its Event.
BURST_SAMPLE = 5
#: The message of a combined Event starts with this (client-go's words for an aggregated Event).
COMBINED = "(combined from similar events)"

#: What makes two Events the same: involved object (UID, else namespace/name), type, reason, message.
SeriesKey = tuple[str, EventType, str, str]
#: What makes Events similar enough to combine: the group object (UID, else namespace/name), type, reason.
BurstKey = tuple[str, EventType, str]


def object_id(obj: Body) -> str:
    """An object's UID, else ``namespace/name``."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def cluster_object(find: Callable[[str, str, str], Body | None], obj: Body) -> Body | None:
    """The object a MaasMachine's combined Events go on: its cluster's MaasCluster (the Cluster's
    ``spec.infrastructureRef``), else the Cluster; None (never combined) for anything else, or when the
    watch caches (``find(plural, namespace, name)``) do not have them."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)
    if obj.get("kind") != "MaasMachine" or not name:
        return None
    namespace = str(meta.get("namespace") or "")
    cluster = find("clusters", namespace, str(name))
    if cluster is None:
        return None
    ref = (cluster.get("spec") or {}).get("infrastructureRef") or {}
    if ref.get("kind") == "MaasCluster" and ref.get("name"):
        return find("maasclusters", namespace, str(ref["name"])) or cluster
    return cluster


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


@dataclass(slots=True)
class _Held:
    """A held Event and how many times its object said it during the hold."""

    obj: Body
    message: str
    count: int = 1


@dataclass(slots=True)
class _Burst:
    """Normal Events of one cluster, type and reason held until the cluster is quiet: the first ``burst`` of
    them whole (posted one by one if no more come), then only their count."""

    key: BurstKey
    group: Body
    first: float
    last: float
    #: The first ones (a repeat of one of them is counted on it).
    held: list[_Held] = field(default_factory=list)
    #: Occurrences, and of them the ones that are not a held Event again.
    count: int = 0
    distinct: int = 0
    #: Events of the burst already posted on their objects: its first, at once.
    posted: int = 0
    #: Set to post the burst now (evicted from the bounded table).
    due: asyncio.Event = field(default_factory=asyncio.Event)
    #: When the first of them was said (the combined Event's ``firstTimestamp``).
    since: str = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat())


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
        burst: int = BURST,
        group: Callable[[Body], Body | None] | None = None,
        burst_hold: float = BURST_HOLD,
        burst_max_hold: float = BURST_MAX_HOLD,
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
        #: ``logging.events_burst`` (0: never combine) and where a burst's Event goes (None: nowhere).
        self._burst, self._group = burst, group
        self._hold, self._max_hold = burst_hold, burst_max_hold
        self._bursts: OrderedDict[BurstKey, _Burst] = OrderedDict()
        self.dropped = 0
        #: Occurrences counted on an earlier Event instead of posted.
        self.aggregated = 0
        #: Occurrences counted on a combined Event of their cluster instead of posted on their object.
        self.combined = 0

    def post(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        if (logging.WARNING if type == "Warning" else logging.INFO) < self._level:
            return
        message = message[:MAX_MESSAGE]
        now = self._clock()
        group = None
        if self._group is not None and self._burst > 0 and type == "Normal" and reason in LIFECYCLE_REASONS:
            group = self._group(obj)
        if group is None or self._posting_at_once:
            self._post(obj, type, reason, message, now)
        elif not self._repeated(key := (object_id(obj), type, reason, message), now):
            self._hold_for(group, obj, key, now)

    @property
    def _posting_at_once(self) -> bool:
        return self._now is not None and self._now.is_set()

    def _repeated(self, key: SeriesKey, now: float, n: int = 1) -> bool:
        """Count ``n`` occurrences on the Event of ``key`` if it was seen within the window."""
        series = self._series.get(key)
        if series is None or now - series.seen > self._window:
            return False
        self.aggregated += n
        self._repeat(key, series, now, n)
        return True

    def _post(
        self,
        obj: Body,
        type: EventType,
        reason: str,
        message: str,
        now: float,
        *,
        count: int = 1,
        key: SeriesKey | None = None,
        since: str | None = None,
    ) -> None:
        """Post an Event on ``obj`` (``count`` occurrences, the first at ``since``; series ``key``: its own
        by default) unless it repeats one posted within the window."""
        key = key or (object_id(obj), type, reason, message)
        if self._repeated(key, now, count):
            return
        if len(self._pending) >= self._max:
            self.dropped += 1
            log.info("event not posted (%d in flight): %s %s: %s", len(self._pending), type, reason, message)
            return
        body = event_body(obj, type, reason, message, component=self._component, instance=self._instance)
        if count > 1:
            body["count"] = count
        if since is not None:
            body["firstTimestamp"] = since
        namespace = body["metadata"]["namespace"]
        series = _Series(key, namespace, seen=now, last=body["lastTimestamp"], count=count, written=count)
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

    # --- bursts ------------------------------------------------------------------------------------------
    def _hold_for(self, group: Body, obj: Body, event: SeriesKey, now: float) -> None:
        """Hold a Normal Event (``event``: its series key) of ``group``'s until the group is quiet (module
        docstring)."""
        _, type, reason, message = event
        key = (object_id(group), type, reason)
        burst = self._bursts.get(key)
        if burst is None:
            burst = self._bursts[key] = _Burst(key, group, first=now, last=now)
            while len(self._bursts) > SERIES_CACHE:  # bounded: the oldest burst is posted now
                _, oldest = self._bursts.popitem(last=False)
                oldest.due.set()
            self._start(self._release(burst), f"capmaas event burst {reason}")
            if not self._combining(key, now):  # the first of a burst is posted at once, on its object
                burst.posted = 1
                self._post(obj, type, reason, message, now)
                return
        burst.count += 1
        burst.last = now
        for held in burst.held:
            if held.message == message and object_id(held.obj) == event[0]:
                held.count += 1
                return
        burst.distinct += 1
        if len(burst.held) <= self._burst:  # one more than posted alone: a sample for a combined Event
            burst.held.append(_Held(obj, message))

    async def _release(self, burst: _Burst) -> None:
        """Post ``burst`` once its group has been quiet for the hold, has been held the longest, or now
        (shutdown, evicted)."""
        while not burst.due.is_set() and not self._posting_at_once:
            wait = min(burst.last + self._hold, burst.first + self._max_hold) - self._clock()
            if wait <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(burst.due.wait(), wait)
        if self._bursts.get(burst.key) is burst:
            del self._bursts[burst.key]
        self._post_burst(burst)

    def _combining(self, key: BurstKey, now: float) -> bool:
        """Whether the group's Events of this type and reason go on its combined Event (one was posted or
        counted within the window)."""
        combined = self._series.get((*key, COMBINED))
        return combined is not None and now - combined.seen <= self._window

    def _post_burst(self, burst: _Burst) -> None:
        """Each held Event on its object; or one on the group's object for them all: more than ``burst``,
        or any number after such a burst within the window."""
        _, type_, reason = burst.key
        if not burst.count:  # its first alone, posted already
            return
        now = self._clock()
        # Keyed by the marker, not the message: a later burst of the group within the window, however
        # small, adds its count to the combined Event (as client-go's aggregator does once over the limit).
        key = (object_id(burst.group), type_, reason, COMBINED)
        if burst.posted + burst.distinct <= self._burst and not self._combining(burst.key, now):
            for held in burst.held:
                self._post(held.obj, type_, reason, held.message, now, count=held.count)
            return
        self.combined += burst.count
        meta: Mapping[str, Any] = burst.group.get("metadata") or {}
        log.debug(
            "%d %s %s Events of %s %s/%s combined into one",
            burst.count, type_, reason, burst.group.get("kind"), meta.get("namespace"), meta.get("name"),
        )  # fmt: skip
        quoted = "; ".join(
            f"{(h.obj.get('metadata') or {}).get('name')}: {h.message}" for h in burst.held[:BURST_SAMPLE]
        )
        more = burst.distinct - min(len(burst.held), BURST_SAMPLE)
        message = f"{COMBINED}: {quoted}" + (f"; and {more} more" if more > 0 else "")
        self._post(
            burst.group,
            type_,
            reason,
            message[:MAX_MESSAGE],
            now,
            count=burst.count,
            key=key,
            since=burst.since,
        )

    def _repeat(self, key: SeriesKey, series: _Series, now: float, n: int = 1) -> None:
        """Count ``n`` repeats on the posted Event; its count is patched (at once for the first repeat of a
        single Event)."""
        series.count += n
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
        """Post the bursts held, write the counts due and wait for the posts in flight (shutdown)."""
        self._now = self._now or asyncio.Event()
        self._now.set()
        for burst in self._bursts.values():
            burst.due.set()
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
