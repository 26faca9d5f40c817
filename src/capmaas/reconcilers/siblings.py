"""What the zone spread reads of a cluster's sibling MaasMachines: how many are placed in each zone, kept up
to date as the watch cache changes.

Why: choosing a zone reads every sibling of the cluster (``baremetal``'s spread rule), once per allocation.
Reading each sibling at every allocation made a cluster's allocations quadratic in its size: first a third of
the operator's CPU at 400 machines (every sibling parsed into a view), then, with each parse kept per version,
still a pass over the cluster's listing per allocation (profiles: docs/benchmarks/per-machine.md). A
:class:`ZoneTally` is changed by one entry when a sibling is stored, changed or dropped (the watch cache's
index keeps one per cluster: :class:`capmaas.operator.kube.Store`), so an allocation reads the counts instead
of the cluster. The only per-allocation walk left is over the siblings not placed yet that a zone was chosen
for in this process (an allocation in flight), the smaller of the two sets.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Sibling:
    """A sibling MaasMachine as the zone spread counts it."""

    uid: str
    #: ``spec.failureDomain``: where it was placed, once its allocation is written.
    failure_domain: str | None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Sibling:
        """What the spread reads of ``body``, read as :class:`~capmaas.api.related.MaasMachineView` reads it:
        a missing or ``null`` section is empty, an empty ``failureDomain`` is none."""
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        zone = spec.get("failureDomain")
        return cls(str(meta.get("uid") or ""), str(zone) if zone else None)


class ZoneTally:
    """The siblings of one cluster, by key: how many are placed in each zone and which are not placed yet."""

    def __init__(self) -> None:
        self._members: dict[str, Sibling] = {}  # object key -> what the spread reads of it
        self._placed: dict[str, int] = {}  # zone -> members whose spec.failureDomain names it
        self._unplaced: dict[str, int] = {}  # UID -> members without spec.failureDomain (one, unless reused)
        self._uid_zones: dict[str, dict[str, str | None]] = {}  # UID -> {key: its zone}: who to leave out

    @classmethod
    def of(cls, bodies: Iterable[Mapping[str, Any]]) -> ZoneTally:
        """The tally of a listing (each body under its own key)."""
        tally = cls()
        for i, body in enumerate(bodies):
            tally.put(str(i), body)
        return tally

    def __len__(self) -> int:
        return len(self._members)

    def put(self, key: str, body: Mapping[str, Any]) -> None:
        """``key`` is now ``body`` (stored or changed)."""
        self.drop(key)
        sibling = Sibling.of(body)
        self._members[key] = sibling
        uid, zone = sibling.uid, sibling.failure_domain
        if zone:
            self._placed[zone] = self._placed.get(zone, 0) + 1
        else:
            self._unplaced[uid] = self._unplaced.get(uid, 0) + 1
        self._uid_zones.setdefault(uid, {})[key] = zone

    def drop(self, key: str) -> None:
        """``key`` is no longer a sibling (gone, or relabelled into another cluster)."""
        sibling = self._members.pop(key, None)
        if sibling is None:
            return
        uid, zone = sibling.uid, sibling.failure_domain
        book, name = (self._placed, zone) if zone else (self._unplaced, uid)
        left = book[name] - 1
        if left:
            book[name] = left
        else:
            del book[name]
        zones = self._uid_zones[uid]
        del zones[key]
        if not zones:
            del self._uid_zones[uid]

    def counts(
        self, *, leave_out: str, chosen: Callable[[str], str | None], chosen_uids: Collection[str]
    ) -> dict[str, int]:
        """Siblings per zone, every sibling but those of UID ``leave_out`` (the machine choosing): a placed
        one in its ``spec.failureDomain``, one not placed yet in the zone ``chosen`` says was chosen for it
        (its allocation in flight); ``chosen_uids`` are the UIDs ``chosen`` may know."""
        counts = dict(self._placed)
        for zone in self._uid_zones.get(leave_out, {}).values():
            if zone:
                left = counts[zone] - 1
                if left:
                    counts[zone] = left
                else:
                    del counts[zone]
        unplaced = self._unplaced
        # Only a sibling both not placed and chosen for can count: the two sets' common part, found in C
        # (the smaller walked), not a Python loop over the smaller set with a lookup each.
        for uid in unplaced.keys() & chosen_uids:
            if uid == leave_out:
                continue
            zone = chosen(uid)
            if zone:
                counts[zone] = counts.get(zone, 0) + unplaced[uid]
        return counts
