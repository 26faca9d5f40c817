"""Two metrics the operator computes itself: the reconcile queue lag (:class:`Workers` measures from an object
becoming due to its reconcile starting) and the leak audit (:class:`LeakAudit` against the simulator: a MAAS
machine still held under a deleted MaasMachine's agent name is counted until it is released)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from capmaas import maas
from capmaas.operator.kube import Store, object_key
from capmaas.operator.leaks import LeakAudit
from capmaas.operator.workers import Workers
from capmaas.reconcilers.keys import AGENT_NAME, ANNOTATION_PREFIX, DELETE_FOR_MOVE_ANNOTATION
from capmaas.reconcilers.ports import Body
from capmaas.reconcilers.scope import Requeue
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


def body(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec}


async def test_queue_lag_is_the_time_from_due_to_the_reconcile_starting() -> None:
    store = Store()
    for name in ("slow", "quick"):
        store.put("maasmachines", body(name))
    lags: list[tuple[str, float]] = []
    passes: dict[str, int] = {}

    async def reconcile(b: Body) -> Requeue:
        name = b["metadata"]["name"]
        passes[name] = passes.get(name, 0) + 1
        if name == "slow" and passes[name] == 1:
            time.sleep(0.4)  # noqa: ASYNC251 - a pass that holds the event loop: what became due waits
        return Requeue(0.05 if passes[name] < 3 else None)

    w = Workers(
        "maasmachines", reconcile, store, resync=3600, backoff_base=0.1, backoff_max=1,
        outcome=lambda kind, result: None, lag=lambda kind, s: lags.append((kind, s)),
    )  # fmt: skip
    w.ensure(object_key("maasmachines", "ns", "slow"))
    w.ensure(object_key("maasmachines", "ns", "quick"))  # due now; its first pass starts after slow's
    for _ in range(100):
        if passes.get("slow") == 3 and passes.get("quick") == 3:
            break
        await asyncio.sleep(0.05)
    await w.stop()
    # One observation per pass (first pass, then two requeues that came due), all of this kind.
    assert len(lags) == 6
    assert {k for k, _ in lags} == {"maasmachines"}
    # quick became due while slow's pass blocked the loop: its lag covers that block.
    assert max(s for _, s in lags) >= 0.4
    assert all(s >= 0 for _, s in lags)


async def test_a_wake_during_a_pass_counts_from_the_wake() -> None:
    store = Store()
    store.put("maasmachines", body("m"))
    key = object_key("maasmachines", "ns", "m")
    lags: list[float] = []
    started = asyncio.Event()
    release = asyncio.Event()
    passes = 0

    async def reconcile(b: Body) -> Requeue:
        nonlocal passes
        passes += 1
        if passes == 1:
            started.set()
            await release.wait()
        return Requeue(None)

    w = Workers(
        "maasmachines", reconcile, store, resync=3600, backoff_base=0.1, backoff_max=1,
        outcome=lambda kind, result: None, lag=lambda kind, s: lags.append(s),
    )  # fmt: skip
    w.ensure(key)
    await started.wait()
    w.wake(key)  # changed while its pass runs: due now, served when the pass ends
    await asyncio.sleep(0.3)
    release.set()
    for _ in range(100):
        if passes == 2:
            break
        await asyncio.sleep(0.02)
    await w.stop()
    assert passes == 2
    assert len(lags) == 2
    assert lags[1] >= 0.3


# --- the leak audit against the simulator -------------------------------------------------------------------


class _Session:
    """A MAAS session as the audit sees it: its client, and the machines its poller watches."""

    def __init__(self, client: maas.MaasClient, watched: dict[str, maas.Machine]) -> None:
        self.client = client
        self.watched = watched

    def snapshot(self, system_id: str) -> maas.Machine | None:
        return self.watched.get(system_id)


@pytest.fixture
async def client() -> AsyncIterator[tuple[Simulator, maas.MaasClient]]:
    sim = Simulator(Inventory.generate(machines=6, zones=1, seed=3), timings=Timings.fast(), faults=Faults())
    async with maas.MaasClient(
        "http://maas.test/MAAS", api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app)
    ) as c:
        yield sim, c


async def test_leak_audit_counts_machines_held_for_deleted_maasmachines(
    client: tuple[Simulator, maas.MaasClient],
) -> None:
    sim, c = client
    store = Store()
    reported: list[int] = []
    watched: dict[str, maas.Machine] = {}
    other = _Session(c, {})  # another tenant's MAAS session: never asked about these machines
    sessions = [other, _Session(c, watched)]
    audit = LeakAudit(store, lambda: sessions, report=reported.append)
    leaked = await c.machines.allocate(agent_name="uid-gone")  # its MaasMachine's finalizer was stripped
    given_back = await c.machines.allocate(agent_name="uid-done")  # released before its finalizer went
    await c.machines.release(given_back.system_id)
    moved = await c.machines.allocate(agent_name="uid-moved")
    adopted = await c.machines.allocate(agent_name="uid-old")  # a live MaasMachine records it now
    renamed = await c.machines.allocate(agent_name="kept-agent")  # agent name from the annotation
    unwatched = await c.machines.allocate(agent_name="uid-unwatched")  # no session polls it: not auditable
    for m in (leaked, given_back, moved, adopted, renamed):
        watched[m.system_id] = m

    audit.deleted(body("gone", systemID=leaked.system_id))
    audit.deleted(body("done", systemID=given_back.system_id))
    move = body("moved", systemID=moved.system_id)
    move["metadata"]["annotations"] = {DELETE_FOR_MOVE_ANNOTATION: ""}
    audit.deleted(move)
    audit.deleted(body("old", systemID=adopted.system_id))
    store.put("maasmachines", body("new", systemID=adopted.system_id))
    ren = body("renamed", systemID=renamed.system_id)
    ren["metadata"]["annotations"] = {ANNOTATION_PREFIX + AGENT_NAME: "kept-agent"}
    audit.deleted(ren)
    audit.deleted(body("pending"))  # never had a machine: nothing to audit
    audit.deleted(body("unwatched", systemID=unwatched.system_id))

    requests: list[str] = []
    other.client = maas.MaasClient(
        "http://other.test/MAAS", api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app),
        on_response=lambda method, path, status, s: requests.append(path),
    )  # fmt: skip
    await audit.check()
    assert requests == []  # the system IDs went to the MAAS they came from only
    assert audit.leaked == 2
    assert reported == [2]
    assert audit.remembered == 2

    # Someone releases one in MAAS: the count falls and it is forgotten.
    await c.machines.release(leaked.system_id)
    await audit.check()
    assert audit.leaked == 1
    assert audit.remembered == 1
    # Released and allocated again by someone else (another agent name): not ours any more.
    await c.machines.release(renamed.system_id)
    for _ in range(50):
        if sim.machine(renamed.system_id)["status_name"] == "Ready":
            break
        await asyncio.sleep(0.05)
    await c.machines.allocate(
        maas.AllocateConstraints(system_id=renamed.system_id), agent_name="someone-else"
    )
    await audit.check()
    assert audit.leaked == 0
    assert audit.remembered == 0
    assert requests == []
    await other.client.aclose()
