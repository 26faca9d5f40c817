"""Timings of the asynchronous lifecycle steps, and seedable fault injection.

Every random decision comes from one ``random.Random(seed)`` drawn in request/transition order, so the same
seed and the same request sequence give the same faults: tests of retry logic are deterministic.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field
from urllib.parse import parse_qs


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds each asynchronous step takes. Defaults are the fast ones: zero, done on the next tick."""

    commission: float = 0.0
    deploy: float = 0.0
    release: float = 0.0
    erase: float = 0.0
    #: (min, max) seconds from the deploy request to the AUTO IP (MAAS claims it in a post-commit hook, so the
    #: deploy answer has ``ip_addresses: []``); drawn from the simulator's seeded RNG when min < max.
    auto_ip: tuple[float, float] = (0.0, 0.0)
    #: From ``op=power_on`` of a Deployed machine that was off to its OS being up (``on_powered_on``).
    boot: float = 0.0

    def __post_init__(self) -> None:
        low, high = self.auto_ip
        if not 0.0 <= low <= high:
            raise ValueError(f"auto_ip must be (min, max) with 0 <= min <= max, got {self.auto_ip}")

    @classmethod
    def fast(cls) -> Timings:
        return cls()

    @classmethod
    def realistic(cls) -> Timings:
        """Roughly what a small physical MAAS lab shows, shortened enough for a demo."""
        return cls(commission=20.0, deploy=45.0, release=8.0, erase=20.0, auto_ip=(1.0, 4.0))


class WriteFault(enum.Enum):
    """What happens to a write request that a fault picked (see :meth:`Faults.write_fault`)."""

    #: MAAS acts on the request only after ``late_commit_delay`` seconds and answers after that: a client
    #: with a shorter timeout has given up (and may retry) before the request takes effect.
    LATE_COMMIT = "late_commit"
    #: MAAS acts on the request, then the connection is cut half-way through the answer.
    DROP_AFTER_COMMIT = "drop_after_commit"


@dataclass(slots=True)
class Faults:
    """Fault rates in [0, 1]; ``latency`` in seconds added to every API request.

    ``drop_rate`` cuts the connection *before* MAAS acts on the request (nothing happened); the two write
    faults act on it: ``drop_after_commit_rate`` cuts the answer after the request took effect, and
    ``late_commit_rate`` holds a write for ``late_commit_delay`` seconds before it takes effect and is
    answered.
    ``write_fault_ops`` limits the write faults to those ops (e.g. ``{"allocate"}``); empty means every
    POST/PUT/DELETE.
    """

    seed: int = 0
    deploy_failure_rate: float = 0.0
    broken_rate: float = 0.0
    unavailable_rate: float = 0.0
    latency: float = 0.0
    drop_rate: float = 0.0
    retry_after: int = 10
    late_commit_rate: float = 0.0
    late_commit_delay: float = 2.0
    drop_after_commit_rate: float = 0.0
    write_fault_ops: frozenset[str] = frozenset()
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in (
            "deploy_failure_rate",
            "broken_rate",
            "unavailable_rate",
            "drop_rate",
            "late_commit_rate",
            "drop_after_commit_rate",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.latency < 0 or self.late_commit_delay < 0:
            raise ValueError("latency and late_commit_delay must not be negative")
        self.write_fault_ops = frozenset(self.write_fault_ops)
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

    def write_fault(self, method: str, query: str) -> WriteFault | None:
        """The fault for one API request, if any: only writes (not GET), only ``write_fault_ops`` if set (the
        op as MAAS clients send it, in the query string)."""
        if method in ("GET", "HEAD") or not (self.late_commit_rate or self.drop_after_commit_rate):
            return None
        if self.write_fault_ops and parse_qs(query).get("op", [""])[0] not in self.write_fault_ops:
            return None
        if self._roll(self.late_commit_rate):
            return WriteFault.LATE_COMMIT
        if self._roll(self.drop_after_commit_rate):
            return WriteFault.DROP_AFTER_COMMIT
        return None


class ConnectionDropped(ConnectionResetError):
    """Raised by the ASGI app to abort a response half-way (a dropped connection)."""
