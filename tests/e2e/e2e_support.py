"""Helpers the e2e tests share: kubectl JSON access, polling, and the objects CAPI users write.

A plain module (not conftest) so tests import it by name: pytest puts ``tests/e2e`` on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from capmaas_dev.demo.manifests import identity_secret

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
INFRA_GROUP = "infrastructure.cluster.x-k8s.io"
INFRA_API = f"{INFRA_GROUP}/v1beta1"
CAPI_API = "cluster.x-k8s.io/v1beta2"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"


class Kubectl(Protocol):
    def __call__(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: str | Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]: ...


def get(kubectl: Kubectl, *args: str) -> Any:
    """``kubectl get ... -o json`` parsed; ``None`` when the object does not exist.

    In-process (``tests/operator/kube_reader.py``) when ``kubectl`` is the session's (it names its
    ``kubeconfig``) and the arguments are ``KIND [NAME] -n NS [-l=SELECTOR]``: the waits poll every 0.25-0.5
    s, and a kubectl fork costs ~0.1 s of CPU (docs/benchmarks/test-durations.md). A KIND the reader cannot
    resolve goes to kubectl, so no answer differs from kubectl's."""
    found = _read(kubectl, args)
    if found is not _FORK:
        return found
    out = kubectl("get", *args, "-o", "json", check=False)
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return None
        raise AssertionError(f"kubectl get {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout)


_FORK = object()


def _read(kubectl: Kubectl, args: tuple[str, ...]) -> Any:
    """``get``'s in-process read, or ``_FORK`` when kubectl must answer (see ``get``)."""
    kubeconfig = getattr(kubectl, "kubeconfig", None)
    rest = list(args)
    namespace = selector = ""
    if rest and rest[-1].startswith("-l="):
        selector = rest.pop()[3:]
    while len(rest) >= 2 and rest[-2] in ("-n", "-l"):
        if rest[-2] == "-n":
            namespace = rest[-1]
        else:
            selector = rest[-1]
        del rest[-2:]
    if kubeconfig is None or not namespace or not 1 <= len(rest) <= 2 or any(a.startswith("-") for a in rest):
        return _FORK
    operator_tests = str(REPO / "tests" / "operator")
    if operator_tests not in sys.path:
        sys.path.append(operator_tests)
    from kube_reader import UNRESOLVED, ReadError, reader

    try:
        found = reader(Path(kubeconfig)).read(rest[0], namespace, rest[1] if len(rest) == 2 else "", selector)
    except ReadError as exc:
        raise AssertionError(f"kubectl get {' '.join(args)} failed: {exc}") from exc
    return _FORK if found is UNRESOLVED else found


def items(
    kubectl: Kubectl, resource: str, namespace: str, selector: str | None = None
) -> list[dict[str, Any]]:
    args = [resource, "-n", namespace, *([f"-l={selector}"] if selector else [])]
    found: list[dict[str, Any]] = get(kubectl, *args)["items"]
    return found


def apply(kubectl: Kubectl, *objects: dict[str, Any]) -> None:
    """``kubectl apply -f -`` of ``objects`` (``kube_reader.apply_manifests``: the new ones in-process when
    ``kubectl`` is the session fixture; a kubectl fork is ~0.1 s of CPU)."""
    operator_tests = str(REPO / "tests" / "operator")
    if operator_tests not in sys.path:
        sys.path.append(operator_tests)
    from kube_reader import apply_manifests

    apply_manifests(kubectl, list(objects))


def wait_for(check: Callable[[], T | None], what: str, *, timeout: float = 60.0, interval: float = 0.5) -> T:
    """Poll ``check`` until it returns something truthy; on timeout fail naming ``what`` and the last."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


# -- the objects a CAPI user (or HyperShift) writes ----------------------------------------------------------
def cluster(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A v1beta2 Cluster whose ``infrastructureRef`` names the MaasCluster of the same name."""
    return {
        "apiVersion": CAPI_API,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasCluster", "name": name}, **spec},
    }


def maascluster(name: str, namespace: str, *, endpoint_host: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"dnsDomain": "maas"}
    if endpoint_host:
        spec["controlPlaneEndpoint"] = {"host": endpoint_host, "port": 6443}
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def maasmachinetemplate(
    name: str, namespace: str, *, image: str = "ubuntu/noble", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasMachineTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {
                "metadata": {"labels": {"capmaas.e2e/from-template": name}},
                "spec": {"image": image, "minCPU": 2, "minMemory": 4096, **spec},
            }
        },
    }


