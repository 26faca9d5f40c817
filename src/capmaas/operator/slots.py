"""Fair, prioritised slots: at most ``n`` holders, let in by priority (aged), round-robin over namespaces
inside a priority, and a per-namespace cap on slots held.

Used for the operator's Kubernetes requests (:class:`~capmaas.operator.kubehttp.KubeHttp`: 16 connections
shared by every tenant) and, one per namespace, for its reconcile passes
(:class:`~capmaas.operator.workers.Workers`). Why fairness per namespace at all: every namespace may be a
hostile tenant (docs/security.md, "Fairness between tenants"), and one tenant's burst of a thousand objects
must not hold every other tenant's work (issue 21).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator


class _Waiter:
    """One queued request: its place in the queues and the future that hands it a slot."""

    __slots__ = ("future", "namespace", "since")

    def __init__(self, namespace: str, since: float, future: asyncio.Future[None]) -> None:
        self.namespace = namespace
        self.since = since
        self.future = future


class _Level:
    """The waiters of one priority: a first-in first-out queue per namespace, the namespaces in a ring
    (round-robin), and every waiter in arrival order (for aging: the level's oldest)."""

    __slots__ = ("arrivals", "ring")

    def __init__(self) -> None:
        self.ring: dict[str, collections.deque[_Waiter]] = {}  # insertion order is the round-robin order
        self.arrivals: collections.deque[_Waiter] = collections.deque()

    def oldest(self) -> _Waiter | None:
        arrivals = self.arrivals
        while arrivals and arrivals[0].future.done():  # served or cancelled: dropped lazily, once
            arrivals.popleft()
        return arrivals[0] if arrivals else None


class PrioritySlots:
    """At most ``n`` holders; waiters are let in by ``priority`` (lower first, aged: see below), round-robin
    over namespaces inside a priority, first come first served inside a namespace; one namespace holds at most
    ``per_namespace`` slots at once.

    Why priorities: in a burst the apiserver is the bottleneck and writes queue here. A machine's Ready status
    must not wait behind the metadata patches of a thousand machines that are only starting (readiness lag),
    so status writes (priority 0) go before metadata writes and Secret reads (priority 1): finishing work goes
    before starting more. Priority -1 goes before both: the status write that completes an object (``ready``)
    and the one shared read of a cached Secret that every pass waits on.

    Why per namespace (issue 21, tenants): with strict priority and one queue, a stream of one tenant's status
    writes held every other tenant's Secret reads and metadata patches for seconds. So:

    - inside a priority the namespaces take turns: a tenant with a thousand queued writes and one with a
      single write get every other slot;
    - a namespace holding ``per_namespace`` slots gets no more until it gives one back, however much it has
      queued: the rest stay free for the others (a lone tenant then uses at most ``per_namespace``);
    - priorities age: a waiter that has waited ``aging`` seconds counts as one priority more urgent, so a
      lower priority is served at the latest once its oldest waiter has waited ``aging`` seconds per priority
      step longer than the oldest of the level above: never starved, and in a burst status writes still go
      first.

    Each acquire and release costs O(priorities) plus the namespaces skipped at their cap (at most
    ``n // per_namespace``).
    """

    def __init__(self, n: int, *, per_namespace: int | None = None, aging: float = 2.0) -> None:
        self._free = n
        self._cap = n if per_namespace is None else max(1, min(n, per_namespace))
        self._aging = aging
        self._held: dict[str, int] = {}
        self._levels: dict[int, _Level] = {}
        self._waiting = 0  # live waiters (not yet handed a slot, not cancelled)

    def idle(self) -> bool:
        """Nothing held and nobody waiting."""
        return self._waiting == 0 and not self._held

    def held(self, namespace: str) -> int:
        """Slots ``namespace`` holds now (given to it and not yet released)."""
        return self._held.get(namespace, 0)

    async def acquire(self, priority: int, namespace: str = "") -> None:
        # Free slots while someone waits are only ever left for waiters held back by their namespace's cap
        # (every release hands out what it can), so a newcomer below its cap may take one at once.
        if self._free > 0 and self._held.get(namespace, 0) < self._cap:
            self._take(namespace)
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = _Waiter(namespace, loop.time(), future)
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = _Level()
            self._levels = dict(sorted(self._levels.items()))
        queue = level.ring.get(namespace)
        if queue is None:
            queue = level.ring[namespace] = collections.deque()
        queue.append(waiter)
        level.arrivals.append(waiter)
        self._waiting += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(namespace)  # handed a slot just as it was cancelled: pass it on
            else:
                self._waiting -= 1
            raise

    def release(self, namespace: str = "") -> None:
        held = self._held.get(namespace, 0) - 1
        if held > 0:
            self._held[namespace] = held
        else:
            self._held.pop(namespace, None)
        self._free += 1
        # One hand-out is enough: before this release a free slot meant every waiter was at its cap, and this
        # release moved one namespace below its cap, or freed the one slot there was.
        if self._waiting > 0:
            self._hand_out()

    @contextlib.asynccontextmanager
    async def slot(self, priority: int, namespace: str = "") -> AsyncIterator[None]:
        await self.acquire(priority, namespace)
        try:
            yield
        finally:
            self.release(namespace)

    def _take(self, namespace: str) -> None:
        self._free -= 1
        self._held[namespace] = self._held.get(namespace, 0) + 1

    def _hand_out(self) -> bool:
        """Give one free slot to the next waiter; False when every live waiter is held back by its cap."""
        levels = self._levels
        if len(levels) == 1:
            return self._serve(next(iter(levels.values())))
        now = asyncio.get_running_loop().time()
        best: _Level | None = None
        best_urgency = 0.0
        for priority, level in levels.items():  # in priority order: a tie goes to the lower priority
            oldest = level.oldest() if level.arrivals else None
            if oldest is not None:
                urgency = priority - (now - oldest.since) / self._aging
                if best is None or urgency < best_urgency:
                    best, best_urgency = level, urgency
        if best is None:
            return False
        if self._serve(best):
            return True
        # Every waiter of the most urgent level is held back by its namespace's cap: the others, by urgency.
        ranked = []
        for priority, level in levels.items():
            oldest = level.oldest()
            if oldest is not None and level is not best:
                ranked.append((priority - (now - oldest.since) / self._aging, priority, level))
        ranked.sort(key=_urgency)
        return any(self._serve(level) for _, _, level in ranked)

    def _serve(self, level: _Level) -> bool:
        """Hand a slot to the first namespace in ``level``'s ring below its cap; that namespace goes to the
        back of the ring (round-robin). False if there is none."""
        ring = level.ring
        skipped = 0
        while ring and skipped < len(ring):
            namespace = next(iter(ring))
            queue = ring.pop(namespace)
            while queue and queue[0].future.done():
                queue.popleft()  # cancelled while waiting
            if not queue:
                continue
            ring[namespace] = queue  # to the back of the ring, served or not
            if self._held.get(namespace, 0) >= self._cap:
                skipped += 1
                continue
            waiter = queue.popleft()
            if not queue:
                del ring[namespace]
            self._waiting -= 1
            self._take(namespace)
            waiter.future.set_result(None)
            return True
        return False


def _urgency(ranked: tuple[float, int, _Level]) -> tuple[float, int]:
    """Aged priority, then priority (the lower first)."""
    return ranked[0], ranked[1]
