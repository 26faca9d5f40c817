"""Validated answers made smaller to keep: one shared ``__pydantic_fields_set__`` per distinct set of names.

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
"""

from __future__ import annotations

import functools
import types
import typing
from typing import TypeVar

import pydantic

__all__ = ["MAX_SHARED", "compact"]

#: Distinct field-name sets kept for sharing (a few dozen serve every model of a real MAAS).
MAX_SHARED = 1024

ModelT = TypeVar("ModelT", bound=pydantic.BaseModel)

_shared: dict[frozenset[str], set[str]] = {}
_set = object.__setattr__


def _mentions_model(annotation: object) -> bool:
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        return issubclass(annotation, pydantic.BaseModel)
    return any(_mentions_model(arg) for arg in typing.get_args(annotation))


@functools.cache
def _shareable(cls: type[pydantic.BaseModel]) -> bool:
    """Whether instances of ``cls`` never add to their set: frozen, and no extra fields kept."""
    config = cls.model_config
    return bool(config.get("frozen")) and config.get("extra") != "allow"


@functools.cache
def _nested(cls: type[pydantic.BaseModel]) -> tuple[str, ...]:
    """The fields of ``cls`` that may hold models (alone, optional, or in a tuple), found once per class."""
    return tuple(name for name, field in cls.model_fields.items() if _mentions_model(field.annotation))


def compact(model: ModelT) -> ModelT:
    """``model`` (and every model nested in it), each sharing its field-name set with earlier answers."""
    cls = type(model)
    if _shareable(cls):
        names = model.__pydantic_fields_set__
        key = frozenset(names)
        shared = _shared.get(key)
        if shared is None:
            if len(_shared) < MAX_SHARED:
                _shared[key] = names
        elif shared is not names:
            _set(model, "__pydantic_fields_set__", shared)
    values = model.__dict__
    for name in _nested(cls):
        value = values.get(name)
        if isinstance(value, tuple):
            for item in value:
                if isinstance(item, pydantic.BaseModel):
                    compact(item)
        elif isinstance(value, pydantic.BaseModel):
            compact(value)
    return model
