"""``K8sModel.from_body`` never lets a model share a dict or list with the body it parsed, whether it parses
the body as it is (a model that builds every value it keeps) or a deep copy (one with an ``Any`` field)."""

from __future__ import annotations

import types
from typing import Annotated, Any

import pytest
from pydantic import BeforeValidator, WrapValidator, field_validator

from capmaas.api.related import CapiCluster, CapiMachine, MaasMachineView, ObjectMeta
from capmaas.api.schema import K8sModel, builds_its_values, plain


def containers(value: Any) -> list[Any]:
    """Every dict and list inside ``value`` (a body, or a model's fields)."""
    if isinstance(value, K8sModel):
        return [c for name in type(value).model_fields for c in containers(getattr(value, name))]
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in containers(v))]
    if isinstance(value, list | tuple):
        return [value, *(c for v in value for c in containers(v))]
    return []


META = {
    "name": "w0",
    "namespace": "ns",
    "uid": "u",
    "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
    "annotations": {"a": "b"},
    "ownerReferences": [
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "w0", "uid": "m"}
    ],
}
BODIES: list[tuple[type[K8sModel], dict[str, Any]]] = [
    (ObjectMeta, META),
    (CapiMachine, {"metadata": META, "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "s"}}}),
    (CapiCluster, {"metadata": META, "spec": {"infrastructureRef": {"kind": "MaasCluster", "name": "c1"}}}),
    (
        MaasMachineView,
        {"metadata": META, "spec": {"systemID": "abc"}, "status": {"addresses": [{"type": "InternalIP"}]}},
    ),
]


@pytest.mark.parametrize(("model", "body"), BODIES, ids=[m.__name__ for m, _ in BODIES])
def test_a_parse_shares_nothing_with_the_body_and_equals_the_parse_of_a_copy(
    model: type[K8sModel], body: dict[str, Any]
) -> None:
    parsed = model.from_body(body)
    assert parsed == model.model_validate(plain(body))
    theirs = {id(c) for c in containers(body)}
    assert not [c for c in containers(parsed) if id(c) in theirs]


def test_which_models_build_every_value_they_keep() -> None:
    assert builds_its_values(ObjectMeta)
    assert builds_its_values(CapiMachine)
    assert builds_its_values(CapiCluster)
    assert not builds_its_values(MaasMachineView)  # status.addresses: list[Any], kept as given

    class Loose(K8sModel):
        value: Any = None

    class Nested(K8sModel):
        inner: Loose | None = None

    class Wrapped(K8sModel):
        value: Annotated[str, WrapValidator(lambda v, handler: v)] = ""

    class Checked(K8sModel):
        value: str = ""

        @field_validator("value", mode="plain")
        @classmethod
        def _as_is(cls, v: Any) -> Any:
            return v

    class Built(K8sModel):
        names: Annotated[list[str], BeforeValidator(lambda v: v or [])] = []
        by_name: dict[str, tuple[int, ...]] = {}
        child: ObjectMeta | None = None

    assert not builds_its_values(Loose)
    assert not builds_its_values(Nested)
    assert not builds_its_values(Wrapped)
    assert not builds_its_values(Checked)
    assert builds_its_values(Built)


def test_a_mapping_view_inside_a_dict_parses_as_its_copy_does() -> None:
    body = {"metadata": types.MappingProxyType(dict(META)), "spec": {"clusterName": "c1"}}
    assert CapiMachine.from_body(body) == CapiMachine.model_validate(plain(body))
    assert CapiMachine.from_body(body).metadata.labels == META["labels"]
