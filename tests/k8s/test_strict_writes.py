"""The operator's writes with ``fieldValidation=Strict`` (what every test runs with) on a real kube-apiserver:
a mistyped status key is refused instead of silently pruned, so it fails a test. With the apiserver's
default (Warn) the same write is accepted and the key dropped: that silence is what Strict ends."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from capmaas.operator.kubehttp import KubeHttp, KubeHttpError
from capmaas_dev.devcluster import ControlPlane

pytestmark = pytest.mark.k8s

API = "infrastructure.cluster.x-k8s.io/v1beta1"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def http(kube: ControlPlane, field_validation: str | None) -> KubeHttp:
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    return KubeHttp(cfg, field_validation=field_validation)


def maasmachine(kubectl: Kubectl, namespace: str) -> None:
    obj: dict[str, Any] = {
        "apiVersion": API,
        "kind": "MaasMachine",
        "metadata": {"name": "m1"},
        "spec": {"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096},
    }
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))


async def test_strict_refuses_a_mistyped_status_key(
    crds: list[str], kube: ControlPlane, kubectl: Kubectl, namespace: str
) -> None:
    maasmachine(kubectl, namespace)
    strict = http(kube, "Strict")
    try:
        with pytest.raises(KubeHttpError) as info:
            await strict.merge_patch(
                API, "maasmachines", namespace, "m1", {"status": {"machineStat": "Deployed"}}, status=True
            )
        assert info.value.status == 422  # "strict decoding error: unknown field" (the message is cut short)
        new = await strict.merge_patch(
            API, "maasmachines", namespace, "m1", {"status": {"machineState": "Deployed"}}, status=True
        )
        assert new["status"]["machineState"] == "Deployed"
    finally:
        await strict.aclose()


async def test_the_default_drops_it_without_a_word(
    crds: list[str], kube: ControlPlane, kubectl: Kubectl, namespace: str
) -> None:
    maasmachine(kubectl, namespace)
    lax = http(kube, None)
    try:
        new = await lax.merge_patch(
            API, "maasmachines", namespace, "m1", {"status": {"machineStat": "Deployed"}}, status=True
        )
    finally:
        await lax.aclose()
    assert "machineStat" not in (new.get("status") or {})
