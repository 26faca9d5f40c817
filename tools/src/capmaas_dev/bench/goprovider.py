"""The Go provider side by side: our benchmark's lifecycle and figures, with spectrocloud's Go provider as the
operator.

``python -m capmaas_dev.bench.goprovider --binary PATH --machines N`` runs what
``python -m capmaas_dev.bench`` runs (a local kube-apiserver + etcd + kube-controller-manager, the MAAS
simulator, a CAPI Cluster and N CAPI Machines with bootstrap Secrets, then N MaasMachines; all Ready; one
delete-collection; all released in MAAS) with the Go provider's manager (built by ``hack/go-provider.sh``) in
place of ``capmaas run``:
- its CRDs, read from its source when the benchmark runs (``config/crd/bases`` labelled as its
  ``config/crd/kustomization.yaml`` labels them), instead of ours; the Cluster API core CRDs as ours;
- the MaasCluster and MaasMachines in its schema (:mod:`.goprovider_manifests`); the Cluster, Machines and
  bootstrap Secrets exactly as our benchmark creates them, and CAPI's part played the same way (the Cluster's
  ``infrastructureProvisioned`` set once the MaasCluster is ready);
- the manager with its kubeconfig, metrics and health on loopback, leader election off, its MAAS endpoint and
  key in ``MAAS_ENDPOINT``/``MAAS_API_KEY``, a throwaway serving certificate for its webhook server (it starts
  one; nothing calls it: no webhook configuration is installed, as our benchmark installs none of ours).
The figures are taken the same way: time from the first MaasMachine create to the last ``status.ready`` on a
watch, MAAS requests per lifecycle from the simulator's counters, the apiserver's write counters minus the
benchmark's own writes, peak RSS (VmHWM) and CPU (utime+stime) of the manager process from /proc, and the
load average with each run. By default the whole run is in a network namespace of its own with loopback only
(the manager's webhook server listens on every address it has).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import yaml

from capmaas_dev.bench import goprovider_manifests as G
from capmaas_dev.bench.goprovider_source import read_crd_sources
from capmaas_dev.bench.metrics import (
    WriteKey,
    apiserver_writes,
    harness_writes,
    operator_writes,
    percentile,
    proc_stats,
    settled_writes,
    writes_by_kind,
)
from capmaas_dev.bench.stackrun import phase_timeout, run_on_stack
from capmaas_dev.demo import manifests as M
from capmaas_dev.demo.capi import Capi, MachineSpec, parallel
from capmaas_dev.demo.kube import CLUSTERS, MAASCLUSTERS, MAASMACHINES
from capmaas_dev.demo.progress import PhaseTicker, Tracker, table
from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.demo.stack import OperatorProcess, Stack, StackError, StackOptions, sigterm_as_interrupt
from capmaas_dev.devcluster import ControlPlane, apply_capi_crds, cache_dir
from capmaas_dev.devcluster import process as devprocess
from capmaas_dev.devcluster.pki import make_serving_pki
from capmaas_dev.simulator import Inventory, Timings

CLUSTER = "bench"
#: Set in the re-executed benchmark inside its network namespace (so it does not re-execute again).
NETNS_MARK = "CAPMAAS_GOBENCH_IN_NETNS"
_PR_SET_PDEATHSIG = 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m capmaas_dev.bench.goprovider", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--binary",
        type=Path,
        help="the Go provider's manager (hack/go-provider.sh prints its path; default: the newest"
        " go-provider-* in the cache's bin/)",
    )
    p.add_argument(
        "--source",
        help="the provider's source, to read its CRDs from: a directory or GITDIR@REV (default: the source"
        " recorded beside the binary by hack/go-provider.sh)",
    )
    p.add_argument("--machines", type=int, default=200, help="MaasMachines to provision (200)")
    p.add_argument("--deploy-seconds", type=float, default=0.0, help="simulated MAAS deploy time (0)")
    p.add_argument("--threads", type=int, default=8, help="parallel create requests (8)")
    p.add_argument("--timeout", type=float, default=0.0, help="seconds to wait for Ready (default: scaled)")
    p.add_argument(
        "--machine-concurrency",
        type=int,
        default=G.DEFAULT_MACHINE_CONCURRENCY,
        help=f"the manager's --machine-concurrency ({G.DEFAULT_MACHINE_CONCURRENCY}, its default)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--log", metavar="FILE", help="copy the manager's log to FILE at the end")
    p.add_argument(
        "--no-isolate-network",
        dest="isolate_network",
        action="store_false",
        help="run in this network namespace (default: a new one with loopback only, via unshare)",
    )
    args = p.parse_args(argv)
    if args.machines < 1:
        p.error("--machines must be at least 1")
    if args.machine_concurrency < 1:
        p.error("--machine-concurrency must be at least 1")
    return args


def netns_command(argv: Sequence[str], python: str, *, root: bool) -> list[str]:
    """The command re-running this benchmark (``python -m capmaas_dev.bench.goprovider argv``) in a new
    network namespace whose loopback is brought up first (as root, or mapped to root in a user namespace
    otherwise)."""
    unshare = ["unshare", "--net"] if root else ["unshare", "--net", "--map-root-user"]
    inner = shlex.join([python, "-m", "capmaas_dev.bench.goprovider", *argv])
    return [*unshare, "sh", "-c", f"ip link set lo up && exec {inner}"]


def newest_binary(bin_dir: Path) -> Path | None:
    """The newest ``go-provider-*`` executable in ``bin_dir`` (provenance files left out)."""
    found = [p for p in bin_dir.glob("go-provider-*") if p.suffix != ".json" and os.access(p, os.X_OK)]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (/proc/loadavg)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class GoManagerProcess(OperatorProcess):
    """The Go provider's manager as a child in its own process group (stopped and tailed as ours is)."""

    def __init__(self, binary: Path, args: list[str], env: dict[str, str], namespace: str, log: Path) -> None:
        super().__init__(env, namespace, log)
        self.binary, self.args = binary, args

    def start(self) -> Self:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [str(self.binary), *self.args],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - a SIGKILL of the benchmark takes it down too
            )
        return self


