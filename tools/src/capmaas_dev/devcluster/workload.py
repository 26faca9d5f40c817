"""A workload-cluster stand-in: a second dev control plane whose Nodes appear when MAAS deploys a machine.

On real hardware the deployed OS runs a kubelet that registers a Node named after the machine's hostname in
the workload cluster; CAPI then matches ``Node.spec.providerID`` to ``Machine.spec.providerID``, sets the
Machine's ``nodeRef`` and the Machine reaches ``Running``. Here no kubelet runs, so this helper does the
kubelet's part against a second local apiserver:

- :meth:`WorkloadCluster.publish_kubeconfig` writes the ``<cluster>-kubeconfig`` Secret (key ``value``, type
  ``cluster.x-k8s.io/secret``, label ``cluster.x-k8s.io/cluster-name``) into the management namespace, which
  is where CAPI's ClusterCache (and capmaas, for the providerID) look for the workload cluster;
- :meth:`WorkloadCluster.register_node` creates a Ready Node with the hostname and addresses, *without* a
  providerID by default (a kubeadm kubelet without ``--provider-id``; capmaas writes it, as the Agent
  provider does) — pass ``provider_id`` to play a kubelet that knows it;
- :meth:`WorkloadCluster.deploy_hook` returns a callback for the simulator's ``on_deployed(machine_json)``.

Only kubectl is used (no Kubernetes client), so the devcluster package stays free of it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from capmaas_dev.devcluster.tools import run_kubectl

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
SECRET_TYPE = "cluster.x-k8s.io/secret"
DEFAULT_KUBELET_VERSION = "v1.33.0"
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory"),
    ("DiskPressure", "KubeletHasNoDiskPressure"),
    ("PIDPressure", "KubeletHasSufficientPID"),
)


def kubeconfig_secret(name: str, namespace: str, cluster_name: str, kubeconfig: bytes) -> dict[str, Any]:
    """The Secret CAPI reads a workload cluster's kubeconfig from (``util/secret``: ``<cluster>-kubeconfig``,
    data key ``value``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
        "data": {"value": base64.b64encode(kubeconfig).decode()},
    }


def node_manifest(
    name: str,
    *,
    addresses: Iterable[tuple[str, str]] = (),
    provider_id: str | None = None,
    ready: bool = True,
    kubelet_version: str = DEFAULT_KUBELET_VERSION,
    labels: Mapping[str, str] | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """A Node as a freshly registered kubelet reports it (status included: Nodes accept status on create)."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    spec: dict[str, Any] = {}
    if provider_id:
        spec["providerID"] = provider_id
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": spec,
        "status": {
            "addresses": [{"type": t, "address": a} for t, a in addresses],
            # A kubelet reports the pressure conditions too, and CAPI (v1beta2 NodeHealthy) keeps a Machine
            # not Ready while they are missing ("Condition not yet reported").
            "conditions": [
                *(
                    {
                        "type": kind,
                        "status": "False",
                        "reason": reason,
                        "message": "capmaas workload stand-in",
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": stamp,
                    }
                    for kind, reason in PRESSURE_CONDITIONS
                ),
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "capmaas workload stand-in",
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                },
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": kubelet_version,
                "containerRuntimeVersion": "containerd://2.0.0",
                "osImage": "Ubuntu 24.04 LTS",
                "kernelVersion": "6.8.0",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
            },
        },
    }


def machine_addresses(machine: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Node addresses for a MAAS machine JSON as a kubelet reports them: Hostname, each IP as InternalIP."""
    out: list[tuple[str, str]] = [("Hostname", str(machine["hostname"]))]
    out += [("InternalIP", str(ip)) for ip in machine.get("ip_addresses") or []]
    return out


class WorkloadCluster:
    """Helpers around the kubeconfig of the control plane standing in for a workload cluster."""

    def __init__(self, kubeconfig: str | os.PathLike[str]) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.registered: list[str] = []  # Node names, in registration order (for tests and cleanup)

    def _kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return run_kubectl(self.kubeconfig, *args, input=input, check=check, timeout=60).stdout

    # -- management side -----------------------------------------------------------------------------------
    def publish_kubeconfig(
        self, management_kubeconfig: str | os.PathLike[str], namespace: str, cluster_name: str
    ) -> str:
        """Create or replace ``<cluster_name>-kubeconfig`` in ``namespace`` of the management cluster; returns
        the Secret name."""
        name = f"{cluster_name}-kubeconfig"
        secret = kubeconfig_secret(name, namespace, cluster_name, self.kubeconfig.read_bytes())
        run_kubectl(management_kubeconfig, "apply", "-f", "-", input=json.dumps(secret), timeout=60)
        return name

    # -- workload side -------------------------------------------------------------------------------------
    def register_node(
        self,
        name: str,
        *,
        addresses: Iterable[tuple[str, str]] = (),
        provider_id: str | None = None,
        ready: bool = True,
        kubelet_version: str = DEFAULT_KUBELET_VERSION,
    ) -> None:
        """Create the Node ``name`` (Ready, with ``addresses``); an existing Node of that name is left as it
        is apart from its status (a re-registering kubelet keeps its providerID)."""
        node = node_manifest(
            name, addresses=addresses, provider_id=provider_id, ready=ready, kubelet_version=kubelet_version
        )
        created = run_kubectl(
            self.kubeconfig, "create", "-f", "-", input=json.dumps(node), check=False, timeout=60
        )
        if created.returncode != 0:
            if "AlreadyExists" not in created.stderr:
                self._kubectl("create", "-f", "-", input=json.dumps(node))  # raises with kubectl's stderr
            self.set_ready(name, ready, addresses=addresses)
        if name not in self.registered:
            self.registered.append(name)

    def set_ready(self, name: str, ready: bool, *, addresses: Iterable[tuple[str, str]] = ()) -> None:
        """Rewrite the Node's Ready condition (and addresses, when given) through the status subresource, as
        a kubelet heartbeat would (``ready=False`` plays a node that went NotReady, for health checks)."""
        status = node_manifest(name, addresses=addresses, ready=ready)["status"]
        patch: dict[str, Any] = {"status": {"conditions": status["conditions"]}}
        if status["addresses"]:
            patch["status"]["addresses"] = status["addresses"]
        self._kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(patch))

    def remove_node(self, name: str) -> None:
        self._kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")
        if name in self.registered:
            self.registered.remove(name)

    def node(self, name: str) -> dict[str, Any] | None:
        out = run_kubectl(self.kubeconfig, "get", "node", name, "-o", "json", check=False, timeout=60)
        if out.returncode != 0:
            return None
        node: dict[str, Any] = json.loads(out.stdout)
        return node

    def nodes(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = yaml.safe_load(self._kubectl("get", "nodes", "-o", "json"))["items"]
        return items

    # -- the simulator hook --------------------------------------------------------------------------------
    def deploy_hook(
        self, *, provider_id: Callable[[Mapping[str, Any]], str | None] | None = None
    ) -> Callable[[dict[str, Any]], Coroutine[Any, Any, None]]:
        """A callback for ``Simulator(on_deployed=...)``: when a MAAS machine reaches Deployed, register its
        Node (named after the hostname) here, off the event loop (kubectl is a subprocess).

        ``provider_id(machine_json)`` may return a providerID for the Node; by default it has none and the
        provider is expected to set it.
        """

        async def on_deployed(machine: dict[str, Any]) -> None:
            pid = provider_id(machine) if provider_id is not None else None
            await asyncio.to_thread(
                self.register_node,
                str(machine["hostname"]),
                addresses=machine_addresses(machine),
                provider_id=pid,
            )

        return on_deployed
