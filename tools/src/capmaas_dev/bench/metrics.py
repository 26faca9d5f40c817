"""Measurements the benchmark takes from outside the operator: apiserver write counts, /proc, percentiles.

Why from outside: the figures must hold for the real process against the real apiserver, and must not need
the operator's cooperation (its own metrics could be wrong in exactly the way a benchmark should catch).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

READ_VERBS = frozenset({"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT"})
#: Written by the apiserver itself (identity lease heartbeats), whatever the operator does.
NOT_OURS = frozenset({"leases"})

WriteKey = tuple[str, str, str]  # verb, resource, subresource


def apiserver_writes(metrics_text: str) -> Counter[WriteKey]:
    """Non-read requests by (verb, resource, subresource) from ``apiserver_request_total``."""
    out: Counter[WriteKey] = Counter()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            verb = labels.get("verb", "")
            if verb in READ_VERBS or labels.get("resource", "") in NOT_OURS:
                continue
            out[(verb, labels.get("resource", ""), labels.get("subresource", ""))] += int(sample.value)
    return out


def settled_writes(metrics: Callable[[], str], quiet: float, limit: float = 15.0) -> Counter[WriteKey]:
    """:func:`apiserver_writes` once the counts stop moving for ``quiet`` seconds (at most ``limit``):
    ``metrics`` reads the apiserver's ``/metrics``. The last Events of a run's deletions are posted after
    the finalizer removal a benchmark waits on, so counts read at once would miss them."""
    last = apiserver_writes(metrics())
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = apiserver_writes(metrics())
        if now == last:
            break
        last = now
    return last


@dataclass(frozen=True)
class ProcStats:
    peak_rss_mb: float  # VmHWM
    rss_mb: float  # VmRSS
    cpu_seconds: float  # utime + stime


def proc_stats(pid: int) -> ProcStats:
    """Peak and current RSS and CPU time of a live process, from /proc (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    kb = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            kb[key] = int(value.split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return ProcStats(kb["VmHWM"] / 1024, kb["VmRSS"] / 1024, ticks / os.sysconf("SC_CLK_TCK"))


def cpu_seconds_of(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU time (user + system) of each named live process (the control plane's components)."""
    return {name: proc_stats(pid).cpu_seconds for name, pid in pids.items()}


def thread_cpu_seconds(pid: int, tid: int) -> float:
    """CPU time (user + system) of one live thread ``tid`` of process ``pid``, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class HarnessCpu:
    """The benchmark process's own CPU seconds at one moment: all of it, its MAAS simulator thread's (the
    simulator runs in the benchmark process, but it stands in for MAAS, not for the harness) and its watch
    thread's (part of the harness)."""

    process: float
    simulator: float
    watch: float = 0.0

    @classmethod
    def now(cls, simulator_tid: int, watch_tid: int | None = None) -> HarnessCpu:
        pid = os.getpid()
        watch = thread_cpu_seconds(pid, watch_tid) if watch_tid is not None else 0.0
        return cls(proc_stats(pid).cpu_seconds, thread_cpu_seconds(pid, simulator_tid), watch)

    def harness_since(self, before: HarnessCpu) -> float:
        """The harness's CPU seconds from ``before`` to this moment: the creates, the watch, the waiting
        loop (every thread of the process but the simulator's, those that have ended included)."""
        return (self.process - before.process) - (self.simulator - before.simulator)


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported p99 is a lag some machine really had)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


#: The operator's log line of its first reconcile (``capmaas.operator.runtime``), with its wall time.
FIRST_RECONCILE = re.compile(
    r"first reconcile (?:as leader|without leader election): .*?at=(\d+\.\d+)(?:.*?cpu=(\d+\.\d+))?"
)

#: Writes by what they are, from (verb, resource, subresource): what docs/scaling.md counts per machine.
WRITE_KINDS = {
    ("PATCH", "maasmachines", ""): "metadata/spec patch",
    ("PATCH", "maasmachines", "status"): "status patch",
    ("POST", "events", ""): "Event posted",
    ("PATCH", "events", ""): "Event count patched (a repeat)",
}


def harness_writes(writes: Counter[WriteKey], creates: int, delete_calls: int) -> Counter[WriteKey]:
    """The benchmark's own writes among ``writes``: its ``creates`` MaasMachine creates and its
    ``delete_calls`` delete-collection calls (the apiserver counts those as DELETECOLLECTION or, in recent
    versions, DELETE)."""
    own: Counter[WriteKey] = Counter({("POST", "maasmachines", ""): creates})
    for verb in ("DELETECOLLECTION", "DELETE"):
        if writes.get((verb, "maasmachines", ""), 0) > 0:
            own[(verb, "maasmachines", "")] = delete_calls
            break
    return own


def operator_writes(writes: Counter[WriteKey], own: Counter[WriteKey]) -> int:
    """All of ``writes`` but the benchmark's own (:func:`harness_writes`)."""
    return sum(max(0, v - own.get(k, 0)) for k, v in writes.items())


def writes_by_kind(writes: Counter[WriteKey], own: Counter[WriteKey], machines: int) -> dict[str, float]:
    """The operator's writes per machine by kind (:data:`WRITE_KINDS`; anything else by verb and resource),
    the benchmark's own (``own``) left out."""
    out: Counter[str] = Counter()
    for key, total in writes.items():
        if (count := total - own.get(key, 0)) > 0:
            verb, resource, sub = key
            out[WRITE_KINDS.get(key, f"{verb} {resource}{'/' + sub if sub else ''}")] += count
    return {kind: round(count / machines, 2) for kind, count in out.most_common()}


def first_reconcile_after(log_text: str) -> tuple[float, float | None] | None:
    """The wall time of the first reconcile logged in ``log_text`` and the process's CPU seconds then (None
    from an operator that does not log it), if any."""
    match = FIRST_RECONCILE.search(log_text)
    if match is None:
        return None
    return float(match.group(1)), float(match.group(2)) if match.group(2) else None