class GoStack(Stack):
    """Our benchmark's stack with the Go provider's CRDs and manager in place of ours."""

    def __init__(
        self, opts: StackOptions, *, binary: Path, crds: list[dict[str, Any]], machine_concurrency: int
    ) -> None:
        super().__init__(opts)
        self.binary, self.crds, self.machine_concurrency = binary, crds, machine_concurrency
        self.keep_log: Path | None = None  # where the manager's log is copied before the directory goes

    def close(self) -> None:
        if self.keep_log is not None and self.operator is not None:
            self.operator.stop()
            with contextlib.suppress(OSError):
                self.keep_log.write_bytes(self.operator.log.read_bytes())
            self.keep_log = None
        super().close()

    def start(self) -> GoStack:
        self.opts.say(f"  working directory {self.workdir} (removed at exit)")
        with self._step("control plane: etcd, kube-apiserver, kube-controller-manager"):
            self.cp = ControlPlane.start(self.workdir / "controlplane")
        with self._step("CRDs: the Go provider's (from its source) and Cluster API core"):
            self._apply_crds()
            apply_capi_crds(self.cp.kubeconfig)
        sim = self._start_simulator()
        with self._step("operator: the Go provider's manager"):
            self.operator = self._manager(sim).start()
            time.sleep(0.3)
            self.check_operator()
        return self

    def _apply_crds(self) -> None:
        assert self.cp is not None
        out = self.workdir / "go-crds"
        out.mkdir()
        for crd in self.crds:
            (out / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd, sort_keys=False))
        self.cp.kubectl("apply", "--server-side", "-f", str(out))
        self.cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(out))

    def _manager(self, sim: SimulatorThread) -> GoManagerProcess:
        assert self.cp is not None
        tmp = self.workdir / "manager-tmp"
        make_serving_pki(G.webhook_cert_dir(tmp))
        ports = G.ManagerPorts(devprocess.free_port(), devprocess.free_port(), devprocess.free_port())
        args = G.manager_args(self.cp.kubeconfig, ports, machine_concurrency=self.machine_concurrency)
        env = G.manager_env(os.environ, maas_endpoint=sim.url, api_key=sim.api_key, tmpdir=tmp)
        return GoManagerProcess(self.binary, args, env, self.namespace, self.workdir / "go-manager.log")


