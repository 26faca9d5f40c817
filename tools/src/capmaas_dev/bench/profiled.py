"""``--profile FILE``: the operator run under cProfile over the measured window only.

``python -m capmaas_dev.bench.profiled FILE capmaas-args...`` runs ``capmaas`` in this process with two signal
handlers: SIGUSR1 starts a :class:`cProfile.Profile`, SIGUSR2 stops it and writes its stats to FILE (for
:mod:`pstats`). The benchmark sends SIGUSR1 just before its first create and SIGUSR2 once every machine is
released, so start-up and the idle tail are not in the profile. cProfile sees the thread that enables it: the
operator's event loop runs on the main thread, where Python runs signal handlers (the leader-election thread,
off in the benchmark, would not be seen). A profiled operator runs slower (every call is counted): read the
shares, not the CPU seconds, of a profiled run.
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from capmaas_dev.demo.stack import OperatorProcess


class ProfiledOperator(OperatorProcess):
    """The stack's operator, started through this module: profiled between SIGUSR1 and SIGUSR2."""

    def __init__(self, env: dict[str, str], namespace: str, log: Path, out: Path) -> None:
        super().__init__(env, namespace, log)
        self.out = out

    def program(self) -> list[str]:
        return [sys.executable, "-m", "capmaas_dev.bench.profiled", str(self.out)]

    def profile_start(self) -> None:
        os.kill(self.pid, signal.SIGUSR1)

    def profile_stop(self, wait: float = 30.0) -> None:
        """Stop the profile and wait (at most ``wait`` seconds) for its stats file."""
        self.out.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + wait
        while not self.out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    profile = cProfile.Profile()

    def start(_sig: int, _frame: FrameType | None) -> None:
        profile.enable()

    def stop(_sig: int, _frame: FrameType | None) -> None:
        profile.disable()
        tmp = out.with_suffix(".tmp")
        profile.dump_stats(tmp)
        tmp.rename(out)  # whole, or not there: the benchmark waits for the file

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from capmaas.cli import main as capmaas_main

    return capmaas_main(argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
