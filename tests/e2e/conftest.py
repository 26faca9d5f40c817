"""End-to-end fixtures: the real Cluster API core manager on the shared ``kube`` control plane.

- ``capi`` (session): :class:`capmaas.devcluster.capi.CapiManager` started with ``--namespace`` on a namespace
  of its own (``capi.namespace``), webhooks limited to it, so the CAPI controllers never touch objects that
  other test packages create in ``kube`` while playing CAPI themselves. Its log is kept under pytest's
  basetemp (``.../capi0/cluster-api.log``).
- ``capmaas_crds`` (session): capmaas' CRDs (``crds/``) applied server-side and Established.
- ``kubeadm_crds`` (session): the kubeadm bootstrap/control-plane CRDs of the same CAPI release, from the Go
  module cache (no kubeadm controllers run: only the schemas, for validating cluster templates).
- ``workload`` (session): :class:`capmaas.devcluster.workload.WorkloadCluster` on ``workload_kube``.

Missing binaries fail (never skip) the tests, as in ``tests/conftest.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from capmaas.devcluster import ControlPlane
    from capmaas.devcluster.capi import CapiManager
    from capmaas.devcluster.workload import WorkloadCluster

from e2e_support import Kubectl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def capmaas_crds(kube: ControlPlane, kubectl: Kubectl) -> None:
    kubectl("apply", "--server-side", "--field-manager=capmaas-e2e", "-f", str(REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(REPO / "crds"))


@pytest.fixture(scope="session")
def kubeadm_crds(kube: ControlPlane, kubectl: Kubectl) -> None:
    from capmaas.devcluster import MissingToolError
    from capmaas.devcluster.capi import kubeadm_crd_dirs

    try:
        dirs = kubeadm_crd_dirs()
    except MissingToolError as exc:
        pytest.fail(f"e2e test needs the Cluster API module: {exc}", pytrace=False)
    for d in dirs:
        kubectl("apply", "--server-side", "--field-manager=capmaas-e2e", "-f", str(d))
        kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(d))


@pytest.fixture(scope="session")
def capi(
    kube: ControlPlane, kubectl: Kubectl, capmaas_crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CapiManager]:
    from capmaas.devcluster import MissingToolError
    from capmaas.devcluster.capi import CapiManager, CapiStartError

    namespace = f"capi-e2e-{secrets.token_hex(3)}"
    kubectl("create", "namespace", namespace)
    problem = None
    try:
        mgr = CapiManager.start(
            kube.kubeconfig, watch_namespace=namespace, workdir=tmp_path_factory.mktemp("capi")
        )
    except MissingToolError as exc:
        problem = f"e2e test needs the Cluster API manager: {exc}"
    except CapiStartError as exc:
        problem = f"the Cluster API manager did not start: {exc}"
    if problem is not None:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        pytest.fail(problem, pytrace=False)
    with mgr:
        yield mgr
    kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="session")
def workload(workload_kube: ControlPlane) -> WorkloadCluster:
    from capmaas.devcluster.workload import WorkloadCluster

    return WorkloadCluster(workload_kube.kubeconfig)
