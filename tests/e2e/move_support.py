"""Two management clusters for ``clusterctl move``: each a private control plane with the real CAPI core
manager, capmaas' CRDs, the clusterctl provider inventory and a ``capmaas run`` process, all against one MAAS
simulator (there is one MAAS; only the management cluster changes).

Why private control planes rather than the shared ``kube``: ``clusterctl move`` discovers the kinds to move
from *every* CRD carrying the clusterctl label and reads the Provider inventory of the whole apiserver, and
a second CAPI manager on ``kube`` would take over the CAPI CRDs' conversion webhook from the session one.
Keeping both management clusters private leaves the shared control plane as the other e2e tests expect it.

The clusterctl inventory is what ``clusterctl init`` records
(``cmd/clusterctl/client/repository/components.go`` ``addCommonLabels``/``InventoryObject``,
``cluster/inventory.go`` ``EnsureCustomResourceDefinitions``):

- the inventory CRD ``providers.clusterctl.cluster.x-k8s.io`` from clusterctl's own manifest in the module
  cache, labelled ``clusterctl.cluster.x-k8s.io/core: inventory``;
- every provider CRD labelled ``clusterctl.cluster.x-k8s.io: ""`` (move discovers kinds *only* from CRDs with
  this label) and ``cluster.x-k8s.io/provider: <manifest label>`` (the CAPI CRDs as the CAPI manager harness
  creates them, capmaas' as they are applied);
- one ``Provider`` per installed provider, named after its manifest label in its target namespace, with
  ``providerName``, ``type`` and ``version`` (move refuses when a source provider is missing on the target or
  is older there).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from e2e_support import CAPI_API, CLUSTER_NAME_LABEL, INFRA_API, INFRA_GROUP, REPO, TIMINGS, start_operator

from capmaas_dev import clusterctl_repo
from capmaas_dev.devcluster import CAPI_VERSION, ControlPlane, process, run_kubectl
from capmaas_dev.devcluster.capi import (
    CapiManager,
    CapiStartError,
    capi_source_dir,
    load_yaml_dir,
)

if TYPE_CHECKING:
    from capmaas_dev.demo.simthread import SimulatorThread

CAPMAAS = Path(sys.executable).parent / "capmaas"
CLUSTERCTL_LABEL = "clusterctl.cluster.x-k8s.io"
CLUSTERCTL_CORE_LABEL = "clusterctl.cluster.x-k8s.io/core"
MOVE_LABEL = "clusterctl.cluster.x-k8s.io/move"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"


@dataclass(frozen=True)
class InventoryEntry:
    """One ``clusterctl init``-installed provider: its manifest label is the Provider object's name."""

    manifest_label: str
    provider_name: str
    type: str
    version: str
    namespace: str


CORE = InventoryEntry("cluster-api", "cluster-api", "CoreProvider", CAPI_VERSION, "capi-system")
MAAS = InventoryEntry(
    clusterctl_repo.PROVIDER,
    "maas",
    "InfrastructureProvider",
    clusterctl_repo.VERSION,
    clusterctl_repo.NAMESPACE,
)


def _crd_names(docs: list[dict[str, Any]]) -> list[str]:
    return [d["metadata"]["name"] for d in docs if d.get("kind") == "CustomResourceDefinition"]


def inventory_labels(entry: InventoryEntry) -> dict[str, str]:
    """What ``clusterctl init`` puts on every object of a provider's components (``addCommonLabels``)."""
    return {CLUSTERCTL_LABEL: "", PROVIDER_LABEL: entry.manifest_label}


def provider_object(entry: InventoryEntry) -> dict[str, Any]:
    return {
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Provider",
        "metadata": {
            "name": entry.manifest_label,
            "namespace": entry.namespace,
            "labels": {**inventory_labels(entry), CLUSTERCTL_CORE_LABEL: "inventory"},
        },
        "providerName": entry.provider_name,
        "type": entry.type,
        "version": entry.version,
    }


# -- a capmaas operator process ------------------------------------------------------------------------------
@dataclass
class Operator:
    """``capmaas run --namespace <ns> --no-leader-elect`` against one management cluster."""

    env: dict[str, str]
    namespace: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(CAPMAAS), "run", "--namespace", self.namespace, "--no-leader-elect"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # Its own session (a Ctrl-C of pytest does not race our stop), so stop it at interpreter exit too:
        # an operator whose apiserver is gone would otherwise retry for ever on a shared box.
        process.register_cleanup(id(self), self.stop)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the operator was not started"
        return self.proc.pid

    def exited(self) -> int | None:
        """Its exit code once it has exited, else None (``e2e_support.start_operator``)."""
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        process.unregister_cleanup(id(self))
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-n:])


