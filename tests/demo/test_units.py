"""The demo's and the benchmark's pure parts: phase folding, tables, apiserver metrics, /proc, percentiles."""

from __future__ import annotations

import argparse
import math
import os
from collections import Counter

import pytest

from capmaas_dev.bench.metrics import (
    apiserver_writes,
    harness_writes,
    operator_writes,
    percentile,
    proc_stats,
    settled_writes,
)
from capmaas_dev.demo import cli, manifests
from capmaas_dev.demo.kube import WatchEvent
from capmaas_dev.demo.progress import PhaseTicker, Tracker, table


def mm(
    name: str,
    *,
    sid: str = "",
    state: str = "",
    ready: bool = False,
    reason: str = "",
    deleting: bool = False,
):
    meta: dict[str, object] = {"name": name, "labels": {manifests.CONTROL_PLANE_LABEL: ""}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, object] = {
        "ready": ready,
        "conditions": [{"type": "Ready", "reason": reason, "message": "m"}],
    }
    if state:
        status["machineState"] = state
        status["failureDomain"] = "az2"
        status["addresses"] = [
            {"type": "Hostname", "address": "h"},
            {"type": "InternalIP", "address": "10.0.0.5"},
        ]
    return {"metadata": meta, "spec": {"systemID": sid} if sid else {}, "status": status}


def test_tracker_reports_each_phase_change_once() -> None:
    t = Tracker()
    steps = [
        ("ADDED", mm("cp-0", reason="WaitingForMachineOwner")),
        ("MODIFIED", mm("cp-0", reason="WaitingForMachineOwner")),  # no change: no line
        ("MODIFIED", mm("cp-0", sid="abc", reason="WaitingForMachineOwner")),  # stale reason, but allocated
        ("MODIFIED", mm("cp-0", sid="abc", state="Deploying", reason="MachineDeploying")),
        ("MODIFIED", mm("cp-0", sid="abc", state="Deployed", ready=True, reason="Ready")),
        ("MODIFIED", mm("cp-0", sid="abc", state="Deployed", ready=True, reason="Releasing", deleting=True)),
        ("DELETED", mm("cp-0", sid="abc", state="Deployed", ready=True, reason="Releasing", deleting=True)),
    ]
    phases = []
    for i, (kind, obj) in enumerate(steps):
        phases += [row.phase for _, row in t.apply([WatchEvent(float(i), kind, obj)])]
    assert phases == ["WaitingForMachineOwner", "Allocated", "Deploying", "Ready", "Releasing", "Released"]
    row = t.rows["cp-0"]
    assert (row.role, row.zone, row.address, row.ready_at, row.deleted_at) == (
        "control-plane",
        "az2",
        "10.0.0.5",
        4.0,
        6.0,
    )
    assert t.count(["cp-0", "other"], ready=True) == 1
    assert t.count(["cp-0"], deleted=True) == 1


def test_tracker_flags_terminal_reasons() -> None:
    t = Tracker()
    t.apply([WatchEvent(0.0, "ADDED", mm("w", reason="RetriesExhausted")), WatchEvent(0.0, "ADDED", mm("x"))])
    assert [r.name for r in t.failed(["w", "x"], frozenset({"RetriesExhausted"}))] == ["w"]


def test_phase_ticker_counts_the_phases_at_most_once_per_interval() -> None:
    t = Tracker()
    t.apply([
        WatchEvent(0.0, "ADDED", mm("a", sid="s1", state="Deployed", ready=True, reason="Ready")),
        WatchEvent(0.0, "ADDED", mm("b", sid="s2", state="Deployed", ready=True, reason="Ready")),
        WatchEvent(0.0, "ADDED", mm("c", sid="s3", state="Deploying", reason="MachineDeploying")),
    ])  # fmt: skip
    lines: list[str] = []
    PhaseTicker(lines.append, t, every=3600.0).tick()
    assert lines == []  # not yet an interval since it started
    ticker = PhaseTicker(lines.append, t, every=0.0)
    ticker.tick()
    assert len(lines) == 1
    assert lines[0].endswith("Ready 2, Deploying 1")


def test_phase_ticker_after_runs_the_check_before_each_tick() -> None:
    lines: list[str] = []
    tick = PhaseTicker(lambda line: lines.append("tick"), Tracker(), every=0.0).after(
        lambda: lines.append("check")
    )
    tick()
    tick()
    assert lines == ["check", "tick", "check", "tick"]

    def dead() -> None:
        raise RuntimeError("the operator exited")

    with pytest.raises(RuntimeError, match="operator exited"):
        PhaseTicker(lines.append, Tracker(), every=0.0).after(dead)()


