"""``--memory DIR``: the benchmark's side of :mod:`capmaas_dev.bench.memtrace` (which runs in the
operator)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from capmaas_dev.demo.stack import OperatorProcess


class MemoryTracedOperator(OperatorProcess):
    """An operator process of the benchmark (``inner``: its arguments, environment and log) run through this
    module: marks on SIGUSR1, its peak recorded by a thread."""

    def __init__(self, inner: OperatorProcess, out: Path, frames: int) -> None:
        super().__init__(inner.env, inner.namespace, inner.log)
        self.inner, self.out, self.frames = inner, out, frames
        out.mkdir(parents=True, exist_ok=True)
        self._marks = 0

    def run_args(self) -> list[str]:
        return self.inner.run_args()

    def program(self) -> list[str]:
        return [sys.executable, "-m", "capmaas_dev.bench.memtrace", str(self.out), str(self.frames)]

    def mark(self, label: str, wait: float = 120.0) -> None:
        """Ask for a mark named ``label`` and wait (at most ``wait`` seconds) until it is written."""
        with (self.out / "marks.txt").open("a", encoding="utf-8") as f:
            f.write(label + "\n")
        done = self.out / f"{self._marks:02d}.json"
        self._marks += 1
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + wait
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
