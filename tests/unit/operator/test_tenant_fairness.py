"""Fairness between namespaces (issue 21, attack 8) on the real scheduling code: the Kubernetes request slots
(:class:`~capmaas.operator.kubehttp.KubeHttp` against a loopback server, and
:class:`~capmaas.operator.slots.PrioritySlots` itself) and the reconcile loops
(:class:`~capmaas.operator.workers.Workers`).

Every bound here is a count of the other tenant's work done meanwhile, never a time: under load everything
is slower, but the order does not change. Before the fix one tenant's stream of status writes held another
tenant's Secret read and metadata patch until the whole stream was done, and a namespace with a thousand busy
objects made another namespace's one pass wait for thousands of their steps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import kubernetes
import pytest
from aiohttp import web
from loopback_server import serve

from capmaas.operator.kube import Store, object_key
from capmaas.operator.kubehttp import KubeHttp, PrioritySlots
from capmaas.operator.workers import Workers
from capmaas.reconcilers.ports import Body
from capmaas.reconcilers.scope import Requeue

API = "infrastructure.cluster.x-k8s.io/v1beta1"


async def answer(request: web.Request) -> web.Response:
    await asyncio.sleep(0.002)  # an apiserver that takes a moment per request: requests queue in the client
    return web.json_response({"metadata": {}, "data": {}})


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with serve(answer) as base:
        yield base


async def test_a_tenants_status_write_stream_does_not_hold_another_tenants_requests(url: str) -> None:
    """Attack 8: tenant A keeps 48 status writes queued (priority 0, the stream of a large roll-out); tenant
    B's Secret read and metadata patch (priority 1) are served while A's stream goes on, after at most about
    two rounds of the 16 connections, not after A's whole stream."""
    http = KubeHttp(kubernetes.client.Configuration(host=url), connections=16)
    writers, each = 48, 40
    done = 0
    established = asyncio.Event()  # A's writes fill every connection and the queue

    async def tenant_a(i: int) -> None:
        nonlocal done
        for _ in range(each):
            await http.merge_patch(API, "maasmachines", "tenant-a", f"m{i}", {"status": {}}, status=True)
            done += 1
            if done >= 64:
                established.set()

    stream = [asyncio.create_task(tenant_a(i)) for i in range(writers)]
    try:
        await established.wait()
        start = done

        async def tenant_b_secret() -> int:
            await http.get_secret("tenant-b", "identity")
            return done - start

        async def tenant_b_patch() -> int:
            await http.merge_patch(
                API, "maasmachines", "tenant-b", "m0", {"metadata": {"annotations": {}}}, status=False
            )
            return done - start

        waited = await asyncio.gather(tenant_b_secret(), tenant_b_patch())
        remaining = writers * each - done
    finally:
        await asyncio.gather(*stream, return_exceptions=True)
        await http.aclose()
    print(f"tenant B waited for {waited} of tenant A's writes ({remaining} left)")
    assert max(waited) <= 32, f"tenant B waited for {waited} of tenant A's writes ({remaining} left)"
    assert remaining > 0, "tenant A's stream ended before tenant B was served: the test proves nothing"


async def test_namespaces_take_turns_inside_a_priority() -> None:
    slots = PrioritySlots(1)
    order: list[str] = []
    await slots.acquire(0, "held")

    async def request(namespace: str, i: int) -> None:
        async with slots.slot(0, namespace):
            order.append(f"{namespace}{i}")

    tasks = [asyncio.create_task(request("a", i)) for i in range(5)]
    tasks += [asyncio.create_task(request("b", i)) for i in range(2)]
    await asyncio.sleep(0)
    slots.release("held")
    await asyncio.gather(*tasks)
    assert order == ["a0", "b0", "a1", "b1", "a2", "a3", "a4"]


async def test_priority_orders_a_namespaces_requests_and_namespaces_take_turns() -> None:
    """The readiness-lag rule of a burst stands inside a namespace: its status write (0) before its metadata
    write (1) queued earlier; across namespaces the turns decide, so another tenant's ready write (-1) cannot
    hold a namespace's metadata write for more than one turn."""
    slots = PrioritySlots(1)
    order: list[str] = []
    await slots.acquire(1, "held")

    async def request(name: str, priority: int, namespace: str) -> None:
        async with slots.slot(priority, namespace):
            order.append(name)

    specs = (("meta-a", 1, "a"), ("meta-b", 1, "b"), ("status-a", 0, "a"), ("ready-b", -1, "b"))
    tasks = [asyncio.create_task(request(*spec)) for spec in specs]
    await asyncio.sleep(0)
    slots.release("held")
    await asyncio.gather(*tasks)
    assert order == ["status-a", "ready-b", "meta-a", "meta-b"]


async def test_a_namespace_at_its_cap_leaves_the_other_slots_to_other_namespaces() -> None:
    slots = PrioritySlots(4, per_namespace=3)
    for _ in range(3):
        await slots.acquire(0, "a")
    fourth = asyncio.create_task(slots.acquire(0, "a"))
    await asyncio.sleep(0)
    assert not fourth.done()  # a slot is free, but not for a
    await asyncio.wait_for(slots.acquire(1, "b"), 1)  # b takes it at once, whatever its priority
    assert slots.held("a") == 3
    assert slots.held("b") == 1
    slots.release("a")
    await asyncio.wait_for(fourth, 1)  # a's own release lets its waiter in
    assert slots.held("a") == 3


