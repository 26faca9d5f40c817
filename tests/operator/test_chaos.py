"""Chaos: the operator SIGKILLed again and again while 20 machines provision on a faulty MAAS, then once more
while the cluster is deleted. Nothing may leak, nothing may be allocated twice, everything must end Ready and,
after the delete, released.

Why this shape: the crash windows that matter are between a MAAS write and the Kubernetes write that records
it (allocate → ``spec.systemID``; giving a failed machine back → ``spec.systemID`` cleared; release →
finalizer removed). So most kills land *while MAAS handles* the n-th allocate/deploy/release of that process
(the simulator counts a request before handling it: the write happens, the answer never arrives), the others a
seeded delay after the process's first MAAS request. New MaasMachines arrive in a wave with every kill
cycle, so there is always something allocating when the operator dies. The faults (503 with Retry-After,
dropped connections, latency, failed and broken deployments) come from one seeded RNG; the interleaving of
the operator's concurrent requests is not deterministic, so the seed fixes the plan (fault rates, kill kinds
and moments, waves), not the exact history. ``CAPMAAS_CHAOS_SEED`` runs another plan.

What it found (fixed, with focused tests): a replacement interrupted after the release let the MaasMachine
take its old machine - by then another MaasMachine's - for its own (``reconcilers/baremetal.py``); a
MaasCluster whose Cluster was deleted first waited for the resync interval to finish deleting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from operator_harness import Harness
from zygote import Child

from capmaas import maas
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, NodeStatus, Simulator, Timings

pytestmark = pytest.mark.k8s

#: The seed of the run; CAPMAAS_CHAOS_SEED replays another one (every run prints its seed).
SEED = int(os.environ.get("CAPMAAS_CHAOS_SEED", "42026"))
MACHINES = 20
KILLS = 10
WAVES = [2] * KILLS  # MaasMachines created as each kill cycle starts: every kill finds some provisioning
assert sum(WAVES) == MACHINES
#: MAAS states of a machine handed to someone and not on its way back.
HELD = frozenset(
    {NodeStatus.ALLOCATED, NodeStatus.DEPLOYING, NodeStatus.DEPLOYED, NodeStatus.FAILED_DEPLOYMENT}
)
#: ... and on its way back (none may be left once every MaasMachine is deleted).
RETURNING = frozenset({NodeStatus.RELEASING, NodeStatus.DISK_ERASING})
WRITE_OPS: dict[str, tuple[str, ...]] = {
    "allocate": ("allocate",),
    "deploy": ("deploy",),
    "release": ("release", "mark_broken"),
}
CounterKey = tuple[str, str, str | None]
#: Seconds a started operator gets to make its first MAAS request, then the n-th write the kill waits for
#: (then a write of any kind, then none).
STARTUP_WITHIN = 30.0
WRITE_WITHIN = 3.0


@pytest.fixture
def sim() -> Simulator:
    return Simulator(
        Inventory.generate(machines=48, zones=3, seed=SEED),
        # A deploy outlasts a kill cycle (about 7.5 s when no write of the planned kind comes): every kill
        # finds the wave it started with still provisioning.
        timings=Timings(deploy=8.0, release=1.0),
        faults=Faults(
            seed=SEED,
            unavailable_rate=0.04,  # 503 "no rack controller", Retry-After: 1
            retry_after=1,
            drop_rate=0.03,  # the answer cut off half-way, connection closed
            latency=0.03,  # every API request answered this much later
            deploy_failure_rate=0.2,  # curtin failed: Failed deployment
            broken_rate=0.04,  # hardware failure at the end of the deploy: Broken
        ),
        seed=SEED,
    )


@dataclass
class Kill:
    n: int
    phase: str
    kind: str  # "time" or "after-<op>"
    planned: str
    alive_for: float  # seconds the operator ran
    created: int  # MaasMachines there were when it died
    held: int  # MAAS machines held by our agent names when it died
    deployed: int  # ... of which Deployed
    orphans: dict[str, str]  # ... of which no MaasMachine had recorded yet: system ID → agent name (UID)

    @property
    def unrecorded(self) -> int:
        return len(self.orphans)

    def __str__(self) -> str:
        return (
            f"kill {self.n:2d} [{self.phase}] {self.kind:<14} {self.planned:<14}"
            f" after {self.alive_for:4.1f}s: {self.created} MaasMachines, {self.held} MAAS machines held,"
            f" {self.deployed} deployed, {self.unrecorded} not yet recorded"
        )


@dataclass
class Wire:
    ops: tuple[str, ...] | None  # None: any request
    left: int
    fire: Callable[[], None]


class Tripwire(Counter[CounterKey]):
    """The simulator's request counter, also firing callbacks once the n-th request of some ops is counted.

    The simulator counts a request before it handles it, so a kill fired from here lands while MAAS is doing
    the write: the operator is gone before the answer is written (allocated in MAAS, not yet in Kubernetes).
    """

    def __init__(self, base: Counter[CounterKey]) -> None:
        super().__init__(base)
        self.wires: list[Wire] = []

    def arm(self, ops: tuple[str, ...] | None, nth: int, fire: Callable[[], None]) -> None:
        self.wires.append(Wire(ops, nth, fire))

    def disarm(self) -> None:
        self.wires.clear()

    def __setitem__(self, key: CounterKey, value: int) -> None:
        super().__setitem__(key, value)
        for wire in list(getattr(self, "wires", ())):
            if wire.ops is None or key[2] in wire.ops:
                wire.left -= 1
                if not wire.left:
                    self.wires.remove(wire)
                    wire.fire()


def held(sim: Simulator) -> dict[str, list[str]]:
    """agent_name → system IDs of the machines MAAS holds for it."""
    out: dict[str, list[str]] = {}
    for m in sim.state.machines.values():
        if m.agent_name:
            out.setdefault(m.agent_name, []).append(m.system_id)
    return out


@dataclass
class Chaos:
    """Starts and SIGKILLs the operator at seeded points; remembers every process it started."""

    h: Harness
    rng: random.Random
    kills: list[Kill] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    zygotes: set[int] = field(default_factory=set)  # parents of the processes forked from a zygote

    def start(self) -> subprocess.Popen[bytes] | Child:
        self.h.operator.start()
        proc = self.h.operator.proc
        assert proc is not None
        self.pids.append(proc.pid)
        if isinstance(proc, Child):
            self.zygotes.add(proc.parent)
        return proc

    async def kill(
        self, phase: str, ops: list[str], meanwhile: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Start the operator, SIGKILL it at a seeded point, record what MAAS held at that moment.

        ``time`` kills land a seeded delay after the new process's first MAAS request (before that it is
        still importing and starting kopf, seconds on a busy machine); ``after-<op>`` kills land while MAAS
        handles its n-th such write (when none comes, a few seconds after its first request).
        ``meanwhile`` runs while the process starts (creating the next wave).
        """
        h, rng = self.h, self.rng
        counters = h.sim.counters
        assert isinstance(counters, Tripwire)
        kind = rng.choice(["time", *(f"after-{op}" for op in ops)])
        nth, delay = rng.randint(1, 3), rng.uniform(0.0, 2.5)
        planned = f"{delay:.2f}s" if kind == "time" else f"#{nth}"
        started = time.monotonic()
        proc = self.start()
        first, fired = asyncio.Event(), asyncio.Event()

        def fire() -> None:
            proc.kill()  # inside the simulator's handling of the request: before MAAS answers it
            fired.set()

        counters.arm(None, 1, first.set)  # its first MAAS request: it is at work from then on
        if kind != "time":
            counters.arm(WRITE_OPS[kind.removeprefix("after-")], nth, fire)
        try:
            if meanwhile is not None:
                await meanwhile()
            try:
                await asyncio.wait_for(first.wait(), timeout=STARTUP_WITHIN)
            except TimeoutError:
                planned += " (no request)"
            if kind == "time":
                await asyncio.sleep(delay)
            else:
                try:
                    await asyncio.wait_for(fired.wait(), timeout=WRITE_WITHIN)
                except TimeoutError:  # none of the kind in this life: at the next write of any kind, then
                    planned += " (none)"
                    counters.arm(tuple(op for ops in WRITE_OPS.values() for op in ops), 1, fire)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(fired.wait(), timeout=WRITE_WITHIN)
        finally:
            counters.disarm()
        assert proc.poll() in (None, -signal.SIGKILL), f"the operator died by itself\n{h.operator.tail()}"
        proc.kill()
        rc = await asyncio.to_thread(proc.wait, 15)
        assert rc == -signal.SIGKILL, f"exit status {rc}\n{h.operator.tail()}"
        h.operator.proc = None
        ours = held(h.sim)
        deployed = sum(
            h.sim.state.machines[s].status is NodeStatus.DEPLOYED for sids in ours.values() for s in sids
        )
        mms = await maasmachines(h)
        recorded = {m["spec"].get("systemID") for m in mms}
        orphans = {s: agent for agent, sids in ours.items() for s in sids if s not in recorded}
        k = Kill(len(self.kills) + 1, phase, kind, planned, time.monotonic() - started,
                 len(mms), sum(map(len, ours.values())), deployed, orphans)  # fmt: skip
        self.kills.append(k)
        print(k, flush=True)

    def survivors(self) -> list[int]:
        """Processes this test started that still run for its namespace (a kill that did not kill)."""
        alive = []
        for pid in self.pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            # Ours, not a reused pid: its command line names the namespace (a fresh interpreter), or it is a
            # live child of the zygote that forked ours (the zygote's command line; it reaps its children,
            # and every process it forks for this test is in self.pids).
            ours = self.h.namespace.encode() in cmdline or (int(ppid) in self.zygotes and state != "Z")
            if ours and pid != getattr(self.h.operator.proc, "pid", None):
                alive.append(pid)
        return alive


