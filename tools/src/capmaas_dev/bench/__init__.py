"""``make bench`` (``python -m capmaas_dev.bench``): the operator's cost per machine, end to end.

N MaasMachines against the MAAS simulator, through the real operator process and the real apiserver, using
the demo's orchestration (:mod:`capmaas_dev.demo.stack`, :mod:`capmaas_dev.demo.capi`). Prints figures next to
the performance targets; it never asserts on timings.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """:func:`capmaas_dev.bench.run.main`, imported only when called: the operator processes that run
    through a module of this package (:mod:`~capmaas_dev.bench.memtrace`, :mod:`~capmaas_dev.bench.profiled`)
    import this package first, and must not carry the benchmark's imports (the ``kubernetes`` client, the
    demo)."""
    from capmaas_dev.bench.run import main as run_main

    return run_main(argv)
