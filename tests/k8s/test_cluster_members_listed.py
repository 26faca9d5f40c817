"""The MaasCluster deletion's last look on a real kube-apiserver: ``lists_maasmachines`` asks the apiserver
(not the watch cache, which kopf may still be filling at start-up) whether any MaasMachine of the cluster is
left, with the same label selectors the operator's watch uses."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import kubernetes
import pytest

from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL
from capmaas_dev.devcluster import ControlPlane

pytestmark = pytest.mark.k8s

API = "infrastructure.cluster.x-k8s.io/v1beta1"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def adapter(kube: ControlPlane, watch_filter: str | None = None) -> KubeAdapter:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    return KubeAdapter(Store(), KubeHttp(cfg), secret_ttl=1.0, watch_filter=watch_filter)


def maasmachine(kubectl: Kubectl, namespace: str, name: str, cluster: str) -> None:
    obj = {
        "apiVersion": API,
        "kind": "MaasMachine",
        "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: cluster}},
        "spec": {"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096},
    }
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))


async def test_the_apiserver_is_asked_for_the_clusters_maasmachines(
    crds: list[str], kube: ControlPlane, kubectl: Kubectl, namespace: str
) -> None:
    maasmachine(kubectl, namespace, "m1", "c1")
    maasmachine(kubectl, namespace, "m2", "c1")
    plain, sharded = adapter(kube), adapter(kube, watch_filter="shard=a")
    try:
        assert plain.list_maasmachines(namespace, "c1") == []  # nothing in the cache: it was never fed
        assert await plain.lists_maasmachines(namespace, "c1")
        assert not await plain.lists_maasmachines(namespace, "c2")
        assert not await plain.lists_maasmachines(namespace + "-other", "c1")  # another namespace
        # Under a watch filter only the MaasMachines it lets in count (the others are another operator's).
        assert not await sharded.lists_maasmachines(namespace, "c1")
        kubectl("label", "maasmachine", "m2", "-n", namespace, "shard=a")
        assert await sharded.lists_maasmachines(namespace, "c1")
        kubectl("delete", "maasmachine", "m1", "m2", "-n", namespace)
        assert not await plain.lists_maasmachines(namespace, "c1")
    finally:
        await plain.aclose()
        await sharded.aclose()
