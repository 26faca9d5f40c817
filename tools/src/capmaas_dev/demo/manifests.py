"""The objects the demo, the benchmark and the tests create.

``make demo`` writes what a Cluster API user writes (a Cluster, its MaasCluster, control-plane Machines with
MaasMachines, a MaasMachineTemplate and a MachineDeployment, bootstrap-data Secrets) and the real CAPI core
manager does the rest. The benchmark and the operator tests play CAPI core's part instead (see
:mod:`capmaas_dev.demo.capi`): ``Machine``s whose ``infrastructureRef`` names the MaasMachines, the owner
references CAPI sets, and the Cluster's ``status.initialization.infrastructureProvisioned``.

The builders keep the signatures of the former ``capmaas/demo.py`` (the operator tests and the reconciler
unit tests call them as ``demo.cluster(...)``, ``demo.machine(...)``), so this package can replace it.
"""

from __future__ import annotations

import base64
from typing import Any

INFRA_GROUP = "infrastructure.cluster.x-k8s.io"
INFRA_VERSION = "v1beta1"
INFRA_API = f"{INFRA_GROUP}/{INFRA_VERSION}"
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = "v1beta2"
CAPI_API = f"{CAPI_GROUP}/{CAPI_VERSION}"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"

CLOUD_CONFIG = b"#cloud-config\nruncmd:\n  - echo capmaas\n"


def owner(
    kind: str, name: str, uid: str, api_version: str = CAPI_API, *, controller: bool = True
) -> dict[str, Any]:
    """An ownerReference as CAPI writes it (``blockOwnerDeletion``, so foreground deletion waits for us)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


MACHINE_DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
KUBERNETES_VERSION = "v1.33.0"


def cluster(name: str, namespace: str, *, paused: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasCluster", "name": name},
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
    name: str,
    namespace: str,
    cluster_name: str,
    *,
    control_plane: bool,
    bootstrap: str | None,
    cluster_uid: str | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    """A CAPI Machine. ``bootstrap`` None leaves only a ``configRef`` (bootstrap data not ready yet);
    ``cluster_uid`` adds the Cluster as (non-controller) owner so deleting the Cluster cascades to it;
    ``version`` is the Kubernetes version (what a control-plane provider would write)."""
    labels = {CLUSTER_NAME_LABEL: cluster_name}
    if control_plane:
        labels[CONTROL_PLANE_LABEL] = ""
    if bootstrap:
        boot: dict[str, Any] = {"dataSecretName": bootstrap}
    else:
        boot = {
            "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}
        }
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if cluster_uid:
        meta["ownerReferences"] = [owner("Cluster", cluster_name, cluster_uid, controller=False)]
    spec: dict[str, Any] = {
        "clusterName": cluster_name,
        "bootstrap": boot,
        "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasMachine", "name": name},
    }
    if version:
        spec["version"] = version
    return {"apiVersion": CAPI_API, "kind": "Machine", "metadata": meta, "spec": spec}


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
    resource_pool: str | None = None,
    lxd_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A MaasMachine; ``lxd_config`` (even ``{}``) makes it ``provisioningMode: lxd`` (a VM composed on a
    MAAS VM host) instead of bare metal."""
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
    if resource_pool:
        spec["resourcePool"] = resource_pool
    if lxd_config is not None:
        spec["provisioningMode"] = "lxd"
        spec["lxdConfig"] = lxd_config
    return {"apiVersion": INFRA_API, "kind": "MaasMachine", "metadata": meta, "spec": spec}


def maasmachine_spec(
    *,
    min_cpu: int = 2,
    min_memory: int = 4096,
    tags: list[str] | None = None,
    image: str = "ubuntu/jammy",
    resource_pool: str | None = None,
    lxd_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A MaasMachine ``spec`` (for a MaasMachineTemplate's ``template.spec``)."""
    spec: dict[str, Any] = maasmachine(
        "x",
        "x",
        "x",
        control_plane=False,
        min_cpu=min_cpu,
        min_memory=min_memory,
        tags=tags,
        image=image,
        resource_pool=resource_pool,
        lxd_config=lxd_config,
    )["spec"]
    return spec


def maasmachinetemplate(name: str, namespace: str, cluster_name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasMachineTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
        "spec": {"template": {"spec": spec}},
    }


def machinedeployment(
    name: str,
    namespace: str,
    cluster_name: str,
    *,
    template: str,
    replicas: int,
    bootstrap: str,
    version: str = KUBERNETES_VERSION,
) -> dict[str, Any]:
    """A MachineDeployment whose Machines take their bootstrap data from the Secret ``bootstrap`` (as when a
    bootstrap provider has written it) and their MaasMachines from the MaasMachineTemplate ``template``."""
    return {
        "apiVersion": CAPI_API,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
        "spec": {
            "clusterName": cluster_name,
            "replicas": replicas,
            "selector": {"matchLabels": {}},
            "template": {
                "spec": {
                    "clusterName": cluster_name,
                    "version": version,
                    "bootstrap": {"dataSecretName": bootstrap},
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
    name: str,
    namespace: str,
    cluster_name: str,
    value: bytes = CLOUD_CONFIG,
    *,
    machine_owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A bootstrap-data Secret as CABPK writes it (``value`` + ``format``); ``machine_owner`` (name, uid)
    makes the Machine its owner so it goes away with it."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {CLUSTER_NAME_LABEL: cluster_name},
    }
    if machine_owner:
        meta["ownerReferences"] = [owner("Machine", *machine_owner, controller=False)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": meta,
        "data": {
            "value": base64.b64encode(value).decode(),
            "format": base64.b64encode(b"cloud-config").decode(),
        },
    }


def identity_secret(
    name: str, namespace: str, endpoint: str, api_key: str, *, allow_plaintext_http: bool = False
) -> dict[str, Any]:
    """The Secret a MaasCluster's ``spec.identityRef`` names: the MAAS endpoint and API key.
    ``allow_plaintext_http``: the identity's opt-in to an ``http://`` endpoint off loopback."""
    data = {"MAAS_ENDPOINT": endpoint, "MAAS_API_KEY": api_key}
    if allow_plaintext_http:
        data["MAAS_ALLOW_PLAINTEXT_HTTP"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }


def cloud_config(hostname: str) -> bytes:
    """Per-machine cloud-config, so each deploy carries distinct user data as kubeadm's would."""
    return (
        "#cloud-config\n"
        f"hostname: {hostname}\n"
        "runcmd:\n"
        f"  - echo 'capmaas demo: {hostname} joined' > /run/capmaas-demo\n"
    ).encode()
