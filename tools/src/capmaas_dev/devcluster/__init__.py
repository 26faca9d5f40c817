"""A local Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) for tests and the demo.

Public surface: :class:`ControlPlane` (start/stop/context manager), :func:`apply_capi_crds`, the tool lookup
helpers (:func:`find_binary`, :func:`kubectl_path`, :func:`run_kubectl`) and the pinned versions. This package
imports no kopf and nothing else from capmaas, so the test fixtures can use it without building config.
"""

from __future__ import annotations

from capmaas_dev.devcluster.controlplane import ControlPlane, StartError
from capmaas_dev.devcluster.tools import (
    KubectlError,
    MissingToolError,
    apply_capi_crds,
    cache_dir,
    capi_crds_dir,
    find_binary,
    have_binary,
    kubectl_path,
    run_kubectl,
)
from capmaas_dev.devcluster.versions import CAPI_VERSION, ETCD_VERSION, HELM_VERSION, K8S_VERSION

__all__ = [
    "CAPI_VERSION",
    "ETCD_VERSION",
    "HELM_VERSION",
    "K8S_VERSION",
    "ControlPlane",
    "KubectlError",
    "MissingToolError",
    "StartError",
    "apply_capi_crds",
    "cache_dir",
    "capi_crds_dir",
    "find_binary",
    "have_binary",
    "kubectl_path",
    "run_kubectl",
]
