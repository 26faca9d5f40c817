"""The MaasCluster's looks past its watch cache, on a real kube-apiserver: ``live_maasmachines`` asks the
apiserver (not the cache, which kopf may still be filling at start-up or on a move target) for the cluster's
MaasMachines (the deletion's last look, ``limit=1``) or its control-plane ones (before the DNS record loses an
address), with the selectors the operator's watch uses."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kubernetes
import pytest

from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL
from capmaas_dev.devcluster import ControlPlane

pytestmark = pytest.mark.k8s

API = "infrastructure.cluster.x-k8s.io/v1beta1"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def adapter(kube: ControlPlane, watch_filter: str | None = None) -> KubeAdapter:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    return KubeAdapter(Store(), KubeHttp(cfg), secret_ttl=1.0, watch_filter=watch_filter)


def maasmachine(kubectl: Kubectl, namespace: str, name: str, cluster: str, *, cp: bool = False) -> None:
    labels = {CLUSTER_NAME_LABEL: cluster, **({CONTROL_PLANE_LABEL: ""} if cp else {})}
    obj = {
        "apiVersion": API,
        "kind": "MaasMachine",
        "metadata": {"name": name, "labels": labels},
        "spec": {"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096},
    }
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))


def names(bodies: Sequence[Mapping[str, Any]]) -> set[str]:
    return {b["metadata"]["name"] for b in bodies}


async def test_the_apiserver_is_asked_for_the_clusters_maasmachines(
    crds: list[str], kube: ControlPlane, kubectl: Kubectl, namespace: str
) -> None:
    maasmachine(kubectl, namespace, "m1", "c1")
    maasmachine(kubectl, namespace, "m2", "c1", cp=True)
    maasmachine(kubectl, namespace, "m3", "c1", cp=True)
    plain, sharded = adapter(kube), adapter(kube, watch_filter="shard=a")
    try:
        assert plain.list_maasmachines(namespace, "c1") == []  # nothing in the cache: it was never fed
        assert names(await plain.live_maasmachines(namespace, "c1")) == {"m1", "m2", "m3"}
        assert len(await plain.live_maasmachines(namespace, "c1", limit=1)) == 1
        assert names(await plain.live_maasmachines(namespace, "c1", control_plane=True)) == {"m2", "m3"}
        assert await plain.live_maasmachines(namespace, "c2") == []
        assert await plain.live_maasmachines(namespace + "-other", "c1") == []  # another namespace
        # Under a watch filter only the MaasMachines it lets in count (the others are another operator's).
        assert await sharded.live_maasmachines(namespace, "c1") == []
        kubectl("label", "maasmachine", "m2", "-n", namespace, "shard=a")
        assert names(await sharded.live_maasmachines(namespace, "c1", control_plane=True)) == {"m2"}
        kubectl("delete", "maasmachine", "m1", "m2", "m3", "-n", namespace)
        assert await plain.live_maasmachines(namespace, "c1") == []
    finally:
        await plain.aclose()
        await sharded.aclose()
