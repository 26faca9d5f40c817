"""``capmaas demo`` (``make demo``): the whole system on this machine, one sample cluster, start to finish.

Starts a local management control plane with the CRDs, the real Cluster API core manager, a second control
plane standing in for the workload cluster, the MAAS simulator (sample inventory, deploys of a few seconds)
and the operator (``capmaas run``). Then it does what a Cluster API user does: applies a Cluster, its
MaasCluster, control-plane Machines with their MaasMachines (no control-plane provider runs here), and a
MachineDeployment whose MachineSet creates the worker Machines and clones their MaasMachines from a
MaasMachineTemplate. It prints one line per change while MAAS allocates and deploys and while CAPI's Machines
reach Running (the stand-in registers a Node per deployed machine, capmaas sets its providerID, CAPI its
nodeRef); ends with a table of every machine and ``clusterctl describe cluster``; then deletes the Cluster
(CAPI deletes the Machines, capmaas releases every MAAS machine) and checks MAAS.

Exit status 0 only when every Machine went Running and everything was released again. Everything it started
is stopped and its temporary directory removed on any exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from capmaas.api import conditions as C
from capmaas_dev.demo import manifests as M
from capmaas_dev.demo.capi import CapiError, MachineSpec, condition_message
from capmaas_dev.demo.kube import (
    CLUSTERS,
    MAASCLUSTERS,
    MAASMACHINES,
    MAASMACHINETEMPLATES,
    MACHINEDEPLOYMENTS,
    MACHINES,
    Kube,
    Watcher,
)
from capmaas_dev.demo.progress import Row, Tracker, table
from capmaas_dev.demo.stack import Stack, StackError, StackOptions, sigterm_as_interrupt
from capmaas_dev.devcluster import MissingToolError, StartError, find_binary
from capmaas_dev.devcluster.capi import CapiStartError
from capmaas_dev.devcluster.workload import kubeconfig_secret
from capmaas_dev.simulator import LXD_INVENTORY, SAMPLE_INVENTORY, Inventory, Timings

CLUSTER = "demo"
WORKERS = f"{CLUSTER}-workers"  # the MachineDeployment and its MaasMachineTemplate
TERMINAL = frozenset({C.RETRIES_EXHAUSTED_REASON})
#: The stand-in's "kubelet" registers its Node the moment MAAS reports a machine Deployed, so the operator
#: need not wait the default 30 s (sized for a real OS booting) before looking for it again.
OPERATOR_ENV = {"CAPMAAS_MACHINE__NODE_RETRY": "2"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--control-planes", type=int, default=3, metavar="N", help="control-plane machines (3)"
    )
    parser.add_argument("--workers", type=int, default=3, metavar="N", help="worker machines (3)")
    parser.add_argument(
        "--deploy-seconds", type=float, default=4.0, metavar="S", help="simulated MAAS deploy time (4)"
    )
    parser.add_argument(
        "--inventory",
        metavar="FILE",
        help="simulator inventory (default: the simulator's sample inventory if the machines fit)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="give up after S seconds (300)"
    )
    parser.add_argument(
        "--lxd",
        action="store_true",
        help="LXD flavour: every machine is a VM composed on a MAAS VM host (the simulator's lxd inventory)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the cluster and everything running (print KUBECONFIG and commands to look around) until "
        "Ctrl-C",
    )


def plan(args: argparse.Namespace) -> tuple[Inventory, str, list[MachineSpec]]:
    """The inventory and the machines. The sample inventory has three control-plane machines (tag
    ``control-plane``, one per zone) and eight in the ``workers`` pool; larger clusters get generated
    ones."""
    cps, workers = args.control_planes, args.workers
    if cps < 1 or workers < 0:
        raise SystemExit("capmaas demo: need --control-planes >= 1 and --workers >= 0")
    if args.lxd:
        source = args.inventory or str(LXD_INVENTORY)
        specs = [MachineSpec(f"cp-{i}", True, lxd_disk_gb=20) for i in range(cps)]
        specs += [MachineSpec(f"worker-{i}", False, lxd_disk_gb=20) for i in range(workers)]
        return Inventory.from_yaml(source), source, specs
    if args.inventory:
        source, inventory = args.inventory, Inventory.from_yaml(args.inventory)
        sample = False
    elif cps <= 3 and workers <= 8 and SAMPLE_INVENTORY.is_file():
        source, inventory, sample = str(SAMPLE_INVENTORY), Inventory.from_yaml(SAMPLE_INVENTORY), True
    else:
        total = cps + workers + 3
        source, inventory, sample = (
            f"generated ({total} machines, 3 zones)",
            Inventory.generate(total, 3),
            False,
        )
    specs = [MachineSpec(f"cp-{i}", True, tags=("control-plane",) if sample else ()) for i in range(cps)]
    specs += [
        MachineSpec(f"worker-{i}", False, resource_pool="workers" if sample else None) for i in range(workers)
    ]
    return inventory, source, specs


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.tw = time.time()  # progress lines count from the moment the cluster is applied
        self.stages: list[tuple[str, float]] = []
        self._machine_phase: dict[str, str] = {}
        self._last_poll = 0.0
        self._cluster_ready = False

    def say(self, line: str) -> None:
        print(line, flush=True)

    def line(self, at: float, row: Row) -> None:
        if row.phase == "Pending":
            return
        extra = row.address if row.phase == "Ready" else ""
        if not extra and row.phase == row.reason:  # waiting or failing: say on what
            extra = row.message[:70]
        zone, sid = row.zone or "-", row.system_id or "-"
        self.say(f"{at - self.tw:7.1f}s  {row.name:<26} {row.phase:<26} {zone:<6} {sid:<7} {extra}".rstrip())

    def run(self) -> int:
        inventory, source, specs = plan(self.args)
        cps = [s for s in specs if s.control_plane]
        workers = [s for s in specs if not s.control_plane]
        # Composed LXD VMs commission before they can be deployed; bare metal here is commissioned already.
        commission = 2.0 if self.args.lxd else 0.0
        timings = Timings(commission=commission, deploy=self.args.deploy_seconds, release=1.0, erase=2.0)
        self.say(
            f"capmaas demo: cluster {CLUSTER!r} on the Cluster API core: {len(cps)} control-plane Machines "
            f"and a MachineDeployment of {len(workers)} workers, "
            f"{'LXD VMs' if self.args.lxd else 'bare metal'} on a simulated MAAS ({source}; "
            f"deploys take {self.args.deploy_seconds:g}s)"
        )
        stack = Stack(
            StackOptions(inventory, timings, say=self.say, capi_core=True, operator_env=dict(OPERATOR_ENV))
        )
        try:
            return self._run(stack, cps, workers)
        except (StackError, CapiError, MissingToolError, StartError, CapiStartError) as exc:
            self.say(f"FAILED: {exc}")
            if isinstance(exc, CapiError):
                self._logs(stack)
            return 1
        except KeyboardInterrupt:
            self.say("interrupted: stopping everything")
            return 130
        finally:
            stack.close()
            stopped = stack.timings.get("stop")
            took = f" in {stopped:.1f}s" if stopped is not None else ""
            self.say(f"cleaned up{took} (processes stopped, {stack.workdir} removed)")

    def _run(self, stack: Stack, cps: list[MachineSpec], workers: list[MachineSpec]) -> int:
        t = time.monotonic()
        stack.start()
        self.stages.append(("everything up", time.monotonic() - t))
        assert stack.kube is not None
        assert stack.sim is not None
        sim, kube, ns = stack.sim, stack.kube, stack.namespace
        dns_before = sim.call(lambda s: {r.name for r in s.state.dns_resources.values()})
        owned_before = {sid for sid, m in sim.machine_states().items() if m["owner"] is not None}  # VM hosts
        total = len(cps) + len(workers)
        watcher = kube.watch(MAASMACHINES, ns)
        tracker = Tracker()
        try:
            self.say(
                f"applying Cluster {CLUSTER}, MaasCluster, {len(cps)} control-plane Machines + MaasMachines, "
                f"MaasMachineTemplate and MachineDeployment {WORKERS} (replicas {len(workers)})"
            )
            self.tw = time.time()
            self._apply(stack, cps, workers)
            self.say(f"{time.time() - self.tw:7.1f}s  applied")
            done = tracker.follow(
                watcher,
                lambda: self._provisioned(kube, ns, tracker, total),
                self.args.timeout,
                on_change=self.line,
                check=stack.check_operator,
            )
            took = time.time() - self.tw
            self.stages.append(("cluster applied -> every Machine Running", took))
            if done and workers:
                self._md_available(stack, len(workers))
            machines = self._machines(kube, ns)
            names = self._names(tracker)
            n_ready = tracker.count(names, ready=True)
            n_running = sum(1 for m in machines.values() if _running(m))
            all_up = done and n_ready == total and n_running == total
            self._table(tracker, names, machines, sim.machine_states())
            self.say(
                f"{n_ready}/{total} machines Ready (MaasMachines), {n_running}/{total} Machines Running with "
                f"a nodeRef in {took:.1f}s"
            )
            self._describe(stack)
            if not all_up:
                self._explain(tracker, names, machines, stack)
            if self.args.keep:
                return self._keep(stack, all_up)
            released = self._delete(stack, watcher, tracker, dns=dns_before, owned=owned_before)
        finally:
            watcher.stop()
        total_s = time.monotonic() - self.t0
        ok = all_up and released
        stages = ", ".join(f"{what} {secs:.1f}s" for what, secs in self.stages)
        self.say(f"{'OK' if ok else 'FAILED'}: total {total_s:.1f}s ({stages})")
        return 0 if ok else 1

    # -- what a CAPI user applies ---------------------------------------------------------------------------
    def _apply(self, stack: Stack, cps: list[MachineSpec], workers: list[MachineSpec]) -> None:
        assert stack.kube is not None
        assert stack.sim is not None
        assert stack.workload is not None
        kube, ns, sim = stack.kube, stack.namespace, stack.sim
        identity = f"{CLUSTER}-maas-identity"
        kube.create_secret(M.identity_secret(identity, ns, sim.url, sim.api_key))
        kube.create(CLUSTERS, M.cluster(CLUSTER, ns))
        kube.create(MAASCLUSTERS, M.maascluster(CLUSTER, ns, identity=identity))
        # Where CAPI (ClusterCache) and capmaas (providerID on the Node) find the workload cluster.
        kubeconfig = stack.workload.kubeconfig.read_bytes()
        kube.create_secret(kubeconfig_secret(f"{CLUSTER}-kubeconfig", ns, CLUSTER, kubeconfig))
        if workers:
            w = workers[0]
            kube.create_secret(
                M.bootstrap_secret(f"{WORKERS}-bootstrap", ns, CLUSTER, M.cloud_config(WORKERS))
            )
            spec = M.maasmachine_spec(
                min_cpu=w.min_cpu,
                min_memory=w.min_memory,
                tags=list(w.tags) or None,
                resource_pool=w.resource_pool,
                lxd_config=None if w.lxd_disk_gb is None else {"storage": {"size": w.lxd_disk_gb}},
            )
            kube.create(MAASMACHINETEMPLATES, M.maasmachinetemplate(WORKERS, ns, CLUSTER, spec))
            kube.create(
                MACHINEDEPLOYMENTS,
                M.machinedeployment(
                    WORKERS,
                    ns,
                    CLUSTER,
                    template=WORKERS,
                    replicas=len(workers),
                    bootstrap=f"{WORKERS}-bootstrap",
                ),
            )
        for cp in cps:
            secret = f"{cp.name}-bootstrap"
            kube.create_secret(M.bootstrap_secret(secret, ns, CLUSTER, M.cloud_config(cp.name)))
            kube.create(
                MACHINES,
                M.machine(
                    cp.name, ns, CLUSTER, control_plane=True, bootstrap=secret, version=M.KUBERNETES_VERSION
                ),
            )
            kube.create(
                MAASMACHINES,
                M.maasmachine(
                    cp.name,
                    ns,
                    CLUSTER,
                    control_plane=True,
                    min_cpu=cp.min_cpu,
                    min_memory=cp.min_memory,
                    tags=list(cp.tags) or None,
                    resource_pool=cp.resource_pool,
                    lxd_config=None if cp.lxd_disk_gb is None else {"storage": {"size": cp.lxd_disk_gb}},
                ),
            )

    # -- following CAPI ------------------------------------------------------------------------------------
    def _machines(self, kube: Kube, ns: str) -> dict[str, dict[str, Any]]:
        items = kube.list(MACHINES, ns, f"{M.CLUSTER_NAME_LABEL}={CLUSTER}")
        return {m["metadata"]["name"]: m for m in items}

    def _poll(self, kube: Kube, ns: str) -> dict[str, dict[str, Any]] | None:
        """CAPI's side, at most twice a second: the MaasCluster once, then each Machine's phase as it changes
        (one line each). None when polled too recently."""
        now = time.monotonic()
        if now - self._last_poll < 0.5:
            return None
        self._last_poll = now
        at = time.time() - self.tw
        if not self._cluster_ready:
            mc = kube.get(MAASCLUSTERS, ns, CLUSTER) or {}
            endpoint = (mc.get("spec") or {}).get("controlPlaneEndpoint") or {}
            if (mc.get("status") or {}).get("ready") and endpoint.get("host"):
                self._cluster_ready = True
                zones = ", ".join(
                    d.get("name", "") for d in (mc.get("status") or {}).get("failureDomains") or ()
                )
                self.say(
                    f"{at:7.1f}s  MaasCluster {CLUSTER} ready: endpoint {endpoint.get('host')}:"
                    f"{endpoint.get('port')}, failure domains {zones}"
                )
        machines = self._machines(kube, ns)
        for name, m in sorted(machines.items()):
            st = m.get("status") or {}
            phase = str(st.get("phase") or "Pending")
            node = (st.get("nodeRef") or {}).get("name")
            shown = f"{phase} (node {node})" if node else phase
            if self._machine_phase.get(name) != shown and phase != "Pending":
                self._machine_phase[name] = shown
                self.say(f"{at:7.1f}s  {name:<26} Machine {shown}")
        return machines

    def _provisioned(self, kube: Kube, ns: str, tracker: Tracker, total: int) -> bool:
        machines = self._poll(kube, ns)
        names = self._names(tracker)
        if tracker.failed(names, TERMINAL):
            return True
        if machines is None or len(names) < total or tracker.count(names, ready=True) < total:
            return False
        return len(machines) == total and all(_running(m) for m in machines.values())

    def _md_available(self, stack: Stack, replicas: int) -> None:
        """Wait (briefly) until CAPI counts the MachineDeployment's replicas available."""
        assert stack.kube is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stack.check_operator()
            md = stack.kube.get(MACHINEDEPLOYMENTS, stack.namespace, WORKERS) or {}
            available = (md.get("status") or {}).get("availableReplicas") or 0
            if available >= replicas:
                at = time.time() - self.tw
                self.say(f"{at:7.1f}s  MachineDeployment {WORKERS}: {available}/{replicas} available")
                return
            time.sleep(0.5)

    @staticmethod
    def _names(tracker: Tracker) -> list[str]:
        """MaasMachine names: control planes first, then workers, each by name."""
        rows = tracker.rows.values()
        return sorted((r.name for r in rows), key=lambda n: (tracker.rows[n].role != "control-plane", n))

    # -- the ending ----------------------------------------------------------------------------------------
    def _table(
        self,
        tracker: Tracker,
        names: list[str],
        machines: dict[str, dict[str, Any]],
        maas: dict[str, dict[str, Any]],
    ) -> None:
        rows = []
        # A Machine's MaasMachine is its infrastructureRef (the MachineSet names both alike, but need not).
        by_infra = {
            ((m.get("spec") or {}).get("infrastructureRef") or {}).get("name"): m for m in machines.values()
        }
        for n in names:
            r = tracker.rows.get(n) or Row(n)
            state = maas.get(r.system_id, {}).get("status_name", "-") if r.system_id else "-"
            host = maas.get(r.system_id, {}).get("hostname", "-") if r.system_id else "-"
            ready = "yes" if r.ready else "no"
            st = (by_infra.get(n) or {}).get("status") or {}
            phase = st.get("phase") or "-"
            node = (st.get("nodeRef") or {}).get("name") or "-"
            rows.append(
                [
                    r.name,
                    r.role,
                    r.zone or "-",
                    r.system_id or "-",
                    host,
                    state,
                    r.address or "-",
                    ready,
                    phase,
                    node,
                ]
            )
        self.say("")
        headers = [
            "NAME", "ROLE", "ZONE", "SYSTEM ID", "MAAS HOST", "MAAS STATE", "ADDRESS", "READY",
            "MACHINE", "NODE",
        ]  # fmt: skip
        self.say(table(headers, rows))
        self.say("")

    def _describe(self, stack: Stack) -> None:
        """``clusterctl describe cluster``, as a CAPI user would look at the result."""
        args = ["describe", "cluster", CLUSTER, "-n", stack.namespace, "--grouping=false"]
        cmd = [*clusterctl_command(stack), *args, "--kubeconfig", str(stack.kubeconfig)]
        self.say(f"$ clusterctl describe cluster {CLUSTER} -n {stack.namespace} --grouping=false")
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=60, check=False, env=clusterctl_env(stack)
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.say(f"  clusterctl describe failed: {exc}")
            return
        text = out.stdout if out.returncode == 0 else f"(exit {out.returncode}) {out.stderr.strip()}"
        self.say("\n".join(line.rstrip() for line in text.rstrip().splitlines()))
        self.say(
            "  (no control-plane provider runs here: the control-plane Machines stand alone, and for a "
            "Cluster without\n  spec.controlPlaneRef Cluster API reports ControlPlaneAvailable Unknown, so "
            "the Cluster is not Available)"
        )
        self.say("")

    def _explain(
        self, tracker: Tracker, names: list[str], machines: dict[str, dict[str, Any]], stack: Stack
    ) -> None:
        for n in names:
            r = tracker.rows.get(n)
            if r is None or not r.ready:
                why = f"{r.reason}: {r.message}" if r else "no MaasMachine seen"
                self.say(f"  {n} not Ready: {why}")
        for n, m in sorted(machines.items()):
            if not _running(m):
                self.say(
                    f"  Machine {n} {(m.get('status') or {}).get('phase')}: {condition_message(m, 'Ready')}"
                )
        self._logs(stack)

    def _logs(self, stack: Stack) -> None:
        if stack.operator is not None:
            self.say(f"last lines of the operator log:\n{stack.operator.tail(20)}")
        if stack.capi is not None:
            self.say(f"last lines of the cluster-api log:\n{stack.capi.tail(10)}")

    def _keep(self, stack: Stack, all_up: bool) -> int:
        assert stack.sim is not None
        assert stack.operator is not None
        assert stack.capi is not None
        assert stack.workload_cp is not None
        ns = stack.namespace
        env = "CLUSTERCTL_DISABLE_VERSIONCHECK=true"  # clusterctl would ask the internet for a newer release
        clusterctl = shlex.join(clusterctl_command(stack))
        kubectl = str(kubectl_binary())
        self.say("--keep: the cluster and everything stay up until Ctrl-C; in another terminal:")
        self.say(f"  export KUBECONFIG={stack.kubeconfig}")
        self.say(f"  export PATH={Path(kubectl).parent}:$PATH")
        self.say(f"  kubectl get cluster,machinedeployments,machinesets,machines,maasmachines -n {ns}")
        self.say(f"  {env} {clusterctl} describe cluster {CLUSTER} -n {ns} --grouping=false")
        self.say(f"  kubectl scale machinedeployment {WORKERS} -n {ns} --replicas=4")
        self.say(
            f"  kubectl --kubeconfig {stack.workload_cp.kubeconfig} get nodes -o wide  # the workload cluster"
        )
        self.say(
            f"  kubectl delete cluster {CLUSTER} -n {ns}   # CAPI deletes the Machines, MAAS releases them"
        )
        self.say(f"  MAAS simulator: {stack.sim.url}/  (API key {stack.sim.api_key})")
        self.say(f"  logs: operator {stack.operator.log}, cluster-api {stack.capi.log}")
        try:
            while True:
                stack.check_operator()
                time.sleep(1)
        except KeyboardInterrupt:
            self.say("stopping")
        return 0 if all_up else 1

    def _delete(
        self, stack: Stack, watcher: Watcher, tracker: Tracker, *, dns: set[str], owned: set[str]
    ) -> bool:
        """Delete the Cluster as a user does and let CAPI take it apart; then check MAAS: every machine we had
        is Ready again (or gone, for a decomposed LXD VM), nothing new is owned, no DNS record is left, the
        simulator is consistent."""
        assert stack.sim is not None
        assert stack.kube is not None
        sim, kube, ns = stack.sim, stack.kube, stack.namespace
        names = self._names(tracker)
        sids = {r.system_id for n in names if (r := tracker.rows.get(n)) and r.system_id}
        self.say(
            f"$ kubectl delete cluster {CLUSTER} -n {ns}  # CAPI deletes the MachineDeployment and the "
            "Machines, each Machine its MaasMachine (capmaas releases it in MAAS), then the MaasCluster"
        )
        self.tw = time.time()
        kube.delete(CLUSTERS, ns, CLUSTER)
        last = [0.0]

        def gone() -> bool:
            if tracker.count(names, deleted=True) < len(names) or time.monotonic() - last[0] < 0.5:
                return False
            last[0] = time.monotonic()
            return kube.get(CLUSTERS, ns, CLUSTER) is None and kube.get(MAASCLUSTERS, ns, CLUSTER) is None

        deleted = tracker.follow(
            watcher, gone, self.args.timeout, on_change=self.line, check=stack.check_operator
        )
        took = time.time() - self.tw
        self.stages.append(("Cluster deleted -> every MAAS machine released", took))
        # What the user created beside the Cluster (CAPI owns none of it).
        kube.delete(MAASMACHINETEMPLATES, ns, WORKERS)
        for secret in [f"{n}-bootstrap" for n in names] + [
            f"{WORKERS}-bootstrap",
            f"{CLUSTER}-maas-identity",
        ]:
            kube.delete_secret(ns, secret)
        maas = sim.machine_states()
        held = sorted(sid for sid, m in maas.items() if m["owner"] is not None and sid not in owned)
        released = [sid for sid in sids if sid not in maas or maas[sid]["status_name"] == "Ready"]
        dns_left = sim.call(lambda s: {r.name for r in s.state.dns_resources.values()}) - dns
        problems = sim.invariants()
        left = len(self._machines(kube, ns))
        self.say(
            f"Cluster deleted in {took:.1f}s: Machines left: {left}; "
            f"{'decomposed' if self.args.lxd else 'released'} {len(released)}/{len(sids)} MAAS machines; "
            f"machines still allocated: {len(held)}; DNS records left: {len(dns_left)}; "
            f"simulator invariants: {problems or 'ok'}"
        )
        if not deleted:
            self.say(f"  the cluster was not fully deleted within {self.args.timeout:.0f}s")
            self._explain(tracker, names, self._machines(kube, ns), stack)
        return (
            deleted
            and left == 0
            and len(released) == len(sids)
            and not held
            and not dns_left
            and not problems
        )


def _running(machine: dict[str, Any]) -> bool:
    st = machine.get("status") or {}
    return (
        st.get("phase") == "Running"
        and bool(st.get("nodeRef"))
        and not machine["metadata"].get("deletionTimestamp")
    )


def kubectl_binary() -> Path:
    from capmaas_dev.devcluster import kubectl_path

    return kubectl_path()


def clusterctl_command(stack: Stack) -> list[str]:
    """clusterctl (the one ``make controlplane`` built; the caller adds ``--kubeconfig`` or exports it)."""
    return [str(find_binary("clusterctl"))]


def clusterctl_env(stack: Stack) -> dict[str, str]:
    """Offline: no version check (it would call out to the internet), a private HOME for its config."""
    home = stack.workdir / "clusterctl"
    home.mkdir(exist_ok=True)
    return {**os.environ, "CLUSTERCTL_DISABLE_VERSIONCHECK": "true", "HOME": str(home)}


def run(args: argparse.Namespace) -> int:
    sigterm_as_interrupt()
    return Demo(args).run()