async def create_wave(h: Harness, cluster_uid: str, names: list[str]) -> None:
    """Machines (owned by the Cluster), their bootstrap Secrets and MaasMachines: three kubectl calls."""
    await h.apply(
        *(
            demo.machine(n, h.namespace, "c1", control_plane=n < "m03", bootstrap=f"{n}-bootstrap",
                         cluster_uid=cluster_uid)
            for n in names
        )
    )  # fmt: skip
    got = await h.items("machines.cluster.x-k8s.io")
    uids = {i["metadata"]["name"]: i["metadata"]["uid"] for i in got}
    objs: list[dict[str, Any]] = []
    for n in names:
        objs.append(demo.bootstrap_secret(f"{n}-bootstrap", h.namespace, "c1", machine_owner=(n, uids[n])))
        objs.append(demo.maasmachine(n, h.namespace, "c1", control_plane=n < "m03", machine_uid=uids[n]))
    await h.apply(*objs)


async def maasmachines(h: Harness) -> list[dict[str, Any]]:
    return await h.items("maasmachines")


async def describe(h: Harness) -> str:
    """What is left, for a failure message: each MaasMachine's deletion/finalizer/annotation/condition state
    next to what MAAS says about its machine."""
    lines = []
    for mm in await maasmachines(h):
        meta, sid = mm["metadata"], mm["spec"].get("systemID")
        notes = {k: v for k, v in (meta.get("annotations") or {}).items() if "last-applied" not in k}
        conditions = (mm.get("status") or {}).get("conditions") or ()
        ready: dict[str, Any] = next((c for c in conditions if c["type"] == "Ready"), {})
        maas = h.sim.machine(sid) if sid in h.sim.state.machines else {}
        lines.append(
            f"{meta['name']} uid={meta['uid'][:8]} deleting={bool(meta.get('deletionTimestamp'))}"
            f" finalizers={meta.get('finalizers')} annotations={notes} systemID={sid}"
            f" Ready={ready.get('reason')}:{ready.get('message')}"
            f" MAAS={maas.get('status_name')}/{maas.get('owner')}/{maas.get('power_state')}"
        )
    lines += [f"held by our agents: {held(h.sim)}"]
    return "\n".join(lines)


