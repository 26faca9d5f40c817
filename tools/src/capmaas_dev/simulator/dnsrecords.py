"""``dnsresourcerecords/``: DNS data (CNAME, MX, NS, SRV, SSHFP, TXT) hung on DNS resources (M
``api/dnsresourcerecords.py``, ``models/dnsdata.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.http import Request, Response, admin_only, bad_request, not_found
from capmaas_dev.simulator.models import DnsData, DnsResource
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import dns_data_json, dns_resource_fqdn
from capmaas_dev.simulator.state import State

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

RESOURCES: list[Resource] = []
records_res = resource(RESOURCES, "DNSResourceRecordsHandler", "dnsresourcerecords/")
record_res = resource(RESOURCES, "DNSResourceRecordHandler", "dnsresourcerecords/{id}/")
SUPPORTED_RRTYPES = ("CNAME", "MX", "NS", "SRV", "SSHFP", "TXT")
MULTI_CNAME = "Only one CNAME can be associated with a name."
CNAME_AND_OTHER = "CNAME records for a name cannot coexist with non-CNAME records."


def _domain_id(sim: Simulator, key: str) -> int:
    state = sim.state
    domain = state.domains.get(int(key)) if key.isdigit() else state.domain_by_name(key)
    if domain is None:
        raise not_found("Domain")
    return domain.id


def _split_fqdn(fqdn: str) -> tuple[str, str]:
    """``separate_fqdn`` for non-SRV names: the first label and the rest."""
    name, _, domain = fqdn.partition(".")
    return name, domain


@records_res.op("GET")
def list_records(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List DNS resource records, filtered by ``fqdn``, ``domain``, ``name``, ``rrtype``."""
    q, state = req.query, sim.state
    name, domain_key = q.get("name"), q.get("domain")
    if q.get("fqdn"):
        name, domain_key = _split_fqdn(q.get("fqdn") or "")
    domain_id = _domain_id(sim, domain_key) if domain_key else None
    rrtype = (q.get("rrtype") or "").upper()
    out = []
    for d in sorted(state.dns_data.values(), key=lambda d: d.id):
        r = state.dns_resources[d.dnsresource_id]
        if (domain_id is not None and r.domain_id != domain_id) or (name and r.name != name):
            continue
        if rrtype and d.rrtype != rrtype:
            continue
        out.append(dns_data_json(state, d))
    return out


def _check(state: State, resource_id: int, rrtype: str, rrdata: str, current: DnsData | None) -> None:
    errors: dict[str, list[str]] = {}
    if rrtype not in SUPPORTED_RRTYPES:
        errors["rrtype"] = [f"{rrtype} is not one of {' '.join(SUPPORTED_RRTYPES)}."]
    elif rrtype == "CNAME" and (not rrdata or " " in rrdata.strip()):
        errors["__all__"] = ["Invalid CNAME: Should be '<server>'."]
    others = [d for d in state.dns_data.values() if d.dnsresource_id == resource_id and d is not current]
    if rrtype == "CNAME" and any(d.rrtype == "CNAME" for d in others):
        errors["__all__"] = [MULTI_CNAME]
    elif any((d.rrtype == "CNAME") != (rrtype == "CNAME") for d in others):
        errors["__all__"] = [CNAME_AND_OTHER]
    if errors:
        raise bad_request(errors)


