"""Everything the demo and the benchmark run, started in order and torn down in reverse, whatever happens.

:class:`Stack` owns: a temporary directory, a local control plane (``capmaas_dev.devcluster``) with our CRDs
and the Cluster API core CRDs, the MAAS simulator (in a thread, :mod:`capmaas_dev.demo.simthread`) and the
operator (``capmaas run`` as a child process with ``KUBECONFIG`` set, logging to a file). With ``capi_core``
(the demo) it also runs the real Cluster API core manager (:class:`capmaas_dev.devcluster.capi.CapiManager`,
which installs the CAPI CRDs with their webhooks) and a second control plane standing in for the workload
cluster (:mod:`capmaas_dev.devcluster.workload`): when the simulator reports a machine Deployed, a Ready Node
named after its hostname is registered there, as the deployed OS's kubelet would, so CAPI's Machines reach
Running with a nodeRef. :meth:`Stack.close` is
idempotent and runs from ``with`` exits, so Ctrl-C, SIGTERM and failures all leave no process or directory
behind; every child also gets PDEATHSIG, so even a SIGKILL of
this process takes them down.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self

from capmaas_dev import crdgen
from capmaas_dev.demo.kube import Kube
from capmaas_dev.demo.simthread import SimulatorThread
from capmaas_dev.devcluster import ControlPlane, apply_capi_crds
from capmaas_dev.devcluster import process as devprocess
from capmaas_dev.devcluster.capi import CapiManager
from capmaas_dev.devcluster.workload import WorkloadCluster
from capmaas_dev.simulator import Faults, Inventory, Timings

_PR_SET_PDEATHSIG = 1


class StackError(RuntimeError):
    """Something the demo needs did not come up; the message says what and where its log is."""


@dataclass
class StackOptions:
    inventory: Inventory
    timings: Timings
    namespace: str = "capmaas-demo"
    faults: Faults | None = None
    operator_env: dict[str, str] = field(default_factory=dict)  # extra CAPMAAS_* settings for the operator
    say: Callable[[str], None] = print
    capi_core: bool = False  # run the Cluster API core manager and a workload-cluster stand-in


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class OperatorProcess:
    """``capmaas run --namespace NS --no-leader-elect`` as a child in its own process group."""

    def __init__(self, env: dict[str, str], namespace: str, log: Path) -> None:
        self.env, self.namespace, self.log = env, namespace, log
        self.popen: subprocess.Popen[bytes] | None = None

    def run_args(self) -> list[str]:
        """The arguments of ``capmaas run`` (subclasses run it otherwise: sharded, cluster-wide)."""
        return ["--namespace", self.namespace, "--no-leader-elect"]

    def program(self) -> list[str]:
        """What runs ``capmaas`` (subclasses wrap it: the benchmark's profiled operator)."""
        return [sys.executable, "-m", "capmaas"]

    def start(self) -> Self:
        cmd = [*self.program(), "run", *self.run_args()]
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                cmd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # our Ctrl-C is not its Ctrl-C: it is stopped in order, by close()
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - a SIGKILL of the demo takes it down too
            )
        return self

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise StackError("the operator is not running")
        return self.popen.pid

    def exited(self) -> int | None:
        """The exit code once the operator has exited, else None."""
        return None if self.popen is None else self.popen.poll()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no operator log)"

    def stop(self) -> None:
        popen, self.popen = self.popen, None
        if popen is not None:
            devprocess.stop_group(popen.pid, popen=popen, grace=10.0)


