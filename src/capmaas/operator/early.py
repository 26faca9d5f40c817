"""The watch events of MaasMachines and MaasClusters, done before kopf sees them.

kopf processed every watch event of ours through its queue and per-object worker, the cause, its loggers,
the handler lookup and the progress bookkeeping, to call a handler that only keeps the watch cache, starts or
wakes the object's loop and wakes what the routing table names (:mod:`capmaas.operator.handlers`): 7 events a
machine's lifecycle, 4 of them the echoes of the operator's own writes (docs/benchmarks/per-machine.md,
sessions 41 and 42).

:class:`EarlyEvents` looks at each decoded watch event before kopf does (:func:`capmaas.operator.jsonbodies.
take_watch_events`) and does the handler's work for it there; kopf gets a ``BOOKMARK`` of the event's
resourceVersion instead, which it notes for the watch's continuation and drops before any per-object work.
Taken: ``ADDED`` and ``MODIFIED`` events of an object the watch filter keeps, and a ``DELETED`` event of an
object's last state (a deletion timestamp and no finalizer). An echo (a ``MODIFIED`` event at the UID and
resourceVersion already cached) is counted apart. Left to kopf as they came:

- every event of a kind until kopf has run its handler once (:meth:`EarlyEvents.open`): kopf holds every
  handler until the CAPI Machines and Clusters are indexed, and no MaasMachine loop may start before that;
- a ``DELETED`` event of an object with finalizers or without a deletion timestamp: under a watch filter
  that is also how an object relabelled to another shard leaves, which its handler tells apart by reading
  the object back (:meth:`capmaas.operator.kube.KubeAdapter.handed_off`), an async read a stream decoder
  cannot make;
- an object outside the watch filter (its handler counts it), an event without a resourceVersion, any other
  kind or event type, a listing (kopf's listings never come through here);
- an event whose work raised (kopf's handler does it again, and reports what fails there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from capmaas.operator.kube import Store, object_key
from capmaas.operator.routing import DELETED, INFRA, MAASCLUSTERS, MAASMACHINES

log = logging.getLogger(__name__)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
BOOKMARK: Final = "BOOKMARK"
#: The event types taken (a DELETED one only for an object's last state).
TAKEN: Final = frozenset({ADDED, MODIFIED, DELETED})
#: The kinds whose events are taken, by their kind: their plurals.
PLURALS: Final = {"MaasMachine": MAASMACHINES, "MaasCluster": MAASCLUSTERS}

#: ``handle(plural, type, body)``: what the kind's kopf handler does for an event of an object it has found
#: to be this shard's.
Handle = Callable[[str, str, Mapping[str, Any]], None]


class EarlyEvents:
    """The filter of decoded watch events. ``handle`` does the handler's work; ``in_shard(body)`` tells
    whether the watch filter keeps the object; ``counted(plural, type, echo)`` is told of each event taken."""

    def __init__(
        self,
        store: Store,
        *,
        in_shard: Callable[[Mapping[str, Any]], bool],
        handle: Handle,
        counted: Callable[[str, str, bool], None],
    ) -> None:
        self.store, self.in_shard, self.handle, self.counted = store, in_shard, handle, counted
        self._open: set[str] = set()

    def open(self, plural: str) -> None:
        """kopf has run the handler of ``plural``: its start-up hold is over, events of it may be taken."""
        self._open.add(plural)

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event``, or a BOOKMARK of its resourceVersion when its work was done here."""
        kind = event.get("type")
        if kind not in TAKEN:
            return event
        body = event.get("object")
        if type(body) is not dict:
            return event
        plural = PLURALS.get(str(body.get("kind")))
        meta = body.get("metadata")
        if plural is None or type(meta) is not dict or str(body.get("apiVersion")).partition("/")[0] != INFRA:
            return event
        version = meta.get("resourceVersion")
        if not version or plural not in self._open:
            return event
        if kind == DELETED:
            if not (meta.get("deletionTimestamp") and not meta.get("finalizers")):
                return event  # perhaps relabelled to another shard: the handler reads it back
        elif not self.in_shard(body):
            return event
        echo = kind == MODIFIED and self._cached(plural, meta, version)
        try:
            self.handle(plural, kind, body)
        except Exception:  # kopf's handler path does it again, and reports what fails there
            log.exception("%s: a watch event was left to kopf", object_key(plural, *_names(meta)))
            return event
        self.counted(plural, kind, echo)
        return {
            "type": BOOKMARK,
            "object": {
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "metadata": {"resourceVersion": version},
            },
        }

    def _cached(self, plural: str, meta: Mapping[str, Any], version: object) -> bool:
        """Whether this version of the object is the one cached (the echo of one of our writes)."""
        cached = self.store.get(object_key(plural, *_names(meta)))
        held = (cached or {}).get("metadata") or {}
        return bool(held.get("resourceVersion") == version and held.get("uid") == meta.get("uid"))


def _names(meta: Mapping[str, Any]) -> tuple[str, str]:
    return str(meta.get("namespace", "")), str(meta.get("name", ""))