def leaks(sim: Simulator, mms: list[dict[str, Any]]) -> list[str]:
    """Every way MAAS and the MaasMachines can disagree; [] when each live MaasMachine holds exactly its own
    machine and MAAS holds nothing for anyone else."""
    problems = list(sim.check_invariants())  # includes "agent_name on N machines" and "acquired while owned"
    by_uid = {m["metadata"]["uid"]: m for m in mms}
    ours = held(sim)
    for agent, sids in sorted(ours.items()):
        mm = by_uid.get(agent)
        if mm is None:
            problems.append(f"leak: {sids} held for {agent}, which is no live MaasMachine")
            continue
        if len(sids) > 1:
            problems.append(f"double allocation: {mm['metadata']['name']} holds {sids}")
        if mm["spec"].get("systemID") not in sids:
            problems.append(
                f"leak: {mm['metadata']['name']} holds {sids} but records {mm['spec'].get('systemID')}"
            )
    for m in sim.state.machines.values():
        if m.status in HELD and not m.agent_name:
            problems.append(f"leak: {m.system_id} is {m.status.label} for {m.owner} without an agent name")
    for mm in mms:
        sid, name = mm["spec"].get("systemID"), mm["metadata"]["name"]
        if sid and sim.state.machines[sid].agent_name != mm["metadata"]["uid"]:
            problems.append(
                f"{name} records {sid}, which MAAS holds for {sim.state.machines[sid].agent_name!r}"
            )
    return problems


#: The operator's MAAS client here: seconds per attempt, retries (the simulator is local and answers in
#: milliseconds). A MaasMachine whose allocate was cut off (a dropped connection, a kill between the
#: ``…/allocating`` mark and the allocate) allocates again only once the client's in-doubt window has passed.
REQUEST_TIMEOUT, MAX_RETRIES = 10.0, 1
IN_DOUBT = maas.in_doubt_window(REQUEST_TIMEOUT, maas.RetryPolicy(max_retries=MAX_RETRIES))


