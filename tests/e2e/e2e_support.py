"""Helpers the e2e tests share: kubectl JSON access, polling, and the objects CAPI users write.

A plain module (not conftest) so tests import it by name: pytest puts ``tests/e2e`` on ``sys.path``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

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
    """``kubectl get ... -o json`` parsed; ``None`` when the object does not exist."""
    out = kubectl("get", *args, "-o", "json", check=False)
    if out.returncode != 0:
        if "NotFound" in out.stderr:
            return None
        raise AssertionError(f"kubectl get {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout)


def items(
    kubectl: Kubectl, resource: str, namespace: str, selector: str | None = None
) -> list[dict[str, Any]]:
    args = [resource, "-n", namespace, *([f"-l={selector}"] if selector else [])]
    found: list[dict[str, Any]] = get(kubectl, *args)["items"]
    return found


def apply(kubectl: Kubectl, *objects: dict[str, Any]) -> None:
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    )


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
