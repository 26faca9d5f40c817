"""``tests/suite_plan.py``: which xdist group each test is in and where each group starts (its module doc)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import suite_plan

TESTS = Path(__file__).resolve().parents[1]


def test_every_e2e_module_is_in_exactly_one_half() -> None:
    """A new e2e module is placed by its duration (``E2E``), not left to the default half unseen."""
    on_disk = sorted(p.name for p in (TESTS / "e2e").glob("test_*.py"))
    named = [module for modules in suite_plan.E2E.values() for module in modules]
    assert sorted(named) == on_disk
    assert set(suite_plan.E2E) == {"e2e-1", "e2e-2"}
    assert all(suite_plan.E2E.values()), "an empty half"


def test_each_e2e_module_runs_in_its_half_and_nothing_else_does() -> None:
    for group, modules in suite_plan.E2E.items():
        for module in modules:
            assert suite_plan.group_by_path(f"tests/e2e/{module}::test_x") == group
            assert suite_plan.group_by_path(f"tests/e2e/{module}::test_x[param]") == group
    assert suite_plan.group_by_path("tests/e2e/test_not_yet_placed.py::test_x") == suite_plan.E2E_DEFAULT
    assert suite_plan.group_by_path("tests/unit/test_suite_plan.py::test_x") is None
    assert suite_plan.group_by_path("tests/demo/test_demo.py::test_x") == "demo"


def test_the_e2e_halves_start_after_pod_and_before_demo_the_lighter_first() -> None:
    """The order the module doc reasons about: chaos, image, pod, e2e-1, e2e-2, demo, the other groups, then
    ungrouped tests; within a group, collection order."""
    collected = [
        ("tests/demo/test_demo.py::test_a", "demo"),
        (None, None),
        ("tests/e2e/x::test_b", "e2e-2"),
        ("tests/release/test_upgrade.py::test_clusterctl_upgrade_c", "image"),
        ("tests/e2e/y::test_d", "e2e-1"),
        ("tests/k8s/test_m.py::test_e", "module-tests/k8s/test_m.py"),
        ("tests/pod/test_pod.py::test_f", "pod"),
        ("tests/e2e/x::test_g", "e2e-2"),
        ("tests/release/test_image_from_scratch.py::test_h", "image"),
        ("tests/operator/test_failover_chaos.py::test_i", "chaos-tests/operator/test_failover_chaos.py"),
        ("tests/operator/test_chaos.py::test_j", "chaos-tests/operator/test_chaos.py"),
        ("tests/e2e/y::test_k", "e2e-1"),
    ]
    ranked = sorted(range(len(collected)), key=lambda i: suite_plan.start_rank(collected[i][1], i))
    assert [collected[i][1] for i in ranked] == [
        "chaos-tests/operator/test_chaos.py",
        "chaos-tests/operator/test_failover_chaos.py",
        "image",
        "image",
        "pod",
        "e2e-1",
        "e2e-1",
        "e2e-2",
        "e2e-2",
        "demo",
        "module-tests/k8s/test_m.py",
        None,
    ]
    assert [collected[i][0] for i in ranked][2:4] == [
        "tests/release/test_upgrade.py::test_clusterctl_upgrade_c",
        "tests/release/test_image_from_scratch.py::test_h",
    ]
    assert [collected[i][0] for i in ranked][5:9] == [
        "tests/e2e/y::test_d",
        "tests/e2e/y::test_k",
        "tests/e2e/x::test_b",
        "tests/e2e/x::test_g",
    ]


def test_the_release_builds_share_the_image_worker_and_the_node_tests_the_pod_worker() -> None:
    """This checkout's release (the from-scratch proof) and the previous one (the clusterctl upgrade) are
    built on one worker from the start, in that order; the two Helm tests run on the one-node cluster
    (``pod``); the image group holds at most 2 tests, so its worker takes a partner at once (module doc)."""
    assert suite_plan.group_by_path("tests/release/test_image_from_scratch.py::test_x") == "image"
    upgrade = "tests/release/test_upgrade.py"
    assert suite_plan.group_by_path(f"{upgrade}::test_clusterctl_upgrade_apply_x") == "image"
    assert suite_plan.group_by_path(f"{upgrade}::test_helm_upgrade_x") == "pod"
    assert suite_plan.group_by_path(f"{upgrade}::test_a_release_commit_missing_x") is None
    assert suite_plan.group_by_path("tests/release/test_release_dist.py::test_x") == "pod"
    on_disk = [
        f"{path.relative_to(TESTS.parent)}::{line.split('(')[0].removeprefix('def ')}"
        for path in sorted((TESTS / "release").glob("test_*.py"))
        for line in path.read_text().splitlines()
        if line.startswith("def test_")
    ]
    assert len([n for n in on_disk if suite_plan.group_by_path(n) == "image"]) == 2, on_disk


def test_the_times_file_has_a_table_per_group_and_a_timeline_per_worker(tmp_path: Path) -> None:
    """What ``make test`` keeps of a run's times: the group table, and which worker ran which test when (a
    run's critical path is read from the timeline)."""

    class Gateway:
        id = "gw1"

    class Node:
        gateway = Gateway()

    times = suite_plan.Times()
    for nodeid, when, start, stop, node in (
        ("tests/unit/test_a.py::test_x", "call", 10.0, 12.5, Node()),
        ("tests/e2e/test_b.py::test_y@e2e-1", "setup", 5.0, 9.0, None),
    ):
        report = pytest.TestReport(nodeid, ("f", 1, "x"), {}, "passed", None, when, start=start, stop=stop)
        report.duration = stop - start
        if node is not None:
            report.node = node  # type: ignore[attr-defined]  # as xdist's controller sets it
        times.add(report)
    path = tmp_path / "test-groups.json"
    times.write(path)
    groups = json.loads(path.read_text())
    assert groups["unit"] == {"tests": 1, "work_seconds": 2.5, "span_seconds": 2.5}
    assert groups["e2e"]["work_seconds"] == 4.0
    timeline = json.loads((tmp_path / "timeline.json").read_text())
    assert [(r["test"], r["when"], r["worker"], r["start"], r["stop"]) for r in timeline] == [
        ("tests/e2e/test_b.py::test_y@e2e-1", "setup", "main", 5.0, 9.0),
        ("tests/unit/test_a.py::test_x", "call", "gw1", 10.0, 12.5),
    ]


def test_coverage_traces_a_test_only_where_the_plan_says(request: pytest.FixtureRequest) -> None:
    """Under ``--cov`` (``make test``) coverage.py's tracer is paused in every test outside ``TRACED``, this
    one included, in a plain run and in an xdist worker alike: in a worker pytest-cov 7.1 had a second
    coverage running under its own, which the pause resumed (tests/conftest.py,
    ``stop_the_early_coverage_of_a_worker``)."""
    config = request.config
    cov = config.pluginmanager.hasplugin("_cov") and not config.getoption("no_cov", False)
    if not cov and sys.gettrace() is not None:
        pytest.skip("traced by something other than pytest-cov (a debugger, `coverage run`)")
    if cov and suite_plan.traced(request.node.nodeid):
        assert sys.gettrace() is not None  # CAPMAAS_COVERAGE=all (make coverage): every test traced
    else:
        assert sys.gettrace() is None
