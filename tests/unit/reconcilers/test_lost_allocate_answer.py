"""The lost-answer window (issue 11 item 3), against the real simulator's late-commit fault.

MAAS takes an allocate up only after the client has given up on it (``late_commit_rate``). The next pass
finds the ``…/allocating`` mark, looks the agent name up and finds nothing *yet*: allocating again then
leaves two machines under one agent name. Until the client's in-doubt window has passed since the mark
(:func:`capmaas.maas.in_doubt_window`: every attempt's timeout, the waits between them, a margin), the pass
must wait and look again instead, with the condition ``AllocationInDoubt``; once the late allocate has
landed it adopts that machine. An allocate that never reached MAAS is followed by another one only after the
window.

The simulator runs behind a transport that handles each request in a task of its own, as a server across a
network does: a client that gives up does not stop MAAS from acting on the request.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from fakes import FakeKube
from reconciler_env import Env, default_credentials

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.gateway import MaasConnections
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ALLOCATING, ANNOTATION_PREFIX
from capmaas.reconcilers.machine import MachineReconciler, MachineSettings
from capmaas.reconcilers.ports import MaasCredentials
from capmaas.reconcilers.scope import Requeue
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

#: The client's deadline per attempt; the late commit lands well after it.
TIMEOUT = 0.3
LATE_COMMIT_DELAY = 1.0
RETRY = maas.RetryPolicy(max_retries=0)


class DetachedTransport(httpx.AsyncBaseTransport):
    """The simulator's ASGI app, each request handled in its own task (a client's timeout does not cancel
    it). ``lose_first_allocate``: the first allocate is never delivered, and its caller times out."""

    def __init__(self, sim: Simulator, *, lose_first_allocate: bool = False) -> None:
        self._inner = httpx.ASGITransport(app=sim.app)
        self.pending: set[asyncio.Task[httpx.Response]] = set()
        self._lose = lose_first_allocate

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._lose and request.url.params.get("op") == "allocate":
            self._lose = False
            await asyncio.sleep(3600)  # never answered: the client's deadline ends it
        task = asyncio.get_running_loop().create_task(self._inner.handle_async_request(request))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        return await asyncio.shield(task)

    async def drain(self) -> None:
        """Wait until MAAS has acted on every request sent so far (late ones included)."""
        while self.pending:
            await asyncio.wait(set(self.pending), timeout=30)


def allocates(sim: Simulator) -> int:
    return sum(n for (method, _, op), n in sim.counters.items() if method == "POST" and op == "allocate")


async def make(sim: Simulator, transport: DetachedTransport, now: list[float]) -> Env:
    kube = FakeKube()

    def factory(c: MaasCredentials) -> maas.MaasClient:
        return maas.MaasClient(
            c.endpoint, api_key=c.api_key, transport=transport, timeout=TIMEOUT, retry=RETRY
        )

    conns = MaasConnections(
        client_factory=factory, fast=3600, idle=3600, batch_size=200, wake=lambda key: None
    )
    creds = default_credentials(sim)
    # As the operator computes it from its MAAS client settings.
    settings = MachineSettings(allocate_in_doubt=maas.in_doubt_window(TIMEOUT, RETRY))
    machines = MachineReconciler(
        kube, conns, default_credentials=creds, settings=settings, clock=lambda: now[0]
    )
    env = Env(sim, kube, conns, machines, ClusterReconciler(kube, conns, default_credentials=creds), creds)
    await env.cluster()
    env.machine("m0")
    return env


@pytest.fixture
def late_sim() -> Simulator:
    faults = Faults(
        late_commit_rate=1.0, late_commit_delay=LATE_COMMIT_DELAY, write_fault_ops=frozenset({"allocate"})
    )
    return Simulator(Inventory.generate(machines=12, zones=3, seed=3), timings=Timings.fast(), faults=faults)


def provisioned(env: Env) -> tuple[str, str]:
    c = next(
        c
        for c in env.kube.get("maasmachines", "m0")["status"]["conditions"]
        if c["type"] == "MachineProvisioned"
    )
    return c["reason"], c["message"]


async def test_a_late_committing_allocate_is_adopted_not_repeated(late_sim: Simulator) -> None:
    now = [time.time()]
    transport = DetachedTransport(late_sim)
    env = await make(late_sim, transport, now)
    try:
        uid = env.kube.get("maasmachines", "m0")["metadata"]["uid"]
        with pytest.raises(TransientError) as lost:  # the client gives up; MAAS acts on it later
            await env.step("m0")
        assert lost.value.reason == C.MAAS_UNREACHABLE_REASON
        assert env.kube.get("maasmachines", "m0")["metadata"]["annotations"][ANNOTATION_PREFIX + ALLOCATING]
        assert env.sim.machines_by_agent(uid) == []  # not committed yet

        now[0] += 1.0  # the next pass, long before the late allocate can be ruled out
        try:
            got: Requeue | TransientError = await env.step("m0")
        except TransientError as exc:  # a second allocate, lost the same way
            got = exc
        await transport.drain()  # everything sent has now taken effect at MAAS
        held = env.sim.machines_by_agent(uid)
        assert len(held) == 1, [m["system_id"] for m in held]  # one allocate, so one machine
        assert allocates(env.sim) == 1
        assert isinstance(got, Requeue)
        assert got.after is not None
        assert 0 < got.after <= env.machines.settings.retry_base
        assert provisioned(env)[0] == C.ALLOCATION_IN_DOUBT_REASON

        now[0] += 1.0
        await env.step("m0")  # adopts the machine the late allocate left
        mm = env.kube.get("maasmachines", "m0")
        assert mm["spec"]["systemID"] == held[0]["system_id"]
        assert ANNOTATION_PREFIX + ALLOCATING not in mm["metadata"]["annotations"]
        assert env.sim.check_invariants() == []
    finally:
        await transport.drain()
        await env.connections.aclose()


async def test_an_allocate_that_never_arrived_is_repeated_only_after_the_window() -> None:
    sim = Simulator(Inventory.generate(machines=12, zones=3, seed=3), timings=Timings.fast(), faults=Faults())
    start = float(int(time.time()))  # the mark keeps whole seconds
    now = [start]
    transport = DetachedTransport(sim, lose_first_allocate=True)
    env = await make(sim, transport, now)
    window = env.machines.settings.allocate_in_doubt
    assert window == maas.in_doubt_window(TIMEOUT, RETRY) > TIMEOUT
    try:
        uid = env.kube.get("maasmachines", "m0")["metadata"]["uid"]
        with pytest.raises(TransientError):
            await env.step("m0")
        assert env.kube.get("maasmachines", "m0")["metadata"]["annotations"][
            ANNOTATION_PREFIX + ALLOCATING
        ] == (str(int(start)))
        for offset in (1.0, window / 2, window - 1.0):  # nothing found, and it may still land: wait
            now[0] = start + offset
            got = await env.step("m0")
            assert isinstance(got, Requeue)
            assert provisioned(env)[0] == C.ALLOCATION_IN_DOUBT_REASON
        assert allocates(sim) == 0
        assert env.sim.machines_by_agent(uid) == []

        now[0] = start + window + 1.0  # it cannot land any more: allocate again
        await env.step("m0")
        mm = env.kube.get("maasmachines", "m0")
        assert allocates(sim) == 1
        assert [m["system_id"] for m in env.sim.machines_by_agent(uid)] == [mm["spec"]["systemID"]]
    finally:
        await transport.drain()
        await env.connections.aclose()
