"""Fencing in the write path (issue 11 item 2) on a real kube-apiserver: a scope's write of a crash-window
annotation really carries the ``resourceVersion`` it read, so the apiserver answers 409 to a stale copy; the
adapter then re-reads the object into its store, and the next pass (from the current copy) succeeds."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from capmaas.operator.kube import KubeAdapter, Store
from capmaas.operator.kubehttp import KubeHttp
from capmaas.reconcilers.errors import ConflictError
from capmaas.reconcilers.keys import ALLOCATING, ANNOTATION_PREFIX, FAILURES
from capmaas.reconcilers.scope import MachineScope
from capmaas_dev.devcluster import ControlPlane

pytestmark = pytest.mark.k8s

API = "infrastructure.cluster.x-k8s.io/v1beta1"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def adapter(kube: ControlPlane) -> KubeAdapter:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    return KubeAdapter(Store(), KubeHttp(cfg, field_validation="Strict"), secret_ttl=1.0)


def current(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    return dict(json.loads(kubectl("get", "maasmachine", "m1", "-n", namespace, "-o", "json").stdout))


async def test_a_stale_copy_gets_409_from_the_apiserver_and_the_store_is_refreshed(
    crds: list[str], kube: ControlPlane, kubectl: Kubectl, namespace: str
) -> None:
    obj = {
        "apiVersion": API,
        "kind": "MaasMachine",
        "metadata": {"name": "m1"},
        "spec": {"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096},
    }
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    port = adapter(kube)
    try:
        stale = current(kubectl, namespace)
        port.store.put("maasmachines", stale)
        kubectl("annotate", "maasmachine", "m1", "-n", namespace, "example.com/touched=yes")  # another writer
        fresh_rv = current(kubectl, namespace)["metadata"]["resourceVersion"]
        assert fresh_rv != stale["metadata"]["resourceVersion"]

        scope = MachineScope(port, "maasmachines", copy.deepcopy(stale))
        scope.set_annotation(ALLOCATING, "1700000000")
        with pytest.raises(ConflictError):
            await scope.flush()
        now = current(kubectl, namespace)
        assert ANNOTATION_PREFIX + ALLOCATING not in now["metadata"]["annotations"]
        assert now["metadata"]["resourceVersion"] == fresh_rv  # the apiserver stored nothing
        assert scope.stale
        await scope.close()  # a stale pass writes nothing more
        assert current(kubectl, namespace)["metadata"]["resourceVersion"] == fresh_rv

        refreshed = port.store.find("maasmachines", namespace, "m1")  # re-read after the 409
        assert refreshed is not None
        assert refreshed["metadata"]["resourceVersion"] == fresh_rv

        unguarded = MachineScope(port, "maasmachines", copy.deepcopy(stale))
        unguarded.set_annotation(FAILURES, "1")  # no crash window: merged whatever the version
        await unguarded.flush()

        retry = MachineScope(port, "maasmachines", port.store.find("maasmachines", namespace, "m1") or {})
        retry.set_annotation(ALLOCATING, "1700000000")
        await retry.flush()
        annotations = current(kubectl, namespace)["metadata"]["annotations"]
        assert annotations[ANNOTATION_PREFIX + ALLOCATING] == "1700000000"
        assert annotations[ANNOTATION_PREFIX + FAILURES] == "1"
        assert annotations["example.com/touched"] == "yes"
    finally:
        await port.aclose()
