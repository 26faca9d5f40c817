"""How the suite is spread over pytest-xdist workers, and the time each group of tests took.

Used by ``tests/conftest.py``; it changes no test, only the order in which tests start and which of them must
share a worker.

Groups (``xdist_group``, honoured by ``--dist loadgroup``; without xdist they only order the run):

- each chaos module (``test_chaos``, ``test_failover_chaos``) on a worker of its own, started first: they are
  the longest (real Lease expiry, real deploy timers) and mostly wait, so they overlap the rest of the suite.
  One group per module, not per test: three chaos tests on the three workers at once left nothing else
  running for their first minutes and put their timing-sensitive waits on a box loaded by each other;
- ``image`` next: the two release builds, one after the other on one worker. First this checkout's release,
  whose first image build runs on a new machine and is the from-scratch proof
  (``tests/release/test_image_from_scratch.py``), then the previous release and the ``clusterctl upgrade``
  from it (``tests/release/test_upgrade.py``'s upgrade test; its Helm test needs the node: ``pod``). Every
  release test takes these two builds (``tests/release/conftest.py``, ``release_support``): started at once,
  the previous release is ready before the ``pod`` worker's Helm upgrade asks for it;
- ``pod`` (the one-node cluster, the release's install and Helm upgrade) next: minutes of mostly I/O;
- ``e2e-1`` and ``e2e-2`` next: the end-to-end modules in two halves (``E2E``), each half on one worker, where
  one CAPI core manager serves its modules (the session-scoped ``capi``: one per worker, with its own control
  plane, CAPI namespace and workload stand-in) and they run one after another as ``tests/e2e/conftest.py``
  assumes. A module stays whole (its module-scoped ``provider_stack``). In one group, the e2e span alone was
  over the whole suite's target (docs/benchmarks/test-durations.md);
- ``demo``: the ``capmaas demo``/bench runs one after another (each starts its own control planes);
- any other module with a module- or class-scoped fixture: its module stays on one worker (the fixture is
  made once, as in a serial run);
- everything else is spread test by test.

Every worker has its own session fixtures (its own ``kube`` control plane): tests on different workers never
share a cluster, so cluster-scoped objects (CRDs, webhooks, Nodes) of one cannot disturb another.

Why this order: with ``--dist loadgroup --no-loadscope-reorder`` xdist gives each of the 3 workers the next
unit (a group, or an ungrouped test) in this order, then at once a second one to each worker with at most 2
tests pending, and later the next unit to the first worker whose pending tests drop to 2. The chaos modules
(1 and 2 tests) and ``image`` (2 tests: at most 2, so that its worker takes a partner at once too) take the
three workers, and the next three units are their partners: ``pod`` after ``test_chaos``, ``e2e-1`` after the
failover chaos, ``e2e-2`` after ``image``. ``e2e-1`` is the lighter half because it follows the longest of the
three first units, the failover chaos. With the halves before ``pod``, ``pod`` queued behind a half or the
failover chaos; with the previous release built behind ``e2e-2`` (a group of its own after the halves, the
order before), the ``pod`` worker's Helm upgrade waited minutes for it: longer chains (the spans in
docs/benchmarks/test-durations.md, "e2e in two halves" and "One build for two proofs").

Coverage (``make test`` runs pytest with ``--cov``): coverage.py's tracer is on only for the tests under
``TRACED``, the ones whose coverage ``hack/coverage_gate.py`` reads (``capmaas/maas/`` and
``capmaas_dev/simulator/`` at 90 % line+branch). Every other test runs with the tracer paused (pytest-cov's
``no_cover`` marker, around the test's call). On Python 3.11 the tracer is called for every Python function
and line, measured or not: it doubled the CPU of the in-process tests (docs/benchmarks/test-durations.md),
on a run that is CPU-bound. The tests still run, all of them; only the report of the rest of the product is
not made. ``CAPMAAS_COVERAGE=all`` (``make coverage``) traces every test, for the whole product's report.
The operator subprocesses (``capmaas run``, the zygote's forks) and other child processes are not traced
either way (no ``COVERAGE_PROCESS_START``).

The per-group time table: every test report (setup, call, teardown) is added to its group's *work* (the sum
of durations) and *span* (from its first start to its last end, wall clock); with several workers the spans
overlap. ``CAPMAAS_TEST_TIMES`` names a JSON file to write it to (``hack/test.sh`` prints it with the phases).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Groups that start first, in this order (module doc: which pairs of them share a worker).
FIRST = ("chaos", "image", "pod", "e2e", "demo")
CHAOS_MODULES = ("tests/operator/test_failover_chaos.py", "tests/operator/test_chaos.py")
#: The e2e modules of each half, by their measured times (docs/benchmarks/test-durations.md, "e2e in two
#: halves" and "The e2e waits"): ``e2e-1`` the lighter (module doc). Every module of tests/e2e is named here
#: (tests/unit/test_suite_plan.py checks it): a new one is placed by its duration, not by default.
E2E: dict[str, tuple[str, ...]] = {
    "e2e-1": (
        "test_capi_harness.py",
        "test_clusterctl_move.py",
        "test_machinedeployment.py",
        "test_static_ips_e2e.py",
    ),
    "e2e-2": (
        "test_clusterclass.py",
        "test_clusterctl_repo.py",  # with test_clusterclass: the only users of the session's kubeadm_crds
        "test_hypershift.py",
        "test_node_reuse_e2e.py",
        "test_operator_ports_e2e.py",
        "test_remediation_e2e.py",
    ),
}
#: A module missing from ``E2E`` still runs, in the lighter half (the unit test fails meanwhile).
E2E_DEFAULT = "e2e-1"
SCOPED = ("module", "class", "package")

#: The tests coverage.py traces in ``make test``: those that give the gate's packages (``capmaas/maas/``,
#: ``capmaas_dev/simulator/``, ``hack/coverage_gate.py``) their coverage. Found by measuring each
#: directory's share (docs/benchmarks/test-durations.md); a directory added here costs its tests about twice
#: their CPU, one left out lowers the gate's figures (the gate then fails if they fall under the bar).
TRACED = (
    "tests/unit/maas/",
    "tests/unit/simulator/",
    "tests/conformance/",
    "tests/integration/",
)
#: The packages the gate reads: every module of them is imported at collection, while the tracer is on.
GATED_PACKAGES = ("capmaas.maas", "capmaas_dev.simulator")
#: ``CAPMAAS_COVERAGE=all``: every test traced (``make coverage``: the whole product's report).
TRACE_ALL = "CAPMAAS_COVERAGE"


def group_of(item: pytest.Item) -> str | None:
    """The xdist group of a test, or None when it may run on any worker, alone."""
    group = group_by_path(item.nodeid)
    if group is not None:
        return group
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for defs in info.name2fixturedefs.values():
            if defs and defs[-1].scope in SCOPED:
                return f"module-{item.nodeid.split('::', 1)[0]}"
    return None


def group_by_path(nodeid: str) -> str | None:
    """The group a test's path (node id) alone decides: ``group_of`` but the module-scoped fixture rule."""
    path = nodeid.split("::", 1)[0]
    if path in CHAOS_MODULES:
        return f"chaos-{path}"
    if path == "tests/release/test_image_from_scratch.py":
        return "image"
    if path.startswith("tests/pod/") or path == "tests/release/test_release_dist.py":
        return "pod"  # the release's install test runs on the one-node cluster too
    if path == "tests/release/test_upgrade.py":
        # The Helm upgrade runs on the one-node cluster: with the other node tests (one node at a time per
        # machine: a second one's clean-up removes the first's network namespace). The clusterctl upgrade
        # builds the previous release right after this checkout's (module doc); the module's other test,
        # which builds nothing, is left to the module-scoped fixture rule.
        if "::test_helm_" in nodeid:
            return "pod"
        return "image" if "::test_clusterctl_upgrade_" in nodeid else None
    if path.startswith("tests/e2e/"):
        module = path.removeprefix("tests/e2e/")
        return next((group for group, modules in E2E.items() if module in modules), E2E_DEFAULT)
    if path == "tests/demo/test_demo.py":
        return "demo"
    return None


