"""The benchmark's memory marks (capmaas_dev.bench.memtrace): the operator process they run in imports
nothing of the benchmark, and what a mark records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from capmaas_dev.bench import memtrace


def test_the_traced_operator_process_carries_none_of_the_benchmarks_imports() -> None:
    """The process runs through ``python -m capmaas_dev.bench.memtrace``: had it imported the benchmark (the
    ``kubernetes`` client, the demo), every figure it records would be the benchmark's too."""
    code = (
        "import sys, capmaas_dev.bench.memtrace; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes' "
        "or m == 'capmaas' or m.startswith(('capmaas_dev.demo', 'capmaas_dev.bench.run', 'capmaas.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "[]"


def test_a_mark_records_the_process_memory_and_a_snapshot_when_traced(tmp_path: Path) -> None:
    (tmp_path / "marks.txt").write_text("first\n")
    recorder = memtrace._Recorder(tmp_path)
    recorder.write("00")
    figures = json.loads((tmp_path / "00.json").read_text())
    assert figures["proc_kb"]["VmRSS"] > 0
    assert figures["proc_kb"]["Threads"] >= 1
    if figures["mallinfo2"]:  # glibc only
        assert figures["mallinfo2"]["uordblks"] > 0
    assert figures["pymalloc"]["arenas allocated current"] > 0
    assert not (tmp_path / "00.snap").exists()
    tracemalloc.start(1)
    try:
        recorder.write("01")
    finally:
        tracemalloc.stop()
    assert (tmp_path / "01.snap").exists()
    assert json.loads((tmp_path / "01.json").read_text())["traced"]["current"] > 0
    assert memtrace.main(["report", str(tmp_path), "--top", "3"]) == 0


def test_each_phase_has_its_own_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a mark, the watcher records the highest memory since that mark as ``NN-peak`` (the deletion's
    burst after the all-Ready mark), even when the whole run's peak was earlier and higher."""
    (tmp_path / "marks.txt").write_text("before\\nafter\\n")
    figures = iter([100, 900, 300, 300, 300, 350, 600, 500])  # the start-up's 900 stays the whole run's peak
    monkeypatch.setattr(memtrace, "PEAK_STEP", 10)
    monkeypatch.setattr(memtrace, "PEAK_POLL", 0)
    monkeypatch.setattr(memtrace, "_rss_bytes", lambda: next(figures))
    recorder = memtrace._Recorder(tmp_path)
    written: list[str] = []
    monkeypatch.setattr(recorder, "write", written.append)
    marks = {2: "00", 4: "01"}  # a mark lands after the 2nd and the 4th reading

    def sleep(_seconds: float) -> None:
        if (n := len(readings)) in marks:
            recorder.marks = int(marks[n]) + 1
            recorder.phase = None
        readings.append(n)

    readings: list[int] = []
    monkeypatch.setattr(memtrace.time, "sleep", sleep)
    with pytest.raises(StopIteration):
        recorder.watch_peak()
    assert written == ["peak", "01-peak"]
    assert memtrace._label("01-peak", ["before", "after"]) == "peak after after"
    assert memtrace._label("01", ["before", "after"]) == "after"
    assert memtrace._label("peak", ["before", "after"]) == "peak"