def operator_env(kubeconfig: Path, sim: SimulatorThread) -> dict[str, str]:
    """Fast polling and retries (a test, not a datacenter); default MAAS credentials (no identityRef, so no
    identity Secret has to move)."""
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "CAPMAAS_MAAS__ENDPOINT": sim.url,
        "CAPMAAS_MAAS__API_KEY": sim.api_key,
        "CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES": "*",  # one tenant: the moved namespaces may use them
        "CAPMAAS_POLLING__FAST_INTERVAL": "0.2",
        "CAPMAAS_POLLING__IDLE_INTERVAL": "2",
        "CAPMAAS_SERVER__BIND_ADDRESS": "127.0.0.1",  # the health and metrics ports: start_operator's
        "CAPMAAS_LOGGING__FORMAT": "text",
        "CAPMAAS_LOGGING__LEVEL": "INFO",
        "CAPMAAS_MACHINE__RETRY_BASE_DELAY": "0.5",
        "CAPMAAS_MACHINE__RETRY_MAX_DELAY": "3",
        "CAPMAAS_MACHINE__NODE_RETRY": "1",
        "CAPMAAS_KUBE__SECRET_CACHE_TTL": "1",
    }


# -- one management cluster ----------------------------------------------------------------------------------
@dataclass
class Management:
    """A management cluster: control plane + CAPI core manager + capmaas CRDs/inventory + operator."""

    name: str
    cp: ControlPlane
    capi: CapiManager | None
    operator: Operator
    startup: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: str | Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Satisfies ``e2e_support.Kubectl``, so its ``get``/``items``/``apply`` work on this cluster."""
        return run_kubectl(kubeconfig or self.cp.kubeconfig, *args, check=check, input=input, timeout=timeout)

    def install(self, *providers: InventoryEntry) -> None:
        """capmaas' CRDs and the clusterctl inventory as ``clusterctl init`` leaves them (see the module doc),
        with a Provider object for each of ``providers``; the CAPI CRDs got their labels when the CAPI manager
        created them (:func:`start_capi`).

        Three kubectl calls, none validating client-side: kubectl's client-side validation downloads the
        apiserver's OpenAPI document, which with CAPI's CRDs installed costs seconds to build and parse."""
        manifest = capi_source_dir() / "cmd" / "clusterctl" / "config" / "manifest" / "clusterctl-api.yaml"
        inventory_crd = yaml.safe_load(manifest.read_text())
        inventory_crd["metadata"].setdefault("labels", {})[CLUSTERCTL_CORE_LABEL] = "inventory"
        maas_crds = load_yaml_dir(REPO / "crds")
        for crd in maas_crds:
            crd["metadata"].setdefault("labels", {}).update(inventory_labels(MAAS))
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--validate=false", "--field-manager=clusterctl",
            "-f", "-", input=yaml.safe_dump_all([inventory_crd, *maas_crds]),
        )  # fmt: skip
        names = [f"crd/{n}" for n in _crd_names([inventory_crd, *maas_crds])]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.add_provider(*providers)

    def add_provider(self, *entries: InventoryEntry) -> None:
        """Record ``entries`` in the inventory (their namespaces and Provider objects)."""
        objs: list[dict[str, Any]] = []
        for entry in entries:
            objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": entry.namespace}})
            objs.append(provider_object(entry))
        listed = {"apiVersion": "v1", "kind": "List", "items": objs}
        self.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(listed))

    def stop_capi(self) -> None:
        """Stop the CAPI manager without restoring the apiserver (webhook configurations, conversion): this
        control plane is thrown away, and the restore is several slow kubectl calls."""
        if self.capi is not None:
            self.capi.webhook_names.clear()
            self.capi.crd_names.clear()
            self.capi.stop()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.operator.stop()
        with contextlib.suppress(Exception):
            self.stop_capi()
        self.cp.stop()


#: The CAPI manager exits at start when its REST mapper does not know a CRD yet: ``CapiManager.start`` applies
#: the CRDs and spawns it at once, and on a starved apiserver discovery can lag the apply by seconds.
_DISCOVERY_RACE = "no matches for kind"


def start_capi(kubeconfig: Path, workdir: Path, attempts: int = 3) -> CapiManager:
    """``CapiManager.start``, retried when it lost the race with CRD discovery (see ``_DISCOVERY_RACE``)."""
    for attempt in range(1, attempts + 1):
        try:
            return CapiManager.start(kubeconfig, workdir=workdir, crd_labels=inventory_labels(CORE))
        except CapiStartError as exc:
            if _DISCOVERY_RACE not in str(exc) or attempt == attempts:
                raise
            print(f"CAPI manager lost the CRD discovery race (attempt {attempt}); starting it again")
            time.sleep(2.0)
    raise AssertionError("unreachable")


def start_management(
    name: str, workdir: Path, namespace: str, sim: SimulatorThread, inventory: tuple[InventoryEntry, ...]
) -> Management:
    """Start one management cluster; the caller owns (and stops) it. ``inventory`` is what its clusterctl
    inventory lists at first (a provider can be added later with :meth:`Management.add_provider`)."""
    times: dict[str, float] = {}
    t = time.monotonic()
    cp = ControlPlane.start(workdir / "cp", controller_manager=False)
    times["control plane"] = time.monotonic() - t
    mgmt = Management(name, cp, None, Operator({}, namespace, workdir / "capmaas.log"), times)
    try:
        t = time.monotonic()
        mgmt.capi = start_capi(cp.kubeconfig, workdir / "capi")
        times["CAPI manager"] = time.monotonic() - t
        t = time.monotonic()
        mgmt.install(*inventory)
        times["CRDs + inventory"] = time.monotonic() - t
        mgmt.operator.env = operator_env(cp.kubeconfig, sim)
        start_operator(mgmt.operator)  # again on fresh ports if another process took one (its docstring)
    except BaseException:
        mgmt.stop()
        raise
    return mgmt


# -- clusterctl ----------------------------------------------------------------------------------------------
def clusterctl(workdir: Path, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run clusterctl offline: no version check, no Go proxy, an empty config in a private HOME."""
    from capmaas_dev.devcluster import find_binary

    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "clusterctl.yaml"
    config.write_text("{}\n")
    env = {
        **os.environ,
        "HOME": str(workdir),
        "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
        "GOPROXY": "off",
    }
    return subprocess.run(
        [str(find_binary("clusterctl")), *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


# -- simulator accounting ------------------------------------------------------------------------------------
def maas_writes(counters: Mapping[tuple[str, str, str | None], int]) -> Counter[str]:
    """Every non-GET MAAS request by ``METHOD path op`` (path relative to the API root)."""
    out: Counter[str] = Counter()
    for (method, template, op), n in counters.items():
        if method != "GET":
            path = template.split("/api/2.0/", 1)[-1]
            out[f"{method} {path} {op or ''}".strip()] += n
    return out


def count(writes: Mapping[str, int], op: str, path_end: str = "") -> int:
    """Requests whose op is ``op`` (and whose path ends with ``path_end``)."""
    return sum(n for k, n in writes.items() if k.split(" ")[-1] == op and k.split(" ")[1].endswith(path_end))


# -- the objects a CAPI user writes (those e2e_support has no helper for) ------------------------------------
def control_plane_machine(
    name: str,
    namespace: str,
    cluster: str,
    bootstrap_secret: str,
    *,
    image: str = "ubuntu/noble",
    **spec: Any,
) -> list[dict[str, Any]]:
    """A stand-alone control-plane Machine and its MaasMachine (no control-plane provider: CAPI counts the
    control plane initialized once such a Machine has a Node, which ``clusterctl move`` insists on)."""
    labels = {CLUSTER_NAME_LABEL: cluster, CONTROL_PLANE_LABEL: ""}
    return [
        {
            "apiVersion": INFRA_API,
            "kind": "MaasMachine",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"image": image, "minCPU": 2, "minMemory": 4096, **spec},
        },
        {
            "apiVersion": CAPI_API,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "clusterName": cluster,
                "version": "v1.33.0",
                "bootstrap": {"dataSecretName": bootstrap_secret},
                "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasMachine", "name": name},
            },
        },
    ]


class Stages:
    """Wall time of each named stage, for the issue's timing notes; also appended to ``e2e_support.TIMINGS``
    (as ``(test id, stage, seconds)``), which the e2e conftest prints at the end of the run."""

    def __init__(self, test_id: str) -> None:
        self.test_id = test_id
        self.times: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - began
            self.times.append((name, took))
            TIMINGS.append((self.test_id, name, took))
            print(f"[clusterctl move e2e] {name}: {took:.1f}s", flush=True)

    def summary(self) -> str:
        total = sum(t for _, t in self.times)
        rows = [f"  {name:<58} {t:6.1f}s" for name, t in self.times]
        return "\n".join(["clusterctl move e2e, stage timings:", *rows, f"  {'total':<58} {total:6.1f}s"])
