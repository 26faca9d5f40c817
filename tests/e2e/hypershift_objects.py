"""The objects HyperShift's NodePool controller writes for a platform, rebuilt for MAAS.

HyperShift has no MAAS platform, so nothing here is copied from a real MAAS builder: each builder imitates
what ``openshift/hypershift`` writes for the platforms it has (paths in ``hypershift-operator/controllers/
nodepool/``), with the MAAS kinds in place of e.g. ``AgentMachineTemplate``:

- ``capi.go`` ``machineTemplateBuilders`` / ``generateMachineTemplateName``: the template is named
  ``getName(<nodepool>, HashSimple(json.Marshal(spec)), 253)`` and annotated ``hypershift.openshift.io/
  nodePool: <ns>/<nodepool>``. :func:`hash_simple` reproduces ``support/util.HashSimple`` exactly, including
  its quirk: it hashes ``fmt.Sprintf("%v", []byte)``, i.e. the *decimal byte list* ``"[123 34 ...]"``, not
  the JSON text. The JSON it hashes is a faithful imitation: compact, as Go's encoding/json writes it, with
  ``metadata: {}`` (a struct with ``omitempty`` is never omitted) and our CRD's field order standing in for
  the field order of a Go ``MaasMachineTemplateSpec`` that does not exist.
- ``capi.go`` ``reconcileMachineDeployment`` / ``reconcileMachineSet``: a v1beta1 MachineDeployment (upgrade
  type Replace) or MachineSet (InPlace) named after the NodePool, with the ``generateName(infraID,
  clusterName, nodepool)`` selector label, the nodePool annotation on the Machine template (CAPI propagates it
  to Machines and from there to the cloned MaasMachines), ``bootstrap.dataSecretName`` and the defaults it
  sets itself (minReadySeconds 0, revisionHistoryLimit 1, progressDeadlineSeconds 600, autoscaler min/max 0).
- ``capi.go`` ``cleanupMachineTemplates``: :func:`templates_to_delete`.
- ``capi.go`` ``reconcileMachineHealthCheck``: :func:`machine_health_check`.
- ``token.go`` ``reconcileUserDataSecret`` / ``ignConfig``: ``user-data-<nodepool>-<hash>`` with exactly the
  keys ``disableTemplating`` (whose *bytes* are ``base64("true")``, as HyperShift writes them) and ``value``
  (an Ignition 3.2.0 pointer config to the ignition server, with the bearer token headers). No ``format`` key.
- ``hostedcluster`` platform ``ReconcileCAPIInfraCR``: :func:`maas_cluster` marked
  ``cluster.x-k8s.io/managed-by`` with the endpoint HyperShift owns; :func:`provisioned_status` is what the
  platform code then writes through the status subresource.
- ``hostedcluster_controller.go`` ``reconcileCAPICluster``: :func:`capi_cluster`, whose ``controlPlaneRef``
  is the HostedControlPlane; here a schemaless CRD stand-in (:func:`hosted_control_plane_crd`) whose status
  the test writes as the control-plane operator would (:func:`hosted_control_plane_status`).

HyperShift writes CAPI core objects through the v1beta1 Go types, so MachineDeployment, MachineSet,
MachineHealthCheck and Cluster are built at ``cluster.x-k8s.io/v1beta1`` here too (CAPI's conversion webhook
turns them into v1beta2 for storage).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

INFRA_GROUP = "infrastructure.cluster.x-k8s.io"
INFRA_API = f"{INFRA_GROUP}/v1beta1"
CAPI_V1BETA1 = "cluster.x-k8s.io/v1beta1"
HCP_API = "hypershift.openshift.io/v1beta1"

NODEPOOL_ANNOTATION = "hypershift.openshift.io/nodePool"
CURRENT_CONFIG_VERSION_ANNOTATION = "hypershift.openshift.io/nodePoolCurrentConfigVersion"
TARGET_CONFIG_VERSION_ANNOTATION = "hypershift.openshift.io/nodePoolTargetConfigVersion"
MAX_UNAVAILABLE_ANNOTATION = "hypershift.openshift.io/nodePoolMaxUnavailable"
TAINTS_ANNOTATION = "hypershift.openshift.io/nodePoolTaints"
AUTOSCALER_MIN_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
AUTOSCALER_MAX_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
MANAGED_BY_ANNOTATION = "cluster.x-k8s.io/managed-by"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
DNS1123_SUBDOMAIN_MAX = 253

FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193


# -- HyperShift's hashing and naming -------------------------------------------------------------------------
def fnv1a_32(data: bytes) -> int:
    h = FNV32_OFFSET
    for b in data:
        h = ((h ^ b) * FNV32_PRIME) & 0xFFFFFFFF
    return h


def hash_simple(value: str | bytes) -> str:
    """``support/util.HashSimple``: FNV-1a 32 of ``fmt.Sprintf("%v", value)`` as 8 hex digits. For a
    ``[]byte`` (which is what ``generateMachineTemplateName`` passes) ``%v`` prints the decimal byte list."""
    text = "[" + " ".join(str(b) for b in value) + "]" if isinstance(value, bytes) else value
    return f"{fnv1a_32(text.encode()):08x}"


def get_name(base: str, suffix: str, max_length: int) -> str:
    """``nodepool/capi.go`` ``getName``: ``<base>-<suffix>``, shortened with a hash when too long."""
    if max_length <= 0:
        return ""
    name = f"{base}-{suffix}"
    if len(name) <= max_length:
        return name
    base_length = max_length - 10 - len(suffix)
    if base_length < 1:
        prefix = base[: min(len(base), max(0, max_length - 9))]
        short = f"{prefix}-{hash_simple(name)}"
        return short[: min(max_length, len(short))]
    return f"{base[:base_length]}-{hash_simple(base)}-{suffix}"


def go_json(obj: Any) -> bytes:
    """Compact JSON as Go's encoding/json writes it (HTML characters escaped; key order as given)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