@pytest.mark.timeout(900)
async def test_sigkill_ten_times_while_twenty_machines_provision_then_once_while_deleting(
    harness: Harness,
) -> None:
    h = harness
    h.sim.counters = Tripwire(h.sim.counters)
    chaos = Chaos(h, random.Random(SEED))
    print(f"\nchaos seed {SEED}: {h.sim.faults}", flush=True)
    began = time.monotonic()
    h.operator.env.update(
        CAPMAAS_MACHINE__MAX_DEPLOY_ATTEMPTS="10",  # 20% + 4% failures: never run out
        CAPMAAS_MAAS__REQUEST_TIMEOUT=str(REQUEST_TIMEOUT),
        CAPMAAS_MAAS__MAX_RETRIES=str(MAX_RETRIES),
    )
    chaos.start()
    cluster_uid = await h.cluster()  # the MaasCluster, Ready (the kills are about machines)
    fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))
    h.operator.stop(kill=True)
    names = iter(f"m{i:02d}" for i in range(MACHINES))
    kills = chaos.kills

    # -- provisioning: ten kills; a wave of new MaasMachines arrives while each operator process starts ------
    for n in range(KILLS):
        wave = [next(names) for _ in range(WAVES[n] if n < len(WAVES) else 0)]
        create = functools.partial(create_wave, h, cluster_uid, wave) if wave else None
        await chaos.kill("provision", ["release", "allocate", "deploy", "allocate"], create)
    assert next(names, None) is None
    chaos.start()

    async def all_ready() -> bool:
        mms = await maasmachines(h)
        return len(mms) == MACHINES and all((m.get("status") or {}).get("ready") for m in mms)

    try:
        await h.wait(f"{MACHINES} MaasMachines Ready", all_ready, within=120 + IN_DOUBT, interval=1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- not Ready ---\n{await describe(h)}") from None
    finally:
        assert chaos.survivors() == []
    mms = await maasmachines(h)
    assert leaks(h.sim, mms) == []
    sids = {m["spec"]["systemID"] for m in mms}
    assert len(sids) == MACHINES  # no two MaasMachines on one MAAS machine
    for m in mms:
        assert h.sim.machine(m["spec"]["systemID"])["status_name"] == "Deployed"
        owned = [x["system_id"] for x in h.sim.machines_by_agent(m["metadata"]["uid"])]
        assert owned == [m["spec"]["systemID"]]
    # A machine allocated but not yet recorded when the operator died was adopted by its MaasMachine, or
    # (adopted, failed and) given back: never allocated a second time beside it, never left behind.
    final = {m["metadata"]["uid"]: m["spec"]["systemID"] for m in mms}
    orphans = {sid: agent for k in kills for sid, agent in k.orphans.items()}
    adopted = 0
    for sid, agent in orphans.items():
        if final.get(agent) == sid:
            adopted += 1
        else:
            assert h.sim.state.machines[sid].agent_name != agent, (sid, agent)
    provisioned = time.monotonic() - began
    h.operator.stop(kill=True)

    # -- deletion: the Cluster goes (CAPI deletes the Machines, hence the MaasMachines), one more kill ------
    async def delete_cluster() -> None:
        await h.k(
            "delete", "clusters.cluster.x-k8s.io/c1", "maasclusters/c1", "-n", h.namespace, "--wait=false"
        )
        await h.k("delete", "maasmachines", "--all", "-n", h.namespace, "--wait=false")

    await chaos.kill("delete", ["release"], delete_cluster)
    chaos.start()

    async def all_gone() -> bool:
        return not await h.items("maasmachines") and not await h.items("maasclusters")

    try:
        await h.wait("every MaasMachine and the MaasCluster deleted", all_gone, within=90, interval=1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- left ---\n{await describe(h)}") from None
    assert leaks(h.sim, []) == []
    assert held(h.sim) == {}  # nothing allocated to any of our agent names
    for machine in h.sim.state.machines.values():
        assert machine.status not in HELD | RETURNING, (machine.system_id, machine.status.label)
    assert [r.name for r in h.sim.state.dns_resources.values() if r.name == fqdn.partition(".")[0]] == []

    events = (
        await h.k("get", "events", "-n", h.namespace, "-o", "jsonpath={.items[*].reason}")
    ).stdout.split()
    ops = Counter[str]()
    for (_, _, op), count in h.sim.counters.items():
        ops[op or "(list/get)"] += count
    print(
        f"chaos seed {SEED}: {len(kills)} kills, {MACHINES} Ready after {provisioned:.0f}s,"
        f" all released after {time.monotonic() - began:.0f}s;"
        f" {len(orphans)} MAAS machines left unrecorded by a kill ({adopted} kept by their MaasMachine);"
        f" MAAS requests by op {dict(sorted(ops.items()))}; Events {dict(sorted(Counter(events).items()))}",
        flush=True,
    )
    # The chaos was real: most kills hit machines still provisioning, some the allocate → record window.
    in_flight = [k for k in kills if k.phase == "provision" and k.deployed < k.created]
    assert len(in_flight) >= KILLS // 2, "\n".join(map(str, kills))
    assert orphans, "\n".join(map(str, kills))