def machinedeployment(
    name: str,
    namespace: str,
    cluster_name: str,
    template: str,
    *,
    replicas: int,
    bootstrap_secret: str,
    version: str = "v1.33.0",
) -> dict[str, Any]:
    """A MachineDeployment with ``bootstrap.dataSecretName`` set, as HyperShift writes it (no bootstrap
    provider needed: CAPI counts bootstrap as ready at once)."""
    return {
        "apiVersion": CAPI_API,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterName": cluster_name,
            "replicas": replicas,
            "selector": {"matchLabels": {}},
            "template": {
                "spec": {
                    "clusterName": cluster_name,
                    "version": version,
                    "bootstrap": {"dataSecretName": bootstrap_secret},
                    "infrastructureRef": {
                        "apiGroup": INFRA_GROUP,
                        "kind": "MaasMachineTemplate",
                        "name": template,
                    },
                }
            },
        },
    }


def machinehealthcheck(
    name: str,
    namespace: str,
    cluster_name: str,
    deployment: str,
    *,
    timeout: int,
    template: str | None = None,
) -> dict[str, Any]:
    """A MachineHealthCheck of ``deployment``'s Machines: NotReady (or Unknown) for ``timeout`` seconds is
    unhealthy; remediated by CAPI (delete) or, with ``template``, by that MaasRemediationTemplate."""
    remediation: dict[str, Any] = {"triggerIf": {"unhealthyLessThanOrEqualTo": "100%"}}
    if template is not None:
        ref = {"apiVersion": INFRA_API, "kind": "MaasRemediationTemplate", "name": template}
        remediation["templateRef"] = ref
    return {
        "apiVersion": CAPI_API,
        "kind": "MachineHealthCheck",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterName": cluster_name,
            "selector": {"matchLabels": {DEPLOYMENT_NAME_LABEL: deployment}},
            "checks": {
                "nodeStartupTimeoutSeconds": 600,
                "unhealthyNodeConditions": [
                    {"type": "Ready", "status": "False", "timeoutSeconds": timeout},
                    {"type": "Ready", "status": "Unknown", "timeoutSeconds": timeout},
                ],
            },
            "remediation": remediation,
        },
    }


def bootstrap_secret(
    name: str, namespace: str, cluster_name: str, value: str = "#cloud-config\n"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
        "stringData": {"value": value, "format": "cloud-config"},
    }


def patch_status(kubectl: Kubectl, resource: str, name: str, namespace: str, status: dict[str, Any]) -> None:
    """Merge-patch ``status`` through the status subresource (playing a controller that owns it)."""
    kubectl(
        "patch", resource, name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


# -- the real provider stack (fixture ``provider_stack`` in conftest) ----------------------------------------
MACHINE_API = "cluster.x-k8s.io/v1beta2"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
#: Every stage timing recorded by :meth:`ProviderStack.stage`, in order: (test id, stage, seconds). The
#: conftest prints them in the terminal summary (the issue's closing note needs the numbers).
TIMINGS: list[tuple[str, str, float]] = []


def control_plane_machine(
    name: str, namespace: str, cluster_name: str, *, bootstrap_secret: str, version: str = "v1.33.0"
) -> dict[str, Any]:
    """A stand-alone control-plane Machine (no control-plane provider): once it has a nodeRef CAPI marks the
    Cluster ``ControlPlaneInitialized``, which MachineHealthChecks and the ClusterCache wait for."""
    return {
        "apiVersion": MACHINE_API,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {CLUSTER_NAME_LABEL: cluster_name, CONTROL_PLANE_LABEL: ""},
        },
        "spec": {
            "clusterName": cluster_name,
            "version": version,
            "bootstrap": {"dataSecretName": bootstrap_secret},
            "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasMachine", "name": name},
        },
    }