class GoCapi(Capi):
    """CAPI core's part for the Go provider: the same Cluster, Machines and bootstrap Secrets as ours, its
    MaasCluster and MaasMachines in its schema."""

    def create_go_cluster(self) -> None:
        created = self.kube.create(CLUSTERS, M.cluster(self.cluster, self.namespace))
        self.cluster_uid = created["metadata"]["uid"]
        self.kube.create(
            MAASCLUSTERS, G.maascluster(self.cluster, self.namespace, cluster_uid=self.cluster_uid)
        )

    def maasmachine(self, spec: MachineSpec, machine_uid: str) -> dict[str, Any]:
        return G.maasmachine(
            spec.name,
            self.namespace,
            self.cluster,
            machine_uid=machine_uid,
            min_cpu=spec.min_cpu,
            min_memory=spec.min_memory,
            extra_labels=spec.extra_labels,
        )


class GoBench:
    def __init__(self, args: argparse.Namespace, binary: Path, provenance: G.Provenance | None) -> None:
        self.args, self.binary, self.provenance = args, binary, provenance
        self.n: int = args.machines
        self.figures: dict[str, Any] = {
            "provider": "go",
            "binary": str(binary),
            "provenance": dataclasses.asdict(provenance) if provenance else None,
            "machines": self.n,
            "deploy_seconds": args.deploy_seconds,
            "machine_concurrency": args.machine_concurrency,
            "network_namespace": os.environ.get(NETNS_MARK) == "1",
        }

    def say(self, line: str) -> None:
        print(line, flush=True)

    def run(self, crds: list[dict[str, Any]]) -> int:
        n = self.n
        inventory = Inventory.generate(machines=n + n // 20 + 3, zones=3, seed=1)
        timings = Timings(commission=0.0, deploy=self.args.deploy_seconds, release=0.0, erase=0.0)
        what = self.provenance.describe() if self.provenance else str(self.binary)
        self.say(f"Go provider bench: {n} MaasMachines, MAAS deploy {self.args.deploy_seconds:g}s ({what})")
        self.say(f"  CRDs: {', '.join(G.crd_names(crds))}")
        stack = GoStack(
            StackOptions(inventory, timings, namespace="capmaas-bench", say=self.say),
            binary=self.binary,
            crds=crds,
            machine_concurrency=self.args.machine_concurrency,
        )
        stack.keep_log = Path(self.args.log).resolve() if self.args.log else None
        return run_on_stack(stack, self._run, self.say)

    def _run(self, stack: Stack) -> int:
        stack.start()
        kube, sim, proc = stack.kube, stack.sim, stack.operator
        assert kube is not None
        assert sim is not None
        assert proc is not None
        n, ns = self.n, stack.namespace

        def check() -> None:
            if (code := proc.exited()) is not None:
                raise StackError(
                    f"the Go manager exited with code {code}; last lines of its log:\n{proc.tail()}"
                )

        capi = GoCapi(kube, ns, CLUSTER)
        capi.create_go_cluster()
        capi.wait_infrastructure(60, check=check)
        specs = [MachineSpec(f"m{i:05d}", False) for i in range(n)]
        t = time.monotonic()
        uids: dict[str, str] = {}

        def owner(spec: MachineSpec) -> None:
            uids[spec.name] = capi.create_owner(spec)

        parallel(owner, specs, self.args.threads)
        self.say(f"  setup: {n} Machines + bootstrap Secrets ({time.monotonic() - t:.1f}s)")
        watcher = kube.watch(MAASMACHINES, ns)
        tracker = Tracker()
        names = [s.name for s in specs]
        load: dict[str, str] = {}
        try:
            time.sleep(1.0)  # the manager's caches settle; the window starts quiet
            sim.reset_counters()
            writes0 = apiserver_writes(kube.raw_get("/metrics"))
            before = proc_stats(proc.pid)
            load["before"] = loadavg()
            t0 = time.time()
            parallel(lambda s: capi.create_maasmachine(s, uids[s.name]), specs, self.args.threads)
            created = time.time() - t0
            self.say(f"  created {n} MaasMachines in {created:.1f}s; waiting for Ready")
            timeout = phase_timeout(self.args, n)
            tick = PhaseTicker(self.say, tracker).after(check)
            tracker.follow(watcher, lambda: tracker.count(names, ready=True) == n, timeout, check=tick)
            ready = tracker.count(names, ready=True)
            t_ready = tracker.ready_after(names, t0)
            at_ready = proc_stats(proc.pid)
            load["ready"] = loadavg()
            self.say(f"  {ready}/{n} Ready after {t_ready:.1f}s; deleting all")
            deployed = sim.call(lambda _: dict(sim.deployed_at))  # read on the simulator's loop
            lags = tracker.readiness_lags(names, deployed)
            t1 = time.time()
            kube.delete_all(MAASMACHINES, ns, label_selector=f"{M.CLUSTER_NAME_LABEL}={CLUSTER}")
            tracker.follow(watcher, lambda: tracker.count(names, deleted=True) == n, timeout, check=tick)
            gone = tracker.count(names, deleted=True)
            t_gone = time.time() - t1
            held = _wait_released(sim, 30.0)
            t_released = time.time() - t1
            counters = sim.counters()
            writes = settled_writes(lambda: kube.raw_get("/metrics"), quiet=3.0)
            writes.subtract(writes0)
            at_end = proc_stats(proc.pid)
            load["end"] = loadavg()
        finally:
            watcher.stop()
        own = harness_writes(writes, n, 1)
        op_writes = operator_writes(writes, own)
        maas_total = sum(counters.values())
        self.figures.update(
            create_seconds=round(created, 2),
            ready=ready,
            time_to_all_ready_seconds=round(t_ready, 2),
            readiness_lag_p50_seconds=round(percentile(lags, 50), 3),
            readiness_lag_p99_seconds=round(percentile(lags, 99), 3),
            released=gone,
            deleted_seconds=round(t_gone, 2),
            release_seconds=round(t_released, 2),
            maas_machines_still_allocated=held,
            maas_requests_total=maas_total,
            maas_requests_per_machine=round(maas_total / n, 2),
            maas_requests_by_endpoint={
                f"{m} {e}" + (f"?op={op}" if op else ""): c for (m, e, op), c in sorted(counters.items())
            },
            kube_writes_total=op_writes,
            kube_writes_per_machine=round(op_writes / n, 2),
            kube_writes_per_machine_by_kind=writes_by_kind(writes, own, n),
            operator_peak_rss_mb=round(at_end.peak_rss_mb, 1),
            operator_rss_at_ready_mb=round(at_ready.rss_mb, 1),
            operator_rss_before_create_mb=round(before.rss_mb, 1),
            operator_cpu_seconds_window=round(at_end.cpu_seconds - before.cpu_seconds, 2),
            operator_cpu_seconds_to_ready=round(at_ready.cpu_seconds - before.cpu_seconds, 2),
            operator_cpu_seconds_deletion=round(at_end.cpu_seconds - at_ready.cpu_seconds, 2),
            operator_cpu_seconds_total=round(at_end.cpu_seconds, 2),
            loadavg=load,
            simulator_invariants=sim.invariants(),
        )
        self._print(counters, writes)
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(self.figures, indent=2) + "\n")
        return 0 if ready == n and gone == n and held == 0 else 1

    def _print(self, counters: dict[tuple[str, str, str | None], int], writes: Counter[WriteKey]) -> None:
        f, n = self.figures, self.n
        rows = [
            ["machines Ready", f"{f['ready']}/{n}"],
            ["time to all Ready", f"{f['time_to_all_ready_seconds']:.1f} s"],
            [
                "readiness lag p50 / p99",
                f"{f['readiness_lag_p50_seconds']:.2f} s / {f['readiness_lag_p99_seconds']:.2f} s",
            ],
            ["MAAS requests / machine lifecycle", f"{f['maas_requests_per_machine']:.2f}"],
            ["Kubernetes API writes / machine", f"{f['kube_writes_per_machine']:.2f}"],
            ["manager peak RSS (VmHWM)", f"{f['operator_peak_rss_mb']:.1f} MB"],
            ["  RSS before the first create", f"{f['operator_rss_before_create_mb']:.1f} MB"],
            ["  RSS at all Ready", f"{f['operator_rss_at_ready_mb']:.1f} MB"],
            ["manager CPU (create..released)", f"{f['operator_cpu_seconds_window']:.1f} s"],
            ["  of which create..all Ready", f"{f['operator_cpu_seconds_to_ready']:.1f} s"],
            ["  of which delete..released", f"{f['operator_cpu_seconds_deletion']:.1f} s"],
            ["manager CPU (whole run)", f"{f['operator_cpu_seconds_total']:.1f} s"],
            ["released after delete", f"{f['released']}/{n} in {f['release_seconds']:.1f} s"],
            ["MAAS machines still allocated", str(f["maas_machines_still_allocated"])],
            ["simulator invariants", "; ".join(f["simulator_invariants"]) or "ok"],
            ["load average (1/5/15 min)", " | ".join(f"{k} {v}" for k, v in f["loadavg"].items())],
        ]
        self.say("")
        self.say(f"figures (Go provider, {n} machines, MAAS deploy {self.args.deploy_seconds:g} s)")
        self.say(table(["FIGURE", "VALUE"], rows))
        self.say("")
        self.say("MAAS requests by endpoint")
        self.say(
            table(
                ["METHOD", "ENDPOINT", "REQUESTS", "PER MACHINE"],
                [
                    [m, e + (f"?op={op}" if op else ""), c, f"{c / n:.2f}"]
                    for (m, e, op), c in sorted(counters.items(), key=lambda kv: -kv[1])
                ],
            )
        )
        self.say("")
        self.say("Kubernetes API writes by verb and resource (benchmark's own creates/delete included)")
        self.say(
            table(
                ["VERB", "RESOURCE", "REQUESTS", "PER MACHINE"],
                [
                    [v, r + (f"/{sub}" if sub else ""), c, f"{c / n:.2f}"]
                    for (v, r, sub), c in sorted(writes.items(), key=lambda kv: -kv[1])
                    if c
                ],
            )
        )


