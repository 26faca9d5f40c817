"""Events that repeat are one Event with a count on a real kube-apiserver (client-go's EventCorrelator):
the first occurrence is posted, the repeats patch its ``count`` and ``lastTimestamp``; another message is
another Event."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from capmaas.operator.apiserver import Apiserver, from_kubeconfig
from capmaas.operator.events import EventRecorder
from capmaas.operator.kubehttp import KubeHttp
from capmaas_dev.devcluster import ControlPlane

pytestmark = pytest.mark.k8s

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def api(kube: ControlPlane) -> Apiserver:
    found = from_kubeconfig({"KUBECONFIG": str(kube.kubeconfig)})
    assert found is not None
    return found


async def test_repeats_are_counted_on_one_event(kube: ControlPlane, kubectl: Kubectl, namespace: str) -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": namespace}}
    created = json.loads(kubectl("create", "-n", namespace, "configmap", "cm", "-o", "json").stdout)
    obj["metadata"]["uid"] = created["metadata"]["uid"]
    http = KubeHttp(api(kube).target())
    recorder = EventRecorder(http, series_flush=3600.0)
    try:
        for _ in range(5):
            recorder.post(obj, "Warning", "NoMachineAvailable", "no machine in zone az1")
        recorder.post(obj, "Warning", "NoMachineAvailable", "no machine in zone az2")
        await recorder.drain()  # the count due is written now, not after series_flush
    finally:
        await http.aclose()
    items = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    counts = {e["message"]: e.get("count") for e in items if e["involvedObject"]["name"] == "cm"}
    assert counts == {"no machine in zone az1": 5, "no machine in zone az2": None}
    assert recorder.aggregated == 4
