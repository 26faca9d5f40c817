"""Validated answers made smaller to keep: shared field-name sets, and equal sub-models kept as one object.

pydantic gives every model instance its own set of the field names the input carried (what
``model_fields_set`` and ``exclude_unset`` read). A MAAS machine is some 23 models (its zone, pool,
interfaces, links, subnets, VLANs, block devices, partitions, filesystems), and those sets were about two
thirds of a machine's memory: ~16 of ~26 KB (docs/benchmarks/README.md, issue 26). The machines in flight
are kept in the shared poller's snapshot (and the Ready ones in the inventory), so at a thousand machines
that was ~16 MB of identical sets. Answers of one MAAS carry the same fields machine after machine, so a
handful of shared sets serve them all.

Sharing a *mutable* set is safe because every response model is frozen with ``extra="ignore"``: pydantic
adds to the set only on attribute assignment, which a frozen model refuses, and ``model_copy`` copies the set
before it adds the updated names. Equality never reads it. What a tenant's MAAS controls (which fields an
answer carries) can make up to 2**fields distinct sets, so the table is capped at :data:`MAX_SHARED` sets;
past that a model simply keeps its own.

Equal sub-models are shared the same way (a frozen model cannot change, so one object serves every place
that holds an equal one): a machine lists its boot disk again among its block devices and its physical block
devices, each a disk with its partitions and their filesystems (:data:`WITHIN_ANSWER`: shared within one
answer's model), and every machine of a MAAS repeats the same zone, pool, VLANs and subnets
(:data:`ACROSS_ANSWERS`: shared across answers through a table capped at :data:`MAX_COMMON` models). Two
models count as equal only with the same class, the same field-name set, values of the same types that
compare equal, and the very same (already shared) nested models, so nothing a caller reads changes, nested
``model_fields_set`` included; a model holding an unhashable value (a dict) is never shared.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pydantic

__all__ = ["ACROSS_ANSWERS", "MAX_COMMON", "MAX_SHARED", "WITHIN_ANSWER", "compact"]

#: Distinct field-name sets kept for sharing (a few dozen serve every model of a real MAAS).
MAX_SHARED = 1024
#: Distinct models of :data:`ACROSS_ANSWERS` kept for sharing (a MAAS has a few zones and pools, and a VLAN
#: and a subnet per network).
MAX_COMMON = 1024
#: Models shared when equal within one answer's model (the disks a machine lists up to three times); filled
#: by :func:`share` (capmaas.maas.models names them).
WITHIN_ANSWER: set[type[pydantic.BaseModel]] = set()
#: Models shared when equal across answers too (what every machine of one MAAS repeats).
ACROSS_ANSWERS: set[type[pydantic.BaseModel]] = set()
#: Models compacted as each is validated (:func:`at_validation`), which :func:`compact` then leaves alone.
AT_VALIDATION: set[type[pydantic.BaseModel]] = set()


def share(
    *,
    within: Iterable[type[pydantic.BaseModel]] = (),
    across: Iterable[type[pydantic.BaseModel]] = (),
    at_validation: Iterable[type[pydantic.BaseModel]] = (),
) -> None:
    """Name the models shared within an answer, across answers, and those compacted as each is validated
    (before any of them is compacted: each class's plan is made once)."""
    WITHIN_ANSWER.update(within)
    ACROSS_ANSWERS.update(across)
    AT_VALIDATION.update(at_validation)


ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)

_shared: dict[frozenset[str], set[str]] = {}
_common: dict[tuple[object, ...], pydantic.BaseModel] = {}
_set = object.__setattr__