# -- the NodePool as far as the CAPI objects depend on it ----------------------------------------------------
@dataclass(frozen=True)
class NodePool:
    """What of a NodePool and its HostedCluster the CAPI objects are derived from.

    ``namespace`` is the NodePool's (the HostedCluster's, e.g. ``clusters``); every CAPI object lives in the
    HostedControlPlane namespace ``hcp_namespace``. ``infra_id`` names the CAPI Cluster.
    """

    name: str
    namespace: str
    cluster_name: str
    infra_id: str
    hcp_namespace: str
    replicas: int
    release_version: str = "4.19.0"

    @property
    def key(self) -> str:
        """``client.ObjectKeyFromObject(nodePool).String()``: the nodePool annotation's value."""
        return f"{self.namespace}/{self.name}"

    @property
    def resources_name(self) -> str:
        """``generateName(infraID, clusterName, nodePool.Name)``: label key and value on the selector."""
        return get_name(f"{self.infra_id}-{self.cluster_name}", self.name, 43)

    def template_labels(self) -> dict[str, str]:
        return {self.resources_name: self.resources_name, CLUSTER_NAME_LABEL: self.infra_id}


# -- InfraCluster --------------------------------------------------------------------------------------------
def maas_cluster(np: NodePool, endpoint_host: str, endpoint_port: int = 443) -> dict[str, Any]:
    """The MaasCluster a HyperShift platform's ``ReconcileCAPIInfraCR`` would create: externally managed, its
    endpoint the HostedControlPlane's (AWS and KubeVirt mark theirs ``managed-by: external``)."""
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasCluster",
        "metadata": {
            "name": np.infra_id,
            "namespace": np.hcp_namespace,
            "annotations": {MANAGED_BY_ANNOTATION: "external"},
        },
        "spec": {
            "controlPlaneEndpoint": {"host": endpoint_host, "port": endpoint_port},
            "dnsDomain": "maas",
        },
    }


