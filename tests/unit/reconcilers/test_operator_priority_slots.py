"""The operator's write slots (capmaas.operator.kubehttp.PrioritySlots): status writes overtake queued
metadata writes, arrival order within a priority, and a cancelled waiter never loses a slot."""

from __future__ import annotations

import asyncio

from capmaas.operator.kubehttp import PrioritySlots


async def test_waiters_enter_by_priority_then_arrival() -> None:
    slots = PrioritySlots(1)
    order: list[str] = []
    await slots.acquire(1)  # the one slot is taken: everyone below queues

    async def writer(name: str, priority: int) -> None:
        async with slots.slot(priority):
            order.append(name)

    tasks = [asyncio.create_task(writer(n, p)) for n, p in (("meta1", 1), ("meta2", 1), ("status", 0))]
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["status", "meta1", "meta2"]


async def test_a_cancelled_waiter_hands_its_slot_on() -> None:
    slots = PrioritySlots(1)
    await slots.acquire(0)
    cancelled = asyncio.create_task(slots.acquire(0))
    after = asyncio.create_task(slots.acquire(1))
    await asyncio.sleep(0)
    slots.release()  # the slot goes to the first waiter ...
    cancelled.cancel()  # ... which is cancelled before it runs: the slot must reach the next one
    await asyncio.wait_for(after, 1)
    slots.release()
    await asyncio.wait_for(slots.acquire(1), 1)  # and the count is back to one free slot
