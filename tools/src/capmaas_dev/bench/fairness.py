"""``--fairness``: one tenant streams N MaasMachines while another creates a few; the small tenant's lag.

Two namespaces, each a tenant with its own MAAS user (its own identity Secret, so its own MAAS session), one
operator process watching both (cluster-wide, as a shared management cluster runs it). The small tenant
first creates ``--small`` MaasMachines ``--rounds`` times on a quiet operator (alone), then the large tenant
starts creating its N and, once a tenth of them are created, the small tenant does the same rounds again
(under the stream). Printed: the small tenant's readiness lag (MAAS Deployed → MaasMachine ready on a watch,
as the main benchmark measures it) and its create → Ready time, alone and under the stream, and their ratio
(the target: p99 under the stream within 2x of alone); and the large tenant's own figures. Figures
only, no assertion on them.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capmaas_dev.bench.metrics import percentile
from capmaas_dev.bench.stackrun import phase_timeout, run_on_stack
from capmaas_dev.demo.capi import Capi, MachineSpec, parallel
from capmaas_dev.demo.kube import MAASMACHINES, Watcher
from capmaas_dev.demo.progress import Tracker, table
from capmaas_dev.demo.stack import OperatorProcess, Stack, StackError, StackOptions
from capmaas_dev.simulator import Inventory, Timings

LARGE_NS, SMALL_NS = "capmaas-bench", "capmaas-bench-small"


class ClusterwideOperator(OperatorProcess):
    """``capmaas run --no-leader-elect`` watching every namespace (both tenants)."""

    def run_args(self) -> list[str]:
        return ["--no-leader-elect"]


@dataclass
class Tenant:
    capi: Capi
    watcher: Watcher
    tracker: Tracker = field(default_factory=Tracker)
    uids: dict[str, str] = field(default_factory=dict)


@dataclass
class Rounds:
    """The small tenant's machines of one phase: readiness lags and create → Ready times."""

    lags: list[float] = field(default_factory=list)
    create_to_ready: list[float] = field(default_factory=list)
    large_created_at_start: list[int] = field(default_factory=list)
    large_ready_at_end: list[int] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "samples": len(self.lags),
            "readiness_lag_p50_seconds": round(percentile(self.lags, 50), 3),
            "readiness_lag_p99_seconds": round(percentile(self.lags, 99), 3),
            "create_to_ready_p50_seconds": round(percentile(self.create_to_ready, 50), 3),
            "create_to_ready_p99_seconds": round(percentile(self.create_to_ready, 99), 3),
            "large_created_at_round_start": self.large_created_at_start,
            "large_ready_at_round_end": self.large_ready_at_end,
        }


