"""``Workers.stop`` in kopf's cleanup: kopf cancels its cleanup task once (and swallows that) before it runs
the cleanup handlers, so the task is already "cancelling" when ``stop`` awaits the loops it cancels. That old
request must not make ``stop`` give up half-way (the rest of the cleanup, closing MAAS sessions, would be
skipped and kopf would wait for the leftovers); a new cancellation still ends it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from capmaas.operator.kube import Store, object_key
from capmaas.operator.workers import Workers
from capmaas.reconcilers.ports import Body
from capmaas.reconcilers.scope import Requeue


def workers(store: Store, *, slow_exit: float = 0.0) -> Workers:
    async def reconcile(b: Body) -> Requeue:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(slow_exit)  # a loop that takes a while to end once cancelled
            raise
        return Requeue(None)

    for name in ("a", "b"):
        store.put("maasmachines", {"metadata": {"name": name, "namespace": "ns", "uid": name}})
    w = Workers(
        "maasmachines", reconcile, store, resync=3600, backoff_base=0.1, backoff_max=1,
        outcome=lambda kind, result: None,
    )  # fmt: skip
    for name in ("a", "b"):
        w.ensure(object_key("maasmachines", "ns", name))
    return w


async def test_stop_finishes_in_a_task_cancelled_once_before() -> None:
    w = workers(Store())
    await asyncio.sleep(0.05)
    after: list[str] = []

    async def cleanup() -> str:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # kopf's startup/cleanup task, then it runs the cleanup handlers
        await w.stop()
        after.append("the rest of the cleanup")
        return "done"

    task = asyncio.create_task(cleanup())
    await asyncio.sleep(0.05)
    task.cancel()
    assert await task == "done"
    assert after == ["the rest of the cleanup"]
    assert len(w) == 0


async def test_a_timeout_around_stop_still_ends_it() -> None:
    w = workers(Store(), slow_exit=1.0)
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await w.stop()
    await asyncio.sleep(1.2)  # the loops end in their own time
    assert len(w) == 0
