"""What the demo shows and the benchmark measures: each MaasMachine's phase, as seen on a watch.

:class:`Tracker` folds timestamped watch events into one :class:`Row` per MaasMachine and reports a change
whenever the phase (a short word a person can follow: the Ready reason while waiting, then MAAS's state, then
Ready, Releasing, Released) or the system ID changes. The benchmark reads ``ready_at`` and ``deleted_at``.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from capmaas_dev.demo.kube import WatchEvent
from capmaas_dev.demo.manifests import CONTROL_PLANE_LABEL


@dataclass
class Row:
    name: str
    role: str = "worker"
    zone: str = ""
    system_id: str = ""
    hostname: str = ""
    machine_state: str = ""
    address: str = ""
    ready: bool = False
    reason: str = ""
    message: str = ""
    deleting: bool = False
    lxd: bool = False  # a VM composed on a VM host: deletion decomposes it rather than releasing
    phase: str = ""
    ready_at: float | None = None  # first watch event showing status.ready
    ready_condition_at: float | None = None  # the Ready condition's lastTransitionTime (whole seconds)
    deleted_at: float | None = None  # the DELETED event (finalizer dropped: MAAS confirmed the release)

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


def _phase(row: Row) -> str:
    if row.deleted:
        if not row.system_id:
            return "Deleted"
        return "Decomposed" if row.lxd else "Released"
    if row.deleting:
        return row.reason or "Deleting"
    if row.ready:
        return "Ready"
    if row.machine_state:
        return row.machine_state
    if row.system_id:  # spec.systemID is written right after allocation, before any status
        return "Allocated"
    return row.reason or "Pending"


def _update(row: Row, obj: dict[str, Any]) -> None:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    row.role = "control-plane" if CONTROL_PLANE_LABEL in (meta.get("labels") or {}) else "worker"
    row.system_id = spec.get("systemID") or row.system_id
    row.zone = status.get("failureDomain") or spec.get("failureDomain") or row.zone
    row.hostname = status.get("hostname") or row.hostname
    row.machine_state = status.get("machineState") or ""
    row.ready = bool(status.get("ready"))
    row.deleting = bool(meta.get("deletionTimestamp"))
    row.lxd = row.lxd or status.get("provisioningMode") == "lxd" or spec.get("provisioningMode") == "lxd"
    for a in status.get("addresses") or ():
        if a.get("type") == "InternalIP":
            row.address = a.get("address", "")
            break
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready":
            row.reason, row.message = c.get("reason", ""), c.get("message", "")
            if c.get("status") == "True" and row.ready_condition_at is None and c.get("lastTransitionTime"):
                row.ready_condition_at = _rfc3339(c["lastTransitionTime"])


def _rfc3339(value: str) -> float | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Drains(Protocol):
    """A watcher's queue of timestamped events (:class:`capmaas_dev.demo.kube.Watcher`, or the benchmark's
    :class:`capmaas_dev.demo.rawkube.RawWatcher`)."""

    def drain(self, timeout: float) -> list[WatchEvent]: ...


class Tracker:
    """Rows by MaasMachine name, in creation order. ``readied`` and ``deleted`` count the rows that have
    been seen ready and deleted (of every name), so a wait can skip counting by name until they add up."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.readied = 0
        self.deleted = 0

    def apply(self, events: Iterable[WatchEvent]) -> list[tuple[float, Row]]:
        """Fold ``events`` in; return (time, row) for every row whose phase or system ID changed."""
        changes: list[tuple[float, Row]] = []
        for ev in events:
            name = (ev.obj.get("metadata") or {}).get("name", "")
            row = self.rows.setdefault(name, Row(name))
            before = (row.phase, row.system_id)
            _update(row, ev.obj)
            if ev.type == "DELETED":
                self.deleted += row.deleted_at is None
                row.deleted_at = ev.at
            if row.ready and row.ready_at is None:
                row.ready_at = ev.at
                self.readied += 1
            row.phase = _phase(row)
            if (row.phase, row.system_id) != before:
                changes.append((ev.at, dataclasses.replace(row)))
        return changes

    def follow(
        self,
        watcher: Drains,
        until: Callable[[], bool],
        timeout: float,
        *,
        on_change: Callable[[float, Row], None] = lambda at, row: None,
        check: Callable[[], None] = lambda: None,
    ) -> bool:
        """Fold the watcher's events in until ``until()`` holds (True) or ``timeout`` passes (False).

        ``check`` runs at least every half second; it raises to abort (the operator died, for instance).
        """
        deadline = time.monotonic() + timeout
        while True:
            for at, row in self.apply(watcher.drain(timeout=0.5)):
                on_change(at, row)
            if until():
                return True
            check()
            if time.monotonic() > deadline:
                return False

    def count(self, names: Iterable[str], *, ready: bool = False, deleted: bool = False) -> int:
        n = 0
        for name in names:
            row = self.rows.get(name)
            if row is not None and (not ready or row.ready_at is not None) and (not deleted or row.deleted):
                n += 1
        return n

    def ready_after(self, names: Iterable[str], t0: float) -> float:
        """Seconds from ``t0`` until the last of ``names`` was seen ready (NaN if none was)."""
        times = [r.ready_at for n in names if (r := self.rows.get(n)) and r.ready_at is not None]
        return max(times) - t0 if times else float("nan")

    def readiness_lags(self, names: Iterable[str], deployed: Mapping[str, float]) -> list[float]:
        """Readiness lag per machine: MAAS reported it Deployed (``deployed``: time by system ID) until the
        watch showed its MaasMachine ready."""
        return [
            r.ready_at - deployed[r.system_id]
            for n in names
            if (r := self.rows.get(n)) and r.ready_at is not None and r.system_id in deployed
        ]

    def failed(self, names: Iterable[str], terminal_reasons: frozenset[str]) -> list[Row]:
        """Rows stuck on a reason that needs a person (the operator gave up)."""
        return [r for n in names if (r := self.rows.get(n)) and not r.ready and r.reason in terminal_reasons]


class PhaseTicker:
    """While a benchmark waits: one line every ``every`` seconds counting the tracked objects by phase (a
    benchmark prints no per-machine lines)."""

    def __init__(self, say: Callable[[str], None], tracker: Tracker, every: float = 5.0) -> None:
        self.say, self.tracker, self.every = say, tracker, every
        self.t0 = self.last = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        phases = Counter(r.phase for r in self.tracker.rows.values())
        summary = ", ".join(f"{k} {v}" for k, v in phases.most_common())
        self.say(f"  {now - self.t0:6.1f}s  {summary}")

    def after(self, check: Callable[[], None]) -> Callable[[], None]:
        """The ``check=`` of :meth:`Tracker.follow` for a benchmark: ``check`` (the stack's own, e.g. that its
        operator still runs), then this ticker's line when one is due."""

        def tick() -> None:
            check()
            self.tick()

        return tick


def table(headers: list[str], rows: Iterable[Iterable[object]]) -> str:
    """Left-aligned plain-text columns (no dependency; the output is read in a terminal or a CI log)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)
