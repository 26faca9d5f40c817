"""One long-lived asyncio loop per object: reconcile, then sleep until woken or the requeue delay passes.

Why not kopf daemons or timers: both make kopf add *its* finalizer (one name for every resource), while the
CAPI contract wants ``maascluster.…`` on MaasClusters, ``maasmachine.…`` on MaasMachines and none at all on
an externally managed MaasCluster; kopf would also remove a finalizer of that name whenever no handler
"requires" it. So the reconcilers own their finalizers and these loops own the scheduling. Wake-ups come
from the object's own watch events, from its owner Machine/Cluster's events (which kopf would never route to
our object), and from the MAAS poller when a machine it watches changes.

This is the ONE place where reconcile outcomes become scheduling: success → its ``Requeue.after`` (or the
resync interval), :class:`TransientError` → its delay (or exponential backoff with full jitter),
:class:`TerminalError` → wait for a change, anything unexpected → logged with its traceback and retried with
backoff (never a crash loop).

Fairness between namespaces: every object has its loop, so no object ever waits for a free
worker; but a pass is CPU on the one event loop and requests in the shared queues, and a namespace with
thousands of objects due at once would have thousands of passes competing with another namespace's one. So a
namespace runs at most ``per_namespace`` passes at once (:class:`~capmaas.operator.slots.PrioritySlots`, one
per namespace): the rest of its due objects wait their turn, passes of objects already in flight before the
first passes of new ones (finishing work before starting more, as the Kubernetes request slots do), while
every other namespace's passes start at once. There is deliberately no limit over all namespaces: a tenant
whose passes are slow (a MAAS endpoint that never answers) then holds up only its own objects. Passes of
objects being deleted are not limited: they give MAAS machines back and mostly wait on MAAS, and limited they
held a mass deletion behind itself (docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from capmaas import backoff
from capmaas.config import OperatorConfig
from capmaas.operator.kube import Store
from capmaas.operator.slots import PrioritySlots
from capmaas.reconcilers.errors import TerminalError, TransientError
from capmaas.reconcilers.ports import Body
from capmaas.reconcilers.scope import Requeue

log = logging.getLogger(__name__)

Reconcile = Callable[[Body], Awaitable[Requeue]]
Outcome = Callable[[str, str], None]  # (kind, result) for metrics
Lag = Callable[[str, float], None]  # (kind, seconds from due to the reconcile starting) for metrics
#: Passes of one namespace running at once (the others wait): well above what the Kubernetes request slots
#: and MAAS write limits let through, so a single tenant's burst is not slowed by it (docs/scaling.md).
PASSES_PER_NAMESPACE = 128


class Workers:
    """The loops of one kind (``maasmachines`` or ``maasclusters``)."""

    @classmethod
    def configured(
        cls,
        plural: str,
        reconcile: Reconcile,
        store: Store,
        config: OperatorConfig,
        *,
        active: bool,
        outcome: Outcome,
        lag: Lag,
        on_exit: Callable[[str], None] = lambda key: None,
    ) -> Workers:
        """Loops with the operator's resync interval and reconcile backoff (every controller's alike)."""
        ms = config.machine
        return cls(
            plural, reconcile, store, active=active, resync=config.kube.resync_interval,
            backoff_base=ms.retry_base_delay, backoff_max=ms.retry_max_delay, outcome=outcome, lag=lag,
            on_exit=on_exit,
        )  # fmt: skip

    def __init__(
        self,
        plural: str,
        reconcile: Reconcile,
        store: Store,
        *,
        resync: float,
        backoff_base: float,
        backoff_max: float,
        outcome: Outcome,
        on_exit: Callable[[str], None] = lambda key: None,
        active: bool = True,
        lag: Lag = lambda kind, seconds: None,
        per_namespace: int = PASSES_PER_NAMESPACE,
    ) -> None:
        self.plural = plural
        self._reconcile = reconcile
        self._store = store
        self._resync = resync
        self._base = backoff_base
        self._max = backoff_max
        self._outcome = outcome
        self._on_exit = on_exit
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._due: dict[str, float] = {}  # key -> when it became due (the oldest wake not yet served)
        self._lag = lag
        self._per_namespace = per_namespace
        self._gates: dict[str, PrioritySlots] = {}  # namespace -> its passes (only while one runs or waits)
        self.active = active

    def ensure(self, key: str, *, wake: bool = True) -> None:
        """Start the loop of ``key`` if it is not running (its first pass runs at once), and wake it.
        Does nothing while inactive (a standby: its watch caches are fed, no loop runs)."""
        if not self.active:
            return
        if key not in self._tasks:
            self._wake[key] = asyncio.Event()
            self._tasks[key] = asyncio.get_running_loop().create_task(self._loop(key), name=f"capmaas {key}")
            wake = True
        if wake:
            self.wake(key)

    def wake(self, key: str) -> None:
        event = self._wake.get(key)
        if event is not None:
            self._due.setdefault(key, time.monotonic())
            event.set()

    def __len__(self) -> int:
        return len(self._tasks)

    def activate(self, keys: Iterable[str]) -> None:
        """Leadership won: start a loop for every object in the cache (and from now on for new ones)."""
        self.active = True
        for key in keys:
            self.ensure(key)

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every loop and start no new one (leadership lost, or shutdown); returns the tasks."""
        self.active = False
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        return tasks

    async def stop(self) -> None:
        """:meth:`cancel`, then wait for the loops to end."""
        me = asyncio.current_task()
        # Cancellation requests this task already had (kopf cancels its cleanup task once, and swallows that,
        # before it runs the cleanup handlers): only a new one means "stop waiting".
        before = me.cancelling() if me is not None else 0
        for t in self.cancel():
            try:
                await t
            except asyncio.CancelledError:
                if me is not None and me.cancelling() > before:
                    raise  # we are being cancelled ourselves (a timeout around stop()): do not swallow it

    def _delay(self, failures: int) -> float:
        return backoff.full_jitter(failures - 1, base=self._base, cap=self._max)

    async def _turn(self, namespace: str, first: bool) -> PrioritySlots:
        """Wait for a pass of ``namespace`` to be allowed; release the returned gate after the pass."""
        gate = self._gates.get(namespace)
        if gate is None:
            gate = self._gates[namespace] = PrioritySlots(self._per_namespace)
        await gate.acquire(1 if first else 0)
        return gate

    def _done(self, namespace: str, gate: PrioritySlots) -> None:
        gate.release()
        if gate.idle():
            self._gates.pop(namespace, None)

    async def _loop(self, key: str) -> None:
        failures = 0
        wake = self._wake[key]
        namespace = key.split("/")[1] if key.count("/") >= 2 else ""
        first = True
        try:
            while True:
                # A deletion's pass is not gated: it gives MAAS machines back, and most of it is waiting on
                # MAAS (the shared ownership lookup gathers deletions for seconds), so gated deletions held
                # the namespace's turns while idle and a mass deletion queued behind itself.
                pending = self._store.get(key)
                if pending is None:
                    return
                gate = None if _deleting(pending) else await self._turn(namespace, first)
                first = False
                try:
                    body = self._store.get(key)
                    if body is None:
                        return
                    wake.clear()
                    due = self._due.pop(key, None)
                    if due is not None:
                        self._lag(self.plural, max(0.0, time.monotonic() - due))
                    delay, failures = await self._pass(key, body, failures)
                finally:
                    if gate is not None:
                        self._done(namespace, gate)
                timeout = self._resync if delay is None else delay
                if timeout > 0:
                    until = time.monotonic() + timeout
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(timeout):
                            await wake.wait()
                    self._due.setdefault(key, min(until, time.monotonic()))  # woken: its wake's time stays
                else:
                    self._due.setdefault(key, time.monotonic())
        finally:
            self._tasks.pop(key, None)
            self._wake.pop(key, None)
            self._due.pop(key, None)
            self._on_exit(key)

    async def _pass(self, key: str, body: Body, failures: int) -> tuple[float | None, int]:
        """One reconcile; returns the delay before the next (None: until woken or the resync) and the
        failures in a row."""
        try:
            result = await self._reconcile(body)
        except TransientError as exc:
            failures += 1
            delay = exc.delay if exc.delay is not None else self._delay(failures)
            log.info("%s: %s (retry in %.0fs)", key, exc, delay)
            self._outcome(self.plural, "transient")
            return delay, failures
        except TerminalError as exc:
            log.warning("%s: %s (no retry until the object changes)", key, exc)
            self._outcome(self.plural, "terminal")
            return None, failures
        except asyncio.CancelledError:
            raise
        except Exception:
            failures += 1
            delay = self._delay(failures)
            log.exception("%s: unexpected error (retry in %.0fs)", key, delay)
            self._outcome(self.plural, "error")
            return delay, failures
        self._outcome(self.plural, "success")
        return result.after, 0


def _deleting(body: Body) -> bool:
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))