def maasmachine(name: str, namespace: str, cluster_name: str, *, control_plane: bool) -> dict[str, Any]:
    labels = {CLUSTER_NAME_LABEL: cluster_name, **({CONTROL_PLANE_LABEL: ""} if control_plane else {})}
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasMachine",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"image": "ubuntu/noble", "minCPU": 2, "minMemory": 4096},
    }


#: The annotation :func:`nudge_machine` sets; its value changes at every nudge.
NUDGE_ANNOTATION = "capmaas.e2e/nudged"


def nudge_machine(kubectl: Kubectl, name: str, namespace: str) -> None:
    """An update of the Machine ``name`` (an annotation), so CAPI's Machine controller reconciles it again.

    Why: the e2e CAPI manager runs without its reconcile rate limit (``capi.UNTHROTTLED_FEATURE_GATES``),
    and CAPI looks for a Machine's Node only when an event asks for it: the Machine or its infrastructure
    object changed, or a Node changed, but the workload cluster's Nodes are watched only once the Cluster is
    ``ControlPlaneInitialized``. Here no control-plane provider runs: a stand-alone control-plane Machine
    makes the Cluster initialized once it has a nodeRef, and capmaas writes the Node's providerID after it
    marks the MaasMachine ready, so the Node becoming findable is no event CAPI sees (with the rate limit, a
    reconcile deferred by it came late enough to find the Node). A control-plane provider's own status write
    would be that event; this plays it."""
    kubectl(
        "annotate", "machine", name, "-n", namespace, "--overwrite",
        f"{NUDGE_ANNOTATION}={time.monotonic_ns()}",
    )  # fmt: skip


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


# -- starting an operator on ports of its own ----------------------------------------------------------------
#: How a listener's failed bind reads in the operator's log, whichever one lost: kopf's health server
#: (aiohttp: "error while attempting to bind on address (...): address already in use") or the metrics
#: server (``OSError: [Errno 98] Address already in use``). Compared in lower case.
PORT_TAKEN = "address already in use"


class Operator(Protocol):
    """A ``capmaas run`` child: ``capmaas_dev.demo.stack.OperatorProcess`` or ``move_support.Operator``."""

    env: dict[str, str]
    log: Path

    @property
    def pid(self) -> int: ...

    def start(self) -> object: ...

    def exited(self) -> int | None: ...

    def stop(self) -> None: ...

    def tail(self) -> str: ...


def start_operator(operator: Operator, *, ports: Callable[[], int] | None = None, attempts: int = 5) -> int:
    """Start ``operator`` on fresh health and metrics ports and wait until it serves both itself; returns its
    health port (``operator.env`` keeps both ports).

    Why a retry: ``free_port`` claims its ports across our processes and hands out none the kernel gives to
    others, but a program that is not ours may still bind one between the hand-out and the operator's bind.
    The operator then exits saying :data:`PORT_TAKEN` (kopf stops when its health server cannot
    bind; the metrics server fails before kopf starts): that start is made again on fresh ports, up to
    ``attempts`` times. Any other exit fails at once, with the log's tail. "Serves itself" is read from the
    sockets (:func:`listens`), not only from a ``/healthz`` answer: a port another operator took answers
    ``/healthz`` too. ``ports`` hands out the ports (``free_port`` when None)."""
    if ports is None:
        from capmaas_dev.devcluster.process import free_port

        ports = free_port
    for attempt in range(1, attempts + 1):
        health, metrics = ports(), ports()
        operator.env.update(
            CAPMAAS_SERVER__HEALTH_PORT=str(health), CAPMAAS_SERVER__METRICS_PORT=str(metrics)
        )
        said = _start_once(operator, health, metrics)
        if said is None:
            return health
        if PORT_TAKEN not in said.lower() or attempt == attempts:
            raise AssertionError(
                f"capmaas run exited (start {attempt} of {attempts}, health port {health}, metrics port "
                f"{metrics}): {said.splitlines()[0]}\n{operator.tail()}"
            )
        print(f"capmaas run lost port {health} or {metrics} to another process (start {attempt}); again")
    raise AssertionError("unreachable")


