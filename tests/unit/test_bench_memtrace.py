"""The benchmark's memory marks (capmaas_dev.bench.memtrace): the operator process they run in imports
nothing of the benchmark, and what a mark records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

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