@records_res.op("POST")
def create_record(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a record for ``fqdn`` (or ``name`` + ``domain``), making the DNS resource if missing (admin)."""
    if not req.is_admin:
        raise admin_only()
    form, state = req.form, sim.state
    rrtype, rrdata = (form.get("rrtype") or "").upper(), form.get("rrdata") or ""
    if not rrtype:
        raise bad_request("rrtype must be provided.")
    if not rrdata:
        raise bad_request("rrdata must be provided.")
    name, domain_key = form.get("name"), form.get("domain")
    if form.get("fqdn") and not (name and domain_key):
        name, domain_key = _split_fqdn(form.get("fqdn") or "")
    if not (name and domain_key):
        raise bad_request("Either name and domain (or fqdn) must be specified")
    domain_id = _domain_id(sim, domain_key)
    existing = next(
        (r for r in state.dns_resources.values() if r.name == name and r.domain_id == domain_id), None
    )
    _check(state, existing.id if existing else -1, rrtype, rrdata, None)
    if existing is None:
        existing = DnsResource(state.new_id("dnsresource"), name, domain_id)
        state.dns_resources[existing.id] = existing
    ttl = form.get("ttl")
    record = DnsData(
        state.new_id("dnsdata"), existing.id, rrtype, rrdata, int(ttl) if ttl and ttl.isdigit() else None
    )
    state.dns_data[record.id] = record
    return dns_data_json(state, record)


def _record(sim: Simulator, req: Request) -> DnsData:
    key = req.params["id"]
    record = sim.state.dns_data.get(int(key)) if key.isdigit() else None
    if record is None:
        raise not_found("DNSData")
    return record


@record_res.op("GET")
def read_record(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a DNS resource record."""
    return dns_data_json(sim.state, _record(sim, req))


@record_res.op("PUT")
def update_record(sim: Simulator, req: Request) -> dict[str, Any]:
    """Update a record's ``rrtype``, ``rrdata``, ``ttl`` (admin)."""
    record = _record(sim, req)
    if not req.is_admin:
        raise admin_only()
    form = req.form
    rrtype = (form.get("rrtype") or record.rrtype).upper()
    rrdata = form.get("rrdata") or record.rrdata
    _check(sim.state, record.dnsresource_id, rrtype, rrdata, record)
    record.rrtype, record.rrdata = rrtype, rrdata
    ttl = form.get("ttl")
    if ttl and ttl.isdigit():
        record.ttl = int(ttl)
    return dns_data_json(sim.state, record)


@record_res.op("DELETE")
def delete_record(sim: Simulator, req: Request) -> Response:
    """Delete a record; a DNS resource left with neither records nor addresses goes too (admin)."""
    record = _record(sim, req)
    if not req.is_admin:
        raise admin_only()
    state = sim.state
    del state.dns_data[record.id]
    owner = state.dns_resources.get(record.dnsresource_id)
    if (
        owner is not None
        and not owner.ips
        and not any(d.dnsresource_id == owner.id for d in state.dns_data.values())
    ):
        del state.dns_resources[owner.id]
    return Response(204, b"", "text/plain")


def implicit_records(sim: Simulator, domain_ids: set[int] | None, name: str | None) -> list[dict[str, Any]]:
    """``DNSResourcesQuerySet._generate_synthetic_rrdata``: one id -1 resource per node name with addresses,
    its A/AAAA data as ``resource_records`` (and ``ip_addresses`` null)."""
    state = sim.state
    users = {u: n for n, u in enumerate(sim.auth.users, start=1)}
    out = []
    for m in state.machines.values():
        ips = [i.ip for i in m.interfaces if i.ip]
        if (
            not ips
            or (domain_ids is not None and m.domain_id not in domain_ids)
            or (name and m.hostname != name)
        ):
            continue
        domain = state.domains[m.domain_id]
        out.append(
            {
                "id": -1,
                "fqdn": f"{m.hostname}.{domain.name}",
                "address_ttl": None,
                "ip_addresses": None,
                "resource_records": [
                    {
                        "system_id": m.system_id,
                        "node_type": 0,
                        "user_id": users.get(m.owner or ""),
                        "dnsresource_id": None,
                        "ttl": None,
                        "rrtype": "AAAA" if ":" in ip else "A",
                        "rrdata": ip,
                        "dnsdata_id": None,
                    }
                    for ip in ips
                ],
                "resource_uri": "/MAAS/api/2.0/dnsresources/-1/",
            }
        )
    return out


__all__ = ["RESOURCES", "dns_resource_fqdn", "implicit_records"]
