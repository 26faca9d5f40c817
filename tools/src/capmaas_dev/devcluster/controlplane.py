"""A real local Kubernetes control plane: etcd + kube-apiserver (+ kube-controller-manager), no containers.

This is what envtest does, in Python: fresh PKI, free loopback ports, wait for ``/readyz``, write a
kubeconfig.
It exists because capmaas proves its claims against a real apiserver and the project's machines have no Docker
(so no kind). kube-controller-manager is started by default when it is built, because without it nothing
garbage-collects owned objects and a deleted namespace stays ``Terminating`` forever.

Use it as a context manager (tests) or detached (``capmaas dev-cluster up``; a state file lets ``down`` find
the processes again)::

    with ControlPlane.start() as cp:
        cp.kubectl("get", "namespaces")
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from capmaas_dev.devcluster import process
from capmaas_dev.devcluster.pki import Pki, make_pki
from capmaas_dev.devcluster.tools import find_binary, have_binary, run_kubectl

STATE_FILE = "state.json"
SERVICE_CIDR = "10.0.0.0/24"  # only an allocation range for Service IPs; nothing is ever sent there
CONTROLLERS = "garbagecollector,namespace,serviceaccount,serviceaccount-token"
# With a node (capmaas_dev.devcluster.node) every default controller runs: deployment, replicaset,
# nodelifecycle, root-ca-cert-publisher, ... as in any cluster.
NODE_CONTROLLERS = "*"
# The ClusterIP of the `kubernetes` Service (the first of SERVICE_CIDR): Pods reach the apiserver there. With
# a node it is an address on the node namespace's lo and the apiserver listens on its port (443) itself.
SERVICE_IP = "10.0.0.1"
NODE_API_PORT = 443
_PORT_RACE = "address already in use"
#: ``1`` serves the apiserver's Go profiles (``/debug/pprof/profile?seconds=60`` with the admin certificate).
PROFILING_ENV = "CAPMAAS_DEV_APISERVER_PROFILING"
#: Extra kube-apiserver flags (shell words), after ours: for measuring a flag's effect on the test apiservers.
EXTRA_ARGS_ENV = "CAPMAAS_DEV_APISERVER_ARGS"
#: The components of a control plane without a node that run with one Go scheduler thread
#: (:data:`process.ONE_P_ENV`); with a node every component keeps Go's default.
ONE_P_COMPONENTS = frozenset({"etcd", "kube-controller-manager"})
#: Built-in resources neither capmaas, its chart nor its tests use, which a control plane without a node
#: serves without a watch cache (``--watch-cache-sizes=<resource>#0``; reads and watches go to etcd). Every
#: cached resource costs an idle apiserver a wake-up a second (its cache's bookmark timer), and a test run
#: keeps six control planes idle most of its 21 minutes; these 28 caches were a sixth of an idle
#: apiserver's CPU (docs/benchmarks/test-durations.md, "Idle control planes"). The API is unchanged: every
#: resource is still served, listed and watched. With a node every default controller runs, so every cache
#: stays.
UNCACHED_RESOURCES = (
    "podtemplates",
    "replicationcontrollers",
    "limitranges",
    "resourcequotas",
    "persistentvolumeclaims",
    "persistentvolumes",
    "controllerrevisions.apps",
    "statefulsets.apps",
    "horizontalpodautoscalers.autoscaling",
    "cronjobs.batch",
    "jobs.batch",
    "certificatesigningrequests.certificates.k8s.io",
    "ingresses.networking.k8s.io",
    "ingressclasses.networking.k8s.io",
    "runtimeclasses.node.k8s.io",
    "priorityclasses.scheduling.k8s.io",
    "csidrivers.storage.k8s.io",
    "csinodes.storage.k8s.io",
    "csistoragecapacities.storage.k8s.io",
    "storageclasses.storage.k8s.io",
    "volumeattachments.storage.k8s.io",
    "volumeattributesclasses.storage.k8s.io",
    "deviceclasses.resource.k8s.io",
    "resourceclaims.resource.k8s.io",
    "resourceclaimtemplates.resource.k8s.io",
    "resourceslices.resource.k8s.io",
    "mutatingadmissionpolicies.admissionregistration.k8s.io",
    "mutatingadmissionpolicybindings.admissionregistration.k8s.io",
)


class StartError(RuntimeError):
    """A component did not come up; the message carries the tail of its log."""


@dataclass
class Component:
    """One running process of the control plane."""

    name: str
    pid: int
    log: Path
    binary: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class ControlPlane:
    """A running control plane. Build one with :meth:`start` (or :meth:`from_state` for a detached one)."""

    def __init__(
        self,
        workdir: Path,
        *,
        owns_workdir: bool,
        server: str,
        components: list[Component],
        detached: bool,
    ) -> None:
        self.workdir = workdir
        self.owns_workdir = owns_workdir
        self.server = server
        self.components = components
        self.detached = detached
        self.kubeconfig = workdir / "kubeconfig"
        self._stopped = False

    # -- starting ------------------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        workdir: str | os.PathLike[str] | None = None,
        *,
        controller_manager: bool | None = None,
        detach: bool = False,
        timeout: float = 90.0,
        attempts: int = 3,
        node_ip: str | None = None,
    ) -> ControlPlane:
        """Start etcd, kube-apiserver and (``None`` = when built) kube-controller-manager; return once
        ``/readyz`` answers 200 and the kubeconfig is written.

        ``workdir`` None means a fresh temporary directory, removed by :meth:`stop`; a given directory is
        created if needed and only the files this class wrote are removed from it. ``detach`` leaves the
        processes running after this interpreter exits (for the CLI). Raises :class:`MissingToolError`
        naming ``make controlplane`` if a binary is absent.

        ``node_ip`` (only inside the network namespace of :mod:`capmaas_dev.devcluster.node`, which owns that
        address) prepares the control plane for a real node: the apiserver listens on every address of the
        namespace at port 443 (Pods reach it at the ``kubernetes`` Service IP, an address there too), the
        ServiceAccount admission plugin and the Node authorizer are on, it reaches the kubelet at its
        InternalIP with a verified certificate, kube-controller-manager runs every default controller and
        kube-scheduler runs.
        """
        names = ["etcd", "kube-apiserver"]
        if node_ip is not None:
            names += ["kube-controller-manager", "kube-scheduler"]
        binaries = {name: find_binary(name) for name in names}
        if controller_manager is None:
            controller_manager = have_binary("kube-controller-manager")
        if controller_manager or node_ip is not None:
            binaries["kube-controller-manager"] = find_binary("kube-controller-manager")
        owns = workdir is None
        path = Path(tempfile.mkdtemp(prefix="capmaas-cp-")) if workdir is None else Path(workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        try:
            for attempt in range(1, max(1, attempts) + 1):
                try:
                    return cls._start_once(
                        path, owns, {k: str(v) for k, v in binaries.items()}, detach, timeout, node_ip
                    )
                except StartError as exc:
                    # Free ports are picked by bind-and-close; another process may grab one in between.
                    if _PORT_RACE not in str(exc).lower() or attempt >= attempts:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        except BaseException:
            if owns:
                shutil.rmtree(path, ignore_errors=True)
            raise

    @classmethod
    def _start_once(  # noqa: PLR0917
        cls,
        workdir: Path,
        owns: bool,
        binaries: dict[str, str],
        detach: bool,
        timeout: float,
        node_ip: str | None,
    ) -> ControlPlane:
        deadline = time.monotonic() + timeout
        pki = make_pki(workdir / "pki")
        logs = workdir / "logs"
        etcd_port, peer_port = process.free_port(), process.free_port()
        api_port = process.free_port() if node_ip is None else NODE_API_PORT
        server = f"https://127.0.0.1:{api_port}"
        cp = cls(workdir, owns_workdir=owns, server=server, components=[], detached=detach)
        standin = node_ip is None  # a stand-in cluster, no node: see ONE_P_COMPONENTS
        if not detach:
            process.register_cleanup(id(cp), cp.stop)
        try:
            etcd_url = f"http://127.0.0.1:{etcd_port}"
            etcd_data = workdir / "etcd"
            shutil.rmtree(etcd_data, ignore_errors=True)
            cp._spawn(
                "etcd",
                binaries["etcd"],
                [
                    f"--name=capmaas-{api_port}",
                    f"--data-dir={etcd_data}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-cluster=capmaas-{api_port}=http://127.0.0.1:{peer_port}",
                    "--listen-metrics-urls=",
                    "--unsafe-no-fsync",
                    "--quota-backend-bytes=2147483648",
                ],
                logs,
                standin=standin,
            )
            cp._wait_http("etcd", f"{etcd_url}/health", None, deadline)
            cp._spawn(
                "kube-apiserver",
                binaries["kube-apiserver"],
                _apiserver_args(pki, etcd_url, api_port, node_ip),
                logs,
                standin=standin,
            )
            cp._wait_http("kube-apiserver", f"{server}/readyz", _client_context(pki), deadline)
            cp._write_kubeconfig(pki)
            if "kube-controller-manager" in binaries:
                cp._spawn(
                    "kube-controller-manager",
                    binaries["kube-controller-manager"],
                    [
                        f"--kubeconfig={cp.kubeconfig}",
                        "--secure-port=0",
                        "--leader-elect=false",
                        f"--controllers={CONTROLLERS if node_ip is None else NODE_CONTROLLERS}",
                        f"--service-account-private-key-file={pki.sa_private}",
                        f"--root-ca-file={pki.ca_cert}",
                    ],
                    logs,
                    standin=standin,
                )
                time.sleep(0.5)  # a bad flag makes it exit at once; catch that here rather than later
                cp._check_alive("kube-controller-manager")
            if "kube-scheduler" in binaries:
                cp._spawn(
                    "kube-scheduler",
                    binaries["kube-scheduler"],
                    [
                        f"--kubeconfig={cp.kubeconfig}",
                        f"--authentication-kubeconfig={cp.kubeconfig}",
                        f"--authorization-kubeconfig={cp.kubeconfig}",
                        "--bind-address=127.0.0.1",
                        "--secure-port=10259",
                        "--leader-elect=false",
                    ],
                    logs,
                    standin=standin,
                )
                time.sleep(0.5)
                cp._check_alive("kube-scheduler")
            cp.write_state()
        except BaseException:
            cp.stop(remove_logs=False)
            raise
        return cp

    def _spawn(self, name: str, binary: str, args: list[str], logs: Path, *, standin: bool) -> None:
        log = logs / f"{name}.log"
        env = process.go_env(one_p=standin and name in ONE_P_COMPONENTS)
        popen = process.spawn([binary, *args], log, detach=self.detached, env=env)
        self.components.append(Component(name, popen.pid, log, binary, popen))

    def _component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def _check_alive(self, name: str) -> None:
        comp = self._component(name)
        if comp.popen is not None and comp.popen.poll() is not None:
            raise StartError(
                f"{name} exited with code {comp.popen.returncode} during start; log {comp.log}:\n"
                f"{_tail(comp.log)}"
            )

    def _wait_http(self, name: str, url: str, context: ssl.SSLContext | None, deadline: float) -> None:
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive(name)
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (OSError, ssl.SSLError) as exc:
                last = str(exc)
            time.sleep(0.2)
        comp = self._component(name)
        raise StartError(f"{name} not ready at {url} in time ({last}); log {comp.log}:\n{_tail(comp.log)}")

    def _write_kubeconfig(self, pki: Pki) -> None:
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "capmaas-dev",
                    "cluster": {"server": self.server, "certificate-authority-data": b64(pki.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "capmaas-admin",
                    "user": {
                        "client-certificate-data": b64(pki.admin_cert),
                        "client-key-data": b64(pki.admin_key),
                    },
                }
            ],
            "contexts": [
                {"name": "capmaas-dev", "context": {"cluster": "capmaas-dev", "user": "capmaas-admin"}}
            ],
            "current-context": "capmaas-dev",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    @property
    def pki(self) -> Pki:
        """The control plane's CA and certificates (the node's certificates are signed by this CA)."""
        return Pki.at(self.workdir / "pki")

    # -- state for the detached CLI ------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "kind": "local",
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "owns_workdir": self.owns_workdir,
            "components": [
                {"name": c.name, "pid": c.pid, "log": str(c.log), "binary": c.binary} for c in self.components
            ],
        }

    def write_state(self) -> None:
        (self.workdir / STATE_FILE).write_text(json.dumps(self.state(), indent=2) + "\n")

    @classmethod
    def from_state(cls, workdir: str | os.PathLike[str]) -> ControlPlane:
        """Re-attach to a control plane started (detached) with ``workdir``; FileNotFoundError if none."""
        path = Path(workdir).resolve()
        data = json.loads((path / STATE_FILE).read_text())
        comps = [Component(c["name"], int(c["pid"]), Path(c["log"]), c["binary"]) for c in data["components"]]
        return cls(
            path,
            owns_workdir=bool(data["owns_workdir"]),
            server=data["server"],
            components=comps,
            detached=True,
        )

    # -- using it ------------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``KUBECONFIG`` for subprocesses (helm, kubectl, the operator)."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_kubectl(self.kubeconfig, *args, check=check, input=input)

    def pids(self) -> list[int]:
        return [c.pid for c in self.components]

    def running(self) -> bool:
        """True when every component is alive (and, for re-attached ones, still the binary we started)."""
        return bool(self.components) and all(self._is_ours(c) for c in self.components)

    @staticmethod
    def _is_ours(comp: Component) -> bool:
        if comp.popen is not None:
            return comp.popen.poll() is None
        cmd = process.pid_cmdline(comp.pid)
        return process.pid_alive(comp.pid) and bool(cmd) and cmd[0] == comp.binary

    # -- stopping ------------------------------------------------------------------------------------------
    def stop(self, *, remove_logs: bool = True) -> None:
        """Stop every component (controller-manager, apiserver, etcd: the reverse of start) and remove the
        files. Idempotent and safe to call from atexit/signal handlers."""
        if self._stopped:
            return
        self._stopped = True
        process.unregister_cleanup(id(self))
        for comp in reversed(self.components):
            if comp.popen is not None or self._is_ours(comp):
                process.stop_group(comp.pid, popen=comp.popen)
        if self.owns_workdir and remove_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            for name in ("pki", "etcd", "kubeconfig", STATE_FILE, *(() if not remove_logs else ("logs",))):
                target = self.workdir / name
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ControlPlane(server={self.server!r}, workdir={str(self.workdir)!r}, pids={self.pids()})"


def _client_context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return ctx


def _apiserver_args(pki: Pki, etcd_url: str, port: int, node_ip: str | None = None) -> list[str]:
    args = [
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1" if node_ip is None else "--bind-address=0.0.0.0",
        f"--advertise-address={node_ip or '127.0.0.1'}",
        f"--secure-port={port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-issuer=https://127.0.0.1:{port}/",
        f"--service-account-key-file={pki.sa_public}",
        f"--service-account-signing-key-file={pki.sa_private}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        # /debug/pprof (admin certificate only) for finding where the apiserver's CPU goes; off by default.
        f"--profiling={'true' if os.environ.get(PROFILING_ENV) == '1' else 'false'}",
    ]
    return [*args, *_mode_args(pki, node_ip), *shlex.split(os.environ.get(EXTRA_ARGS_ENV, ""))]


def _mode_args(pki: Pki, node_ip: str | None) -> list[str]:
    """The flags that differ between a stand-in control plane and one prepared for a real node."""
    if node_ip is None:
        uncached = ",".join(f"{resource}#0" for resource in UNCACHED_RESOURCES)
        return [
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            f"--watch-cache-sizes={uncached}",
        ]
    return [
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # `kubectl logs`/`exec` reach the kubelet at the Node's InternalIP (its hostname resolves nowhere
        # here), authenticated with the admin certificate, verifying the kubelet's CA-signed certificate.
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki.admin_cert}",
        f"--kubelet-client-key={pki.admin_key}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
    ]
