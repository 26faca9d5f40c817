"""Properties every generated CRD schema must have: descriptions, bounds (CEL cost), CEL rules, labels."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from capmaas_dev import crdgen

CRDS = {kind.kind: crdgen.crd(kind) for kind in crdgen.KINDS}


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def nodes(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every schema node except the standard apiVersion/kind/metadata the apiserver owns."""
    return [
        (p, n)
        for p, n in walk(schema_of(kind))
        if p.split(".")[:2][-1] not in ("metadata", "apiVersion", "kind")
    ]


def rules(kind: str) -> dict[tuple[str, str], str]:
    """(path, rule) -> message for every CEL rule in the kind's schema."""
    return {
        (path, v["rule"]): v["message"]
        for path, node in nodes(kind)
        for v in node.get("x-kubernetes-validations", [])
    }


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_property_has_a_description(kind: str) -> None:
    missing = [
        f"{path}.{name}"
        for path, node in nodes(kind)
        for name, sub in node.get("properties", {}).items()
        if name != "metadata" and not sub.get("description")
    ]
    assert missing == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_everything_is_bounded_so_cel_cost_is_bounded(kind: str) -> None:
    unbounded = []
    for path, node in nodes(kind):
        t = node.get("type")
        if t == "string" and not ({"maxLength", "enum", "format"} & set(node)):
            unbounded.append(path)
        if t == "array" and "maxItems" not in node:
            unbounded.append(path)
        if t == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(path)
        if node.get("x-kubernetes-int-or-string") and "pattern" not in node:
            unbounded.append(path)
    assert unbounded == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    for path, node in walk(schema_of(kind)):
        assert "$ref" not in node, path
        assert "title" not in node, path
        assert "const" not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "type" in node, path


def test_only_deliberate_defaults() -> None:
    defaults = {
        (kind, path): node["default"]
        for kind in CRDS
        for path, node in walk(schema_of(kind))
        if "default" in node
    }
    assert defaults == {
        ("MaasMachine", ".spec.provisioningMode"): "bare-metal",
        ("MaasMachineTemplate", ".spec.template.spec.provisioningMode"): "bare-metal",
        ("MaasCluster", ".spec.identityRef.kind"): "Secret",
        ("MaasClusterTemplate", ".spec.template.spec.identityRef.kind"): "Secret",
        ("MaasIPPool", ".spec.identityRef.kind"): "Secret",
    }


def test_machine_cel_rules() -> None:
    found = rules("MaasMachine")
    assert found[
        (".spec", "!has(self.lxdConfig) || (has(self.provisioningMode) && self.provisioningMode == 'lxd')")
    ] == ("lxdConfig is only allowed when provisioningMode is lxd")
    messages = set(found.values())
    assert {
        "registerVMHost is only allowed for bare-metal machines",
        "image is immutable",
        "minCPU is immutable",
        "minMemory is immutable",
        "provisioningMode is immutable",
        "secureErase and quickErase need erase: true",
        "staticIP.address must lie inside staticIP.subnet",
        "must be an IP address such as 10.0.0.10",
        "must be a CIDR such as 10.0.0.0/24",
    } <= messages


