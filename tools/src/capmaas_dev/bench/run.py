"""The benchmark: N MaasMachines from creation to Ready to deletion to MAAS released, measured.

What is measured, and where from:
- time to all Ready: from the first MaasMachine create request to the last ``status.ready`` seen on a watch;
- readiness lag: the simulator's ``on_deployed`` wall time of a machine -> the watch event showing its
  MaasMachine ready (same host clock, same process);
- MAAS requests per machine lifecycle: the simulator's per-endpoint counters, zeroed just before the first
  create and read once every MAAS machine is released, divided by N;
- Kubernetes API writes per machine: ``apiserver_request_total`` deltas (non-read verbs) over the same
  window (read once they stop moving: the last Events land after the last object is gone), minus the
  benchmark's own writes (N creates, one delete-collection) and lease heartbeats; also by kind (metadata
  patch, status patch, Event);
- operator peak RSS (VmHWM), RSS before the first create and CPU time (per phase: to all Ready, deletion)
  from /proc of the ``capmaas run`` process;
- the benchmark harness's own CPU time over the same phases (its creates, watch and waiting loop: the
  benchmark process less its MAAS simulator thread, whose CPU is given apart), from /proc of this process:
  it shares the cores with the operator, so a reader can tell a harness saving from an operator saving;
- the control plane's CPU time (kube-apiserver, etcd, kube-controller-manager) from the first create to all
  Ready, from /proc of each: the rest of what the two cores spend in that window;
- start-up (one operator process): the operator restarted once its MaasCluster is ready, with bytecode
  compiled as in the image; process start to the first reconcile it logs, wall and its CPU seconds.
The Machines and bootstrap Secrets (CAPI's objects) are created before the window opens. The MaasMachines
are created and watched without the ``kubernetes`` client (:mod:`capmaas_dev.demo.rawkube`: one POST per
object on a kept-alive connection per thread, one JSON decode per watch event), as CAPI's Go controllers would
for a fraction of its CPU; before session 39 the harness used that client, and its own CPU in the window (now
printed) was taken from the operator's two cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from capmaas.operator.events import BURST_HOLD
from capmaas_dev.bench.memory import MemoryTracedOperator
from capmaas_dev.bench.metrics import (
    HarnessCpu,
    ProcStats,
    WriteKey,
    apiserver_writes,
    cpu_seconds_of,
    first_reconcile_after,
    harness_writes,
    operator_writes,
    percentile,
    proc_stats,
    settled_writes,
    writes_by_kind,
)
from capmaas_dev.bench.profiled import ProfiledOperator
from capmaas_dev.bench.shards import WATCH_FILTER_LABEL, ShardCapi, ShardOperator, shard_settings, shard_value
from capmaas_dev.bench.stackrun import phase_timeout, run_on_stack
from capmaas_dev.demo.capi import Capi, MachineSpec, parallel
from capmaas_dev.demo.kube import MAASMACHINES
from capmaas_dev.demo.manifests import CLUSTER_NAME_LABEL
from capmaas_dev.demo.progress import PhaseTicker, Tracker, table
from capmaas_dev.demo.rawkube import RawKube
from capmaas_dev.demo.stack import OperatorProcess, Stack, StackError, StackOptions, sigterm_as_interrupt
from capmaas_dev.simulator import Inventory, Timings

CLUSTER = "bench"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m capmaas_dev.bench", description=__doc__.splitlines()[0])
    p.add_argument("--machines", type=int, default=200, help="MaasMachines to provision (200)")
    p.add_argument("--deploy-seconds", type=float, default=0.0, help="simulated MAAS deploy time (0)")
    p.add_argument("--threads", type=int, default=8, help="parallel create requests (8)")
    p.add_argument("--timeout", type=float, default=0.0, help="seconds to wait for Ready (default: scaled)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument(
        "--shards",
        type=int,
        default=1,
        help="operator processes, each with its own watch-filter label, Lease and Cluster (1)",
    )
    p.add_argument(
        "--fairness",
        action="store_true",
        help="two tenants: one streams --machines MaasMachines while the other creates --small, --rounds"
        " times; prints the small tenant's readiness lag alone and under the stream"
        " (capmaas_dev.bench.fairness)",
    )
    p.add_argument("--small", type=int, default=3, help="--fairness: the small tenant's machines a round (3)")
    p.add_argument("--rounds", type=int, default=3, help="--fairness: rounds alone and under the stream (3)")
    p.add_argument(
        "--profile",
        metavar="FILE",
        help="run the operator under cProfile from the first create to the last release and write its"
        " stats to FILE (pstats); slows the operator: read shares, not times (capmaas_dev.bench.profiled)",
    )
    p.add_argument(
        "--memory",
        metavar="DIR",
        help="run each operator process through capmaas_dev.bench.memtrace: its memory (RSS, smaps, malloc,"
        " pymalloc; tracemalloc snapshots with --memory-frames) before the first create, at all Ready, once"
        " released and at its peak, written to DIR (one folder per shard); report with"
        " `python -m capmaas_dev.bench.memtrace report DIR`",
    )
    p.add_argument(
        "--memory-frames",
        type=int,
        default=0,
        help="--memory: trace allocations with tracemalloc, this many frames each (0: no tracing, the real"
        " sizes; a traced operator is slower and larger: read shares)",
    )
    args = p.parse_args(argv)
    if args.memory and (args.fairness or args.profile):
        p.error("--memory is for a plain or sharded run (no --fairness, no --profile)")
    if args.fairness and (args.shards != 1 or args.small < 1 or args.rounds < 1):
        p.error("--fairness runs one operator process (no --shards); --small and --rounds at least 1")
    if args.profile and (args.fairness or args.shards != 1):
        p.error("--profile profiles the one operator process of a plain run (no --fairness, no --shards)")
    if args.machines < 1:
        p.error("--machines must be at least 1")
    if not 1 <= args.shards <= args.machines:
        p.error("--shards must be between 1 and --machines")
    return args


@dataclass
class Shard:
    """One operator process and the Cluster it serves (the whole run when there is one shard)."""

    index: int
    capi: Capi
    proc: OperatorProcess
    labels: dict[str, str]
    names: list[str] = field(default_factory=list)
    cpu0: float = 0.0
    rss0: float = 0.0  # MB, before the first create


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n: int = args.machines
        self.figures: dict[str, Any] = {"machines": self.n, "deploy_seconds": args.deploy_seconds}

    def say(self, line: str) -> None:
        print(line, flush=True)

    def run(self) -> int:
        n = self.n
        inventory = Inventory.generate(machines=n + n // 20 + 3, zones=3, seed=1)
        timings = Timings(commission=0.0, deploy=self.args.deploy_seconds, release=0.0, erase=0.0)
        shards = f", {self.args.shards} shards" if self.args.shards > 1 else ""
        self.say(f"capmaas bench: {n} MaasMachines, MAAS deploy {self.args.deploy_seconds:g}s{shards}")
        stack = Stack(StackOptions(inventory, timings, namespace="capmaas-bench", say=self.say))
        return run_on_stack(stack, self._run, self.say)

    def _shards(self, stack: Stack) -> list[Shard]:
        """One shard: the stack's operator and one Cluster. Several: the stack's operator is replaced by one
        process per shard (:mod:`capmaas_dev.bench.shards`)."""
        kube, op = stack.kube, stack.operator
        assert kube is not None
        assert op is not None
        ns = stack.namespace
        if self.args.shards == 1:
            return [Shard(0, Capi(kube, ns, CLUSTER), op, {})]
        op.stop()
        out = []
        for s in shard_settings(self.args.shards):
            proc = self._traced(
                ShardOperator(op.env, ns, stack.workdir / f"operator-{shard_value(s.index)}.log", s),
                shard_value(s.index),
            ).start()
            labels = {WATCH_FILTER_LABEL: shard_value(s.index)}
            capi = ShardCapi(kube, ns, f"{CLUSTER}-{s.index}", labels=labels)
            out.append(Shard(s.index, capi, proc, labels))
        stack.operator = out[0].proc  # stopped by stack.close(); the others by _run
        return out

    def _traced(self, proc: OperatorProcess, name: str) -> OperatorProcess:
        """``proc`` run through :mod:`capmaas_dev.bench.memtrace` with ``--memory`` (into ``DIR/name``)."""
        if not self.args.memory:
            return proc
        return MemoryTracedOperator(proc, Path(self.args.memory).resolve() / name, self.args.memory_frames)

    def _mark(self, shards: list[Shard], label: str) -> None:
        """A memory mark of every traced operator process (``--memory``)."""
        for shard in shards:
            if isinstance(shard.proc, MemoryTracedOperator):
                shard.proc.mark(label)

    def _run(self, stack: Stack) -> int:
        stack.start()
        kube, sim = stack.kube, stack.sim
        assert kube is not None
        assert sim is not None
        shards = self._shards(stack)
        try:
            return self._measure(stack, shards)
        finally:
            for shard in shards[1:]:
                shard.proc.stop()

    def _measure(self, stack: Stack, shards: list[Shard]) -> int:
        kube, sim = stack.kube, stack.sim
        assert kube is not None
        assert sim is not None
        n, ns = self.n, stack.namespace

        def check_operators() -> None:
            for shard in shards:
                if (code := shard.proc.exited()) is not None:
                    raise StackError(
                        f"operator {shard.index} exited with code {code}; last lines of its log:\n"
                        f"{shard.proc.tail()}"
                    )

        for shard in shards:
            shard.capi.create_cluster(sim.url, sim.api_key)
        for shard in shards:
            shard.capi.wait_infrastructure(60 * len(shards), check=check_operators)
        if len(shards) == 1:
            shards[0].proc = stack.operator = self._startup(shards[0].proc, check_operators)
        profiled = shards[0].proc if isinstance(shards[0].proc, ProfiledOperator) else None
        specs = []
        for i in range(n):
            shard = shards[i % len(shards)]
            specs.append(MachineSpec(f"m{i:05d}", False, extra_labels=dict(shard.labels)))
            shard.names.append(specs[-1].name)
        shard_of = {name: shard for shard in shards for name in shard.names}
        t = time.monotonic()
        uids: dict[str, str] = {}

        def owner(spec: MachineSpec) -> None:
            uids[spec.name] = shard_of[spec.name].capi.create_owner(spec)

        parallel(owner, specs, self.args.threads)
        self.say(f"  setup: {n} Machines + bootstrap Secrets ({time.monotonic() - t:.1f}s)")
        raw = RawKube.of(kube)
        control = {c.name: c.pid for c in stack.cp.components} if stack.cp is not None else {}
        watcher = raw.watch(MAASMACHINES, ns)
        tracker = Tracker()
        names = [s.name for s in specs]
        try:
            time.sleep(1.0)  # let the operator's caches settle; the window starts quiet
            sim.reset_counters()
            writes0 = apiserver_writes(kube.raw_get("/metrics"))
            self._mark(shards, "before create")
            for shard in shards:
                before = proc_stats(shard.proc.pid)
                shard.cpu0, shard.rss0 = before.cpu_seconds, before.rss_mb
            if profiled is not None:
                profiled.profile_start()
            harness0 = HarnessCpu.now(sim.native_id, watcher.native_id)
            control0 = cpu_seconds_of(control)
            t0 = time.time()
            parallel(
                lambda s: raw.create(MAASMACHINES, shard_of[s.name].capi.maasmachine(s, uids[s.name])),
                specs,
                self.args.threads,
            )
            created = time.time() - t0
            self.say(f"  created {n} MaasMachines in {created:.1f}s; waiting for Ready")
            timeout = phase_timeout(self.args, n)
            check = PhaseTicker(self.say, tracker).after(check_operators)
            tracker.follow(
                watcher,
                lambda: tracker.readied >= n and tracker.count(names, ready=True) == n,
                timeout,
                check=check,
            )
            harness_ready = HarnessCpu.now(sim.native_id, watcher.native_id)
            control_ready = cpu_seconds_of(control)
            ready = tracker.count(names, ready=True)
            t_ready = tracker.ready_after(names, t0)
            self.say(f"  {ready}/{n} Ready after {t_ready:.1f}s; deleting all")
            deployed = sim.call(lambda s: dict(sim.deployed_at))
            lags = tracker.readiness_lags(names, deployed)
            lags_condition = [
                r.ready_condition_at - deployed[r.system_id]
                for nm in names
                if (r := tracker.rows.get(nm))
                and r.ready_condition_at is not None
                and r.system_id in deployed
            ]
            at_ready = {shard.index: proc_stats(shard.proc.pid) for shard in shards}
            self._mark(shards, "all Ready")
            t1 = time.time()
            deletes = sum(_delete_all(kube, ns, shard.capi.cluster) for shard in shards)
            tracker.follow(
                watcher,
                lambda: tracker.deleted >= n and tracker.count(names, deleted=True) == n,
                timeout,
                check=check,
            )
            gone = tracker.count(names, deleted=True)
            t_released = time.time() - t1
            maas = sim.machine_states()
            held = sum(1 for m in maas.values() if m["owner"] is not None)
            counters = sim.counters()
            # A burst's Event is posted once its cluster has been quiet for BURST_HOLD: wait longer than that.
            writes = settled_writes(lambda: kube.raw_get("/metrics"), quiet=BURST_HOLD + 1.0)
            writes.subtract(writes0)
            at_end = {shard.index: proc_stats(shard.proc.pid) for shard in shards}
            harness_end = HarnessCpu.now(sim.native_id, watcher.native_id)
            self._mark(shards, "released")
            if profiled is not None:
                profiled.profile_stop()
                self.say(f"  profile (create..released) written to {profiled.out}")
        finally:
            watcher.stop()
        first = shards[0]
        cpu_window = sum(at_end[s.index].cpu_seconds - s.cpu0 for s in shards)
        self._figures(
            created=created,
            t_ready=t_ready,
            ready=ready,
            lags=lags,
            lags_condition=lags_condition,
            gone=gone,
            t_released=t_released,
            held=held,
            counters=counters,
            writes=writes,
            stats=(at_ready[first.index], at_end[first.index], first.cpu0),
            rss0=first.rss0,
            invariants=sim.invariants(),
            deletes=deletes,
            harness=(harness0, harness_ready, harness_end),
        )
        self.figures["control_plane_cpu_seconds_to_ready"] = {
            name: round(control_ready[name] - control0[name], 2) for name in sorted(control)
        }
        if len(shards) > 1:  # the operator figures are over every shard: CPU summed, memory the largest
            self.figures["operator_cpu_seconds_window"] = round(cpu_window, 2)
            self.figures["operator_cpu_seconds_total"] = round(sum(x.cpu_seconds for x in at_end.values()), 2)
            self.figures["operator_peak_rss_mb"] = round(max(x.peak_rss_mb for x in at_end.values()), 1)
            self.figures["operator_rss_at_ready_mb"] = round(max(x.rss_mb for x in at_ready.values()), 1)
            shard_lags = {s.index: tracker.readiness_lags(s.names, deployed) for s in shards}
            self.figures["shards"] = [
                {
                    "shard": shard_value(s.index),
                    "machines": len(s.names),
                    "ready": tracker.count(s.names, ready=True),
                    "time_to_all_ready_seconds": round(tracker.ready_after(s.names, t0), 2),
                    "readiness_lag_p50_seconds": round(percentile(shard_lags[s.index], 50), 3),
                    "readiness_lag_p99_seconds": round(percentile(shard_lags[s.index], 99), 3),
                    "cpu_seconds_window": round(at_end[s.index].cpu_seconds - s.cpu0, 2),
                    "cpu_seconds_total": round(at_end[s.index].cpu_seconds, 2),
                    "peak_rss_mb": round(at_end[s.index].peak_rss_mb, 1),
                    "rss_at_ready_mb": round(at_ready[s.index].rss_mb, 1),
                }
                for s in shards
            ]
        self._print(counters, writes)
        if self.args.json:
            with open(self.args.json, "w", encoding="utf-8") as f:
                json.dump(self.figures, f, indent=2)
        return 0 if ready == n and gone == n and held == 0 else 1

    def _startup(
        self, proc: OperatorProcess, check: Callable[[], None], timeout: float = 60.0
    ) -> OperatorProcess:
        """Start-up: the operator restarted with its MaasCluster in place and its bytecode compiled; process
        start (just before the fork) to its first reconcile, as it logs it. The restarted process (returned;
        under the profiler with ``--profile``) is the one measured after."""
        proc.stop()
        if self.args.profile:
            proc = ProfiledOperator(proc.env, proc.namespace, proc.log, Path(self.args.profile).resolve())
        proc = self._traced(proc, "operator")
        # Bytecode as the image has it (compiled at build time): a development venv run with
        # PYTHONDONTWRITEBYTECODE would compile every module of the product at every start.
        env = {k: v for k, v in proc.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(proc.log.parent / "pycache")
        subprocess.run([sys.executable, "-c", "import capmaas.operator.app"], env=env, check=True)
        proc.env = env
        offset = proc.log.stat().st_size if proc.log.exists() else 0
        started = time.time()
        proc.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            check()
            with proc.log.open("rb") as f:
                f.seek(offset)
                found = first_reconcile_after(f.read().decode(errors="replace"))
            if found is not None:
                at, cpu = found
                self.figures["startup_seconds"] = round(at - started, 2)
                cpu_text = ""
                if cpu is not None:
                    self.figures["startup_cpu_seconds"] = round(cpu, 2)
                    cpu_text = f" ({cpu:.2f}s of operator CPU)"
                self.say(f"  start-up: process start to first reconcile {at - started:.2f}s{cpu_text}")
                return proc
            time.sleep(0.05)
        self.say(f"  start-up: no first reconcile within {timeout:.0f}s")
        return proc

    def _figures(
        self,
        *,
        created: float,
        t_ready: float,
        ready: int,
        lags: list[float],
        lags_condition: list[float],
        gone: int,
        t_released: float,
        held: int,
        counters: dict[tuple[str, str, str | None], int],
        writes: Counter[WriteKey],
        stats: tuple[ProcStats, ProcStats, float],
        rss0: float,
        invariants: list[str],
        deletes: int,
        harness: tuple[HarnessCpu, HarnessCpu, HarnessCpu],
    ) -> None:
        n = self.n
        own = harness_writes(writes, n, deletes)
        op_writes = operator_writes(writes, own)
        stats_ready, stats_end, cpu0 = stats
        self.figures["kube_writes_per_machine_by_kind"] = writes_by_kind(writes, own, n)
        self.figures.update(
            create_seconds=round(created, 2),
            ready=ready,
            time_to_all_ready_seconds=round(t_ready, 2),
            readiness_lag_p50_seconds=round(percentile(lags, 50), 3),
            readiness_lag_p99_seconds=round(percentile(lags, 99), 3),
            readiness_lag_samples=len(lags),
            readiness_lag_p99_condition_seconds=round(percentile(lags_condition, 99), 3),
            released=gone,
            release_seconds=round(t_released, 2),
            maas_machines_still_allocated=held,
            maas_requests_total=sum(counters.values()),
            maas_requests_per_machine=round(sum(counters.values()) / n, 2),
            kube_writes_total=op_writes,
            kube_writes_per_machine=round(op_writes / n, 2),
            operator_peak_rss_mb=round(stats_end.peak_rss_mb, 1),
            operator_rss_at_ready_mb=round(stats_ready.rss_mb, 1),
            operator_rss_before_create_mb=round(rss0, 1),
            operator_cpu_seconds_window=round(stats_end.cpu_seconds - cpu0, 2),
            operator_cpu_seconds_to_ready=round(stats_ready.cpu_seconds - cpu0, 2),
            operator_cpu_seconds_deletion=round(stats_end.cpu_seconds - stats_ready.cpu_seconds, 2),
            operator_cpu_seconds_total=round(stats_end.cpu_seconds, 2),
            simulator_invariants=invariants,
        )
        harness0, harness_ready, harness_end = harness
        self.figures.update(
            bench_harness_cpu_seconds_to_ready=round(harness_ready.harness_since(harness0), 2),
            bench_harness_cpu_seconds_deletion=round(harness_end.harness_since(harness_ready), 2),
            bench_watch_cpu_seconds_to_ready=round(harness_ready.watch - harness0.watch, 2),
            simulator_cpu_seconds_to_ready=round(harness_ready.simulator - harness0.simulator, 2),
        )

    def _print(self, counters: dict[tuple[str, str, str | None], int], writes: Counter[WriteKey]) -> None:
        f, n = self.figures, self.n
        at_1000 = n == 1000 and self.args.deploy_seconds == 0
        scale = "" if at_1000 else " (target is for 1,000 machines, deploy 0 s)"

        complete = f["ready"] == n and f["released"] == n

        def verdict(value: float, limit: float, applies: bool = True) -> str:
            if not applies:
                return "n/a"
            if not complete:  # a figure over a lifecycle that did not finish says nothing against the target
                return "incomplete run"
            return "ok" if value <= limit else "OVER"

        rows = [
            ["machines Ready", f"{f['ready']}/{n}", "all", "ok" if f["ready"] == n else "MISSING"],
            [
                "time to all Ready",
                f"{f['time_to_all_ready_seconds']:.1f} s",
                "<= 60 s" + scale,
                verdict(f["time_to_all_ready_seconds"], 60, at_1000),
            ],
            ["readiness lag p50", f"{f['readiness_lag_p50_seconds']:.2f} s", "", ""],
            [
                "readiness lag p99",
                f"{f['readiness_lag_p99_seconds']:.2f} s",
                "<= 3 s",
                verdict(f["readiness_lag_p99_seconds"], 3),
            ],
            [
                "MAAS requests / machine lifecycle",
                f"{f['maas_requests_per_machine']:.2f}",
                "<= 6",
                verdict(f["maas_requests_per_machine"], 6),
            ],
            [
                "  cross-check: Ready lastTransitionTime",
                f"{f['readiness_lag_p99_condition_seconds']:.2f} s",
                "p99, whole-second clock",
                "",
            ],
            [
                "Kubernetes API writes / machine",
                f"{f['kube_writes_per_machine']:.2f}",
                "<= 5 (6 with the create)",
                verdict(f["kube_writes_per_machine"], 5),
            ],
            [
                "operator peak RSS",
                f"{f['operator_peak_rss_mb']:.0f} MB",
                "<= 200 MB at 1,000",
                verdict(f["operator_peak_rss_mb"], 200, n >= 1000),
            ],
            ["  RSS before the first create", f"{f['operator_rss_before_create_mb']:.0f} MB", "", ""],
            ["operator CPU (create..released)", f"{f['operator_cpu_seconds_window']:.1f} s", "", ""],
            ["  of which create..all Ready", f"{f['operator_cpu_seconds_to_ready']:.1f} s", "", ""],
            ["  of which delete..released", f"{f['operator_cpu_seconds_deletion']:.1f} s", "", ""],
            ["operator CPU (whole run)", f"{f['operator_cpu_seconds_total']:.1f} s", "", ""],
            ["create requests (benchmark side)", f"{f['create_seconds']:.1f} s", "", ""],
            [
                "bench harness CPU in the window (create..all Ready)",
                f"{f['bench_harness_cpu_seconds_to_ready']:.1f} s",
                "not the operator's",
                "",
            ],
            ["  of which its watch thread", f"{f['bench_watch_cpu_seconds_to_ready']:.1f} s", "", ""],
            *(
                [f"{name} CPU in the window", f"{seconds:.1f} s", "", ""]
                for name, seconds in f.get("control_plane_cpu_seconds_to_ready", {}).items()
            ),
            [
                "MAAS simulator CPU in the window (not above)",
                f"{f['simulator_cpu_seconds_to_ready']:.1f} s",
                "",
                "",
            ],
            *([_startup_row(f, verdict)] if "startup_seconds" in f else []),
            [
                "released after delete",
                f"{f['released']}/{n} in {f['release_seconds']:.1f} s",
                "all",
                "ok" if f["released"] == n and not f["maas_machines_still_allocated"] else "LEAK",
            ],
            [
                "simulator invariants",
                "; ".join(f["simulator_invariants"]) or "ok",
                "no violation",
                "BROKEN" if f["simulator_invariants"] else "ok",
            ],
        ]
        self.say("")
        self.say(f"figures ({n} machines, MAAS deploy {self.args.deploy_seconds:g} s)")
        self.say(table(["FIGURE", "VALUE", "TARGET", ""], rows))
        if "shards" in f:
            self.say("")
            self.say(
                "per shard (one operator process each; the target, 4,000 machines on 4 shards: all"
                f" Ready, MAAS requests / lifecycle <= 3.2 (total: {f['maas_requests_per_machine']:.2f}),"
                " readiness lag p99 <= 5 s)"
            )
            shard_rows = [
                [
                    x["shard"],
                    f"{x['ready']}/{x['machines']}",
                    f"{x['time_to_all_ready_seconds']:.1f} s",
                    f"{x['readiness_lag_p50_seconds']:.2f} s",
                    f"{x['readiness_lag_p99_seconds']:.2f} s",
                    f"{x['cpu_seconds_window']:.1f} s",
                    f"{x['peak_rss_mb']:.0f} MB",
                ]
                for x in f["shards"]
            ]
            shard_rows.append(
                [
                    "total",
                    f"{f['ready']}/{n}",
                    f"{f['time_to_all_ready_seconds']:.1f} s",
                    f"{f['readiness_lag_p50_seconds']:.2f} s",
                    f"{f['readiness_lag_p99_seconds']:.2f} s",
                    f"{f['operator_cpu_seconds_window']:.1f} s",
                    f"max {f['operator_peak_rss_mb']:.0f} MB",
                ]
            )
            self.say(
                table(
                    ["SHARD", "READY", "ALL READY AFTER", "LAG P50", "LAG P99", "CPU (WINDOW)", "PEAK RSS"],
                    shard_rows,
                )
            )
        self.say("")
        self.say("MAAS requests by endpoint")
        maas_rows = [
            [method, endpoint + (f"?op={op}" if op else ""), count, f"{count / n:.2f}"]
            for (method, endpoint, op), count in sorted(counters.items(), key=lambda kv: -kv[1])
        ]
        self.say(table(["METHOD", "ENDPOINT", "REQUESTS", "PER MACHINE"], maas_rows))
        self.say("")
        self.say("Kubernetes API writes by verb and resource (benchmark's own creates/delete included)")
        kube_rows = [
            [verb, res + (f"/{sub}" if sub else ""), count, f"{count / n:.2f}"]
            for (verb, res, sub), count in sorted(writes.items(), key=lambda kv: -kv[1])
            if count
        ]
        self.say(table(["VERB", "RESOURCE", "REQUESTS", "PER MACHINE"], kube_rows))
        self.say("")
        self.say("the operator's Kubernetes writes per machine, by kind")
        kinds = f.get("kube_writes_per_machine_by_kind", {})
        self.say(table(["KIND", "PER MACHINE"], [[k, f"{v:.2f}"] for k, v in kinds.items()]))


def _startup_row(f: dict[str, Any], verdict: Callable[[float, float], str]) -> list[str]:
    seconds, cpu = f["startup_seconds"], f.get("startup_cpu_seconds")
    value = f"{seconds:.2f} s" + (f" ({cpu:.2f} s CPU)" if cpu is not None else "")
    return ["operator start-up (to first reconcile)", value, "<= 1.5 s", verdict(seconds, 1.5)]


def _delete_all(kube: Any, namespace: str, cluster: str, attempts: int = 5) -> int:
    """DELETECOLLECTION of the benchmark's MaasMachines; returns the calls made. A loaded apiserver may answer
    504 after its request timeout while it is still marking a thousand objects deleted: that is retried (the
    next call marks what is left), not an end of the run; so is an answer cut off while it is read."""
    for attempt in range(1, attempts + 1):
        try:
            kube.delete_all(MAASMACHINES, namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}")
            return attempt
        except ApiException as exc:
            if exc.status != 504 or attempt == attempts:
                raise
            print(f"  delete-collection answered 504 (attempt {attempt}); retrying", flush=True)
        except ProtocolError as exc:  # the answer (every deleted object) cut off while it was read
            if attempt == attempts:
                raise
            print(f"  delete-collection answer broken off (attempt {attempt}: {exc}); retrying", flush=True)
    return attempts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sigterm_as_interrupt()
    if args.fairness:
        from capmaas_dev.bench.fairness import Fairness

        return Fairness(args).run()
    return Bench(args).run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
