"""Kubernetes answers parsed for keeping: pydantic-core's JSON parser, and no ``managedFields``.

Every watch event and every answer to a write is parsed into dicts, and some are kept (the watch cache, kopf's
last event of each object, a pass's scope). Two things make those dicts far larger than they need to be:

- ``json.loads`` makes a new string for every key and value of every document; pydantic-core's parser
  (``pydantic_core.from_json``, already used for the MAAS answers) shares the short ones across documents
  through its string cache, and parses faster;
- ``metadata.managedFields`` (server-side apply's field ownership: a ``fieldsV1`` tree per writer) is about
  half of a MaasMachine's JSON and most of its parsed size, and neither capmaas nor kopf reads it.

:func:`loads` parses with pydantic-core and drops ``managedFields`` from the object, from each item of a
list, and from the object of a watch event. Its figures: docs/scaling.md, "Memory at 200 machines".
:func:`install_in_kopf` makes kopf decode through it too: its watch streams (each line is parsed with
``json.loads`` of its module ``kopf._cogs.clients.api``) and its listings (``api.get``, which every listing
and discovery read goes through, returns ``response.json()``; it is replaced by the same request decoded
with :func:`loads`). The tests of this module fail if the installed kopf stops doing either. The watch
events decoded there can be handed to a filter first (:func:`take_watch_events`: the operator's
:class:`~capmaas.operator.early.EarlyEvents`).
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from typing import Any

import pydantic_core

#: The metadata field dropped from every parsed object.
MANAGED_FIELDS = "managedFields"


def loads(data: str | bytes) -> Any:
    """The JSON document ``data`` as Python values, like ``json.loads`` (``ValueError`` when it is not
    JSON), without ``managedFields`` (see the module docstring)."""
    value = pydantic_core.from_json(data)
    if type(value) is dict:
        _drop_managed_fields(value)
        event_object = value.get("object")  # a watch event: {"type": ..., "object": {...}}
        if type(event_object) is dict:
            _drop_managed_fields(event_object)
        items = value.get("items")  # a list answer
        if type(items) is list:
            for item in items:
                if type(item) is dict:
                    _drop_managed_fields(item)
    return value


def _drop_managed_fields(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata")
    if type(meta) is dict:
        meta.pop(MANAGED_FIELDS, None)


#: What each decoded watch event goes through before kopf sees it (:func:`take_watch_events`): one a process.
_WATCH_EVENTS: list[Callable[[dict[str, Any]], dict[str, Any]]] = []


def take_watch_events(through: Callable[[dict[str, Any]], dict[str, Any]] | None) -> None:
    """Hand every event of kopf's watch streams, decoded, to ``through`` first (kopf gets what it returns);
    None: to kopf directly again. Takes effect where :func:`install_in_kopf` succeeded."""
    _WATCH_EVENTS[:] = [] if through is None else [through]


def _watch_line(data: str | bytes) -> Any:
    """One line of a kopf watch stream (kopf's ``api.stream`` is the only ``json.loads`` of its client)."""
    value = loads(data)
    if _WATCH_EVENTS and type(value) is dict:
        return _WATCH_EVENTS[0](value)
    return value


class _JsonForKopf(types.ModuleType):
    """The ``json`` module as kopf's client module sees it: its watch lines decoded by :func:`loads` (and
    handed to :func:`take_watch_events`'s filter), everything else the standard module's."""

    loads = staticmethod(_watch_line)

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)


def install_in_kopf() -> bool:
    """Make kopf decode its watch streams and its listings with :func:`loads`; False when kopf's client
    module is not as expected (nothing is changed then)."""
    from kopf._cogs.clients import api

    current = getattr(api, "json", None)
    if isinstance(current, _JsonForKopf):
        return True
    if current is not json or getattr(api, "get", None) is None or getattr(api, "request", None) is None:
        return False
    api.json = _JsonForKopf("json")  # type: ignore[attr-defined]
    api.get = _kopf_get
    return True


async def _kopf_get(url: str, **kwargs: Any) -> Any:
    """kopf's ``api.get`` (a GET through its ``api.request``, the answer's JSON), decoded by :func:`loads`."""
    from kopf._cogs.clients import api

    response = await api.request(method="get", url=url, **kwargs)
    async with response:
        return await response.json(loads=loads)
