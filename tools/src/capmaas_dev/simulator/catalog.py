"""Zones, resource pools, tags, domains and DNS resources (M ``api/{zones,resourcepools,tags,domains,
dnsresources}.py``)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from capmaas_dev.simulator.dnsrecords import implicit_records
from capmaas_dev.simulator.forms import FormError, parse_bool
from capmaas_dev.simulator.http import (
    HttpError,
    Request,
    Response,
    admin_only,
    bad_request,
    conflict,
    forbidden,
    not_found,
    raw_json_response,
)
from capmaas_dev.simulator.machines import visible
from capmaas_dev.simulator.models import DnsResource, Domain, Pool, Tag, UserReservedIp, Zone
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import (
    dns_resource_json,
    domain_json,
    machines_bytes,
    pool_json,
    tag_json,
    zone_json,
)
from capmaas_dev.simulator.state import State

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

RESOURCES: list[Resource] = []
zones_res = resource(RESOURCES, "ZonesHandler", "zones/")
zone_res = resource(RESOURCES, "ZoneHandler", "zones/{name}/")
pools_res = resource(RESOURCES, "ResourcePoolsHandler", "resourcepools/")
pool_res = resource(RESOURCES, "ResourcePoolHandler", "resourcepool/{id}/")
tags_res = resource(RESOURCES, "TagsHandler", "tags/")
tag_res = resource(RESOURCES, "TagHandler", "tags/{name}/")
domains_res = resource(RESOURCES, "DomainsHandler", "domains/")
domain_res = resource(RESOURCES, "DomainHandler", "domains/{id}/")
dns_res = resource(RESOURCES, "DNSResourcesHandler", "dnsresources/")
dns_one_res = resource(RESOURCES, "DNSResourceHandler", "dnsresources/{id}/")
NO_CONTENT = Response(204, b"", "text/plain")
TAG_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
DNS_LABEL = re.compile(r"^(\*|@|[a-zA-Z0-9_]([a-zA-Z0-9_-]{0,61}[a-zA-Z0-9_])?)$")


# -- zones and resource pools ------------------------------------------------------------------------------
Named = TypeVar("Named", Zone, Pool)
T = TypeVar("T")


@dataclass(frozen=True)
class NamedKind(Generic[Named]):
    """Zones and resource pools: a unique name plus a description, created, read and updated alike in MAAS
    (``ZoneForm``/``ResourcePoolForm``). They differ only in their texts, who may write, and the URL key."""

    model: str  # in the 404 text
    label: str  # in the duplicate-name error
    param: str  # the URL parameter
    counter: str  # State.new_id's kind
    by_id: bool  # the URL key may also be a numeric id
    denied: Callable[[], HttpError]  # what a non-admin gets
    records: Callable[[State], dict[int, Named]]
    make: Callable[[int, str, str], Named]
    to_json: Callable[[Named], dict[str, Any]]


ZONES = NamedKind(
    model="Zone", label="Physical zone", param="name", counter="zone", by_id=False, denied=admin_only,
    records=lambda s: s.zones, make=Zone, to_json=zone_json,
)  # fmt: skip
POOLS = NamedKind(
    model="ResourcePool", label="Resource pool", param="id", counter="pool", by_id=True, denied=forbidden,
    records=lambda s: s.pools, make=Pool, to_json=pool_json,
)  # fmt: skip


def _found(
    record: T | None, model: str, req: Request, *, write: bool, denied: Callable[[], HttpError] = forbidden
) -> T:
    """The record, else MAAS's 404; then a write by a non-admin gets ``denied`` (MAAS looks the object up
    first, so an unknown one is a 404 for everybody)."""
    if record is None:
        raise not_found(model)
    if write and not req.is_admin:
        raise denied()
    return record


def _by_name(records: dict[int, Named], name: str) -> Named | None:
    return next((r for r in records.values() if r.name == name), None)


def _check_name_free(sim: Simulator, kind: NamedKind[Named], name: str) -> None:
    if _by_name(kind.records(sim.state), name):
        raise bad_request({"name": [f"{kind.label} with this Name already exists."]})


def _create_named(sim: Simulator, req: Request, kind: NamedKind[Named]) -> dict[str, Any]:
    if not req.is_admin:
        raise kind.denied()
    name = req.form.get("name") or ""
    if not name:
        raise bad_request({"name": ["This field is required."]})
    _check_name_free(sim, kind, name)
    rid = sim.state.new_id(kind.counter)
    record = kind.records(sim.state)[rid] = kind.make(rid, name, req.form.get("description") or "")
    return kind.to_json(record)


def _named(sim: Simulator, req: Request, kind: NamedKind[Named], *, write: bool = False) -> Named:
    key, records = req.params[kind.param], kind.records(sim.state)
    record = records.get(int(key)) if kind.by_id and key.isdigit() else _by_name(records, key)
    return _found(record, kind.model, req, write=write, denied=kind.denied)


def _update_named(sim: Simulator, req: Request, kind: NamedKind[Named]) -> dict[str, Any]:
    record = _named(sim, req, kind, write=True)
    name = req.form.get("name")
    if name and name != record.name:
        _check_name_free(sim, kind, name)
        record.name = name
    if "description" in req.form:
        record.description = req.form.get("description") or ""
    sim.state.invalidate_all()
    return kind.to_json(record)


def _register(kind: NamedKind[Named], many: Resource, one: Resource, noun: str, who: str) -> None:
    """List, create, read and update handlers for ``kind`` (deletes differ: each is written out below)."""

    def listing(sim: Simulator, req: Request) -> list[dict[str, Any]]:
        return [kind.to_json(r) for r in sorted(kind.records(sim.state).values(), key=lambda r: r.name)]

    def create(sim: Simulator, req: Request) -> dict[str, Any]:
        return _create_named(sim, req, kind)

    def read(sim: Simulator, req: Request) -> dict[str, Any]:
        return kind.to_json(_named(sim, req, kind))

    def update(sim: Simulator, req: Request) -> dict[str, Any]:
        return _update_named(sim, req, kind)

    for res, method, fn, doc in (
        (many, "GET", listing, f"List {noun}s, ordered by name."),
        (many, "POST", create, f"Create a {noun} ({who})."),
        (one, "GET", read, f"Read a {noun}" + (" (by id or name)." if kind.by_id else ".")),
        (one, "PUT", update, f"Update a {noun} ({who})."),
    ):
        fn.__doc__ = doc
        res.op(method)(fn)


_register(ZONES, zones_res, zone_res, "zone", "admin")
_register(POOLS, pools_res, pool_res, "resource pool", "superuser")


@zone_res.op("DELETE")
def delete_zone(sim: Simulator, req: Request) -> Response:
    """Delete a zone (admin); its machines move to the default zone."""
    zone = _named(sim, req, ZONES, write=True)
    if zone.name == "default":
        raise bad_request("This zone is the default zone, it cannot be deleted.")
    default = sim.state.default_zone
    for m in sim.state.machines.values():
        if m.zone_id == zone.id:
            m.zone_id = default.id
            m.cached_json = None
    for h in sim.state.vm_hosts.values():
        if h.zone_id == zone.id:
            h.zone_id = default.id
    del sim.state.zones[zone.id]
    return NO_CONTENT


@pool_res.op("DELETE")
def delete_pool(sim: Simulator, req: Request) -> Response:
    """Delete an empty, non-default resource pool (superuser)."""
    pool = _named(sim, req, POOLS, write=True)
    if pool.id == 0:
        raise bad_request("This is the default pool, it cannot be deleted.")
    if any(m.pool_id == pool.id for m in sim.state.machines.values()):
        raise bad_request("Pool has machines in it, it cannot be deleted.")
    del sim.state.pools[pool.id]
    return NO_CONTENT


# -- tags -------------------------------------------------------------------------------------------------
@tags_res.op("GET")
def list_tags(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List tags."""
    return [tag_json(t) for t in sorted(sim.state.tags.values(), key=lambda t: t.name)]


