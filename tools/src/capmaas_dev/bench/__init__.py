"""``make bench`` (``python -m capmaas_dev.bench``): the operator's cost per machine, end to end.

N MaasMachines against the MAAS simulator, through the real operator process and the real apiserver, using
the demo's orchestration (:mod:`capmaas_dev.demo.stack`, :mod:`capmaas_dev.demo.capi`). Prints figures next to
the performance targets; it never asserts on timings.
"""

from __future__ import annotations

from capmaas_dev.bench.run import main

__all__ = ["main"]
