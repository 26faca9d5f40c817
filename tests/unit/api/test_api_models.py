"""The models parse real object bodies (the sample manifests), round-trip them, and build status patches."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from capmaas.api import conditions as c
from capmaas.api.schema import K8sModel
from capmaas.api.v1beta1 import (
    API_VERSION,
    Condition,
    MaasCluster,
    MaasClusterStatus,
    MaasClusterTemplate,
    MaasIPPool,
    MaasMachine,
    MaasMachineSpec,
    MaasMachineStatus,
    MaasMachineTemplate,
    MaasRemediationTemplate,
    MachineAddress,
    find_condition,
    set_condition,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "manifests"
MODELS: dict[str, type[K8sModel]] = {
    "MaasCluster": MaasCluster,
    "MaasMachine": MaasMachine,
    "MaasMachineTemplate": MaasMachineTemplate,
    "MaasClusterTemplate": MaasClusterTemplate,
    "MaasIPPool": MaasIPPool,
    "MaasRemediationTemplate": MaasRemediationTemplate,
}


def example_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] in MODELS)
    return docs


def test_every_kind_has_an_example() -> None:
    assert {d["kind"] for d in example_docs()} == set(MODELS)
    assert len([d for d in example_docs() if d["kind"] == "MaasMachine"]) == 2


@pytest.mark.parametrize("doc", example_docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_examples_round_trip_unchanged(doc: dict[str, Any]) -> None:
    obj = MODELS[doc["kind"]].from_body(doc)
    out = obj.to_k8s(exclude_unset=True)
    assert out["spec"] == doc["spec"]
    assert out["apiVersion"] == API_VERSION == doc["apiVersion"]
    assert type(obj).from_body(obj.to_k8s()) == obj


def test_go_provider_spellings_and_python_names() -> None:
    spec = MaasMachineSpec.from_body(
        {
            "image": "ubuntu/jammy",
            "minCPU": 2,
            "minMemory": 4096,
            "systemID": "abc123",
            "providerID": "maas://z/abc123",
        }
    )
    assert (spec.min_cpu, spec.min_memory, spec.system_id) == (2, 4096, "abc123")
    assert spec.provisioning_mode == "bare-metal"
    by_name = MaasMachineSpec(image="custom/k8s-1.31", min_cpu=1, min_memory=1024, register_vm_host=True)
    assert by_name.to_k8s() == {
        "image": "custom/k8s-1.31",
        "minCPU": 1,
        "minMemory": 1024,
        "provisioningMode": "bare-metal",
        "registerVMHost": True,
    }


def test_from_body_accepts_read_only_mapping_views_and_ignores_unknown_fields() -> None:
    body: Mapping[str, Any] = MappingProxyType(
        {
            "apiVersion": API_VERSION,
            "kind": "MaasMachine",
            "metadata": MappingProxyType({"name": "m", "namespace": "ns", "uid": "u-1", "generation": 3}),
            "spec": MappingProxyType(
                {"image": "ubuntu/noble", "minCPU": 1, "minMemory": 2048, "futureField": 1}
            ),
            "status": {"ready": True, "addresses": ({"type": "InternalIP", "address": "10.0.0.5"},)},
        }
    )
    machine = MaasMachine.from_body(body)
    assert machine.metadata.uid == "u-1"
    assert machine.status.addresses == [MachineAddress(type="InternalIP", address="10.0.0.5")]
    assert "futureField" not in machine.to_k8s()["spec"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"image": "ubuntu/jammy", "minCPU": 0, "minMemory": 2048}, "minCPU"),
        ({"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 512}, "minMemory"),
        ({"image": "not an image", "minCPU": 1, "minMemory": 2048}, "image"),
        ({"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 2048, "tags": ["bad tag"]}, "tags"),
        (
            {"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 2048, "provisioningMode": "vm"},
            "provisioningMode",
        ),
    ],
)
def test_field_validation_matches_the_schema_in_python_too(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        MaasMachineSpec.from_body(spec)
    assert field in str(info.value)


def test_status_patch_contains_only_what_was_set() -> None:
    status = MaasMachineStatus(ready=True, machine_state="Deployed", lxd_host="host-1")
    assert status.to_k8s() == {"ready": True, "machineState": "Deployed", "lxdHost": "host-1"}
    full = MaasMachineStatus.from_body(
        {"vmResourceUsage": {"allocatedCores": 2, "allocatedMemory": 4096, "allocatedDisk": 40}}
    )
    assert full.to_k8s()["vmResourceUsage"] == {
        "allocatedCores": 2,
        "allocatedMemory": 4096,
        "allocatedDisk": 40,
    }


def test_cluster_status_failure_domains_as_list() -> None:
    status = MaasClusterStatus.from_body(
        {
            "ready": True,
            "initialization": {"provisioned": True},
            "failureDomains": [{"name": "zone-a", "controlPlane": True, "attributes": {"id": "1"}}],
        }
    )
    assert status.failure_domains is not None
    assert status.failure_domains[0].control_plane is True
    assert status.to_k8s()["failureDomains"] == [
        {"name": "zone-a", "controlPlane": True, "attributes": {"id": "1"}}
    ]


def test_set_condition_keeps_transition_time_while_status_is_unchanged() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    conds = set_condition(None, c.READY_CONDITION, "False", c.WAITING_FOR_BOOTSTRAP_DATA_REASON, now=t0)
    conds = set_condition(conds, c.MACHINE_PROVISIONED_CONDITION, "False", c.MACHINE_DEPLOYING_REASON, now=t0)
    later = t0 + timedelta(minutes=5)
    conds = set_condition(
        conds, c.READY_CONDITION, "False", c.NO_MACHINE_AVAILABLE_REASON, "none fit", now=later
    )
    ready = find_condition(conds, c.READY_CONDITION)
    assert ready is not None
    assert (ready.reason, ready.message, ready.last_transition_time) == (
        c.NO_MACHINE_AVAILABLE_REASON,
        "none fit",
        t0,
    )
    conds = set_condition(conds, c.READY_CONDITION, "True", c.READY_REASON, observed_generation=2, now=later)
    ready = find_condition(conds, c.READY_CONDITION)
    assert ready is not None
    assert ready.last_transition_time == later
    assert [x.type for x in conds] == [c.READY_CONDITION, c.MACHINE_PROVISIONED_CONDITION]
    assert ready.to_k8s() == {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "observedGeneration": 2,
        "lastTransitionTime": "2026-01-01T00:05:00Z",
    }


def test_condition_reasons_are_valid_for_the_schema() -> None:
    values = [v for k, v in vars(c).items() if k.endswith(("_REASON", "_CONDITION"))]
    assert len(values) >= 40
    for value in values:
        Condition(type="Ready", status="True", reason=value, last_transition_time=datetime.now(UTC))
    for required in (
        "WaitingForClusterInfrastructure",
        "WaitingForBootstrapData",
        "WaitingForMachineOwner",
        "Paused",
        "MachineAllocated",
        "MachineDeploying",
        "DeploymentFailed",
        "DeploymentTimedOut",
        "NoMachineAvailable",
        "MaasUnreachable",
        "InvalidCredentials",
        "Releasing",
        "DNSReady",
        "FailureDomainsDiscovered",
        "LXDHostSelected",
        "LXDResourcesAllocated",
        "LXDVMCreated",
        "LXDVMDeployed",
    ):
        assert required in values


def test_every_condition_constant_has_a_comment() -> None:
    source = Path(c.__file__).read_text().splitlines()
    for line in source:
        if line.split(" = ")[0].endswith(("_REASON", "_CONDITION")):
            assert "  # " in line, line
