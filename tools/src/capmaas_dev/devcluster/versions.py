"""The one place the versions of the Kubernetes tools capmaas builds and tests against are pinned.

``hack/build-tools.sh`` reads these lines with ``sed`` (keep the ``NAME = "value"`` form, one per line), so
the script that builds the binaries and the code that looks them up can never disagree. ``hack/k8s/go.mod``
and ``hack/etcd/go.mod`` must require the same releases; the build script checks that too.
"""

from __future__ import annotations

K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.21.4"
# v1.13.7 is refused by the Go module proxy ("not available"); v1.13.6 is the newest 1.13.x it serves.
CAPI_VERSION = "v1.13.6"
# The node's sandbox image: hack/pause (a static Go binary) built locally, as nothing can be pulled here.
PAUSE_VERSION = "1"

#: binary name -> version, as laid out in the cache (``<cache>/bin/<name>-<version>``).
TOOL_VERSIONS: dict[str, str] = {
    "etcd": ETCD_VERSION,
    "kube-apiserver": K8S_VERSION,
    "kube-controller-manager": K8S_VERSION,
    # The one-node cluster (``capmaas dev-cluster up --node``, tests/pod): ``hack/build-tools.sh kubelet
    # kube-scheduler pause``.
    "kubelet": K8S_VERSION,
    "kube-scheduler": K8S_VERSION,
    "pause": PAUSE_VERSION,
    "helm": HELM_VERSION,
    # Cluster API core manager and clusterctl (``hack/build-tools.sh cluster-api clusterctl``): only the e2e
    # harness (:mod:`capmaas_dev.devcluster.capi`) and the clusterctl repository tests need them.
    "cluster-api": CAPI_VERSION,
    "clusterctl": CAPI_VERSION,
}