def provisioned_status() -> dict[str, Any]:
    """What the platform code writes through the status subresource. HyperShift's AWS/KubeVirt code sets
    ``Status.Ready``; capmaas' CRDs carry the v1beta2 contract label, for which CAPI reads only
    ``status.initialization.provisioned`` (``internal/contract`` ``InfrastructureCluster().Provisioned``),
    so a MAAS platform must write both."""
    return {"ready": True, "initialization": {"provisioned": True}}


def capi_cluster(np: NodePool) -> dict[str, Any]:
    """``reconcileCAPICluster`` (v1beta1): the Cluster named after the infra ID, its control plane the
    HostedControlPlane (named after the HostedCluster), its infrastructure the MaasCluster."""
    return {
        "apiVersion": CAPI_V1BETA1,
        "kind": "Cluster",
        "metadata": {"name": np.infra_id, "namespace": np.hcp_namespace},
        "spec": {
            "controlPlaneRef": {
                "apiVersion": HCP_API,
                "kind": "HostedControlPlane",
                "namespace": np.hcp_namespace,
                "name": np.cluster_name,
            },
            "infrastructureRef": {
                "apiVersion": INFRA_API,
                "kind": "MaasCluster",
                "namespace": np.hcp_namespace,
                "name": np.infra_id,
            },
        },
    }


