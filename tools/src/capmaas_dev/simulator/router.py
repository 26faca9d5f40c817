"""Resources, their ``(METHOD, op)`` tables and the URL patterns: piston's ``OperationsHandler`` dispatch.

Each handler module declares its resources with :func:`resource` and registers functions with ``@res.op``; the
ASGI app routes a path to a resource, looks up ``(method, op)``, and answers MAAS's 400/405 for unknown pairs.
``describe/`` is generated from the same tables, so it can never disagree with what is actually served.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.http import Request

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

API_PREFIX = "/MAAS/api/2.0/"
Handler = Callable[["Simulator", Request], Any]
OpKey = tuple[str, str | None]
CRUD = {"GET": "read", "POST": "create", "PUT": "update", "DELETE": "delete"}


@dataclass
class Operation:
    method: str
    op: str | None
    fn: Handler
    doc: str


@dataclass
class Resource:
    """One URL with its authenticated handler (and optionally an anonymous one)."""

    name: str
    path: str
    anon_name: str | None = None
    vmhost: bool = False
    ops: dict[OpKey, Operation] = field(default_factory=dict)
    anon_ops: dict[OpKey, Operation] = field(default_factory=dict)
    anon_methods: frozenset[str] = frozenset()
    anonymous_only: bool = False
    #: False for a second URL of a handler MAAS describes once (``vlans/{vlan_id}/`` is VlanHandler's too)
    described: bool = True
    pattern: re.Pattern[str] = field(init=False)
    params: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.params = re.findall(r"{(\w+)}", self.path)
        regex = re.sub(r"{(\w+)}", r"(?P<\1>[^/]+)", self.path)
        self.pattern = re.compile(f"^{regex}(?:op-(?P<path_op>[\\w-]+)/?)?$")

    @property
    def template(self) -> str:
        return API_PREFIX + self.path

    def op(
        self, method: str, op: str | None = None, *, anonymous: bool = False
    ) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            entry = Operation(method, op, fn, (fn.__doc__ or "").strip())
            (self.anon_ops if anonymous else self.ops)[(method, op)] = entry
            return fn

        return register

    def methods(self) -> set[str]:
        return {m for m, _ in self.ops} | {m for m, _ in self.anon_ops}


def resource(registry: list[Resource], name: str, path: str, **kwargs: Any) -> Resource:
    res = Resource(name, path, **kwargs)
    registry.append(res)
    return res


def match(resources: list[Resource], rest: str) -> tuple[Resource, dict[str, str], str | None] | None:
    for res in resources:
        m = res.pattern.match(rest)
        if m:
            groups = m.groupdict()
            path_op = groups.pop("path_op", None)
            return res, {k: v for k, v in groups.items() if v is not None}, path_op
    return None
