"""Fair, prioritised slots: at most ``n`` holders; the namespaces with waiters take turns, each namespace's
waiters go by priority, and one namespace holds at most ``per_namespace`` slots.

Used for the operator's Kubernetes requests (:class:`~capmaas.operator.kubehttp.KubeHttp`: 16 connections
shared by every tenant) and, one per namespace, for its reconcile passes
(:class:`~capmaas.operator.workers.Workers`). Why fairness per namespace at all: every namespace may be a
hostile tenant (docs/security.md, "Fairness between tenants"), and one tenant's burst of a thousand objects
must not hold every other tenant's work.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator


class _Queue:
    """One namespace's waiters: first come first served inside each priority, the lowest priority first."""

    __slots__ = ("levels", "live")

    def __init__(self) -> None:
        self.levels: dict[int, collections.deque[asyncio.Future[None]]] = {}  # sorted by priority
        self.live = 0  # waiters neither served nor cancelled

    def push(self, priority: int, future: asyncio.Future[None]) -> None:
        queue = self.levels.get(priority)
        if queue is None:
            queue = self.levels[priority] = collections.deque()
            if len(self.levels) > 1:
                self.levels = dict(sorted(self.levels.items()))
        queue.append(future)
        self.live += 1

    def pop(self) -> asyncio.Future[None] | None:
        for queue in self.levels.values():
            while queue and queue[0].done():
                queue.popleft()  # cancelled while waiting (already uncounted)
            if queue:
                self.live -= 1
                return queue.popleft()
        return None


class PrioritySlots:
    """At most ``n`` holders. The namespaces with waiters take turns (round-robin); a namespace's turn goes to
    its most urgent waiter (lowest ``priority``, then arrival order); a namespace holding ``per_namespace``
    slots is skipped until it gives one back.

    Why priorities: in a burst the apiserver is the bottleneck and writes queue here. A machine's Ready status
    must not wait behind the metadata patches of a thousand machines that are only starting (readiness lag),
    so status writes (priority 0) go before metadata writes and Secret reads (priority 1): finishing work goes
    before starting more. Priority -1 goes before both: the status write that completes an object (``ready``)
    and the one shared read of a cached Secret that every pass waits on.

    Why turns by namespace (tenants): with strict priority over one queue, a stream of one tenant's
    status writes held every other tenant's Secret reads and metadata patches for seconds. Now a tenant with
    a thousand queued writes and a tenant with one get every other slot, whatever their priorities: another
    tenant's higher priority can hold a request for one turn, never longer, so no priority starves across
    namespaces (this is the aging that matters; see docs/security.md). Inside a namespace the order is strict
    priority, as the readiness lag needs: ageing there made a saturated burst first come first served, and a
    tenant's own higher-priority work is finite (an object's status writes end when it is done). And a
    namespace holding ``per_namespace`` slots gets no more, however much it has queued: the rest stay free
    for the others (a lone tenant then uses ``per_namespace``).

    Each acquire and release is O(priorities) plus the namespaces skipped at their cap (at most
    ``n // per_namespace``).
    """

    def __init__(self, n: int, *, per_namespace: int | None = None) -> None:
        self._free = n
        self._cap = n if per_namespace is None else max(1, min(n, per_namespace))
        self._held: dict[str, int] = {}
        self._ring: dict[str, _Queue] = {}  # namespaces with live waiters; insertion order is the turn order
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
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._ring.get(namespace)
        if queue is None:
            queue = self._ring[namespace] = _Queue()  # its turn comes after every namespace waiting now
        queue.push(priority, future)
        self._waiting += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(namespace)  # handed a slot just as it was cancelled: pass it on
            else:
                self._waiting -= 1
                queue.live -= 1
                if queue.live == 0 and self._ring.get(namespace) is queue:
                    del self._ring[namespace]
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

    def _hand_out(self) -> None:
        """Give the free slot to the next namespace in turn below its cap (its most urgent waiter); that
        namespace goes to the back of the ring. Nothing if every waiting namespace is at its cap."""
        ring = self._ring
        skipped = 0
        while ring and skipped < len(ring):
            namespace = next(iter(ring))
            queue = ring.pop(namespace)
            if self._held.get(namespace, 0) >= self._cap:
                ring[namespace] = queue
                skipped += 1
                continue
            future = queue.pop()
            if future is None:
                continue
            if queue.live:
                ring[namespace] = queue  # to the back of the ring
            self._waiting -= 1
            self._take(namespace)
            future.set_result(None)
            return
