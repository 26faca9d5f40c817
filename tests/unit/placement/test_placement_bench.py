"""The bench script runs and prints one line per inventory size (no timing is asserted)."""

from __future__ import annotations

import re

import pytest

from capmaas.placement import HostCandidate
from capmaas_dev.bench import placement as bench


def test_bench_prints_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--hosts", "12", "30", "--placements", "9", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line, hosts in zip(lines, (12, 30), strict=True):
        assert re.fullmatch(
            rf"\s*{hosts} hosts:\s+[\d.]+ us per placement; 9 VMs on \d+ hosts; per zone: "
            r"zone-1=3, zone-2=3, zone-3=3",
            line,
        ), line


def test_inventory_is_reproducible() -> None:
    first = bench.inventory(200, seed=3)
    assert first == bench.inventory(200, seed=3)
    assert all(isinstance(h, HostCandidate) for h in first)
    assert any(h.maintenance for h in first)
    assert any(not h.host_ready for h in first)


def test_bench_keeps_going_when_hosts_run_out() -> None:
    _, zones, used = bench.run(3, 200)
    assert 0 < sum(zones.values()) < 200
    assert used <= 3
