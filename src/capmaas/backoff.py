"""Exponential backoff with full jitter: the one formula every retry in capmaas uses.

``full_jitter(n)`` is a uniformly random delay in ``[0, min(cap, base * 2**n)]`` (the "full jitter" of the AWS
architecture blog's backoff study): after a burst of failures, say a thousand MaasMachines all told "no
machine available" or a MAAS restart failing every request in flight, the retries spread over the whole
window instead of arriving together again. ``n`` counts from 0 (the first retry). ``rand`` is injectable so a
test can pin the draw (``lambda: 1.0`` gives the upper bound).
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["ceiling", "full_jitter"]


def ceiling(attempt: int, *, base: float, cap: float) -> float:
    """The upper bound of the delay before retry ``attempt`` (0-based): ``min(cap, base * 2**attempt)``."""
    return float(min(cap, base * 2 ** max(0, min(attempt, 64))))


def full_jitter(attempt: int, *, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """A random delay in ``[0, ceiling(attempt)]`` before retry ``attempt`` (0-based)."""
    return ceiling(attempt, base=base, cap=cap) * rand()