def _start_once(operator: Operator, health: int, metrics: int) -> str | None:
    """Start ``operator``; None once it serves, else its exit code and what it wrote to its log (reaped)."""
    log = operator.log
    seen = log.stat().st_size if log.exists() else 0
    operator.start()
    pid = operator.pid
    try:
        wait_for(
            lambda: operator.exited() is not None or _serving(pid, health, metrics),
            f"capmaas run serving /healthz on 127.0.0.1:{health} (or exiting)",
            timeout=60,
            interval=0.2,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{operator.tail()}") from None
    code = operator.exited()
    if code is None:
        return None
    with log.open("rb") as f:
        f.seek(seen)
        said = f.read().decode(errors="replace")
    operator.stop()
    return f"(exit code {code})\n{said}"


def _serving(pid: int, health: int, metrics: int) -> bool:
    """``/healthz`` answers 200 on ``health`` and process ``pid`` holds both listeners. The answer is asked
    first: until the operator serves it is a refused connect, where each :func:`listens` reads the whole of
    ``/proc/net/tcp`` (every socket of a box running several control planes), polled every 0.2 s."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as r:
            if r.status != 200:
                return False
    except OSError:
        return False
    return listens(pid, health) and listens(pid, metrics)


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (IPv4, any address): the inode of the
    listener in ``/proc/net/tcp`` among the sockets of ``/proc/<pid>/fd``."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == _TCP_LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
            inodes.add(f"socket:[{inode}]")
    if not inodes:
        return False
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except (FileNotFoundError, PermissionError):
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:  # closed since the listing
            continue
    return False


#: ``TCP_LISTEN`` as ``/proc/net/tcp`` writes the state (hex).
_TCP_LISTEN = "0A"


class ProviderStack:
    """The real provider for e2e tests: MAAS simulator (thread, loopback) + ``capmaas run`` (subprocess) +
    the CAPI core manager + the workload stand-in. Built by the ``provider_stack`` fixture; see the conftest
    module docstring for how to use it."""

    def __init__(
        self,
        *,
        kubectl: Kubectl,
        kubeconfig: Path,
        capi: Any,
        workload: Any,
        sim: Any,
        operator: Any,
        hostname_prefix: str,
        test_id: Callable[[], str],
    ) -> None:
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig
        self.capi = capi
        self.namespace: str = capi.namespace
        self.workload = workload
        self.sim = sim  # capmaas_dev.demo.simthread.SimulatorThread: use .call(fn) to read the Simulator
        self.operator = operator  # capmaas_dev.demo.stack.OperatorProcess
        self.hostname_prefix = hostname_prefix
        self.clusters: list[str] = []  # created and not yet deleted (teardown deletes them)
        self.created: list[str] = []  # every cluster name ever created here (teardown unblocks their objects)
        self._test_id = test_id

    # -- timing ----------------------------------------------------------------------------------------------
    def stage(self, what: str) -> Any:
        """``with stack.stage("3 Machines Running"):`` prints and records how long the block took."""
        import contextlib

        @contextlib.contextmanager
        def timed() -> Any:
            t0 = time.monotonic()
            yield
            took = time.monotonic() - t0
            TIMINGS.append((self._test_id(), what, took))
            print(f"[e2e timing] {what}: {took:.1f}s")

        return timed()

    # -- logs ------------------------------------------------------------------------------------------------
    def logs(self, lines: int = 60) -> str:
        """Tails of the operator and CAPI manager logs (added to a failing test's report by the conftest)."""
        return (
            f"--- capmaas operator ({self.operator.log}) ---\n{self.operator.tail(lines)}\n"
            f"--- cluster-api ({self.capi.log}) ---\n{self.capi.tail(lines // 2)}"
        )

    def check_operator(self) -> None:
        code = self.operator.exited()
        if code is not None:
            raise AssertionError(f"capmaas run exited with code {code}:\n{self.operator.tail()}")

    def wait_for(self, check: Callable[[], T | None], what: str, *, timeout: float = 120.0) -> T:
        """:func:`wait_for` that fails at once if the operator died. Every 0.25 s: its checks read in process
        (:func:`get`), and a test waits on a chain of these (each poll's delay adds up along it)."""

        def checked() -> T | None:
            self.check_operator()
            return check()

        return wait_for(checked, what, timeout=timeout, interval=0.25)

    # -- clusters --------------------------------------------------------------------------------------------
    def create_cluster(
        self,
        name: str,
        *,
        identity: bool = False,
        endpoint_host: str | None = None,
        control_plane: bool = True,
        timeout: float = 90.0,
    ) -> dict[str, Any]:
        """Cluster + MaasCluster + ``<name>-kubeconfig`` (the workload stand-in) + ``<name>-userdata`` (a
        bootstrap data Secret for ``dataSecretName``); waits for the MaasCluster ready and the Cluster's
        ``infrastructureProvisioned``. ``identity`` adds a MAAS (admin) user named after the cluster and an
        identityRef Secret ``<name>-maas`` with its key instead of the operator's default credentials (the
        cluster's machines are then owned by that user in MAAS; the default is the ``admin`` user).
        ``control_plane`` (default) adds a stand-alone control-plane Machine ``<name>-cp-0`` and waits for the
        Cluster's ``ControlPlaneInitialized``: until then CAPI keeps every Machine's NodeReady/NodeHealthy
        Unknown, so no Machine is Ready, a MachineDeployment never becomes available, a rolling update never
        proceeds and MachineHealthChecks see no Node. Returns the MaasCluster."""
        ns = self.namespace
        mc = maascluster(name, ns, endpoint_host=endpoint_host)
        objs: list[dict[str, Any]] = []
        if identity:
            # A MAAS user of its own, so MAAS records which credentials allocated a machine (its owner). An
            # admin: MAAS lets only admins create the DNS record capmaas makes for the endpoint (a plain
            # user gets 403).
            key = self.sim.call(lambda sim: sim.add_user(name, admin=True).api_key)
            objs.append(identity_secret(f"{name}-maas", ns, self.sim.url, key))
            mc["spec"]["identityRef"] = {"kind": "Secret", "name": f"{name}-maas"}
        objs += [bootstrap_secret(f"{name}-userdata", ns, name), mc, cluster(name, ns)]
        self.track_cluster(name)
        apply(self.kubectl, *objs)
        self.workload.publish_kubeconfig(self.kubeconfig, ns, name)

        def ready() -> dict[str, Any] | None:
            got = get(self.kubectl, "maascluster", name, "-n", ns)
            return got if got and (got.get("status") or {}).get("ready") else None

        found = self.wait_for(ready, f"MaasCluster {name} ready", timeout=timeout)

        def provisioned() -> bool:
            c = get(self.kubectl, "cluster", name, "-n", ns) or {}
            return bool(
                ((c.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned")
            )

        self.wait_for(provisioned, f"Cluster {name} infrastructureProvisioned", timeout=timeout)
        if control_plane:
            self.add_control_plane_machine(name, f"{name}-cp-0", timeout=timeout)
        return found

    def track_cluster(self, name: str) -> None:
        """Have teardown delete (and, as a last resort, unblock) a Cluster created without
        :meth:`create_cluster` — e.g. one built the way HyperShift builds it."""
        if name not in self.clusters:
            self.clusters.append(name)
        if name not in self.created:
            self.created.append(name)

    def add_control_plane_machine(self, cluster_name: str, name: str, *, timeout: float = 90.0) -> None:
        """A control-plane Machine + its MaasMachine; waits until it runs and the Cluster is
        ``ControlPlaneInitialized``."""
        ns = self.namespace
        apply(
            self.kubectl,
            maasmachine(name, ns, cluster_name, control_plane=True),
            control_plane_machine(name, ns, cluster_name, bootstrap_secret=f"{cluster_name}-userdata"),
        )
        nudged = [0.0]

        def running() -> list[dict[str, Any]] | None:
            found = self.running_machines(cluster_name, f"{CONTROL_PLANE_LABEL}", 1)
            if found is None and time.monotonic() - nudged[0] >= 1.0:
                m = get(self.kubectl, "machine", name, "-n", ns) or {}
                if (m.get("spec") or {}).get("providerID") and not (m.get("status") or {}).get("nodeRef"):
                    nudge_machine(self.kubectl, name, ns)  # CAPI finds its Node (nudge_machine's doc)
                    nudged[0] = time.monotonic()
            return found

        self.wait_for(running, f"control-plane Machine {name} Running", timeout=timeout)

        def initialized() -> bool:
            c = condition(get(self.kubectl, "cluster", cluster_name, "-n", ns), "ControlPlaneInitialized")
            return bool(c and c["status"] == "True")

        self.wait_for(initialized, f"Cluster {cluster_name} ControlPlaneInitialized", timeout=timeout)

    def delete_cluster(self, name: str, *, timeout: float = 120.0) -> None:
        """Delete the Cluster and wait until CAPI and capmaas removed everything (MAAS machines released)."""
        ns = self.namespace
        self.kubectl("delete", "cluster", name, "-n", ns, "--wait=false", "--ignore-not-found")
        self.wait_for(
            lambda: get(self.kubectl, "cluster", name, "-n", ns) is None,
            f"Cluster {name} gone",
            timeout=timeout,
        )
        if name in self.clusters:
            self.clusters.remove(name)

    # -- machines --------------------------------------------------------------------------------------------
    def machines(self, cluster_name: str, selector: str | None = None) -> list[dict[str, Any]]:
        sel = f"{CLUSTER_NAME_LABEL}={cluster_name}" + (f",{selector}" if selector else "")
        return items(self.kubectl, "machines", self.namespace, sel)

    def maasmachines(self, cluster_name: str, selector: str | None = None) -> list[dict[str, Any]]:
        sel = f"{CLUSTER_NAME_LABEL}={cluster_name}" + (f",{selector}" if selector else "")
        return items(self.kubectl, "maasmachines", self.namespace, sel)

    def running_machines(
        self, cluster_name: str, selector: str | None, count: int
    ) -> list[dict[str, Any]] | None:
        """Exactly ``count`` Machines match and all are Running with a nodeRef (none deleting); else None."""
        ms = self.machines(cluster_name, selector)
        if len(ms) != count:
            return None
        for m in ms:
            st = m.get("status") or {}
            if (
                m["metadata"].get("deletionTimestamp")
                or st.get("phase") != "Running"
                or not st.get("nodeRef")
            ):
                return None
        return ms

    # -- the simulator ---------------------------------------------------------------------------------------
    def invariants(self) -> list[str]:
        """The simulator's invariant violations (double allocations, broken indexes): ``[]`` when fine."""
        result: list[str] = self.sim.invariants()
        return result

    def machine_states(self) -> dict[str, dict[str, Any]]:
        """system_id -> ``{status_name, owner, agent_name, hostname, zone}`` for every MAAS machine."""
        result: dict[str, dict[str, Any]] = self.sim.machine_states()
        return result

    def allocations(self) -> dict[str, list[str]]:
        """agent_name (a MaasMachine UID) -> system IDs of the MAAS machines it holds (owned, any state)."""
        out: dict[str, list[str]] = {}
        for sid, m in self.machine_states().items():
            if m["owner"] is not None:
                out.setdefault(m["agent_name"] or "", []).append(sid)
        return out

    def leaks(self) -> list[str]:
        """What is wrong between MAAS and the namespace's MaasMachines, ``[]`` when they agree: invariant
        violations, MAAS machines held for no live MaasMachine (leaked), MaasMachines holding several, and
        live provisioned MaasMachines that MAAS does not know as allocated to them."""
        problems = self.invariants()
        # Every MaasMachine of the namespace: the simulator belongs to this stack, so whatever it has
        # allocated must be held by one of them.
        live = {mm["metadata"]["uid"]: mm for mm in items(self.kubectl, "maasmachines", self.namespace)}
        allocated = self.allocations()
        for agent, sids in allocated.items():
            if agent not in live:
                problems.append(
                    f"MAAS machines {sids} allocated to {agent!r}, no live MaasMachine has that UID"
                )
            elif len(sids) > 1:
                problems.append(f"MaasMachine {live[agent]['metadata']['name']} holds {sids}")
        for uid, mm in live.items():
            sid = (mm.get("spec") or {}).get("systemID")
            if sid and uid not in allocated and not mm["metadata"].get("deletionTimestamp"):
                problems.append(f"MaasMachine {mm['metadata']['name']} has systemID {sid} but MAAS disagrees")
        return problems

    def ready_in_maas(self, system_ids: list[str]) -> bool:
        states = self.machine_states()
        return all(states[s]["status_name"] == "Ready" and states[s]["owner"] is None for s in system_ids)