class Stack:
    """Start with :meth:`start` (or ``with Stack(opts) as stack``); attributes are valid once started."""

    def __init__(self, opts: StackOptions) -> None:
        self.opts = opts
        self.workdir = Path(tempfile.mkdtemp(prefix="capmaas-demo-"))
        self.cp: ControlPlane | None = None
        self.kube: Kube | None = None
        self.sim: SimulatorThread | None = None
        self.operator: OperatorProcess | None = None
        self.capi: CapiManager | None = None
        self.workload_cp: ControlPlane | None = None
        self.workload: WorkloadCluster | None = None
        self.timings: dict[str, float] = {}  # stage -> seconds, in start order
        self._closed = False

    @property
    def namespace(self) -> str:
        return self.opts.namespace

    @property
    def kubeconfig(self) -> Path:
        if self.cp is None:
            raise StackError("the control plane is not running")
        return self.cp.kubeconfig

    def _step(self, what: str) -> contextlib.AbstractContextManager[None]:
        @contextlib.contextmanager
        def timed() -> Iterator[None]:
            t0 = time.monotonic()
            yield
            self.timings[what] = took = time.monotonic() - t0
            self.opts.say(f"  {what} ({took:.1f}s)")

        return timed()

    def start(self) -> Stack:
        self.opts.say(f"  working directory {self.workdir} (removed at exit)")
        if self.opts.capi_core:
            warm = threading.Thread(target=_import_kube_client, name="kube-client-import", daemon=True)
            warm.start()  # the client's lazy API modules load while the control planes start
            with self._step("control planes: management (etcd, kube-apiserver, kube-controller-manager) "
                            "and workload stand-in (etcd, kube-apiserver)"):  # fmt: skip
                with ThreadPoolExecutor(1, thread_name_prefix="workload-cp") as pool:
                    workload = pool.submit(
                        ControlPlane.start, self.workdir / "workload", controller_manager=False
                    )
                    try:
                        self.cp = ControlPlane.start(self.workdir / "controlplane")
                    finally:
                        self.workload_cp = workload.result()
                self.workload = WorkloadCluster(self.workload_cp.kubeconfig)
            # The CAPI manager (its CRDs, webhooks, readiness) starts while our CRDs are applied.
            step = self._step("CRDs: capmaas (from the models) and Cluster API core; CAPI core manager ready")
            with step, ThreadPoolExecutor(1, thread_name_prefix="capi") as pool:
                capi = pool.submit(
                    CapiManager.start, self.cp.kubeconfig, workdir=self.workdir / "cluster-api"
                )
                try:
                    self._apply_crds()
                finally:
                    self.capi = capi.result()
        else:
            with self._step("control plane: etcd, kube-apiserver, kube-controller-manager"):
                self.cp = ControlPlane.start(self.workdir / "controlplane")
            with self._step("CRDs: capmaas (from the models) and Cluster API core"):
                self._apply_crds()
                apply_capi_crds(self.cp.kubeconfig)
        sim = self._start_simulator()
        if self.workload is not None:
            self._register_nodes(sim, self.workload)
        with self._step("operator: capmaas run"):
            self.operator = OperatorProcess(
                self._operator_env(), self.namespace, self.workdir / "operator.log"
            )
            self.operator.start()
            time.sleep(0.3)
            self.check_operator()
        return self

    def _start_simulator(self) -> SimulatorThread:
        """The benchmark's namespace on the control plane, then the MAAS simulator (``self.sim``)."""
        assert self.cp is not None
        self.kube = Kube(self.cp.kubeconfig)
        self.kube.create_namespace(self.namespace)
        with self._step("MAAS simulator"):
            self.sim = SimulatorThread(
                self.opts.inventory, self.opts.timings, faults=self.opts.faults
            ).start()
        return self.sim

    @staticmethod
    def _register_nodes(sim: SimulatorThread, workload: WorkloadCluster) -> None:
        """The kubelet's part: a deployed MAAS machine registers its Node in the workload stand-in (after the
        simulator thread's own bookkeeping of the deploy time)."""
        register = workload.deploy_hook()
        record = sim.sim.on_deployed

        def on_deployed(machine: dict[str, Any]) -> object:
            if record is not None:
                record(machine)
            return register(machine)

        sim.sim.on_deployed = on_deployed

    def _apply_crds(self) -> None:
        assert self.cp is not None
        # Generated from the models (what crds/ of a checkout holds, `make verify` checks that): the demo
        # needs no checkout.
        out = self.workdir / "crds"
        out.mkdir()
        for name, text in crdgen.generate().items():
            (out / name).write_text(text)
        self.cp.kubectl("apply", "--server-side", "-f", str(out))
        self.cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(out))

    def _operator_env(self) -> dict[str, str]:
        assert self.cp is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAPMAAS_")}
        env.update(
            KUBECONFIG=str(self.cp.kubeconfig),
            CAPMAAS_SERVER__BIND_ADDRESS="127.0.0.1",
            CAPMAAS_SERVER__HEALTH_PORT=str(devprocess.free_port()),
            CAPMAAS_SERVER__METRICS_PORT=str(devprocess.free_port()),
            CAPMAAS_LOGGING__FORMAT="text",
        )
        if os.environ.get("CAPMAAS_CACHE"):
            env["CAPMAAS_CACHE"] = os.environ["CAPMAAS_CACHE"]
        env.update(self.opts.operator_env)
        return env

    def check_operator(self) -> None:
        """Raise :class:`StackError` with the log tail if the operator has exited."""
        if self.operator is not None and (code := self.operator.exited()) is not None:
            raise StackError(
                f"the operator exited with code {code}; last lines of its log:\n{self.operator.tail()}"
            )

    def close(self) -> None:
        """Stop the operator, the simulator and the control plane; remove the temporary directory.

        SIGINT is ignored meanwhile, so an impatient second Ctrl-C cannot leave half of it running.
        """
        if self._closed:
            return
        self._closed = True
        old = signal.getsignal(signal.SIGINT)
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            began = time.monotonic()
            # The operator and the CAPI manager first (both talk to the apiserver), then the rest; each group
            # stops in parallel.
            capi = self.capi
            _all(
                self.operator.stop if self.operator is not None else None,
                functools.partial(capi.stop, uninstall=False) if capi is not None else None,
            )
            if self.kube is not None:
                self.kube.close()
            _all(
                self.sim.stop if self.sim is not None else None,
                self.cp.stop if self.cp is not None else None,
                self.workload_cp.stop if self.workload_cp is not None else None,
            )
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.timings["stop"] = time.monotonic() - began
        finally:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGINT, old)

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _all(*calls: Callable[[], object] | None) -> None:
    """Run ``calls`` (None: skipped) in parallel threads and wait for all; errors are not raised (teardown
    continues with what it can)."""
    todo = [c for c in calls if c is not None]
    threads = [threading.Thread(target=_quietly, args=(c,), name="demo-stop") for c in todo]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _quietly(call: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        call()


def _import_kube_client() -> None:
    """The Kubernetes client's API modules load lazily on first use, and the core one takes seconds: load it
    in the background while the control planes start."""
    import kubernetes.client.api.core_v1_api
    import kubernetes.client.api.custom_objects_api  # noqa: F401


def sigterm_as_interrupt() -> None:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt, so a polite kill runs the same teardown as Ctrl-C."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
