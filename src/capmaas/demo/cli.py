"""``capmaas demo`` (``make demo``): the whole system on this machine, one sample cluster, start to finish.

Starts a local control plane with the CRDs, the MAAS simulator (sample inventory, deploys of a few seconds)
and the operator (``capmaas run``); plays Cluster API core (:mod:`capmaas.demo.capi`) for a cluster of
control-plane and worker machines; prints one line per change while MAAS allocates and deploys; ends with a
table of every machine and the time it took; then deletes the cluster and shows the MAAS machines released.
Exit status 0 only when every machine went Ready and everything was released again. Everything it started
is stopped and its temporary directory removed on any exit, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from capmaas.api import conditions as C
from capmaas.demo.capi import Capi, CapiError, MachineSpec
from capmaas.demo.kube import MAASMACHINES, Watcher
from capmaas.demo.progress import Row, Tracker, table
from capmaas.demo.stack import Stack, StackError, StackOptions, sigterm_as_interrupt
from capmaas.devcluster import MissingToolError, StartError
from capmaas.simulator import Inventory, Timings

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SAMPLE_INVENTORY = EXAMPLES / "inventory-sample.yaml"
LXD_INVENTORY = EXAMPLES / "inventory-lxd.yaml"
CLUSTER = "demo"
TERMINAL = frozenset({C.RETRIES_EXHAUSTED_REASON})


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
        help="simulator inventory (default: examples/inventory-sample.yaml if the machines fit)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="give up after S seconds (300)"
    )
    parser.add_argument(
        "--lxd",
        action="store_true",
        help="LXD flavour: every machine is a VM composed on a MAAS VM host (examples/inventory-lxd.yaml)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave everything running (print KUBECONFIG and the simulator URL) until Ctrl-C",
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
        self.tw = time.time()  # progress lines count from the moment the machines are created

    def say(self, line: str) -> None:
        print(line, flush=True)

    def line(self, at: float, row: Row) -> None:
        if row.phase == "Pending":
            return
        extra = row.address if row.phase == "Ready" else ""
        if not extra and row.phase == row.reason:  # waiting or failing: say on what
            extra = row.message[:70]
        zone, sid = row.zone or "-", row.system_id or "-"
        self.say(f"{at - self.tw:7.1f}s  {row.name:<10} {row.phase:<26} {zone:<6} {sid:<7} {extra}".rstrip())

    def run(self) -> int:
        inventory, source, specs = plan(self.args)
        names = [s.name for s in specs]
        # Composed LXD VMs commission before they can be deployed; bare metal here is commissioned already.
        commission = 2.0 if self.args.lxd else 0.0
        timings = Timings(commission=commission, deploy=self.args.deploy_seconds, release=1.0, erase=2.0)
        cps = sum(s.control_plane for s in specs)
        self.say(
            f"capmaas demo: cluster {CLUSTER!r}, machines: {cps} control-plane + {len(specs) - cps} worker "
            f"{'LXD VMs ' if self.args.lxd else ''}on a simulated MAAS ({source}; "
            f"deploys take {self.args.deploy_seconds:g}s)"
        )
        stack = Stack(StackOptions(inventory, timings, say=self.say))
        try:
            return self._run(stack, specs, names)
        except (StackError, CapiError, MissingToolError, StartError) as exc:
            self.say(f"FAILED: {exc}")
            if isinstance(exc, CapiError) and stack.operator is not None:
                self.say(f"last lines of the operator log:\n{stack.operator.tail(20)}")
            return 1
        except KeyboardInterrupt:
            self.say("interrupted: stopping everything")
            return 130
        finally:
            stack.close()
            self.say(f"cleaned up (processes stopped, {stack.workdir} removed)")

    def _run(self, stack: Stack, specs: list[MachineSpec], names: list[str]) -> int:
        stack.start()
        assert stack.kube is not None
        assert stack.sim is not None
        sim = stack.sim
        dns_before = sim.call(lambda s: {r.name for r in s.state.dns_resources.values()})
        owned_before = {sid for sid, m in sim.machine_states().items() if m["owner"] is not None}  # VM hosts
        capi = Capi(stack.kube, stack.namespace, CLUSTER)
        watcher = stack.kube.watch(MAASMACHINES, stack.namespace)
        tracker = Tracker()
        try:
            capi.create_cluster(sim.url, sim.api_key)
            mc = capi.wait_infrastructure(60, check=stack.check_operator)
            endpoint = (mc.get("spec") or {}).get("controlPlaneEndpoint") or {}
            zones = ", ".join(d.get("name", "") for d in (mc.get("status") or {}).get("failureDomains") or ())
            self.say(
                f"  MaasCluster {CLUSTER} ready: endpoint {endpoint.get('host')}:{endpoint.get('port')}, "
                f"failure domains {zones}"
            )
            self.say(f"creating {len(specs)} Machines with bootstrap Secrets and MaasMachines")
            self.tw = time.time()
            capi.create_machines(specs)
            ready = tracker.follow(
                watcher,
                lambda: (
                    tracker.count(names, ready=True) == len(names) or bool(tracker.failed(names, TERMINAL))
                ),
                self.args.timeout,
                on_change=self.line,
                check=stack.check_operator,
            )
            all_ready = ready and tracker.count(names, ready=True) == len(names)
            took = time.time() - self.tw
            self._table(tracker, names, sim.machine_states())
            n_ready = tracker.count(names, ready=True)
            self.say(f"{n_ready}/{len(names)} machines Ready in {took:.1f}s")
            if not all_ready:
                self._explain(tracker, names, stack)
            if self.args.keep:
                return self._keep(stack, all_ready)
            released = self._delete(
                stack, capi, watcher, tracker, names=names, dns=dns_before, owned=owned_before
            )
        finally:
            watcher.stop()
        total = time.monotonic() - self.t0
        ok = all_ready and released
        self.say(f"{'OK' if ok else 'FAILED'}: total {total:.1f}s")
        return 0 if ok else 1

    def _table(self, tracker: Tracker, names: list[str], maas: dict[str, dict[str, Any]]) -> None:
        rows = []
        for n in names:
            r = tracker.rows.get(n) or Row(n)
            state = maas.get(r.system_id, {}).get("status_name", "-") if r.system_id else "-"
            host = maas.get(r.system_id, {}).get("hostname", "-") if r.system_id else "-"
            ready = "yes" if r.ready else "no"
            rows.append(
                [r.name, r.role, r.zone or "-", r.system_id or "-", host, state, r.address or "-", ready]
            )
        self.say("")
        headers = ["NAME", "ROLE", "ZONE", "SYSTEM ID", "MAAS HOST", "MAAS STATE", "ADDRESS", "READY"]
        self.say(table(headers, rows))
        self.say("")

    def _explain(self, tracker: Tracker, names: list[str], stack: Stack) -> None:
        for n in names:
            r = tracker.rows.get(n)
            if r is None or not r.ready:
                why = f"{r.reason}: {r.message}" if r else "no MaasMachine seen"
                self.say(f"  {n} not Ready: {why}")
        if stack.operator is not None:
            self.say(f"last lines of the operator log:\n{stack.operator.tail(20)}")

    def _keep(self, stack: Stack, all_ready: bool) -> int:
        assert stack.sim is not None
        assert stack.operator is not None
        self.say("--keep: everything stays up until Ctrl-C")
        self.say(f"  export KUBECONFIG={stack.kubeconfig}")
        self.say(f"  kubectl get maasmachines,machines,clusters -n {stack.namespace}")
        self.say(f"  MAAS simulator: {stack.sim.url}/  (API key {stack.sim.api_key})")
        self.say(f"  operator log: {stack.operator.log}")
        try:
            while True:
                stack.check_operator()
                time.sleep(1)
        except KeyboardInterrupt:
            self.say("stopping")
        return 0 if all_ready else 1

    def _delete(
        self,
        stack: Stack,
        capi: Capi,
        watcher: Watcher,
        tracker: Tracker,
        *,
        names: list[str],
        dns: set[str],
        owned: set[str],
    ) -> bool:
        """Delete as CAPI does and check MAAS afterwards: every machine we had is Ready again (or gone, for
        a decomposed LXD VM), nothing new is owned, no DNS record is left, the simulator is consistent."""
        assert stack.sim is not None
        sim = stack.sim
        sids = {r.system_id for n in names if (r := tracker.rows.get(n)) and r.system_id}
        self.say(
            f"deleting cluster {CLUSTER} as CAPI does: MaasMachines (MAAS releases), Machines, MaasCluster"
        )
        self.tw = time.time()
        capi.delete_machines(names)
        gone = tracker.follow(
            watcher,
            lambda: tracker.count(names, deleted=True) == len(names),
            self.args.timeout,
            on_change=self.line,
            check=stack.check_operator,
        )
        capi.delete_rest(names)
        gone = gone and tracker.follow(
            watcher, capi.finish_delete, 60, on_change=self.line, check=stack.check_operator
        )
        took = time.time() - self.tw
        maas = sim.machine_states()
        held = sorted(sid for sid, m in maas.items() if m["owner"] is not None and sid not in owned)
        released = [sid for sid in sids if sid not in maas or maas[sid]["status_name"] == "Ready"]
        dns_left = sim.call(lambda s: {r.name for r in s.state.dns_resources.values()}) - dns
        problems = sim.invariants()
        self.say(
            f"{'decomposed' if self.args.lxd else 'released'} {len(released)}/{len(sids)} MAAS machines in "
            f"{took:.1f}s; "
            f"machines still allocated: {len(held)}; DNS records left: {len(dns_left)}; "
            f"simulator invariants: {problems or 'ok'}"
        )
        if not gone:
            self.say(f"  the cluster was not fully deleted within {self.args.timeout:.0f}s")
            self._explain(tracker, names, stack)
        return gone and len(released) == len(sids) and not held and not dns_left and not problems


def run(args: argparse.Namespace) -> int:
    sigterm_as_interrupt()
    return Demo(args).run()
