"""`kubectl apply -f crds/`, the install path without Helm, works on the real apiserver and is repeatable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"


def _crd_names() -> list[str]:
    return sorted(yaml.safe_load(p.read_text())["metadata"]["name"] for p in CRDS.glob("*.yaml"))


@pytest.mark.k8s
def test_kubectl_apply_crds_directory(kubectl: Any) -> None:
    names = _crd_names()
    assert names, "crds/ is empty: run `make generate`"
    first = kubectl("apply", "-f", str(CRDS))
    assert all(f"customresourcedefinition.apiextensions.k8s.io/{n}" in first.stdout for n in names)
    for name in names:
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    served = kubectl(
        "api-resources", "--api-group=infrastructure.cluster.x-k8s.io", "-o", "name"
    ).stdout.split()
    assert sorted(served) == names
    # Applying the same files again changes nothing.
    again = kubectl("apply", "-f", str(CRDS)).stdout
    assert again.count("unchanged") == len(names), again
    # Server-side apply (what clusterctl and GitOps tools use) accepts them too.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))


@pytest.mark.k8s
def test_crds_are_in_the_cluster_api_category(kubectl: Any) -> None:
    kubectl("apply", "-f", str(CRDS))
    for name in _crd_names():
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    # `kubectl get cluster-api` lists our kinds beside CAPI's (the category in every CRD).
    out = kubectl("get", "cluster-api", "-A", check=False)
    assert out.returncode == 0, out.stderr