def test_tracker_ready_after_and_readiness_lags() -> None:
    t = Tracker()
    t.apply([
        WatchEvent(10.0, "ADDED", mm("a", sid="s1", state="Deployed", ready=True, reason="Ready")),
        WatchEvent(12.5, "ADDED", mm("b", sid="s2", state="Deployed", ready=True, reason="Ready")),
        WatchEvent(13.0, "ADDED", mm("c", sid="s3", state="Deploying", reason="MachineDeploying")),
        WatchEvent(14.0, "ADDED", mm("d", sid="s4", state="Deployed", ready=True, reason="Ready")),
    ])  # fmt: skip
    assert t.ready_after(["a", "b", "c"], 9.0) == 3.5  # the last ready of the names asked, not of all rows
    assert math.isnan(t.ready_after(["c", "missing"], 0.0))
    # c is not ready, d's deploy time is unknown: neither has a lag
    assert t.readiness_lags(["a", "b", "c", "d"], {"s1": 9.0, "s2": 12.0, "s3": 12.0}) == [1.0, 0.5]


def test_table_aligns_columns() -> None:
    out = table(["A", "LONGER"], [["xxxx", 1], ["y", None]])
    assert out.splitlines() == ["A     LONGER", "xxxx  1", "y     None"]


def sample(verb: str, resource: str, value: int, *, sub: str = "", code: str = "200") -> str:
    labels = f'code="{code}",component="apiserver",resource="{resource}",subresource="{sub}",verb="{verb}"'
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        sample("POST", "maasmachines", 7, code="201"),
        sample("PATCH", "maasmachines", 5, sub="status"),
        sample("PATCH", "maasmachines", 2, sub="status", code="409"),
        sample("LIST", "pods", 40),
        sample("PUT", "leases", 9),
        "",
    ]
)


def test_apiserver_writes_counts_non_reads_by_resource() -> None:
    writes = apiserver_writes(METRICS)
    assert dict(writes) == {("POST", "maasmachines", ""): 7, ("PATCH", "maasmachines", "status"): 7}


def test_the_harness_writes_are_left_out_of_the_operators() -> None:
    writes = Counter({
        ("POST", "maasmachines", ""): 10,
        ("DELETE", "maasmachines", ""): 2,
        ("PATCH", "maasmachines", ""): 30,
        ("PATCH", "maasmachines", "status"): 20,
    })  # fmt: skip
    own = harness_writes(writes, creates=10, delete_calls=2)
    assert own == {("POST", "maasmachines", ""): 10, ("DELETE", "maasmachines", ""): 2}
    assert operator_writes(writes, own) == 50
    # an older apiserver counts the delete-collection calls as DELETECOLLECTION
    old = Counter({("DELETECOLLECTION", "maasmachines", ""): 1, ("POST", "maasmachines", ""): 3})
    assert harness_writes(old, 3, 1)[("DELETECOLLECTION", "maasmachines", "")] == 1
    assert operator_writes(old, harness_writes(old, 3, 1)) == 0


def test_settled_writes_reads_until_the_counts_stop_moving() -> None:
    """A count that still moves is read again; the first unchanged pair ends the wait."""
    later = METRICS.replace("} 7", "} 9")  # two more creates
    answers = iter([METRICS, later, later, "never read"])
    reads: list[str] = []

    def metrics() -> str:
        reads.append(text := next(answers))
        return text

    writes = settled_writes(metrics, quiet=0.0)
    assert len(reads) == 3
    assert dict(writes) == {("POST", "maasmachines", ""): 9, ("PATCH", "maasmachines", "status"): 7}


def test_settled_writes_gives_up_after_its_limit() -> None:
    counter = iter(range(1_000_000))
    writes = settled_writes(
        lambda: f'apiserver_request_total{{verb="POST",resource="events"}} {next(counter)}\n',
        quiet=0.01,
        limit=0.05,
    )
    assert 0 < writes[("POST", "events", "")] < 100


def test_proc_stats_of_this_process() -> None:
    s = proc_stats(os.getpid())
    assert s.peak_rss_mb >= s.rss_mb > 1
    assert s.cpu_seconds > 0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert math.isnan(percentile([], 50))


def args(**kw: object) -> argparse.Namespace:
    base = {"control_planes": 3, "workers": 3, "inventory": None, "lxd": False}
    base.update(kw)
    return argparse.Namespace(**base)


def test_plan_uses_the_sample_inventory_when_it_fits() -> None:
    _, source, specs = cli.plan(args())
    assert source.endswith("inventories/sample.yaml")
    assert [s.name for s in specs] == ["cp-0", "cp-1", "cp-2", "worker-0", "worker-1", "worker-2"]
    assert all(s.tags == ("control-plane",) for s in specs if s.control_plane)
    assert all(s.resource_pool == "workers" for s in specs if not s.control_plane)


def test_plan_generates_an_inventory_for_big_clusters() -> None:
    inventory, source, specs = cli.plan(args(control_planes=5, workers=20))
    assert source.startswith("generated (28 machines")
    assert len(inventory.build().machines) == 28
    assert not any(s.tags or s.resource_pool for s in specs)


def test_plan_lxd_asks_for_vms() -> None:
    _, source, specs = cli.plan(args(lxd=True, control_planes=1, workers=1))
    assert source.endswith("inventories/lxd.yaml")
    assert all(s.lxd_disk_gb for s in specs)


def test_plan_rejects_nonsense() -> None:
    with pytest.raises(SystemExit):
        cli.plan(args(control_planes=0))
