"""The sibling MaasMachines of a cluster as typed views, each body parsed once per version.

Why: choosing a zone reads every sibling of the cluster (``baremetal``'s spread rule), once per allocation.
Parsing every sibling each time made a cluster's allocations quadratic: at 400 machines it was a third of the
operator's CPU (a view costs ~35 µs, most of it :func:`capmaas.api.schema.plain`'s deep copy; profile:
docs/benchmarks/per-machine.md). Between two allocations most siblings have not changed, so their views are
kept and reused while the cache holds the same body at the same ``resourceVersion``; a changed, new or gone
sibling is parsed again or dropped at the next read of its cluster, so the memory is one view per current
sibling. A body without a ``resourceVersion`` is never reused (nothing tells its versions apart).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capmaas.api.related import MaasMachineView

_Entry = tuple[Mapping[str, Any], str, MaasMachineView]


class SiblingViews:
    """Views of the bodies a cluster's sibling listing returns, reused across reads while unchanged."""

    def __init__(self) -> None:
        self._clusters: dict[tuple[str, str], dict[int, _Entry]] = {}

    def views(
        self, namespace: str, cluster: str, bodies: Sequence[Mapping[str, Any]]
    ) -> list[MaasMachineView]:
        """The view of each of ``bodies`` (the cluster's current listing), in order."""
        old = self._clusters.get((namespace, cluster), {})
        new: dict[int, _Entry] = {}
        out = []
        for body in bodies:
            rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
            hit = old.get(id(body))
            # The identity check makes id() safe (a freed body's id may be reused); the resourceVersion check
            # catches a body updated in place.
            if hit is not None and hit[0] is body and hit[1] == rv and rv:
                view = hit[2]
            else:
                view = MaasMachineView.from_body(body)
            new[id(body)] = (body, rv, view)
            out.append(view)
        if new:
            self._clusters[(namespace, cluster)] = new
        else:
            self._clusters.pop((namespace, cluster), None)
        return out