def _wait_released(sim: SimulatorThread, timeout: float) -> int:
    """MAAS machines still owned (allocated or deployed) once every MaasMachine is gone, after waiting up to
    ``timeout`` seconds for them to be released."""
    deadline = time.monotonic() + timeout
    while True:
        held = sum(1 for m in sim.machine_states().values() if m["owner"] is not None)
        if held == 0 or time.monotonic() > deadline:
            return held
        time.sleep(0.5)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.isolate_network and os.environ.get(NETNS_MARK) != "1":
        cmd = netns_command(argv, sys.executable, root=os.geteuid() == 0)
        os.environ[NETNS_MARK] = "1"
        sys.stdout.flush()
        try:
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            print(f"cannot run in a network namespace of its own ({exc}); --no-isolate-network runs here")
            return 1
    binary = args.binary or newest_binary(cache_dir() / "bin")
    if binary is None or not binary.is_file():
        print(
            f"no Go provider binary{f' at {binary}' if binary else ''}: build it with hack/go-provider.sh"
            " (docs/benchmarks/go-provider.md) and pass --binary"
        )
        return 2
    provenance = G.read_provenance(binary)
    source = args.source or (provenance.provider_source if provenance else "")
    if not source:
        print("no provider source to read its CRDs from: pass --source (a directory or GITDIR@REV)")
        return 2
    try:
        crds = G.labelled_crds(*read_crd_sources(source))
    except G.GoSourceError as exc:
        print(f"FAILED: {exc}")
        return 2
    sigterm_as_interrupt()
    return GoBench(args, binary.resolve(), provenance).run(crds)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
