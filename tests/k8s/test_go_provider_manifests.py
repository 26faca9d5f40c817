"""Manifests users bring from the Go provider (spectrocloud/cluster-api-provider-maas), on a real apiserver.

``go_provider/`` holds the Maas* objects of every ``templates/*.yaml`` and ``examples/**/*.yaml`` file of
that repository (commit noted in each file's header), with the clusterctl variables filled in. Each object is
created with kubectl's default strict field validation, exactly as a user would ``kubectl apply`` it, and then
parsed with our models to check it means here what it means there (``canonical()``).

Two example files use fields that the Go provider's own CRDs (``config/crd/bases`` at that commit) do not
define either (a design sketch: ``dynamicLXD``, a string ``staticIP``, ``lxdControlPlaneCluster``,
``workloadClusterConfig``, ``infrastructureClusterRef``). The Go provider refuses those objects with "strict
decoding error: unknown field"; so do we, naming the same fields (accepting them would mean ignoring them).
Whether the LXD objects reach Ready on the simulator needs the operator to read ``canonical()``; that test is
added with the reconciler wiring.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from capmaas.api.v1beta1 import (
    PROVISIONING_MODE_BARE_METAL,
    PROVISIONING_MODE_LXD,
    MaasCluster,
    MaasMachineTemplate,
)

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "go_provider"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

#: (fixture file, kind, name) -> the fields the Go provider's own CRDs do not define either.
REFUSED: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("examples__sample-lxd-cluster.yaml", "MaasCluster", "lxd-cluster"): ("spec.lxdControlPlaneCluster",),
    ("examples__sample-lxd-cluster.yaml", "MaasMachineTemplate", "lxd-cluster-control-plane"): (
        "spec.template.spec.dynamicLXD",
        "spec.template.spec.staticIP",
    ),
    ("examples__sample-lxd-cluster.yaml", "MaasMachineTemplate", "lxd-cluster-worker"): (
        "spec.template.spec.dynamicLXD",
        "spec.template.spec.staticIP",
    ),
    ("examples__sample-workload-cluster.yaml", "MaasCluster", "workload-cluster"): (
        "spec.infrastructureClusterRef",
        "spec.workloadClusterConfig",
    ),
}


def objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        out += [(path.name, obj) for obj in yaml.safe_load_all(path.read_text()) if obj]
    return out


OBJECTS = objects()
IDS = [f"{f.split('__')[1]}:{o['kind']}/{o['metadata']['name']}" for f, o in OBJECTS]


def test_fixtures_cover_every_template_and_example_file() -> None:
    names = {p.name for p in FIXTURES.glob("*.yaml")}
    assert names == {
        "templates__cluster-template.yaml",
        "templates__cluster-template-lxd.yaml",
        "templates__cluster-template-hcp.yaml",
        "examples__sample-cp-only.yaml",
        "examples__sample-lxd-cluster.yaml",
        "examples__sample-with-workerpool.yaml",
        "examples__sample-workload-cluster.yaml",
        "examples__test-backward-compatibility.yaml",
    }
    assert len(OBJECTS) == 24
    assert set(REFUSED) <= {(f, o["kind"], o["metadata"]["name"]) for f, o in OBJECTS}


@pytest.mark.parametrize(("source", "obj"), OBJECTS, ids=IDS)
def test_go_provider_object_applies_unchanged(
    crds: list[str], kubectl: Kubectl, namespace: str, source: str, obj: dict[str, Any]
) -> None:
    body = json.loads(json.dumps(obj))
    body["metadata"].pop("namespace", None)  # the examples say `default`; each test has its own namespace
    proc = kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)
    refused = REFUSED.get((source, obj["kind"], obj["metadata"]["name"]))
    if refused is not None:
        assert proc.returncode != 0, f"accepted fields the Go provider does not define: {refused}"
        for field in refused:
            assert f'unknown field "{field}"' in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(
        kubectl("get", "-n", namespace, obj["kind"].lower(), obj["metadata"]["name"], "-o", "json").stdout
    )
    # nothing the user wrote was pruned: every field given is stored as given (defaults may be added)
    assert _contains(stored["spec"], _normalised(body["spec"])), (body["spec"], stored["spec"])


def _normalised(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if v is not None}


def _contains(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _contains(have[k], v) for k, v in want.items())
    return bool(have == want)


def _stored(kubectl: Kubectl, namespace: str, fixture: str, kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for f, o in OBJECTS if f == fixture and o["kind"] == kind and o["metadata"]["name"] == name]
    body = json.loads(json.dumps(obj))
    body["metadata"].pop("namespace", None)
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body))
    out: dict[str, Any] = json.loads(kubectl("get", "-n", namespace, kind.lower(), name, "-o", "json").stdout)
    return out


def test_lxd_template_means_an_lxd_vm_here(crds: list[str], kubectl: Kubectl, namespace: str) -> None:
    """cluster-template-lxd.yaml: spec.lxd.enabled + vmConfig.diskSize = provisioningMode lxd, that disk."""
    fixture = "templates__cluster-template-lxd.yaml"
    cp = MaasMachineTemplate.from_body(
        _stored(kubectl, namespace, fixture, "MaasMachineTemplate", "go-demo-control-plane")
    )
    spec = cp.spec.template.spec
    assert spec.provisioning_mode == PROVISIONING_MODE_BARE_METAL  # the CRD default, as stored
    canonical = spec.canonical()
    assert canonical.provisioning_mode == PROVISIONING_MODE_LXD
    assert canonical.lxd_config is not None
    assert canonical.lxd_config.storage is not None
    assert canonical.lxd_config.storage.size == 60
    assert canonical.resource_pool == "lxd-pool"
    md = MaasMachineTemplate.from_body(
        _stored(kubectl, namespace, fixture, "MaasMachineTemplate", "go-demo-md-0")
    )
    assert md.spec.template.spec.canonical().provisioning_mode == PROVISIONING_MODE_BARE_METAL


def test_hcp_cluster_means_vm_hosts_and_reports_what_maas_cannot_apply(
    crds: list[str], kubectl: Kubectl, namespace: str
) -> None:
    """cluster-template-hcp.yaml: lxdConfig.enabled; storageBackend/storageSize have no MAAS equivalent."""
    stored = _stored(kubectl, namespace, "templates__cluster-template-hcp.yaml", "MaasCluster", "go-demo")
    assert stored["spec"]["lxdConfig"]["storageSize"] == "50"  # "${LXD_STORAGE_SIZE}": a string, as upstream
    cluster = MaasCluster.from_body(stored).spec.canonical()
    assert cluster.lxd_config is not None
    assert cluster.lxd_config.enabled is True
    assert cluster.lxd_config.storage_size == 50
    assert cluster.lxd_config.not_applied() == ["storageBackend", "storageSize"]
    assert cluster.failure_domains == ["az1", "default"]


def test_string_storage_size_and_network_bridge(crds: list[str], kubectl: Kubectl, namespace: str) -> None:
    """sample-lxd-cluster.yaml's lxdConfig without the undefined lxdControlPlaneCluster: storageSize '50'
    (a string, as the Go CRD types it) and the legacy networkBridge."""
    [obj] = [o for f, o in OBJECTS if f == "examples__sample-lxd-cluster.yaml" and o["kind"] == "MaasCluster"]
    body = json.loads(json.dumps(obj))
    body["metadata"].pop("namespace", None)
    del body["spec"]["lxdControlPlaneCluster"]
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body))
    stored = json.loads(kubectl("get", "-n", namespace, "maascluster", "lxd-cluster", "-o", "json").stdout)
    assert stored["spec"]["lxdConfig"] == {
        "storageBackend": "zfs",
        "storageSize": "50",
        "networkBridge": "br0",
    }
    canonical = MaasCluster.from_body(stored).spec.canonical()
    assert canonical.lxd_config is not None
    assert (canonical.lxd_config.storage_size, canonical.lxd_config.nic_parent) == (50, "br0")
