"""``capmaas demo`` and the manifests it applies while playing Cluster API core's part.

Until the e2e work brings the real CAPI controllers, the demo (and the operator tests) create what CAPI core
would: a ``Cluster`` whose ``infrastructureRef`` names the MaasCluster, ``Machine``s whose
``infrastructureRef`` names the MaasMachines, bootstrap-data Secrets, the owner references CAPI sets,
and the Cluster's ``status.initialization.infrastructureProvisioned`` once the MaasCluster is ready.
"""

from __future__ import annotations

import argparse
from typing import Any

INFRA_API = "infrastructure.cluster.x-k8s.io/v1beta1"
CAPI_API = "cluster.x-k8s.io/v1beta2"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"

CLOUD_CONFIG = b"#cloud-config\nruncmd:\n  - echo capmaas\n"


def owner(kind: str, name: str, uid: str, api_version: str = CAPI_API) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def cluster(name: str, namespace: str, *, paused: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "MaasCluster",
            "name": name,
        },
        "clusterNetwork": {"apiServerPort": 6443},
    }
    if paused:
        spec["paused"] = True
    return {
        "apiVersion": CAPI_API,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def maascluster(
    name: str,
    namespace: str,
    *,
    dns_domain: str = "maas",
    identity: str | None = None,
    annotations: dict[str, str] | None = None,
    endpoint_host: str | None = None,
    cluster_uid: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"dnsDomain": dns_domain}
    if identity:
        spec["identityRef"] = {"kind": "Secret", "name": identity}
    if endpoint_host:
        spec["controlPlaneEndpoint"] = {"host": endpoint_host, "port": 6443}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    if cluster_uid:
        meta["ownerReferences"] = [owner("Cluster", name, cluster_uid)]
    return {"apiVersion": INFRA_API, "kind": "MaasCluster", "metadata": meta, "spec": spec}


def machine(
    name: str, namespace: str, cluster_name: str, *, control_plane: bool, bootstrap: str | None
) -> dict[str, Any]:
    labels = {CLUSTER_NAME_LABEL: cluster_name}
    if control_plane:
        labels[CONTROL_PLANE_LABEL] = ""
    spec: dict[str, Any] = {
        "clusterName": cluster_name,
        "bootstrap": {"dataSecretName": bootstrap} if bootstrap else {"configRef": None},
        "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io",
            "kind": "MaasMachine",
            "name": name,
        },
    }
    if not bootstrap:
        spec["bootstrap"] = {
            "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}
        }
    return {
        "apiVersion": CAPI_API,
        "kind": "Machine",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def maasmachine(
    name: str,
    namespace: str,
    cluster_name: str,
    *,
    control_plane: bool,
    machine_uid: str | None = None,
    min_cpu: int = 2,
    min_memory: int = 4096,
    tags: list[str] | None = None,
    image: str = "ubuntu/jammy",
    failure_domain: str | None = None,
) -> dict[str, Any]:
    labels = {CLUSTER_NAME_LABEL: cluster_name}
    if control_plane:
        labels[CONTROL_PLANE_LABEL] = ""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if machine_uid:
        meta["ownerReferences"] = [owner("Machine", name, machine_uid)]
    spec: dict[str, Any] = {"image": image, "minCPU": min_cpu, "minMemory": min_memory}
    if tags:
        spec["tags"] = tags
    if failure_domain:
        spec["failureDomain"] = failure_domain
    return {"apiVersion": INFRA_API, "kind": "MaasMachine", "metadata": meta, "spec": spec}


def bootstrap_secret(
    name: str, namespace: str, cluster_name: str, value: bytes = CLOUD_CONFIG
) -> dict[str, Any]:
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
        "data": {
            "value": base64.b64encode(value).decode(),
            "format": base64.b64encode(b"cloud-config").decode(),
        },
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--machines", type=int, default=12, help="machines in the simulated MAAS inventory")


def run(args: argparse.Namespace) -> int:
    print("capmaas demo: not implemented yet (see issue 4); the operator tests exercise the same flow")
    return 1