async def test_a_lower_priority_is_not_starved_by_another_namespaces_stream() -> None:
    """No cap here (one slot): what serves namespace b's metadata write (1) while namespace a keeps eight
    status writes (0) queued is the turns alone: after the write in flight and at most one turn of a."""
    slots = PrioritySlots(1)
    holds = 0
    served_after: list[int] = []

    async def status_writer() -> None:
        nonlocal holds
        for _ in range(40):
            async with slots.slot(0, "a"):
                await asyncio.sleep(0.001)
                holds += 1

    stream = [asyncio.create_task(status_writer()) for _ in range(8)]
    await asyncio.sleep(0.01)
    start = holds
    async with slots.slot(1, "b"):
        served_after.append(holds - start)
    await asyncio.gather(*stream)
    print(f"b's metadata write served after {served_after[0]} of a's status writes")
    assert served_after[0] <= 2, f"served after {served_after[0]} of a's status writes"


async def test_a_cancelled_waiter_gives_back_what_its_namespace_holds() -> None:
    slots = PrioritySlots(2, per_namespace=1)
    await slots.acquire(0, "a")
    cancelled = asyncio.create_task(slots.acquire(0, "a"))  # at a's cap: waits
    await asyncio.sleep(0)
    slots.release("a")  # handed to the waiter ...
    cancelled.cancel()  # ... cancelled before it ran: given back
    await asyncio.gather(cancelled, return_exceptions=True)
    assert slots.held("a") == 0
    assert slots.idle()
    await asyncio.wait_for(slots.acquire(0, "a"), 1)
    await asyncio.wait_for(slots.acquire(0, "b"), 1)


def _body(namespace: str, name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}-{name}"}}


async def test_a_namespace_with_a_thousand_busy_objects_does_not_hold_another_namespaces_pass() -> None:
    """Namespace ``big`` has 1,000 objects due again and again (each pass ten steps on the event loop);
    namespace ``small`` wakes one object. Its pass must finish after a bounded number of big's steps (the
    per-namespace limit of passes), not after ten rounds of all 1,000."""
    store = Store()
    for i in range(1000):
        store.put("maasmachines", _body("big", f"m{i}"))
    store.put("maasmachines", _body("small", "s0"))
    big_steps = 0
    small: list[int] = []
    running = {"big": 0}
    most = {"big": 0}
    swing, small_done = asyncio.Event(), asyncio.Event()

    async def reconcile(b: Body) -> Requeue:
        nonlocal big_steps
        namespace = b["metadata"]["namespace"]
        if namespace == "small":
            small.append(big_steps)
            for _ in range(10):
                await asyncio.sleep(0)
            small.append(big_steps)
            small_done.set()
            return Requeue(None)
        running["big"] += 1
        most["big"] = max(most["big"], running["big"])
        try:
            for _ in range(10):
                await asyncio.sleep(0)
                big_steps += 1
            if big_steps >= 20_000:
                swing.set()
        finally:
            running["big"] -= 1
        return Requeue(0)  # due again at once: the namespace stays busy

    w = Workers(
        "maasmachines", reconcile, store, resync=3600, backoff_base=0.1, backoff_max=1,
        outcome=lambda kind, result: None,
    )  # fmt: skip
    for i in range(1000):
        w.ensure(object_key("maasmachines", "big", f"m{i}"))
    try:
        await swing.wait()  # big is in full swing
        woke = big_steps
        w.ensure(object_key("maasmachines", "small", "s0"))
        await small_done.wait()
    finally:
        await w.stop()
    waited = small[1] - woke
    print(f"small's pass: {waited} of big's steps; big ran at most {most['big']} passes at once")
    assert waited <= 3000, f"small's pass took {waited} of big's steps; big ran {most['big']} passes at once"
    assert most["big"] <= 128


def test_a_request_belongs_to_the_namespace_in_its_path() -> None:
    from capmaas.operator.kubehttp import namespace_of  # here: a name the client before issue 21 lacks

    assert namespace_of(f"/apis/{API}/namespaces/team-a/maasmachines/m0/status?fieldValidation=Strict") == (
        "team-a"
    )
    assert namespace_of("/api/v1/namespaces/team-b/secrets/identity") == "team-b"
    assert namespace_of("/api/v1/namespaces/team-c") == "team-c"  # the Namespace itself (its labels)
    assert namespace_of("/api/v1/nodes/n1") == ""


async def test_a_deletion_is_not_held_behind_its_namespaces_busy_passes() -> None:
    """A namespace's limit of passes bounds work, not deletions: with one pass allowed and that pass stuck
    (a MAAS that does not answer), the namespace's object being deleted still gets its pass, since deletions
    give MAAS machines back and mostly wait on MAAS (held behind the limit, a mass deletion of 1,000 machines
    queued behind itself)."""
    store = Store()
    store.put("maasmachines", _body("t", "busy"))
    gone = _body("t", "gone")
    gone["metadata"].update(deletionTimestamp="2026-11-27T00:00:00Z", finalizers=["f"])
    store.put("maasmachines", gone)
    stuck, deleted = asyncio.Event(), asyncio.Event()

    async def reconcile(b: Body) -> Requeue:
        if b["metadata"]["name"] == "busy":
            stuck.set()
            await asyncio.Event().wait()
        deleted.set()
        return Requeue(None)

    w = Workers(
        "maasmachines", reconcile, store, resync=3600, backoff_base=0.1, backoff_max=1,
        outcome=lambda kind, result: None, per_namespace=1,
    )  # fmt: skip
    w.ensure(object_key("maasmachines", "t", "busy"))
    try:
        await asyncio.wait_for(stuck.wait(), 10)
        w.ensure(object_key("maasmachines", "t", "gone"))
        await asyncio.wait_for(deleted.wait(), 10)
    finally:
        await w.stop()
    assert deleted.is_set()
