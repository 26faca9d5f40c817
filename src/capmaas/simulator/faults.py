"""Timings of the asynchronous lifecycle steps, and seedable fault injection.

Every random decision comes from one ``random.Random(seed)`` drawn in request/transition order, so the same
seed and the same request sequence give the same faults: tests of retry logic are deterministic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds each asynchronous step takes. Defaults are the fast ones: zero, done on the next tick."""

    commission: float = 0.0
    deploy: float = 0.0
    release: float = 0.0
    erase: float = 0.0

    @classmethod
    def fast(cls) -> Timings:
        return cls()

    @classmethod
    def realistic(cls) -> Timings:
        """Roughly what a small physical MAAS lab shows, shortened enough for a demo."""
        return cls(commission=20.0, deploy=45.0, release=8.0, erase=20.0)


@dataclass(slots=True)
class Faults:
    """Fault rates in [0, 1]; ``latency`` in seconds added to every API request."""

    seed: int = 0
    deploy_failure_rate: float = 0.0
    broken_rate: float = 0.0
    unavailable_rate: float = 0.0
    latency: float = 0.0
    drop_rate: float = 0.0
    retry_after: int = 10
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("deploy_failure_rate", "broken_rate", "unavailable_rate", "drop_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.latency < 0:
            raise ValueError("latency must not be negative")
        self.rng = random.Random(self.seed)

    def _roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate

    def deploy_fails(self) -> bool:
        return self._roll(self.deploy_failure_rate)

    def goes_broken(self) -> bool:
        return self._roll(self.broken_rate)

    def unavailable(self) -> bool:
        return self._roll(self.unavailable_rate)

    def drops(self) -> bool:
        return self._roll(self.drop_rate)


class ConnectionDropped(ConnectionResetError):
    """Raised by the ASGI app to abort a response half-way (a dropped connection)."""
