"""Read-mostly resources: subnets, boot resources, users, version, describe, and the debug endpoint."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.http import (
    JSON_UTF8,
    HttpError,
    Request,
    Response,
    bad_request,
    forbidden,
    json_response,
    not_found,
)
from capmaas_dev.simulator.router import CRUD, Resource, resource
from capmaas_dev.simulator.serialize import boot_resource_json, subnet_json

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

RESOURCES: list[Resource] = []
subnets_res = resource(RESOURCES, "SubnetsHandler", "subnets/")
subnet_res = resource(RESOURCES, "SubnetHandler", "subnets/{id}/")
boot_res = resource(RESOURCES, "BootResourcesHandler", "boot-resources/")
boot_one_res = resource(RESOURCES, "BootResourceHandler", "boot-resources/{id}/")
users_res = resource(RESOURCES, "UsersHandler", "users/")
user_res = resource(RESOURCES, "UserHandler", "users/{username}/")
version_res = resource(RESOURCES, "VersionHandler", "version/", anonymous_only=True)
describe_res = resource(RESOURCES, "DescribeHandler", "describe/", anonymous_only=True)
debug_res = resource(RESOURCES, "DebugHandler", "debug/")
CAPABILITIES = [
    "networks-management",
    "static-ipaddresses",
    "ipv6-deployment-ubuntu",
    "devices-management",
    "storage-deployment-ubuntu",
    "network-deployment-ubuntu",
    "bridging-interface-ubuntu",
    "bridging-automatic-ubuntu",
    "authenticate-api",
]


@subnets_res.op("GET")
def list_subnets(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List all subnets (MAAS offers no filters here)."""
    return [subnet_json(s) for _, s in sorted(sim.state.subnets.items())]


@subnet_res.op("GET")
def read_subnet(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a subnet by id (or ``cidr:<cidr>`` / name)."""
    key = req.params["id"]
    for s in sim.state.subnets.values():
        if key in (str(s.id), f"cidr:{s.cidr}", s.name):
            return subnet_json(s)
    raise not_found("Subnet")


@boot_res.op("GET")
def list_boot_resources(sim: Simulator, req: Request) -> Response:
    """List boot resources, optionally by ``type=synced|uploaded``."""
    kind = req.query.get("type")
    if kind is not None and kind not in ("synced", "uploaded"):
        raise bad_request(
            f"'{kind}' is not a valid boot resource type. Available types: ['synced', 'uploaded']"
        )
    items = [
        boot_resource_json(b)
        for _, b in sorted(sim.state.boot_resources.items())
        if kind is None or b.type.lower() == kind
    ]
    return json_response(items, content_type=JSON_UTF8)


@boot_one_res.op("GET")
def read_boot_resource(sim: Simulator, req: Request) -> Response:
    """Read one boot resource with its sets."""
    key = req.params["id"]
    b = sim.state.boot_resources.get(int(key)) if key.isdigit() else None
    if b is None:
        raise not_found("BootResource")
    return json_response(boot_resource_json(b, detail=True), content_type=JSON_UTF8)


@boot_res.op("GET", "is_importing")
def is_importing(sim: Simulator, req: Request) -> bool:
    """Whether an image import is running (never, here)."""
    return False


@users_res.op("GET")
def list_users(sim: Simulator, req: Request) -> list[dict[str, object]]:
    """List users, ordered by username."""
    return [u.to_json() for _, u in sorted(sim.auth.users.items())]


@users_res.op("GET", "whoami")
def whoami(sim: Simulator, req: Request) -> dict[str, object]:
    """The authenticated user."""
    assert req.user is not None
    return req.user.to_json()


@user_res.op("GET")
def read_user(sim: Simulator, req: Request) -> dict[str, object]:
    """Read a user."""
    user = sim.auth.users.get(req.params["username"])
    if user is None:
        raise not_found("User")
    return user.to_json()


@version_res.op("GET", anonymous=True)
def version(sim: Simulator, req: Request) -> Response:
    """The MAAS version and API capabilities."""
    body = {
        "capabilities": CAPABILITIES,
        "version": "4.0.0" if sim.maas4 else "3.7.3",
        "subversion": "",
    }
    return json_response(body, content_type=JSON_UTF8)


@describe_res.op("GET", anonymous=True)
def describe(sim: Simulator, req: Request) -> Response:
    """The API description MAAS clients discover the API from."""
    host = req.headers.get("host", "localhost:5240")
    return Response(200, describe_document(sim, f"http://{host}").encode(), "application/json")


def _handler_doc(
    res: Resource, name: str, ops: list[tuple[str, str | None, str]], base: str
) -> dict[str, Any]:
    actions = [
        {"name": op or CRUD[method], "method": method, "op": op, "restful": op is None, "doc": doc}
        for method, op, doc in ops
    ]
    actions.sort(key=lambda a: (a["name"], a["method"]))
    return {
        "name": name,
        "doc": f"Manage {res.path.split('/')[0]}.",
        "params": list(res.params),
        "path": res.template,
        "uri": base + res.template,
        "actions": actions,
    }


def describe_document(sim: Simulator, base: str) -> str:
    resources = []
    handlers_anon: list[dict[str, Any]] = []
    handlers_auth: list[dict[str, Any]] = []
    for res in sim.resources:
        if res.name == "DebugHandler" or not res.described:
            continue
        anon = auth = None
        if res.anon_ops or res.anon_name:
            anon_name = res.anon_name or res.name
            anon = _handler_doc(
                res, anon_name, [(o.method, o.op, o.doc) for o in res.anon_ops.values()], base
            )
            handlers_anon.append(anon)
        if not res.anonymous_only:
            auth = _handler_doc(res, res.name, [(o.method, o.op, o.doc) for o in res.ops.values()], base)
            handlers_auth.append(auth)
        resources.append({"name": res.name, "anon": anon, "auth": auth})
    resources.sort(key=lambda r: str(r["name"]))
    doc = {"doc": "MAAS API", "resources": resources, "handlers": handlers_anon + handlers_auth}
    doc["hash"] = api_hash(sim)
    return json.dumps(doc, sort_keys=True)


def api_hash(sim: Simulator) -> str:
    """sha1 of the API's shape (resources and their ops), sent as X-MAAS-API-Hash on every response."""
    shape = sorted(
        (r.name, r.path, sorted((m, o or "") for m, o in [*r.ops, *r.anon_ops])) for r in sim.resources
    )
    return hashlib.sha1(json.dumps(shape).encode(), usedforsecurity=False).hexdigest()


def _admin(req: Request) -> None:
    if not req.is_admin:
        raise forbidden("User is not allowed access to this API.")


@debug_res.op("GET", "counters")
def debug_counters(sim: Simulator, req: Request) -> list[dict[str, object]]:
    """Per-endpoint request counts (simulator only; admin)."""
    _admin(req)
    return [
        {"method": method, "endpoint": endpoint, "op": op, "count": count}
        for (method, endpoint, op), count in sorted(sim.counters.items(), key=lambda kv: str(kv[0]))
    ]


@debug_res.op("GET", "invariants")
def debug_invariants(sim: Simulator, req: Request) -> dict[str, object]:
    """Invariant violations, ``[]`` when all hold (simulator only; admin)."""
    _admin(req)
    violations = sim.check_invariants()
    return {"ok": not violations, "violations": violations}


@debug_res.op("POST", "reset_counters")
def debug_reset(sim: Simulator, req: Request) -> dict[str, object]:
    """Zero the request counters (simulator only; admin)."""
    _admin(req)
    sim.reset_counters()
    return {"ok": True}


__all__ = ["RESOURCES", "HttpError"]