def _mentions_model(annotation: object) -> bool:
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        return issubclass(annotation, pydantic.BaseModel)
    return any(_mentions_model(arg) for arg in typing.get_args(annotation))


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What :func:`compact` does with instances of one class, found once per class."""

    nested: tuple[str, ...]
    """The fields that may hold models (alone, optional, or in a tuple)."""
    shareable: bool
    """Its instances never add to their field-name set: frozen, and no extra fields kept."""
    scope: int
    """Equal instances are shared within one answer (:data:`_WITHIN`), across answers (:data:`_ACROSS`), or
    not (0: not listed, or a field whose values could compare equal across types, see :func:`_plain`)."""
    plain: Callable[[dict[str, Any]], tuple[object, ...]] | None = None
    """The values of the other fields, as a tuple (in the key as they are)."""


@functools.cache
def _plan(cls: type[pydantic.BaseModel]) -> _Plan:
    fields = cls.model_fields
    nested = tuple(name for name, field in fields.items() if _mentions_model(field.annotation))
    config = cls.model_config
    shareable = bool(config.get("frozen")) and config.get("extra") != "allow"
    scope = _ACROSS if cls in ACROSS_ANSWERS else _WITHIN if cls in WITHIN_ANSWER else 0
    others = [name for name in fields if name not in nested]
    if not shareable or not all(_plain(fields[name].annotation) for name in others):
        return _Plan(nested, shareable, 0)
    plain = operator.itemgetter(*others) if len(others) > 1 else lambda values: (values[others[0]],)
    return _Plan(nested, shareable, scope, plain if others else lambda values: ())


_WITHIN, _ACROSS = 1, 2
_NUMBERS = frozenset({int, bool, float})


def _plain(annotation: object) -> bool:
    """Whether values of a field so annotated are equal only when interchangeable: ``str``, ``int``,
    ``bool``, ``None``, tuples of those, and unions of them with at most one numeric type (``1 == 1.0 ==
    True``; and ``0.0 == -0.0``, so no ``float`` at all)."""
    members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    kinds: list[object] = []
    for member in members:
        if typing.get_origin(member) is tuple:
            args = typing.get_args(member)
            if len(args) != 2 or args[1] is not Ellipsis or not _plain(args[0]):
                return False
        elif member in (str, int, bool, type(None)):
            kinds.append(member)
        else:
            return False
    return len(_NUMBERS.intersection(kinds)) <= 1


def compact(model: ModelT) -> ModelT:
    """``model`` (and every model nested in it), each sharing its field-name set with earlier answers and
    holding one object for equal sub-models (see the module docstring); a model of :data:`AT_VALIDATION`
    was compacted already."""
    if type(model) in AT_VALIDATION:
        return model
    return _compact(model, {})


def at_validation(model: ModelT) -> ModelT:
    """:func:`compact` for a model of :data:`AT_VALIDATION`, from its own after-validator: each machine of a
    listing is compacted as soon as it is validated, so the listing never holds every machine's own sets
    and copies at once (docs/scaling.md, "Memory: session 38")."""
    return _compact(model, {})


def _compact(model: ModelT, seen: dict[tuple[object, ...], pydantic.BaseModel]) -> ModelT:
    """``model`` compacted, nested models first (so that equal parents hold the very same children); the
    model to keep in its place is returned: ``model`` itself or an equal one met before in ``seen`` (this
    answer) or :data:`_common` (earlier answers)."""
    plan = _plan(type(model))
    values = model.__dict__
    # Nested models by identity, gathered as they are compacted: they are the shared ones by then, so equal
    # children are the same object.
    ids: list[object] = []
    for name in plan.nested:
        value = values.get(name)
        if isinstance(value, tuple):
            items: list[object] | None = None
            for i, item in enumerate(value):
                if isinstance(item, pydantic.BaseModel) and (kept := _compact(item, seen)) is not item:
                    if items is None:
                        items = list(value)
                    items[i] = kept
            if items is not None:
                value = values[name] = tuple(items)
            ids.append(tuple(map(id, value)))
        else:
            if isinstance(value, pydantic.BaseModel):
                value = values[name] = _compact(value, seen)
            ids.append(id(value))
    if not plan.shareable:
        return model
    names = model.__pydantic_fields_set__
    names_key = frozenset(names)
    shared = _shared.get(names_key)
    if shared is None:
        if len(_shared) < MAX_SHARED:
            _shared[names_key] = names
    elif shared is not names:
        _set(model, "__pydantic_fields_set__", shared)
    if not plan.scope or plan.plain is None or model.__pydantic_extra__ or model.__pydantic_private__:
        return model
    key = (type(model), names_key, plan.plain(values), tuple(ids))
    found = seen.get(key)
    if found is None and plan.scope == _ACROSS:
        found = _common.get(key)
    if found is not None:
        return found  # type: ignore[return-value]  # an equal model of the same class
    seen[key] = model
    if plan.scope == _ACROSS and len(_common) < MAX_COMMON:
        _common[key] = model
    return model