class Fairness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n: int = args.machines
        self.small: int = args.small
        self.rounds: int = args.rounds
        self.figures: dict[str, Any] = {"large_machines": self.n, "small_machines": self.small}

    def say(self, line: str) -> None:
        print(line, flush=True)

    def run(self) -> int:
        n, extra = self.n, 2 * self.small * self.rounds
        inventory = Inventory.generate(machines=n + n // 20 + extra + 3, zones=3, seed=1)
        timings = Timings(commission=0.0, deploy=self.args.deploy_seconds, release=0.0, erase=0.0)
        self.say(
            f"capmaas bench --fairness: tenant {LARGE_NS} streams {n} MaasMachines, tenant {SMALL_NS} creates"
            f" {self.small} x {self.rounds} rounds alone, then as many under the stream"
        )
        stack = Stack(StackOptions(inventory, timings, namespace=LARGE_NS, say=self.say))
        return run_on_stack(stack, self._run, self.say)

    def _run(self, stack: Stack) -> int:
        stack.start()
        kube, sim, op = stack.kube, stack.sim, stack.operator
        assert kube is not None
        assert sim is not None
        assert op is not None
        op.stop()  # it watches the large tenant's namespace only: one process for both instead
        proc = ClusterwideOperator(op.env, "", stack.workdir / "operator-clusterwide.log").start()
        stack.operator = proc

        def check() -> None:
            if (code := proc.exited()) is not None:
                raise StackError(f"the operator exited with code {code}; last lines:\n{proc.tail()}")

        kube.create_namespace(SMALL_NS)
        # Its own MAAS user (its own identity, session and poller); an admin, as its DNS record needs.
        small_key = sim.call(lambda s: s.add_user("small-tenant", admin=True).api_key)
        large = Tenant(Capi(kube, LARGE_NS, "large"), kube.watch(MAASMACHINES, LARGE_NS))
        small = Tenant(Capi(kube, SMALL_NS, "small"), kube.watch(MAASMACHINES, SMALL_NS))
        try:
            return _Run(self, sim, large, small, check).measure(small_key)
        finally:
            large.watcher.stop()
            small.watcher.stop()

    def _print(self) -> None:
        f = self.figures
        a, s = f["alone"], f["stream"]

        def ratio(key: str) -> str:
            return f"{s[key] / a[key]:.2f}x" if a[key] else "n/a"

        rows = [
            [
                "readiness lag p50",
                f"{a['readiness_lag_p50_seconds']:.2f} s",
                f"{s['readiness_lag_p50_seconds']:.2f} s",
                ratio("readiness_lag_p50_seconds"),
                "",
            ],
            [
                "readiness lag p99",
                f"{a['readiness_lag_p99_seconds']:.2f} s",
                f"{s['readiness_lag_p99_seconds']:.2f} s",
                ratio("readiness_lag_p99_seconds"),
                "<= 2x",
            ],
            [
                "create -> Ready p50",
                f"{a['create_to_ready_p50_seconds']:.2f} s",
                f"{s['create_to_ready_p50_seconds']:.2f} s",
                ratio("create_to_ready_p50_seconds"),
                "",
            ],
            [
                "create -> Ready p99",
                f"{a['create_to_ready_p99_seconds']:.2f} s",
                f"{s['create_to_ready_p99_seconds']:.2f} s",
                ratio("create_to_ready_p99_seconds"),
                "",
            ],
        ]
        self.say("")
        self.say(f"small tenant ({a['samples']} machines alone, {s['samples']} under the stream of {self.n})")
        self.say(table(["FIGURE", "ALONE", "UNDER THE STREAM", "RATIO", "TARGET"], rows))
        self.say(
            f"  the large tenant had created {s['large_created_at_round_start']} at each round's start,"
            f" had Ready {s['large_ready_at_round_end']} at each round's end"
        )
        self.say("")
        self.say(
            f"large tenant: {f['large_ready']}/{self.n} Ready,"
            f" creates took {f['large_create_seconds']:.1f} s,"
            f" all Ready after {f['large_time_to_all_ready_seconds']} s, readiness lag p50 / p99"
            f" {f['large_readiness_lag_p50_seconds']:.2f} / {f['large_readiness_lag_p99_seconds']:.2f} s;"
            f" simulator invariants: {'; '.join(f['simulator_invariants']) or 'ok'}"
        )


class _Run:
    """One measurement: the stack's simulator, both tenants, and the large tenant's create count so far."""

    def __init__(
        self, bench: Fairness, sim: Any, large: Tenant, small: Tenant, check: Callable[[], None]
    ) -> None:
        self.bench, self.sim, self.large, self.small, self.check = bench, sim, large, small, check
        self.created = [0]

    def measure(self, small_key: str) -> int:
        b, sim, large, small, check = self.bench, self.sim, self.large, self.small, self.check
        large.capi.create_cluster(sim.url, sim.api_key)
        small.capi.create_cluster(sim.url, small_key)
        large.capi.wait_infrastructure(120, check=check)
        small.capi.wait_infrastructure(120, check=check)
        large_specs = [MachineSpec(f"m{i:05d}", False) for i in range(b.n)]
        phases = {
            phase: [[MachineSpec(f"{phase}-{r}-{i}", False) for i in range(b.small)] for r in range(b.rounds)]
            for phase in ("alone", "stream")
        }
        t = time.monotonic()
        parallel(lambda s: large.uids.__setitem__(s.name, large.capi.create_owner(s)), large_specs, 8)
        small_specs = [s for rounds in phases.values() for specs in rounds for s in specs]
        parallel(lambda s: small.uids.__setitem__(s.name, small.capi.create_owner(s)), small_specs, 4)
        b.say(f"  setup: {len(large_specs) + len(small_specs)} Machines + bootstrap Secrets"
                 f" ({time.monotonic() - t:.1f}s)")  # fmt: skip
        time.sleep(1.0)
        created = self.created
        alone = self.rounds(phases["alone"])
        b.say(f"  alone: small tenant's readiness lag p99 {percentile(alone.lags, 99):.2f} s")

        def stream() -> None:
            def one(spec: MachineSpec) -> None:
                large.capi.create_maasmachine(spec, large.uids[spec.name])
                created[0] += 1

            parallel(one, large_specs, b.args.threads)

        errors: list[BaseException] = []

        def streamer() -> None:
            try:
                stream()
            except BaseException as exc:  # reported after the rounds
                errors.append(exc)

        t0 = time.time()
        thread = threading.Thread(target=streamer, name="large-tenant", daemon=True)
        thread.start()
        while created[0] < max(1, b.n // 10) and thread.is_alive():
            check()
            time.sleep(0.1)
        under = self.rounds(phases["stream"])
        b.say(f"  under the stream: small tenant's readiness lag p99 {percentile(under.lags, 99):.2f} s")
        thread.join()
        if errors:
            raise StackError(f"the large tenant's creates failed: {errors[0]}")
        create_seconds = time.time() - t0
        names = [s.name for s in large_specs]
        timeout = phase_timeout(b.args, b.n)
        large.tracker.follow(
            large.watcher, lambda: large.tracker.count(names, ready=True) == b.n, timeout, check=check
        )
        deployed = sim.call(lambda s: dict(sim.deployed_at))
        large_lags = large.tracker.readiness_lags(names, deployed)
        ready_times = [r.ready_at for nm in names if (r := large.tracker.rows.get(nm)) and r.ready_at]
        b.figures.update(
            alone=alone.figures(),
            stream=under.figures(),
            large_ready=large.tracker.count(names, ready=True),
            large_create_seconds=round(create_seconds, 2),
            large_time_to_all_ready_seconds=round(max(ready_times) - t0, 2) if ready_times else None,
            large_readiness_lag_p50_seconds=round(percentile(large_lags, 50), 3),
            large_readiness_lag_p99_seconds=round(percentile(large_lags, 99), 3),
            simulator_invariants=sim.invariants(),
        )
        b._print()
        if b.args.json:
            with open(b.args.json, "w", encoding="utf-8") as f:
                json.dump(b.figures, f, indent=2)
        complete = len(alone.lags) == len(under.lags) == b.small * b.rounds
        return 0 if complete and b.figures["large_ready"] == b.n else 1

    def rounds(self, rounds: list[list[MachineSpec]]) -> Rounds:
        """The small tenant's rounds: each creates its machines and waits for all of them Ready."""
        sim, small, large = self.sim, self.small, self.large
        out = Rounds()
        timeout = max(120.0, self.bench.args.deploy_seconds * 3 + 60)
        for specs in rounds:
            names = [s.name for s in specs]
            out.large_created_at_start.append(self.created[0])
            t0 = time.time()
            parallel(lambda s: small.capi.create_maasmachine(s, small.uids[s.name]), specs, len(specs))
            small.tracker.follow(small.watcher, _all_ready(small.tracker, names), timeout, check=self.check)
            deployed = sim.call(lambda s: dict(sim.deployed_at))
            out.lags += small.tracker.readiness_lags(names, deployed)
            rows = [r for nm in names if (r := small.tracker.rows.get(nm))]
            out.create_to_ready += [r.ready_at - t0 for r in rows if r.ready_at is not None]
            large.tracker.apply(large.watcher.drain(timeout=0))
            out.large_ready_at_end.append(large.tracker.count(list(large.tracker.rows), ready=True))
        return out


def _all_ready(tracker: Tracker, names: list[str]) -> Callable[[], bool]:
    return lambda: tracker.count(names, ready=True) == len(names)
