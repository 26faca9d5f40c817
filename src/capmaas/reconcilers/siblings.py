"""What the zone spread reads of a cluster's sibling MaasMachines, each body parsed once per version.

Why: choosing a zone reads every sibling of the cluster (``baremetal``'s spread rule), once per allocation.
Parsing every sibling each time made a cluster's allocations quadratic: at 400 machines it was a third of the
operator's CPU (a view costs ~35 µs, most of it :func:`capmaas.api.schema.plain`'s deep copy; profile:
docs/benchmarks/per-machine.md). Between two allocations most siblings have not changed, so what was read of
each is kept and reused while the cache holds the same body at the same ``resourceVersion``; a changed, new or
gone sibling is parsed again or dropped at the next read of its cluster. Only what the spread reads is kept
(UID and ``spec.failureDomain``: ~60 bytes a sibling, where its whole view is ~4.4 KB of Python objects for a
Ready MaasMachine). A body without a ``resourceVersion`` is never reused (nothing tells its versions apart).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capmaas.api.related import MaasMachineView


@dataclass(frozen=True, slots=True)
class Sibling:
    """A sibling MaasMachine as the zone spread counts it."""

    uid: str
    #: ``spec.failureDomain``: where it was placed, once its allocation is written.
    failure_domain: str | None


_Entry = tuple[Mapping[str, Any], str, Sibling]


class SiblingZones:
    """The siblings of a cluster's listing, each reused across reads while its body is unchanged."""

    def __init__(self) -> None:
        self._clusters: dict[tuple[str, str], dict[int, _Entry]] = {}

    def read(self, namespace: str, cluster: str, bodies: Sequence[Mapping[str, Any]]) -> list[Sibling]:
        """A :class:`Sibling` for each of ``bodies`` (the cluster's current listing), in order."""
        old = self._clusters.get((namespace, cluster), {})
        new: dict[int, _Entry] = {}
        out = []
        for body in bodies:
            rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
            hit = old.get(id(body))
            # The identity check makes id() safe (a freed body's id may be reused); the resourceVersion check
            # catches a body updated in place.
            if hit is not None and hit[0] is body and hit[1] == rv and rv:
                sibling = hit[2]
            else:
                view = MaasMachineView.from_body(body)
                sibling = Sibling(view.metadata.uid, view.spec.failure_domain)
            new[id(body)] = (body, rv, sibling)
            out.append(sibling)
        if new:
            self._clusters[(namespace, cluster)] = new
        else:
            self._clusters.pop((namespace, cluster), None)
        return out
