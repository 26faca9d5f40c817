"""``capmaas run`` publishes MaasMachineTemplate ``status.capacity`` / ``status.nodeInfo`` (the cluster
autoscaler's scale-from-zero contract) on a real kube-apiserver: for a template tied to no Cluster, from the
template's sizes, for both LXD spellings, every value a string (the autoscaler drops a map with a number in
it), corrected when someone writes it wrong, and never rewritten when it is right. Counting in MAAS:
tests/operator/test_template_capacity_operator.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capmaas.api.v1beta1 import API_VERSION
from capmaas_dev.demo.stack import OperatorProcess
from capmaas_dev.devcluster.process import free_port

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def operator(crds: list[str], kube: Any, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPMAAS_")}
    env.update(
        KUBECONFIG=str(kube.kubeconfig),
        CAPMAAS_SERVER__BIND_ADDRESS="127.0.0.1",
        CAPMAAS_SERVER__HEALTH_PORT=str(free_port()),
        CAPMAAS_SERVER__METRICS_PORT=str(free_port()),
        CAPMAAS_LOGGING__FORMAT="text",
    )
    proc = OperatorProcess(env, namespace, tmp_path / "operator.log").start()
    try:
        yield proc
    finally:
        proc.stop()


def template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MaasMachineTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"image": "ubuntu/noble", "minCPU": 4, "minMemory": 8192, **spec}}},
    }


def wait_status(
    api: Any, kubectl: Kubectl, namespace: str, name: str, want: dict[str, Any], op: OperatorProcess
) -> dict[str, Any]:
    """Polls ``kubectl get maasmachinetemplate NAME -o json`` every 0.2 s, read in-process (``api``: no
    kubectl fork per poll); kubectl itself when the reader cannot answer, so that its failure is what
    raises."""
    deadline = time.monotonic() + 30
    while True:
        got = api.get("maasmachinetemplate", name, namespace)
        obj: dict[str, Any] = (
            got
            if isinstance(got, dict)
            else json.loads(kubectl("get", "-n", namespace, "maasmachinetemplate", name, "-o", "json").stdout)
        )
        if obj.get("status") == want:
            return obj
        assert op.exited() is None, f"operator exited:\n{op.tail()}"
        assert time.monotonic() < deadline, f"status of {name}: {obj.get('status')} != {want}\n{op.tail()}"
        time.sleep(0.2)


def test_operator_publishes_template_capacity(
    api: Any, kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    bare = template("bare", {"minDiskSize": 50})
    seed = template("seed-lxd", {"provisioningMode": "lxd", "lxdConfig": {"storage": {"size": "20Gi"}}})
    go = template("go-lxd", {"lxd": {"enabled": True, "vmConfig": {"diskSize": 40}}})
    plain = template("plain", {"image": "windows/win2022", "minCPU": 2, "minMemory": 2048})
    for obj in (bare, seed, go, plain):
        kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))
    linux = {"operatingSystem": "linux"}
    got = wait_status(
        api,
        kubectl,
        namespace,
        "bare",
        {"capacity": {"cpu": "4", "memory": "8192Mi", "ephemeral-storage": "50G"}, "nodeInfo": linux},
        operator,
    )
    wait_status(
        api,
        kubectl,
        namespace,
        "seed-lxd",
        {"capacity": {"cpu": "4", "memory": "8192Mi", "ephemeral-storage": "22G"}, "nodeInfo": linux},
        operator,
    )
    wait_status(
        api,
        kubectl,
        namespace,
        "go-lxd",
        {"capacity": {"cpu": "4", "memory": "8192Mi", "ephemeral-storage": "40G"}, "nodeInfo": linux},
        operator,
    )
    wait_status(
        api,
        kubectl,
        namespace,
        "plain",
        {"capacity": {"cpu": "2", "memory": "2048Mi"}, "nodeInfo": {"operatingSystem": "windows"}},
        operator,
    )

    assert all(isinstance(v, str) for v in got["status"]["capacity"].values())

    # Right already: nothing is written again (no write loop on the echo of our own patch).
    version = got["metadata"]["resourceVersion"]
    time.sleep(2)
    again = json.loads(kubectl("get", "-n", namespace, "maasmachinetemplate", "bare", "-o", "json").stdout)
    assert again["metadata"]["resourceVersion"] == version

    # Written wrong by someone else (an extra key, a wrong value): put right, the extra key removed.
    wrong = {"status": {"capacity": {"cpu": "64", "nvidia.com/gpu": "1"}}}
    kubectl(
        "patch", "-n", namespace, "maasmachinetemplate/bare", "--subresource=status",
        "--type=merge", "-p", json.dumps(wrong),
    )  # fmt: skip
    wait_status(
        api,
        kubectl,
        namespace,
        "bare",
        {"capacity": {"cpu": "4", "memory": "8192Mi", "ephemeral-storage": "50G"}, "nodeInfo": linux},
        operator,
    )

    # A number in the map is refused by the schema: it would make the autoscaler drop the whole map.
    number = {"status": {"capacity": {"cpu": 64}}}
    refused = kubectl(
        "patch", "-n", namespace, "maasmachinetemplate/bare", "--subresource=status",
        "--type=merge", "-p", json.dumps(number), check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "status.capacity.cpu" in refused.stderr
