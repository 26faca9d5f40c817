"""The Kubernetes-flavoured pydantic base that every capmaas API model derives from.

Why a base of our own: the same classes are both the source of the CRD OpenAPI schemas
(``capmaas_dev.crdgen``) and what the operator parses object bodies into and builds status patches from.
That only works if field names on the wire are the Kubernetes ones (camelCase, with the Go provider's
spellings such as ``minCPU`` and ``systemID``), Python code can use snake_case, and unknown fields from a
newer CRD version never break parsing.

Schema-only annotations (CEL rules, list types, deliberate defaults) are attached with the small helpers
below so that a model file reads like a ``*_types.go`` file with its kubebuilder markers.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Self

import annotated_types
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

__all__ = [
    "CRD_DEFAULT_KEY",
    "DNS1123_SUBDOMAIN",
    "QUANTITY_PATTERN",
    "IntOrString",
    "K8sModel",
    "Quantity",
    "cel",
    "crd_default",
    "list_map",
    "list_set",
    "plain",
    "schema_extra",
]

#: Marker the CRD generator turns into a schema ``default`` (pydantic's own defaults are dropped on purpose).
CRD_DEFAULT_KEY = "x-capmaas-default"

#: RFC 1123 subdomain, the rule for most Kubernetes object names (Secrets included).
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

#: resource.Quantity's serialised form, as controller-gen emits it for ``resource.Quantity``.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

#: ``x-kubernetes-int-or-string``: the generator turns pydantic's ``anyOf[integer, string]`` into it.
IntOrString = int | str

#: A Kubernetes quantity ("8", "16Gi", 4): int-or-string with the quantity pattern on the string form.
Quantity = Annotated[
    int | Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=64)],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]


class K8sModel(BaseModel):
    """Base for every API model: camelCase on the wire, snake_case in Python, unknown fields ignored.

    ``extra="ignore"`` (not "forbid") because the apiserver already prunes unknown fields, and an operator
    built against an older schema must still parse objects written through a newer CRD.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        validate_assignment=True,
    )

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Self:
        """Parse a Kubernetes object body (a dict, or kopf's ``Body``/``Spec``/``Status`` mapping views).

        The model never shares a dict or list with ``body``: a model that would keep a value it was given as
        it is (an ``Any`` field) parses a deep copy (:func:`plain`). One that builds every value it keeps
        (:func:`builds_its_values`) parses a dict as it is, without the copy (most of a parse's cost);
        should that fail (a mapping view inside), it parses the copy: the same model, or the same error."""
        if type(body) is dict and builds_its_values(cls):
            try:
                return cls.model_validate(body)
            except ValidationError:
                pass
        return cls.model_validate(plain(body))

    def to_k8s(self, *, exclude_unset: bool = False) -> dict[str, Any]:
        """The wire form: camelCase keys, JSON types, ``None`` fields left out.

        ``exclude_unset=True`` keeps only the fields that were given explicitly, which is what a merge patch
        built from a partially filled model should contain.
        """
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=exclude_unset)


#: Field types whose validated value is never the object given (pydantic makes a new one, or it is immutable).
_BUILT = frozenset({str, int, float, bool, type(None)})
#: Generic containers that pydantic validates into a new container of validated items.
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})


@functools.cache
def builds_its_values(model: type[BaseModel]) -> bool:
    """Whether every value a ``model`` keeps is one pydantic builds (scalars, enums, literals, and lists,
    dicts and models of those), never one passed through as given (``Any``, a plain or wrap validator): then
    its parse of a body shares nothing with the body, and needs no copy of it first."""
    decorators = model.__pydantic_decorators__
    if any(d.info.mode in ("wrap", "plain") for d in decorators.field_validators.values()) or any(
        d.info.mode in ("wrap", "plain") for d in decorators.model_validators.values()
    ):
        return False
    return all(
        _built(field.annotation) and all(_checks_only(m) for m in field.metadata)
        for field in model.model_fields.values()
    )


def _checks_only(marker: Any) -> bool:
    """A field's metadata that leaves the value to the type's validation (a before-validator changes the input
    only; a constraint checks it)."""
    return isinstance(marker, BeforeValidator | annotated_types.BaseMetadata | FieldInfo) or (
        type(marker).__module__.startswith("pydantic") and "Validator" not in type(marker).__name__
    )


def _built(annotation: Any) -> bool:
    if annotation in _BUILT:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *markers = typing.get_args(annotation)
        return _built(inner) and all(_checks_only(m) for m in markers)
    if origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType) or origin in _CONTAINERS:
        args = typing.get_args(annotation)
        return bool(args) and all(a is Ellipsis or _built(a) for a in args)
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return True
        if issubclass(annotation, BaseModel):
            return builds_its_values(annotation)
    return False


#: JSON's scalar types: returned as they are, before the (slow, ABC) ``Mapping`` check.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """Deep-copy mappings and sequences into plain dicts and lists (kopf hands out mapping views).

    The exact-type checks come first: bodies are mostly JSON scalars and dicts, and ``isinstance(x, Mapping)``
    (an ABC check) was most of this function's cost, itself the largest of the operator's (profile:
    docs/benchmarks/per-machine.md)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if kind is list or isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def cel(
    rule: str, message: str, *, reason: str | None = None, field_path: str | None = None
) -> dict[str, str]:
    """One ``x-kubernetes-validations`` entry. ``message`` is what the user sees, so write it for a person."""
    entry = {"rule": rule, "message": message}
    if reason is not None:
        entry["reason"] = (
            reason  # FieldValueInvalid | FieldValueForbidden | FieldValueRequired | FieldValueDuplicate
        )
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def crd_default(value: Any) -> dict[str, Any]:
    """Mark a deliberate schema default (the apiserver fills it in); other pydantic defaults are dropped."""
    return {CRD_DEFAULT_KEY: value}


def list_set() -> dict[str, Any]:
    """``x-kubernetes-list-type: set``: scalar items, no duplicates (server-side apply merges as a set)."""
    return {"x-kubernetes-list-type": "set"}


def list_map(*keys: str) -> dict[str, Any]:
    """``x-kubernetes-list-type: map`` keyed by ``keys`` (for example conditions by ``type``)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def schema_extra(*parts: Mapping[str, Any], rules: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Merge schema fragments (and CEL ``rules``) into one ``json_schema_extra`` dict."""
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    if rules:
        merged["x-kubernetes-validations"] = list(rules)
    return merged