def test_template_spec_is_immutable_and_keeps_the_machine_rules() -> None:
    """Template specs are immutable through the admission policy, not a CRD rule: CAPI's topology controller
    must be able to dry-run a changed template spec (ClusterClass contract), which a CRD ``self == oldSelf``
    refuses. Every other machine rule stays on the template, and no transition rule is left inside it."""
    found = rules("MaasMachineTemplate")
    lxd_rule = "!has(self.lxdConfig) || (has(self.provisioningMode) && self.provisioningMode == 'lxd')"
    assert (".spec.template.spec", lxd_rule) in found
    for kind in ("MaasMachineTemplate", "MaasClusterTemplate"):
        inside = [(path, rule) for path, rule in rules(kind) if path.startswith(".spec.template.spec")]
        assert inside or kind == "MaasClusterTemplate"
        assert not [r for _, r in inside if "oldSelf" in r], kind
    policy, binding = crdgen.template_immutability_policy()
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert sorted(rule["resources"]) == ["maasclustertemplates", "maasmachinetemplates"]
    assert rule["operations"] == ["UPDATE"]
    [validation] = policy["spec"]["validations"]
    assert validation["expression"].startswith(
        "object.spec.template.spec == oldObject.spec.template.spec || "
    )
    assert "request.dryRun == true" in validation["expression"]
    assert "'topology.cluster.x-k8s.io/dry-run' in object.metadata.annotations" in validation["expression"]
    assert "spec.template.spec is immutable" in validation["messageExpression"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_cluster_cel_rules() -> None:
    found = rules("MaasCluster")
    assert found[(".spec.dnsDomain", "self == oldSelf")] == "dnsDomain is immutable"
    assert found[(".spec.identityRef", "!has(self.__namespace__)")].startswith(
        "identityRef must name a Secret"
    )


def test_required_fields() -> None:
    assert schema_of("MaasMachine")["required"] == ["spec"]
    assert schema_of("MaasMachine")["properties"]["spec"]["required"] == ["image", "minCPU", "minMemory"]
    assert schema_of("MaasCluster")["properties"]["spec"]["required"] == ["dnsDomain"]
    assert schema_of("MaasMachineTemplate")["properties"]["spec"]["required"] == ["template"]
    assert schema_of("MaasMachineTemplate")["properties"]["spec"]["properties"]["template"]["required"] == [
        "spec"
    ]


def test_ranges_and_enums() -> None:
    spec = schema_of("MaasMachine")["properties"]["spec"]["properties"]
    assert spec["minCPU"]["minimum"] == 1
    assert spec["minMemory"]["minimum"] == 1024
    assert spec["provisioningMode"]["enum"] == ["bare-metal", "lxd"]
    assert spec["tags"]["maxItems"] == 32
    endpoint = schema_of("MaasCluster")["properties"]["spec"]["properties"]["controlPlaneEndpoint"]
    assert (endpoint["properties"]["port"]["minimum"], endpoint["properties"]["port"]["maximum"]) == (
        1,
        65535,
    )


def test_go_provider_field_names_are_kept() -> None:
    spec = schema_of("MaasMachine")["properties"]["spec"]["properties"]
    for name in ("minCPU", "minMemory", "minDiskSize", "image", "tags", "resourcePool", "failureDomain"):
        assert name in spec
    for name in (
        "systemID",
        "providerID",
        "provisioningMode",
        "lxdConfig",
        "registerVMHost",
        "deployInMemory",
    ):
        assert name in spec
    assert set(spec["lxdConfig"]["properties"]) == {"profile", "storage", "network", "vmHost", "project"}
    assert "staticIP" in spec["lxdConfig"]["properties"]["network"]["properties"]
    cluster = schema_of("MaasCluster")["properties"]["spec"]["properties"]
    assert {"dnsDomain", "controlPlaneEndpoint", "failureDomains", "identityRef"} <= set(cluster)


def test_status_contract_fields() -> None:
    for kind in ("MaasCluster", "MaasMachine"):
        status = schema_of(kind)["properties"]["status"]["properties"]
        assert status["ready"]["type"] == "boolean"
        assert status["initialization"]["properties"]["provisioned"]["type"] == "boolean"
        assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
        assert status["conditions"]["maxItems"] == 32
        assert {"failureReason", "failureMessage"} <= set(status)
    fds = schema_of("MaasCluster")["properties"]["status"]["properties"]["failureDomains"]
    assert fds["type"] == "array"
    assert set(fds["items"]["properties"]) == {"name", "controlPlane", "attributes"}
    machine = schema_of("MaasMachine")["properties"]["status"]["properties"]
    for name in ("addresses", "machineState", "machinePowered", "hostname", "lxdHost", "lxdProject"):
        assert name in machine
    assert set(machine["vmResourceUsage"]["properties"]) == {
        "allocatedCores",
        "allocatedMemory",
        "allocatedDisk",
    }
    capacity = schema_of("MaasMachineTemplate")["properties"]["status"]["properties"]["capacity"]
    # Strings only: the cluster autoscaler reads the map with NestedStringMap, and one number drops all of it.
    assert capacity["additionalProperties"]["type"] == "string"
    assert "x-kubernetes-int-or-string" not in capacity["additionalProperties"]
    assert capacity["additionalProperties"]["pattern"].startswith("^(\\+|-)?")
    template = schema_of("MaasMachineTemplate")["properties"]["status"]["properties"]
    assert (template["available"]["type"], template["available"]["minimum"]) == ("integer", 0)
    assert template["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_crd_metadata_follows_the_capi_contract(kind: str) -> None:
    crd = CRDS[kind]
    plural = crd["spec"]["names"]["plural"]
    assert crd["metadata"]["name"] == f"{plural}.infrastructure.cluster.x-k8s.io"
    assert plural == kind.lower() + "s"
    labels = crd["metadata"]["labels"]
    assert labels["cluster.x-k8s.io/v1beta2"] == "v1beta1"
    assert labels["cluster.x-k8s.io/v1beta1"] == "v1beta1"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["categories"] == ["cluster-api"]
    assert crd["spec"]["names"]["listKind"] == f"{kind}List"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    assert any(c["name"] == "Age" for c in version["additionalPrinterColumns"])


def test_short_names_are_unique() -> None:
    names = [n for crd in CRDS.values() for n in crd["spec"]["names"]["shortNames"]]
    assert sorted(names) == ["maasc", "maasct", "maasip", "maasm", "maasmt", "maasr", "maasrt"]


def test_machine_printer_columns() -> None:
    cols = {
        c["name"]: c["jsonPath"]
        for c in CRDS["MaasMachine"]["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert cols["Cluster"] == ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
    assert cols["SystemID"] == ".spec.systemID"
    assert cols["State"] == ".status.machineState"
    assert cols["Mode"] == ".spec.provisioningMode"
    assert cols["Zone"] == ".spec.failureDomain"
    assert cols["ProviderID"] == ".spec.providerID"
