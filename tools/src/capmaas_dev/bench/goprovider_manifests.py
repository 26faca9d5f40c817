"""What the Go provider's side of the side-by-side benchmark is made of, as data: its CRDs labelled as its
kustomization labels them, the objects it reads in its own schema, the manager's command line and environment,
and the provenance the build script writes beside the binary.

The Go provider is spectrocloud/cluster-api-provider-maas, built by ``hack/go-provider.sh``; nothing of its
source is kept here: the CRDs are read from its tree when the benchmark runs (:mod:`.goprovider_source`).
The CAPI objects (Cluster, Machine, bootstrap Secret) are the ones our benchmark creates
(:mod:`capmaas_dev.demo.manifests`); only the infrastructure objects differ in schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capmaas_dev.demo.manifests import CLUSTER_NAME_LABEL, INFRA_API, owner

#: Where the provider's generated CRDs and their kustomization live in its tree.
CRD_DIR = "config/crd"
CRD_BASES = f"{CRD_DIR}/bases"
#: The Go manager reads the MAAS endpoint and key from its environment (``pkg/maas/scope/client.go``).
ENDPOINT_ENV = "MAAS_ENDPOINT"
API_KEY_ENV = "MAAS_API_KEY"
#: Its default, as its Deployment runs it (``main.go``: ``--machine-concurrency`` 2).
DEFAULT_MACHINE_CONCURRENCY = 2


class GoSourceError(RuntimeError):
    """The provider's tree lacks what the benchmark reads from it."""


def labelled_crds(documents: Mapping[str, str], kustomization: str) -> list[dict[str, Any]]:
    """The CRDs of ``documents`` (file name -> YAML text, ``config/crd/bases``) with the ``commonLabels`` of
    ``kustomization`` (``config/crd/kustomization.yaml``) added, as ``kustomize build config/crd`` gives them
    (the ``cluster.x-k8s.io/<contract>`` labels say which API version serves each CAPI contract); in file name
    order."""
    custom = yaml.safe_load(kustomization) or {}
    labels = {str(k): str(v) for k, v in (custom.get("commonLabels") or {}).items()}
    out: list[dict[str, Any]] = []
    for name in sorted(documents):
        for doc in yaml.safe_load_all(documents[name]):
            if not doc:
                continue
            if doc.get("kind") != "CustomResourceDefinition":
                raise GoSourceError(f"{CRD_BASES}/{name} holds a {doc.get('kind')!r}, not a CRD")
            meta = doc.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **labels}
            out.append(doc)
    if not out:
        raise GoSourceError(f"no CRD in {CRD_BASES}")
    return out


def crd_names(crds: list[dict[str, Any]]) -> list[str]:
    return [str(c["metadata"]["name"]) for c in crds]


def maascluster(name: str, namespace: str, *, cluster_uid: str, dns_domain: str = "maas") -> dict[str, Any]:
    """A MaasCluster in the Go provider's schema: ``spec.dnsDomain`` (required) and the Cluster as its
    controller owner (its MaasCluster controller waits for that ownerReference). No identity: the Go manager
    has one MAAS, from its environment."""
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasCluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [owner("Cluster", name, cluster_uid)],
        },
        "spec": {"dnsDomain": dns_domain},
    }


def maasmachine(
    name: str,
    namespace: str,
    cluster_name: str,
    *,
    machine_uid: str,
    min_cpu: int = 2,
    min_memory: int = 4096,
    image: str = "ubuntu/jammy",
    extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A bare-metal worker MaasMachine in the Go provider's schema (``image``, ``minCPU``, ``minMemory`` are
    its required fields), owned by its CAPI Machine; the same constraints our benchmark asks for."""
    labels = {CLUSTER_NAME_LABEL: cluster_name, **(extra_labels or {})}
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasMachine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner("Machine", name, machine_uid)],
        },
        "spec": {"image": image, "minCPU": min_cpu, "minMemory": min_memory},
    }


@dataclass(frozen=True)
class ManagerPorts:
    metrics: int
    health: int
    webhook: int


def manager_args(kubeconfig: Path, ports: ManagerPorts, *, machine_concurrency: int) -> list[str]:
    """The manager's flags: its kubeconfig, metrics and health on loopback, no leader election (one process,
    as our benchmark runs ours), the MaasMachine concurrency. The webhook server has only a port flag (it
    listens on every address of its network namespace; the benchmark gives it one with loopback only)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--metrics-bind-addr=127.0.0.1:{ports.metrics}",
        f"--health-addr=127.0.0.1:{ports.health}",
        f"--webhook-port={ports.webhook}",
        f"--machine-concurrency={machine_concurrency}",
        "--leader-elect=false",
    ]


def manager_env(base: Mapping[str, str], *, maas_endpoint: str, api_key: str, tmpdir: Path) -> dict[str, str]:
    """The manager's environment: ``base`` without any MAAS setting of the caller's, the simulator's endpoint
    and key, and ``TMPDIR`` (controller-runtime's webhook server reads its certificate from
    ``$TMPDIR/k8s-webhook-server/serving-certs``)."""
    drop = {ENDPOINT_ENV, API_KEY_ENV, "MAAS_API_URL", "MAAS_API_TOKEN", "KUBECONFIG"}
    env = {k: v for k, v in base.items() if k not in drop}
    env.update({ENDPOINT_ENV: maas_endpoint, API_KEY_ENV: api_key, "TMPDIR": str(tmpdir)})
    return env


def webhook_cert_dir(tmpdir: Path) -> Path:
    """Where controller-runtime's webhook server looks for ``tls.crt``/``tls.key`` by default."""
    return tmpdir / "k8s-webhook-server" / "serving-certs"


@dataclass(frozen=True)
class Provenance:
    """What ``hack/go-provider.sh`` recorded beside the binary."""

    provider_source: str
    provider_revision: str
    client_pinned: str
    client_source: str
    client_revision: str
    go: str

    def describe(self) -> str:
        client = (
            f"client {self.client_revision} (replacing the pinned {self.client_pinned})"
            if self.client_revision
            else f"client {self.client_pinned} (as pinned)"
        )
        return f"provider {self.provider_revision}, {client}, {self.go}"


def read_provenance(binary: Path) -> Provenance | None:
    """The ``<binary>.json`` the build script writes; None when there is none (a binary built otherwise)."""
    path = binary.with_name(binary.name + ".json")
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Provenance(
        provider_source=str(data.get("provider_source", "")),
        provider_revision=str(data.get("provider_revision", "")),
        client_pinned=str(data.get("client_pinned", "")),
        client_source=str(data.get("client_source", "")),
        client_revision=str(data.get("client_revision", "")),
        go=str(data.get("go", "")),
    )
