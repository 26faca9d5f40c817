"""Several ``capmaas run`` processes on the same objects: leader election on a Lease keeps them from
double-allocating (issue 11).

Before leader election, two processes each allocated a MAAS machine for every MaasMachine (40 held for 20,
20 left after the delete), and kopf's peering options did not help: kopf paused its own handlers while our
per-object loops and MAAS pollers went on. These tests start the replicas *without* ``--no-leader-elect`` and
set leader election up through ``CAPMAAS_LEADER_ELECTION__*`` only, so on code without it they run exactly the
scenario of the issue (and fail).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from operator_harness import Harness, Operator
from test_chaos import create_wave, describe, held, leaks, maasmachines

from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings
from capmaas_dev.simulator.faults import WriteFault

pytestmark = pytest.mark.k8s

#: Short Lease timings for tests (the defaults are 15/10/2 s, controller-runtime's).
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.5, 0.5


@pytest.fixture
def sim() -> Simulator:
    return Simulator(
        Inventory.generate(machines=50, zones=3, seed=11),
        timings=Timings(deploy=1.0, release=0.3),
        faults=Faults(),
    )


def leader_elect(
    h: Harness, timings: tuple[float, float, float] = (LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
) -> None:
    """The harness's operator with leader election (``capmaas run``'s default), short timings."""
    h.operator.leader_elect = True
    h.operator.env.update(
        CAPMAAS_LEADER_ELECTION__ENABLED="true",
        CAPMAAS_LEADER_ELECTION__LEASE_DURATION=str(timings[0]),
        CAPMAAS_LEADER_ELECTION__RENEW_DEADLINE=str(timings[1]),
        CAPMAAS_LEADER_ELECTION__RETRY_PERIOD=str(timings[2]),
    )


def replicas(h: Harness, tmp: Path, n: int, *, args: list[list[str]] | None = None) -> list[Operator]:
    return [
        h.operator.replica(f"op-{i}", tmp / f"op-{i}.log", extra_args=args[i] if args else None)
        for i in range(n)
    ]


async def leases(h: Harness) -> list[dict[str, Any]]:
    return await h.items("leases.coordination.k8s.io")


def became_leader(op: Operator) -> list[str]:
    return [ln for ln in op.log.read_text(errors="replace").splitlines() if "became leader of Lease" in ln]


def is_ready(mm: dict[str, Any]) -> bool:
    return bool((mm.get("status") or {}).get("ready"))


async def all_ready(h: Harness, n: int) -> bool:
    mms = await maasmachines(h)
    return len(mms) == n and all(map(is_ready, mms))


def doubled(sim: Simulator) -> dict[str, list[str]]:
    """agent name → system IDs, for every agent MAAS holds several machines for."""
    return {agent: sids for agent, sids in held(sim).items() if len(sids) > 1}


async def watch_doubles(sim: Simulator, seen: dict[str, set[str]]) -> None:
    """Adds every double allocation MAAS shows to ``seen`` (agent name → system IDs), until cancelled: one
    that is later given back was a double allocation all the same."""
    while True:
        for agent, sids in doubled(sim).items():
            seen.setdefault(agent, set()).update(sids)
        await asyncio.sleep(0.1)


async def settle(h: Harness, what: str, check: Callable[[], Awaitable[bool]], within: float) -> str | None:
    """Waits like ``h.wait``; the failure (with every MaasMachine's state) as a message instead of raising,
    so the figures that matter more are printed and checked first."""
    try:
        await h.wait(what, check, within=within, interval=1.0)
    except AssertionError as exc:
        return f"{exc}\n{await describe(h)}"
    return None


async def provision_and_delete(
    h: Harness, ops: list[Operator], n: int, *, meanwhile: Callable[[], Awaitable[None]] | None = None
) -> None:
    """A Cluster, ``n`` MaasMachines, all Ready; then all deleted and released. Checks MAAS against the
    MaasMachines at both ends (the checks print every MaasMachine's state when they fail). ``meanwhile``
    runs once the MaasMachines exist. The figures (doubles, machines held after the delete) are printed
    before anything is asserted, and double allocations (even one given back later) are checked first."""
    uid = await h.cluster(within=180)
    names = [f"m{i:02d}" for i in range(n)]
    seen: dict[str, set[str]] = {}
    watcher = asyncio.create_task(watch_doubles(h.sim, seen))
    try:
        await create_wave(h, uid, names)
        if meanwhile is not None:
            await meanwhile()
        not_ready = await settle(h, f"{n} MaasMachines Ready", lambda: all_ready(h, n), within=120)
        mms = await maasmachines(h)
        ours = held(h.sim)
        doubled_when_ready = doubled(h.sim)
        problems = leaks(h.sim, mms)
        print(
            f"\n{sum(is_ready(m) for m in mms)}/{n} MaasMachines Ready:"
            f" {sum(map(len, ours.values()))} MAAS machines held, {len(doubled_when_ready)} doubled",
            flush=True,
        )
        await h.k("delete", "maasmachines", "--all", "-n", h.namespace, "--wait=false")

        async def gone() -> bool:
            return not await maasmachines(h)

        not_gone = await settle(h, "every MaasMachine deleted", gone, within=90)
    finally:
        if watcher.done():
            watcher.result()  # it never ends by itself: a failure of its own must not pass for "no doubles"
        watcher.cancel()
    left = held(h.sim)
    print(
        f"after the delete: {sum(map(len, left.values()))} MAAS machines still held;"
        f" {len(seen)} MaasMachines held several MAAS machines at some point",
        flush=True,
    )
    assert seen == {}, f"{len(seen)} MaasMachines held several MAAS machines: {seen}"
    assert doubled_when_ready == {}
    assert not_ready is None, not_ready
    assert problems == []
    assert sum(map(len, ours.values())) == n
    assert not_gone is None, not_gone
    assert left == {}, f"leaked: {left}"
    assert leaks(h.sim, []) == []


async def test_two_replicas_with_leader_election_never_double_allocate(
    harness: Harness, tmp_path: Path
) -> None:
    """Issue 11 (a): two replicas, 20 MaasMachines: exactly one MAAS machine each, none left after the delete;
    one replica led the whole time, the other only kept its caches."""
    h = harness
    leader_elect(h)
    ops = replicas(h, tmp_path, 2)
    for op in ops:
        op.start()
    try:
        await provision_and_delete(h, ops, 20)
        assert any(became_leader(op) for op in ops)  # (on a saturated machine, a leader may lose it: fine)
        (lease,) = await leases(h)
        assert lease["spec"]["leaseDurationSeconds"] == round(LEASE_DURATION)
        holder = lease["spec"]["holderIdentity"]
        (lead,) = [op for op in ops if holder.startswith(op.env["POD_NAME"] + "_")]
        standby = next(op for op in ops if op is not lead)
        # A graceful stop gives the Lease up: the standby takes over without waiting for it to expire.
        before = len(became_leader(standby))
        stopped = time.monotonic()
        lead.stop()
        await h.wait(
            "the standby to lead",
            lambda: _true(len(became_leader(standby)) > before),
            within=3 * LEASE_DURATION,
        )
        print(f"graceful handover in {time.monotonic() - stopped:.1f}s", flush=True)
    finally:
        for op in ops:
            op.stop()


async def _true(value: bool) -> bool:
    return value


KOPF_PEERING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "kopfpeerings.kopf.dev"},
    "spec": {
        "group": "kopf.dev",
        "scope": "Namespaced",
        "names": {"kind": "KopfPeering", "plural": "kopfpeerings", "singular": "kopfpeering"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


class SlowAllocates(Faults):
    """A loaded MAAS: every allocate is held ``delay`` seconds before it takes effect and is answered (well
    within the client's timeout: nothing is in doubt). ``arrived`` is set when the first one comes in."""

    def __init__(self, delay: float) -> None:
        super().__init__(
            late_commit_rate=1.0, late_commit_delay=delay, write_fault_ops=frozenset({"allocate"})
        )
        self.arrived = asyncio.Event()

    def write_fault(self, method: str, query: str) -> WriteFault | None:
        fault = super().write_fault(method, query)
        if fault is not None:
            self.arrived.set()
        return fault


#: Seconds each allocate takes at MAAS in the peering scenario: longer than B takes to start and look A's
#: MaasMachines up, so A's allocates are still in flight when B decides (the race of the issue).
SLOW_ALLOCATE = 6.0


async def test_kopf_peering_options_no_longer_double_allocate(harness: Harness, tmp_path: Path) -> None:
    """Issue 11 (c): the scenario with kopf peering (A priority 0, B priority 10, a KopfPeering object):
    before, A paused kopf's handlers in favour of B but its loops went on allocating (8 of 20 doubled).
    ``--peering NAME`` is now leader election on the Lease NAME and ``--priority`` is ignored.

    MAAS answers each allocate only after :data:`SLOW_ALLOCATE` seconds, and B starts once A's first allocate
    has reached MAAS: without leader election, B finds A's MaasMachines marked ``…/allocating`` with nothing
    yet in MAAS under their agent names and allocates again while A's allocates are still in flight."""
    h = harness
    faults = SlowAllocates(SLOW_ALLOCATE)
    h.sim.faults = faults
    await h.k("apply", "-f", "-", input=json.dumps(KOPF_PEERING_CRD))
    await h.k("wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev")
    peering = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "capmaas"}}
    await h.apply(peering)
    h.operator.leader_elect = True  # no --no-leader-elect: the peering options say what to do
    ops = replicas(h, tmp_path, 2, args=[["--peering", "capmaas", "--priority", p] for p in ("0", "10")])
    ops[0].start()

    async def second_replica() -> None:
        """B (priority 10) joins once A is at work, as in a rollout: before, A paused kopf in B's favour
        while its loops went on allocating."""
        await asyncio.wait_for(faults.arrived.wait(), 120)
        ops[1].start()

    try:
        await provision_and_delete(h, ops, 20, meanwhile=second_replica)
        assert became_leader(ops[0])
        assert [lease["metadata"]["name"] for lease in await leases(h)] == ["capmaas"]
    finally:
        for op in ops:
            op.stop()


class TimedCounter(Counter[tuple[str, str, str | None]]):
    """The simulator's request counter, remembering when the last request was counted."""

    last = 0.0

    def __setitem__(self, key: tuple[str, str, str | None], value: int) -> None:
        super().__setitem__(key, value)
        self.last = time.monotonic()


async def test_a_deposed_leader_stops_every_request_before_its_lease_can_expire(harness: Harness) -> None:
    """Someone else takes the Lease (as a standby would once it expired): the old leader's renewals fail,
    and it must send no MAAS request later than ``renew_deadline`` after its last successful renewal (so
    before the new holder could start), then exit non-zero (its Deployment restarts it as a standby)."""
    h = harness
    h.sim.timings = Timings(deploy=60.0, release=0.3)  # machines stay Deploying: the poller keeps asking
    counter = TimedCounter(h.sim.counters)
    h.sim.counters = counter
    leader_elect(h)
    h.operator.start()
    uid = await h.cluster()
    await create_wave(h, uid, ["m00", "m01", "m02"])

    async def deploying() -> bool:
        return sum(m.status.name == "DEPLOYING" for m in h.sim.state.machines.values()) == 3

    await h.wait("3 machines deploying", deploying, within=60)
    (lease,) = await leases(h)
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    steal = {"spec": {"holderIdentity": "intruder", "renewTime": now, "leaseDurationSeconds": 3600}}
    await h.k(
        "patch",
        "lease",
        lease["metadata"]["name"],
        "-n",
        h.namespace,
        "--type=merge",
        "-p",
        json.dumps(steal),
    )
    # Taken by now (kubectl has returned; on a loaded machine it may take seconds to start): every renew the
    # leader began before the patch fails (409, or another holder seen), so its fence closes at most
    # renew_deadline after this moment.
    stolen = time.monotonic()
    proc = h.operator.proc
    assert proc is not None
    rc = await asyncio.to_thread(proc.wait, RENEW_DEADLINE + 20)
    h.operator.proc = None
    log = h.operator.log.read_text(errors="replace")
    assert rc == 1, log[-3000:]
    assert "lost the Lease" in log
    after = counter.last - stolen
    print(f"\nLease taken by t=0; last MAAS request at t={after:.2f}s; exit code {rc}", flush=True)
    assert after < RENEW_DEADLINE, f"a MAAS request {after:.2f}s after the Lease was taken"
    assert held(h.sim)
    assert all(len(s) == 1 for s in held(h.sim).values())


def failover_times(op: Operator) -> list[float]:
    """Seconds from the previous holder's Lease expiry to this process's first reconcile as leader."""
    out = []
    expiry: float | None = None
    for line in op.log.read_text(errors="replace").splitlines():
        if m := re.search(r"became leader of Lease .* previous_expiry=([0-9.]+)", line):
            expiry = float(m.group(1))
        elif (m := re.search(r"first reconcile as leader: .* at=([0-9.]+)", line)) and expiry is not None:
            out.append(float(m.group(1)) - expiry)
            expiry = None
    return out


async def test_lease_protocol_between_two_candidates(kube: Any, namespace: str) -> None:
    """The election itself, two in-process candidates on the real apiserver: the holder keeps the Lease; a
    candidate takes it over only ``lease_duration`` after it last saw it change, and by then the old holder's
    fence (``is_leader``) has been closed for ``lease_duration - renew_deadline``; a released Lease is taken
    at once."""
    import kubernetes

    from capmaas.operator.kubehttp import KubeHttp
    from capmaas.operator.leader import LeaderElector, LeaseSettings

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)

    def candidate(name: str) -> LeaderElector:
        settings = LeaseSettings(namespace, "election", f"{name}_x", 2.0, 1.2, 0.2)
        return LeaderElector(KubeHttp(cfg, connections=2, timeout=5.0), settings)

    a, b = candidate("a"), candidate("b")
    try:
        assert await a.try_acquire_or_renew(5.0)
        assert a.is_leader()
        assert not await b.try_acquire_or_renew(5.0)
        renewed = time.monotonic()
        assert await a.try_acquire_or_renew(5.0)  # a renew keeps acquireTime, moves renewTime
        while not await b.try_acquire_or_renew(5.0):  # a stops renewing here
            assert time.monotonic() - renewed < 10
            await asyncio.sleep(0.05)
        took_over = time.monotonic() - renewed
        assert not a.is_leader()
        # a's fence closed renew_deadline after its last renew began: lease_duration - renew_deadline (0.8 s)
        # or more before b could take over.
        assert a.remaining() < -0.7
        assert took_over >= 2.0
        lease = json.loads(
            (
                await asyncio.to_thread(
                    kube.kubectl, "get", "lease", "election", "-n", namespace, "-o", "json"
                )
            ).stdout
        )
        assert lease["spec"]["holderIdentity"] == "b_x"
        assert lease["spec"]["leaseTransitions"] == 1
        assert b.previous is not None
        assert b.previous.holder == "a_x"
        assert await b.try_acquire_or_renew(5.0)  # (kubectl may have taken longer than renew_deadline)
        await b.release()
        assert not b.is_leader()
        started = time.monotonic()
        assert await a.try_acquire_or_renew(5.0)  # released: no waiting for an expiry
        assert time.monotonic() - started < 1.0
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_busy_main_loop_does_not_lose_the_lease(kube: Any, namespace: str) -> None:
    """A saturated operator: its main loop runs reconciles for longer than the renew deadline without
    yielding. The renewals run on the election's own thread and loop, so the Lease is kept (before, they
    waited for the main loop: the fence closed and the leader gave up its own Lease)."""
    import kubernetes

    from capmaas.operator.kubehttp import KubeHttp
    from capmaas.operator.leader import LeaseSettings, LeaseThread

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    settings = LeaseSettings(namespace, "busy", "busy_x", 8.0, 6.0, 0.5)
    election = LeaseThread(lambda: KubeHttp(cfg, connections=2, timeout=5.0), settings)
    began = asyncio.Event()

    async def on_started() -> None:
        began.set()

    run = asyncio.create_task(election.run(on_started))
    try:
        await asyncio.wait_for(began.wait(), 60)
        busy_until = time.monotonic() + 2 * settings.renew_deadline
        while time.monotonic() < busy_until:  # CPU-bound, never yielding to the loop
            sum(range(10_000))
        assert election.is_leader()
        await asyncio.sleep(2 * settings.retry_period)  # the loop runs again: nothing reported lost
        assert not run.done()
        assert election.is_leader()
        lease = json.loads(
            (
                await asyncio.to_thread(kube.kubectl, "get", "lease", "busy", "-n", namespace, "-o", "json")
            ).stdout
        )
        assert lease["spec"]["holderIdentity"] == "busy_x"
        assert lease["spec"].get("leaseTransitions", 0) == 0
    finally:
        await election.release()
        run.cancel()
    assert not election.is_leader()
    lease = json.loads(
        (await asyncio.to_thread(kube.kubectl, "get", "lease", "busy", "-n", namespace, "-o", "json")).stdout
    )
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out