# -- HostedControlPlane stand-in ----------------------------------------------------------------------------
def hosted_control_plane_crd() -> dict[str, Any]:
    """A schemaless stand-in for HyperShift's HostedControlPlane CRD (as HyperShift-adjacent e2e suites use),
    carrying CAPI contract labels so CAPI resolves ``controlPlaneRef`` to it (which contract HyperShift's own
    CRD declares is not checked here: the status below satisfies both)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "hostedcontrolplanes.hypershift.openshift.io",
            "labels": {"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta1"},
        },
        "spec": {
            "group": "hypershift.openshift.io",
            "names": {
                "kind": "HostedControlPlane",
                "listKind": "HostedControlPlaneList",
                "plural": "hostedcontrolplanes",
                "singular": "hostedcontrolplane",
                "shortNames": ["hcp"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def hosted_control_plane(np: NodePool) -> dict[str, Any]:
    """The HostedControlPlane the hostedcluster controller creates (no ``spec.version``: it carries a release
    image, so CAPI's MachineSet preflight checks, which need a control-plane version, do not apply)."""
    return {
        "apiVersion": HCP_API,
        "kind": "HostedControlPlane",
        "metadata": {"name": np.cluster_name, "namespace": np.hcp_namespace},
        "spec": {"releaseImage": f"quay.example/openshift-release:{np.release_version}"},
    }


def hosted_control_plane_status(np: NodePool, endpoint_host: str, endpoint_port: int = 443) -> dict[str, Any]:
    """What the control-plane operator reports once the hosted API server runs: the v1beta1 contract fields
    HyperShift writes (``ready``, ``initialized``, ``externalManagedControlPlane``) plus the v1beta2 one."""
    return {
        "ready": True,
        "initialized": True,
        "initialization": {"controlPlaneInitialized": True},
        "externalManagedControlPlane": True,
        "controlPlaneEndpoint": {"host": endpoint_host, "port": endpoint_port},
        "version": np.release_version,
    }


# -- machine template ----------------------------------------------------------------------------------------
def machine_template_spec(
    *, image: str = "ubuntu/noble", min_cpu: int = 2, min_memory: int = 4096, tags: list[str] | None = None
) -> dict[str, Any]:
    """The template spec a MAAS builder would compute from ``NodePool.spec.platform`` (the imitation's input
    to the hash; field order is our CRD's)."""
    spec: dict[str, Any] = {"image": image, "minCPU": min_cpu, "minMemory": min_memory}
    if tags:
        spec["tags"] = list(tags)
    return {"template": {"metadata": {}, "spec": spec}}


def machine_template(np: NodePool, spec: dict[str, Any]) -> dict[str, Any]:
    """``<nodepool>-<HashSimple(json(spec))>`` with the nodePool annotation, in the HCP namespace."""
    name = get_name(np.name, hash_simple(go_json(spec)), DNS1123_SUBDOMAIN_MAX)
    return {
        "apiVersion": INFRA_API,
        "kind": "MaasMachineTemplate",
        "metadata": {
            "name": name,
            "namespace": np.hcp_namespace,
            "annotations": {NODEPOOL_ANNOTATION: np.key},
        },
        "spec": spec,
    }


def templates_to_delete(
    np: NodePool, machinesets: list[dict[str, Any]], templates: list[dict[str, Any]]
) -> list[str]:
    """``cleanupMachineTemplates``: every template carrying this NodePool's annotation that no MachineSet of
    the NodePool (those annotated with it, including the ones CAPI makes from a MachineDeployment, which
    inherit its annotations) references. Nothing when the NodePool has no MachineSet yet."""
    mine = [
        ms
        for ms in machinesets
        if (ms["metadata"].get("annotations") or {}).get(NODEPOOL_ANNOTATION) == np.key
    ]
    if not mine:
        return []
    referenced = {ms["spec"]["template"]["spec"]["infrastructureRef"]["name"] for ms in mine}
    return [
        t["metadata"]["name"]
        for t in templates
        if (t["metadata"].get("annotations") or {}).get(NODEPOOL_ANNOTATION) == np.key
        and t["metadata"]["name"] not in referenced
    ]


# -- user data -----------------------------------------------------------------------------------------------
def ignition_config(
    *, token: str, endpoint: str, ca_pem: bytes, nodepool_key: str, target_config_version_hash: str
) -> bytes:
    """``token.go`` ``ignConfig`` marshalled: an Ignition 3.2.0 pointer config that merges the ignition
    server's payload. The shape follows Go's encoding/json over ignition's v3_2 types: struct fields with
    ``omitempty`` are still written (as ``{}``), empty slices and nil pointers are not (inference from the
    types)."""

    def resource(source: str, headers: list[dict[str, str]] | None = None) -> dict[str, Any]:
        r: dict[str, Any] = {}
        if headers:
            r["httpHeaders"] = headers
        r["source"] = source
        r["verification"] = {}
        return r

    ca = base64.b64encode(ca_pem).decode()
    bearer = base64.b64encode(token.encode()).decode()
    cfg = {
        "ignition": {
            "config": {
                "merge": [
                    resource(
                        f"https://{endpoint}/ignition",
                        [
                            {"name": "Authorization", "value": f"Bearer {bearer}"},
                            {"name": "NodePool", "value": nodepool_key},
                            {"name": "TargetConfigVersionHash", "value": target_config_version_hash},
                        ],
                    )
                ],
                "replace": {"verification": {}},
            },
            "proxy": {},
            "security": {"tls": {"certificateAuthorities": [resource(f"data:text/plain;base64,{ca}")]}},
            "timeouts": {},
            "version": "3.2.0",
        },
        "kernelArguments": {},
        "passwd": {},
        "storage": {},
        "systemd": {},
    }
    return go_json(cfg)


def user_data_secret(np: NodePool, config_hash: str, ignition: bytes) -> dict[str, Any]:
    """``user-data-<nodepool>-<hash>``: mutable (token rotation rewrites it), annotated with the NodePool,
    ``data`` exactly ``{disableTemplating, value}``. Opaque, no cluster-name label, no ``format``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "immutable": False,
        "metadata": {
            "name": f"user-data-{np.name}-{config_hash}",
            "namespace": np.hcp_namespace,
            "annotations": {NODEPOOL_ANNOTATION: np.key},
        },
        "data": {
            # HyperShift stores base64("true") as the value's bytes, so the API shows it encoded twice.
            "disableTemplating": base64.b64encode(base64.b64encode(b"true")).decode(),
            "value": base64.b64encode(ignition).decode(),
        },
    }


# -- MachineDeployment (Replace) / MachineSet (InPlace) / MachineHealthCheck -------------------------------
def _machine_template(np: NodePool, template: str, user_data: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": np.template_labels(),
            "annotations": {NODEPOOL_ANNOTATION: np.key},
        },
        "spec": {
            "clusterName": np.infra_id,
            "bootstrap": {"dataSecretName": user_data},
            "infrastructureRef": {
                "apiVersion": INFRA_API,
                "kind": "MaasMachineTemplate",
                "namespace": np.hcp_namespace,
                "name": template,
            },
            "version": version,
        },
    }


def machine_deployment(
    np: NodePool, template: str, user_data: str, *, version: str = "v1.32.5", max_surge: int = 1
) -> dict[str, Any]:
    """UpgradeType Replace. Strategy from ``spec.management.replace`` (NodePool's defaults: RollingUpdate,
    maxSurge 1, maxUnavailable 0); replicas from ``spec.replicas`` with the autoscaler annotations reset."""
    return {
        "apiVersion": CAPI_V1BETA1,
        "kind": "MachineDeployment",
        "metadata": {
            "name": np.name,
            "namespace": np.hcp_namespace,
            "labels": {CLUSTER_NAME_LABEL: np.infra_id},
            "annotations": {
                NODEPOOL_ANNOTATION: np.key,
                AUTOSCALER_MAX_ANNOTATION: "0",
                AUTOSCALER_MIN_ANNOTATION: "0",
            },
        },
        "spec": {
            "clusterName": np.infra_id,
            "replicas": np.replicas,
            "minReadySeconds": 0,
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": np.template_labels()},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": 0},
            },
            "template": _machine_template(np, template, user_data, version),
        },
    }


def machine_set(
    np: NodePool, template: str, user_data: str, config_version_hash: str, *, version: str = "v1.32.5"
) -> dict[str, Any]:
    """UpgradeType InPlace: a MachineSet named after the NodePool, with the annotations the in-place upgrader
    reads (a brand-new MachineSet gets current = target, so no in-place upgrade is pending)."""
    tmpl = _machine_template(np, template, user_data, version)
    tmpl["metadata"]["annotations"][TAINTS_ANNOTATION] = "null"  # json.Marshal of a nil taint list
    return {
        "apiVersion": CAPI_V1BETA1,
        "kind": "MachineSet",
        "metadata": {
            "name": np.name,
            "namespace": np.hcp_namespace,
            "labels": {CLUSTER_NAME_LABEL: np.infra_id},
            "annotations": {
                NODEPOOL_ANNOTATION: np.key,
                MAX_UNAVAILABLE_ANNOTATION: "1",
                TARGET_CONFIG_VERSION_ANNOTATION: config_version_hash,
                CURRENT_CONFIG_VERSION_ANNOTATION: config_version_hash,
                AUTOSCALER_MAX_ANNOTATION: "0",
                AUTOSCALER_MIN_ANNOTATION: "0",
            },
        },
        "spec": {
            "clusterName": np.infra_id,
            "replicas": np.replicas,
            "minReadySeconds": 0,
            "selector": {"matchLabels": {np.resources_name: np.resources_name}},
            "template": tmpl,
        },
    }


def machine_health_check(np: NodePool) -> dict[str, Any]:
    """``reconcileMachineHealthCheck`` with its defaults for a platform other than Agent/None: NodeReady
    False/Unknown for 8m, maxUnhealthy 2, nodeStartupTimeout 20m (a bare-metal deploy slower than that is
    remediated unless the ``machine-health-check-node-startup-timeout`` annotation overrides it)."""
    return {
        "apiVersion": CAPI_V1BETA1,
        "kind": "MachineHealthCheck",
        "metadata": {"name": np.name, "namespace": np.hcp_namespace},
        "spec": {
            "clusterName": np.infra_id,
            "selector": {"matchLabels": {np.resources_name: np.resources_name}},
            "unhealthyConditions": [
                {"type": "Ready", "status": "False", "timeout": "8m0s"},
                {"type": "Ready", "status": "Unknown", "timeout": "8m0s"},
            ],
            "maxUnhealthy": 2,
            "nodeStartupTimeout": "20m0s",
        },
    }
