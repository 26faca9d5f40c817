"""The watch events that only echo the operator's own writes, taken before kopf sees them.

Every write of a MaasMachine or MaasCluster (a status patch, a finalizer, an annotation) comes back on the
operator's watch as a MODIFIED event of the version the write's answer already put in the watch cache
(:meth:`~capmaas.operator.kube.Store.put` finds it not news). kopf processed each one anyway: its queue and
per-object worker, the cause, its loggers, the handler lookup and the progress bookkeeping, for 4 of the 7
watch events of a machine's lifecycle (docs/benchmarks/per-machine.md, session 41).

:class:`Echoes` looks at each decoded watch event before kopf does (:func:`capmaas.operator.jsonbodies.
take_watch_events`). A MODIFIED event of a MaasMachine or MaasCluster whose UID and resourceVersion are the
cached ones is done here, as its handler would do it for a version already seen (the object's loop kept,
not woken; what the routing table names for the event woken), and kopf gets a BOOKMARK of that
resourceVersion instead, which it notes for the watch's continuation and skips. Everything else goes to
kopf as it came: another version, a deletion, an object leaving or outside the watch filter, an object not
cached, any other kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from capmaas.operator.kube import Store, object_key
from capmaas.operator.routing import INFRA, MAASCLUSTERS, MAASMACHINES

log = logging.getLogger(__name__)

MODIFIED: Final = "MODIFIED"
BOOKMARK: Final = "BOOKMARK"
#: The kinds whose echoes are taken, by their kind: their plurals.
PLURALS: Final = {"MaasMachine": MAASMACHINES, "MaasCluster": MAASCLUSTERS}


class Echoes:
    """The filter of decoded watch events: ``echo(plural, key, body)`` does what the handler of ``plural``
    does for a version already cached; ``in_shard(body)`` tells whether the watch filter keeps the object."""

    def __init__(
        self,
        store: Store,
        *,
        in_shard: Callable[[Mapping[str, Any]], bool],
        echo: Callable[[str, str, Mapping[str, Any]], None],
    ) -> None:
        self.store, self.in_shard, self.echo = store, in_shard, echo

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event``, or a BOOKMARK of its resourceVersion when it is an echo (taken here)."""
        if event.get("type") != MODIFIED:
            return event
        body = event.get("object")
        if type(body) is not dict:
            return event
        plural = PLURALS.get(str(body.get("kind")))
        meta = body.get("metadata")
        if plural is None or type(meta) is not dict or str(body.get("apiVersion")).partition("/")[0] != INFRA:
            return event
        version = meta.get("resourceVersion")
        if not version or (meta.get("deletionTimestamp") and not meta.get("finalizers")):
            return event  # the last event of a deletion: the handler tells the leak audit
        key = object_key(plural, meta.get("namespace", ""), meta.get("name", ""))
        cached = self.store.get(key)
        if cached is None:
            return event
        held = cached.get("metadata") or {}
        if held.get("resourceVersion") != version or held.get("uid") != meta.get("uid"):
            return event
        if not self.in_shard(body):
            return event
        try:
            self.echo(plural, key, body)
        except Exception:  # kopf's handler path does it again, and reports what fails there
            log.exception("%s: the echo of a write was left to kopf", key)
            return event
        return {
            "type": BOOKMARK,
            "object": {
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "metadata": {"resourceVersion": version},
            },
        }
