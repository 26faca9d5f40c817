"""A bounded least-recently-used map whose entries also expire: what the operator keeps of tenants' secrets.

Why both bounds: Secrets and workload clients are per tenant, and tenants come and go; an unbounded dict kept
every credential the process ever read for its whole life. The size bound caps memory, the age bound caps how
long a copy of a secret outlives its use (and how long a rotated one is still served).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TtlLru"]

K = TypeVar("K")
V = TypeVar("V")


class TtlLru(Generic[K, V]):
    """At most ``maxsize`` entries, each at most ``ttl`` seconds old; ``on_evict(value)`` is called for every
    entry that leaves (expired, pushed out or replaced), e.g. to close a client."""

    def __init__(
        self,
        maxsize: int,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[V], None] | None = None,
    ) -> None:
        self.maxsize = max(1, maxsize)
        self.ttl = ttl
        self._clock = clock
        self._on_evict = on_evict
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value if present and younger than ``ttl`` (it becomes the most recently used), else None."""
        item = self._data.get(key)
        if item is None:
            return None
        if self._clock() - item[0] >= self.ttl:
            self._drop(key)
            return None
        self._data.move_to_end(key)
        return item[1]

    def put(self, key: K, value: V) -> None:
        if key in self._data:
            self._drop(key)
        self._data[key] = (self._clock(), value)
        while len(self._data) > self.maxsize:
            self._drop(next(iter(self._data)))

    def pop(self, key: K) -> None:
        if key in self._data:
            self._drop(key)

    def expire(self) -> None:
        """Drop every expired entry now (``get`` drops them lazily)."""
        now = self._clock()
        for key in [k for k, (t, _) in self._data.items() if now - t >= self.ttl]:
            self._drop(key)

    def clear(self) -> None:
        for key in list(self._data):
            self._drop(key)

    def __len__(self) -> int:
        return len(self._data)

    def _drop(self, key: K) -> None:
        _, value = self._data.pop(key)
        if self._on_evict is not None:
            self._on_evict(value)