@tags_res.op("POST")
def create_tag(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a tag (admin; others get 403 with an empty body)."""
    if not req.is_admin:
        raise forbidden()
    form = req.form
    name = form.get("name") or ""
    if not name:
        raise bad_request({"name": ["This field is required."]})
    if not TAG_NAME.match(name):
        raise bad_request({"name": ["Invalid character in tag name."]})
    if name in sim.state.tags:
        raise bad_request({"name": ["Tag with this Name already exists."]})
    definition = form.get("definition") or ""
    _check_xpath(definition)
    tag = sim.state.tags[name] = Tag(
        name, definition, form.get("comment") or "", form.get("kernel_opts") or ""
    )
    return tag_json(tag)


def _check_xpath(definition: str) -> None:
    if definition and (
        definition.count("[") != definition.count("]") or definition.count("(") != definition.count(")")
    ):
        raise bad_request({"definition": [f"Invalid xpath expression: {definition}"]})


def _tag(sim: Simulator, req: Request, *, write: bool = False) -> Tag:
    return _found(sim.state.tags.get(req.params["name"]), "Tag", req, write=write)


@tag_res.op("GET")
def read_tag(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a tag."""
    return tag_json(_tag(sim, req))


@tag_res.op("PUT")
def update_tag(sim: Simulator, req: Request) -> dict[str, Any]:
    """Update a tag's comment, definition or kernel options (admin)."""
    tag = _tag(sim, req, write=True)
    for key in ("comment", "kernel_opts"):
        if key in req.form:
            setattr(tag, key, req.form.get(key) or "")
    if "definition" in req.form:
        _check_xpath(req.form.get("definition") or "")
        tag.definition = req.form.get("definition") or ""
    return tag_json(tag)


@tag_res.op("DELETE")
def delete_tag(sim: Simulator, req: Request) -> Response:
    """Delete a tag (admin); machines lose it."""
    tag = _tag(sim, req, write=True)
    for m in sim.state.machines.values():
        if tag.name in m.tags:
            m.tags.discard(tag.name)
            m.cached_json = None
    del sim.state.tags[tag.name]
    return NO_CONTENT


@tag_res.op("GET", "machines")
@tag_res.op("GET", "nodes")
def tag_machines(sim: Simulator, req: Request) -> Response:
    """Machines carrying the tag."""
    tag = _tag(sim, req)
    result = [m for m in sim.state.machines.values() if tag.name in m.tags and visible(req, m)]
    return raw_json_response(machines_bytes(sim.state, result, sim.maas4))


@tag_res.op("POST", "update_nodes")
def update_nodes(sim: Simulator, req: Request) -> dict[str, int]:
    """Add the tag to (``add``) and remove it from (``remove``) machines (admin)."""
    tag = _tag(sim, req, write=True)
    definition = req.form.get("definition")
    if definition is not None and definition != tag.definition:
        raise conflict(
            f"Definition supplied '{definition}' doesn't match current definition '{tag.definition}'"
        )
    added = removed = 0
    for sid in req.form.getlist("add"):
        m = sim.state.machines.get(sid)
        if m is not None and tag.name not in m.tags:
            m.tags.add(tag.name)
            m.cached_json = None
            added += 1
    for sid in req.form.getlist("remove"):
        m = sim.state.machines.get(sid)
        if m is not None and tag.name in m.tags:
            m.tags.discard(tag.name)
            m.cached_json = None
            removed += 1
    return {"added": added, "removed": removed}


@tag_res.op("POST", "rebuild")
def rebuild(sim: Simulator, req: Request) -> dict[str, str]:
    """Re-evaluate the tag's definition (a no-op here)."""
    tag = _tag(sim, req, write=True)
    return {"rebuilding": tag.name}


# -- domains ----------------------------------------------------------------------------------------------
@domains_res.op("GET")
def list_domains(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List domains."""
    return [domain_json(sim.state, d) for d in sorted(sim.state.domains.values(), key=lambda d: d.id)]


@domains_res.op("POST")
def create_domain(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a domain (admin)."""
    if not req.is_admin:
        raise admin_only()
    name = req.form.get("name") or ""
    if not name:
        raise bad_request({"name": ["This field is required."]})
    if sim.state.domain_by_name(name):
        raise bad_request({"name": ["Domain with this Name already exists."]})
    did = sim.state.new_id("domain")
    ttl = req.form.get("ttl")
    authoritative = (req.form.get("authoritative") or "true").lower() in ("true", "1", "yes", "on")
    domain = sim.state.domains[did] = Domain(
        did, name, int(ttl) if ttl and ttl.isdigit() else None, authoritative
    )
    return domain_json(sim.state, domain)


def _domain_by_key(state: State, key: str) -> Domain | None:
    return state.domains.get(int(key)) if key.isdigit() else state.domain_by_name(key)


def _domain(sim: Simulator, req: Request, *, write: bool = False) -> Domain:
    domain = _domain_by_key(sim.state, req.params["id"])
    return _found(domain, "Domain", req, write=write, denied=admin_only)


@domain_res.op("GET")
def read_domain(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a domain."""
    return domain_json(sim.state, _domain(sim, req))


@domain_res.op("PUT")
def update_domain(sim: Simulator, req: Request) -> dict[str, Any]:
    """Update a domain (admin)."""
    domain = _domain(sim, req, write=True)
    if req.form.get("name"):
        domain.name = req.form.get("name") or domain.name
        sim.state.invalidate_all()
    ttl = req.form.get("ttl")
    if ttl and ttl.isdigit():
        domain.ttl = int(ttl)
    return domain_json(sim.state, domain)


@domain_res.op("DELETE")
def delete_domain(sim: Simulator, req: Request) -> Response:
    """Delete a domain (admin); the default domain and domains with records cannot be deleted."""
    domain = _domain(sim, req, write=True)
    if domain.id == sim.state.default_domain_id:
        raise bad_request("This domain is the default domain, it cannot be deleted.")
    protected = protected_by(sim.state, domain)
    if protected:
        raise HttpError(500, protected)
    del sim.state.domains[domain.id]
    return NO_CONTENT


def protected_by(state: State, domain: Domain) -> str:
    """Django's ``ProtectedError`` text when nodes or DNS resources still use ``domain`` (their foreign keys
    are ``on_delete=PROTECT``); MAAS's middleware answers it as a 500 with ``str(exception)``. Empty when
    nothing does."""
    objects: dict[str, list[str]] = {}
    for m in state.machines.values():
        if m.domain_id == domain.id:
            objects.setdefault("'Node.domain'", []).append(f"<Node: {m.system_id} ({m.hostname})>")
    for d in state.devices.values():
        if d.domain_id == domain.id:
            objects.setdefault("'Node.domain'", []).append(f"<Node: {d.system_id} ({d.hostname})>")
    for r in state.dns_resources.values():
        if r.domain_id == domain.id:
            objects.setdefault("'DNSResource.domain'", []).append(f"<DNSResource: name={r.name}>")
    if not objects:
        return ""
    message = (
        "Cannot delete some instances of model 'Domain' because they are referenced through protected "
        f"foreign keys: {', '.join(objects)}."
    )
    instances = ", ".join(o for group in objects.values() for o in sorted(group))
    return f'("{message}", {{{instances}}})'  # str() of the exception's (message, set of instances) args


@domain_res.op("POST", "set_default")
def set_default_domain(sim: Simulator, req: Request) -> dict[str, Any]:
    """Make this the default domain (admin)."""
    domain = _domain(sim, req, write=True)
    sim.state.default_domain_id = domain.id
    return domain_json(sim.state, domain)


# -- DNS resources ----------------------------------------------------------------------------------------
@dns_res.op("GET")
def list_dns(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List DNS resources, filtered by fqdn, domain or name; ``all=true`` adds the implicit records of nodes
    (``DNSResourcesQuerySet``: id -1, their addresses as ``resource_records``)."""
    q, state = req.query, sim.state
    try:
        with_implicit = parse_bool(q, "all")
    except FormError as exc:
        raise bad_request(str(exc)) from None
    out = []
    for r in sorted(state.dns_resources.values(), key=lambda r: r.id):
        body = dns_resource_json(state, r)
        domain = state.domains[r.domain_id]
        if q.get("fqdn") and body["fqdn"] != q.get("fqdn"):
            continue
        if q.get("domain") and q.get("domain") not in (domain.name, str(domain.id)):
            continue
        if q.get("name") and r.name != q.get("name"):
            continue
        if q.get("rrtype") and (q.get("rrtype") or "").upper() not in ("A", "AAAA"):
            continue
        out.append(body)
    if with_implicit:
        domain_ids: set[int] | None = None
        found: Domain | None = None
        if q.get("domain"):
            found = _domain_by_key(state, q.get("domain") or "")
            domain_ids = {found.id} if found else set()
        name = q.get("name") or ((q.get("fqdn") or "").partition(".")[0] or None)
        if q.get("fqdn"):
            found = state.domain_by_name((q.get("fqdn") or "").partition(".")[2])
            domain_ids = {found.id} if found else set()
        rrtype = (q.get("rrtype") or "").upper()
        for record in implicit_records(sim, domain_ids, name):
            record["resource_records"] = [
                rr for rr in record["resource_records"] if not rrtype or rr["rrtype"] == rrtype
            ]
            if record["resource_records"]:
                out.append(record)
    return out


def _dns_fields(
    sim: Simulator, req: Request, current: DnsResource | None
) -> tuple[str, int, list[str] | None]:
    form, state = req.form, sim.state
    fqdn = form.get("fqdn")
    name = form.get("name")
    domain_key = form.get("domain")
    if fqdn:
        name, _, domain_key = fqdn.partition(".")
    if current is not None:
        name = name or current.name
    if not name:
        raise bad_request({"name": ["This field is required."]})
    if domain_key:
        domain_id = _found(_domain_by_key(state, domain_key), "Domain", req, write=False).id
    else:
        domain_id = current.domain_id if current else state.default_domain_id
    if not DNS_LABEL.match(name):
        raise bad_request({"name": [f"Invalid dnsresource name: {name}."]})
    ips: list[str] | None = None
    if "ip_addresses" in form:
        ips = []
        for token in " ".join(form.getlist("ip_addresses")).replace(",", " ").split():
            try:
                ips.append(str(ipaddress.ip_address(token)))
            except ValueError:
                raise bad_request({"ip_addresses": [f"'{token}' is not a valid IP address."]}) from None
    for other in state.dns_resources.values():
        if other is not current and other.name == name and other.domain_id == domain_id:
            raise bad_request({"__all__": ["Labels must be unique within their zone."]})
    return name, domain_id, ips


def _address_rows(sim: Simulator, req: Request, ips: list[str]) -> None:
    """``DNSResourceForm.save``: each address without a row gets a USER_RESERVED one owned by the caller
    (best subnet, possibly none; no range check), which from then on blocks ``link_subnet`` STATIC to it
    (404) like any reservation. An address some row already has (a machine's) is linked as it is."""
    state = sim.state
    owner = req.user.username if req.user else ""
    for ip in ips:
        if ip not in state.used_ips:
            subnet = state.subnet_for_ip(ip)
            row = UserReservedIp(state.new_id("staticipaddress"), ip, subnet.id if subnet else None, owner)
            state.user_reserved[ip] = row
            state.used_ips.add(ip)


@dns_res.op("POST")
def create_dns(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a DNS resource from ``fqdn`` (or ``name`` + ``domain``) and ``ip_addresses`` (admin)."""
    if not req.is_admin:
        raise admin_only()
    name, domain_id, ips = _dns_fields(sim, req, None)
    _address_rows(sim, req, ips or [])
    ttl = req.form.get("address_ttl")
    rid = sim.state.new_id("dnsresource")
    record = DnsResource(rid, name, domain_id, ips or [], int(ttl) if ttl and ttl.isdigit() else None)
    sim.state.dns_resources[rid] = record
    return dns_resource_json(sim.state, record)


def _dns(sim: Simulator, req: Request, *, write: bool = False) -> DnsResource:
    key = req.params["id"]
    record = sim.state.dns_resources.get(int(key)) if key.isdigit() else None
    return _found(record, "DNSResource", req, write=write)


@dns_one_res.op("GET")
def read_dns(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a DNS resource."""
    return dns_resource_json(sim.state, _dns(sim, req))


@dns_one_res.op("PUT")
def update_dns(sim: Simulator, req: Request) -> dict[str, Any]:
    """Update a DNS resource (admin)."""
    record = _dns(sim, req, write=True)
    name, domain_id, ips = _dns_fields(sim, req, record)
    record.name, record.domain_id = name, domain_id
    if ips is not None:  # the rows of addresses dropped from the record stay (M2M set), still reserved
        _address_rows(sim, req, ips)
        record.ips, record.released_ips = ips, 0  # the new set replaces any freed (null) address too
    ttl = req.form.get("address_ttl")
    if ttl and ttl.isdigit():
        record.address_ttl = int(ttl)
    return dns_resource_json(sim.state, record)


@dns_one_res.op("DELETE")
def delete_dns(sim: Simulator, req: Request) -> Response:
    """Delete a DNS resource (admin), and each of its USER_RESERVED addresses no interface and no other DNS
    resource has (``StaticIPAddress.is_safe_to_delete``)."""
    record = _dns(sim, req, write=True)
    state = sim.state
    del state.dns_resources[record.id]
    for ip in record.ips:
        row = state.user_reserved.get(ip)
        if row is not None and row.mac is None and not any(ip in r.ips for r in state.dns_resources.values()):
            del state.user_reserved[ip]
            state.used_ips.discard(ip)
    return NO_CONTENT


__all__ = ["RESOURCES", "HttpError"]