def start_rank(group: str | None, index: int) -> tuple[int, str, int]:
    """Where a test of ``group`` (None: ungrouped), collected ``index``-th, starts: the ``FIRST`` groups in
    that order (``e2e-1`` before ``e2e-2``), then the other groups, then ungrouped tests, each in collection
    order."""
    head = (group or "").split("-", 1)[0]
    if head in FIRST:
        return FIRST.index(head), group or "", index
    return len(FIRST) + (0 if group else 1), "", index


def traced(nodeid: str) -> bool:
    """Whether coverage.py traces this test in ``make test`` (``TRACED``; module doc)."""
    return os.environ.get(TRACE_ALL) == "all" or nodeid.startswith(TRACED)


def import_gated_packages() -> None:
    """Import every module of ``GATED_PACKAGES`` now, at collection, with the tracer on. A module is imported
    once per process: if its first import came inside an untraced test, its import-time lines (``def``,
    ``class``, constants) would never be measured, and the gate's figure would depend on which worker ran
    which test first."""
    for name in GATED_PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            importlib.import_module(info.name)


def plan(items: list[pytest.Item]) -> None:
    """Mark each grouped test and put the long groups first (stable: the same order on every worker, which
    xdist requires); mark the tests coverage.py does not trace (``no_cover``)."""

    def rank(pair: tuple[int, pytest.Item]) -> tuple[int, str, int]:
        index, item = pair
        return start_rank(group_of(item), index)

    ordered = [item for _, item in sorted(enumerate(items), key=rank)]
    for item in ordered:
        group = group_of(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
        if not traced(item.nodeid):
            item.add_marker(pytest.mark.no_cover)
    items[:] = ordered


class GroupNames:
    """pytest-xdist 3.8 names a grouped test ``<nodeid>@<group>`` by setting ``item._nodeid``, which pytest
    9.2 no longer reads (its node id is ``item._id``), so ``--dist loadgroup`` spread every group over
    all workers. Where xdist's renaming did not take, this does it the way pytest 9.2 keeps node ids (last,
    after xdist's own hook)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not (is_worker(config) and config.getvalue("loadgroup")):
            return
        from _pytest.nodeid import NodeId

        for item in items:
            marks = item.iter_markers("xdist_group")
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
            if names and "@" not in item.nodeid:
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")  # type: ignore[attr-defined]


def category(nodeid: str) -> str:
    """The row of the time table a test belongs to: its directory under tests/, chaos and image apart."""
    path = nodeid.split("::", 1)[0]
    if path in CHAOS_MODULES:
        return "operator (chaos)"
    if path == "tests/release/test_image_from_scratch.py":
        return "image (from scratch)"
    parts = path.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


@dataclass
class Row:
    tests: set[str] = field(default_factory=set)
    work: float = 0.0
    first: float = float("inf")
    last: float = 0.0


@dataclass
class Times:
    rows: dict[str, Row] = field(default_factory=dict)
    #: Every report's (node id, phase, worker, start, stop): which worker ran what when, to see a run's
    #: critical path (``timeline.json`` beside the table's file).
    timeline: list[tuple[str, str, str, float, float]] = field(default_factory=list)

    def add(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # xdist's controller: the worker that sent the report
        worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
        if report.start:
            self.timeline.append((report.nodeid, report.when, worker, report.start, report.stop))
        row = self.rows.setdefault(category(report.nodeid), Row())
        row.tests.add(report.nodeid)
        row.work += report.duration
        if report.start:
            row.first = min(row.first, report.start)
            row.last = max(row.last, report.stop)

    def table(self) -> list[str]:
        lines = [f"{'group':<22} {'tests':>6} {'work (s)':>9} {'span (s)':>9}"]
        for name, row in sorted(self.rows.items(), key=lambda kv: -kv[1].work):
            span = row.last - row.first if row.last else 0.0
            lines.append(f"{name:<22} {len(row.tests):>6} {row.work:>9.1f} {span:>9.1f}")
        return lines

    def write(self, path: Path) -> None:
        data = {
            name: {
                "tests": len(row.tests),
                "work_seconds": round(row.work, 1),
                "span_seconds": round(row.last - row.first, 1) if row.last else 0.0,
            }
            for name, row in self.rows.items()
        }
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        rows = [
            {"test": nodeid, "when": when, "worker": worker, "start": round(start, 2), "stop": round(stop, 2)}
            for nodeid, when, worker, start, stop in sorted(self.timeline, key=lambda t: t[3])
        ]
        path.with_name("timeline.json").write_text(json.dumps(rows, indent=0) + "\n")


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def output_path() -> Path | None:
    value = os.environ.get("CAPMAAS_TEST_TIMES")
    return Path(value) if value else None
