"""IP addresses outside machines' links: ``ipaddresses/`` (USER_RESERVED addresses), ``reservedips/`` (MAC
pins) and ``ipranges/`` (read-only) (M ``api/ip_addresses.py``, ``api/reservedip.py``, ``api/ipranges.py``,
``forms/reservedip.py``, ``models/staticipaddress.py``).

A reserved address is a row in use (``State.used_ips``): no machine gets it, and ``link_subnet`` with it is
404 ``IP address is already in use.``. A DNS resource naming an address no row has makes such a row too
(``catalog._address_rows``), and deleting the resource deletes the rows only it held. A ``reservedips/`` entry
is not a row: it pins the address to a MAC for ``State.claim_auto_ips`` and survives release. With
``hostname``, reserve adds the address to that DNS resource, creating it (default domain, or the domain after
the first dot); releasing the address takes it out of every DNS resource.

Not modelled: ``release`` with ``discovered`` (the simulator has no observed addresses); an ``ipaddresses/``
reservation's ``mac`` makes no ``unknown``-type interface of its own (the MAC is kept on the reservation and
shown as one ``interface_set`` entry).
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.forms import FormError, parse_bool
from capmaas_dev.simulator.http import (
    HttpError,
    Request,
    Response,
    admin_only,
    bad_request,
    forbidden,
    not_found,
    not_found_text,
    unavailable,
)
from capmaas_dev.simulator.models import DnsResource, Interface, IpRange, ReservedIp, Subnet, UserReservedIp
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import API, interface_json, subnet_json
from capmaas_dev.simulator.state import State

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

RESOURCES: list[Resource] = []
ipaddresses_res = resource(RESOURCES, "IPAddressesHandler", "ipaddresses/")
reservedips_res = resource(RESOURCES, "ReservedIpsHandler", "reservedips/")
reservedip_res = resource(RESOURCES, "ReservedIpHandler", "reservedips/{id}/")
ipranges_res = resource(RESOURCES, "IPRangesHandler", "ipranges/")
iprange_res = resource(RESOURCES, "IPRangeHandler", "ipranges/{id}/")
#: ``IPADDRESS_TYPE`` codes and their ``IPADDRESS_TYPE_CHOICES`` names (M ``maasserver/enum.py``).
AUTO, STICKY, USER_RESERVED = 0, 1, 4
TYPE_NAMES = {AUTO: "Automatic", STICKY: "Static", USER_RESERVED: "User reserved"}
CREATED = "2025-01-01T00:00:00.000"
MAC = re.compile(r"^([0-9a-fA-F]{1,2}[:.-]?){5}[0-9a-fA-F]{1,2}$")
NO_CONTENT = Response(204, b"", "text/plain")
IN_DYNAMIC_RANGE = (
    "IP address {ip} belongs to an existing dynamic range. To reserve this IP address, a MAC address is "
    "required. (Create a device instead.)"
)
RELEASE_REFUSED = (
    "IP address {ip} does not exist, is not the correct type of address, or does not belong to the "
    "requesting user.\nIf you are sure you want to release this address, use force=true as a MAAS "
    "administrator."
)
IMMUTABLE = (
    "The ip, mac_address and the subnet of a reserved IP are immutable. Delete the entry and recreate it."
)


def _bool(req: Request, key: str) -> bool:
    try:
        return parse_bool(req.data, key)
    except FormError as exc:
        raise bad_request(str(exc)) from None


def _mac(value: str) -> str:
    """``normalise_macaddress``: lower case, colon-separated, two digits a group."""
    parts = re.split(r"[:.-]", value.lower())
    if len(parts) != 6:
        digits = "".join(parts)
        parts = [digits[i : i + 2] for i in range(0, 12, 2)]
    return ":".join(p.zfill(2) for p in parts)


def _valid_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def subnet_by_specifier(state: State, key: str) -> Subnet | None:
    """``Subnet.objects.get_object_by_specifiers_or_raise``, for the specifiers a provider uses: an id, a
    CIDR or a name, bare or as ``id:``/``cidr:``/``name:``, and ``ip:<address>`` (the subnet holding it)."""
    kind, _, value = key.partition(":") if re.match(r"^(id|cidr|name|ip):", key) else ("", "", key)
    if kind == "ip":
        return state.subnet_for_ip(value) if _valid_ip(value) else None
    for s in state.subnets.values():
        if (kind in ("", "id") and value == str(s.id)) or (kind in ("", "cidr") and value == s.cidr):
            return s
        if kind in ("", "name") and value == s.name:
            return s
    return None


# -- ipaddresses/ -----------------------------------------------------------------------------------------
def _owner_json(sim: Simulator, username: str | None) -> dict[str, object] | None:
    user = sim.auth.users.get(username or "")
    return user.to_json() if user is not None else None


def _address_json(
    sim: Simulator,
    ip: str,
    alloc_type: int,
    owner: str | None,
    interfaces: list[dict[str, Any]],
) -> dict[str, Any]:
    subnet = sim.state.subnet_for_ip(ip)
    return {
        "alloc_type": alloc_type,
        "alloc_type_name": TYPE_NAMES[alloc_type],
        "created": CREATED,
        "ip": ip,
        "owner": _owner_json(sim, owner),
        "interface_set": interfaces,
        "subnet": subnet_json(subnet) if subnet else None,
        "resource_uri": f"{API}/ipaddresses/",
    }


def _reservation_json(sim: Simulator, r: UserReservedIp) -> dict[str, Any]:
    nics = []
    if r.mac:
        nics.append({"id": r.id, "name": "eth0", "type": "unknown", "mac_address": r.mac, "links": []})
    return _address_json(sim, r.ip, USER_RESERVED, r.owner, nics)


def _add_to_dns(sim: Simulator, req: Request, hostname: str, ip: str) -> None:
    """``DNSResource.objects.get_or_create(name, domain)`` then add the address."""
    state = sim.state
    name, _, domain_name = hostname.partition(".")
    if domain_name:
        domain = state.domain_by_name(domain_name)
        if domain is None:
            raise not_found("Domain")
        domain_id = domain.id
    else:
        domain_id = state.default_domain_id
    record = next(
        (r for r in state.dns_resources.values() if r.name == name and r.domain_id == domain_id), None
    )
    if record is None:
        record = DnsResource(state.new_id("dnsresource"), name, domain_id)
        state.dns_resources[record.id] = record
    if ip not in record.ips:
        record.ips.append(ip)


def _node_of_mac(sim: Simulator, mac: str) -> str | None:
    for m in sim.state.machines.values():
        if any(i.mac_address.lower() == mac for i in m.interfaces):
            return m.hostname
    for d in sim.state.devices.values():
        if any(i.mac_address.lower() == mac for i in d.interfaces):
            return d.hostname
    return None


@ipaddresses_res.op("POST", "reserve")
def reserve(sim: Simulator, req: Request) -> dict[str, Any]:
    """Reserve an address for use outside MAAS (USER_RESERVED, owned by the caller): ``ip`` (or
    ``ip_address``) or a free one of ``subnet``; ``hostname`` adds it to a DNS resource."""
    form, state = req.form, sim.state
    ip = form.get("ip") or form.get("ip_address") or None
    subnet_key = form.get("subnet") or None
    hostname = form.get("hostname") or None
    mac = form.get("mac") or None
    errors: dict[str, list[str]] = {}
    if ip is not None and not _valid_ip(ip):
        errors["ip_address"] = ["Enter a valid IPv4 or IPv6 address."]
    if mac is not None and not MAC.match(mac):
        errors["mac_address"] = [f"'{mac}' is not a valid MAC address."]
    if errors:
        raise bad_request(errors)
    if ip is not None:
        ip = str(ipaddress.ip_address(ip))
        subnet = state.subnet_for_ip(ip)
        if subnet is None:
            raise bad_request(f"No known subnet for IP address: {ip}.")
    elif subnet_key is not None:
        subnet = subnet_by_specifier(state, subnet_key)
        if subnet is None:
            raise bad_request(f"Unable to identify subnet: {subnet_key}.")
    else:
        raise bad_request("Must supply either the 'subnet' or the 'ip' parameter.")
    # _claim_ip: a dynamic-range address is refused whether or not a MAC was given (the check ignores it).
    if ip is not None and state.range_for(subnet, ip, "dynamic") is not None:
        raise forbidden(IN_DYNAMIC_RANGE.format(ip=ip))
    if mac is not None:
        mac = _mac(mac)
        host = _node_of_mac(sim, mac)
        if host is not None:
            raise bad_request(
                f"MAC address {mac} already belongs to {host}. Use of the interface API is required, for an "
                "interface that belongs to a node."
            )
    if ip is None:
        ip = state.free_ip(subnet)
        if ip is None:
            raise unavailable(f"No more IPs available in subnet: {subnet.cidr}.")
    elif mac is None:  # StaticIPAddressManager.allocate_new with a requested address
        if ip in state.used_ips:
            raise not_found_text(f"The IP address {ip} is already in use.")
        reserved = state.range_for(subnet, ip, "reserved")
        if reserved is not None:
            raise not_found_text(
                f"{ip} is within the reserved range from {reserved.start_ip} to {reserved.end_ip}"
            )
    elif ip in state.used_ips:  # Interface._link_subnet_static for the MAC's unknown interface
        raise not_found_text("IP address is already in use.")
    if hostname:
        _add_to_dns(sim, req, hostname, ip)
    owner = req.user.username if req.user else ""
    row = UserReservedIp(state.new_id("staticipaddress"), ip, subnet.id, owner, mac)
    state.user_reserved[ip] = row
    state.used_ips.add(ip)
    return _reservation_json(sim, row)


def _machine_row(sim: Simulator, ip: str) -> tuple[Interface, list[Interface]] | None:
    """The machine or device interface holding ``ip`` (a STICKY or AUTO row), with its node's interfaces."""
    nics: list[list[Interface]] = [m.interfaces for m in sim.state.machines.values()]
    nics += [d.interfaces for d in sim.state.devices.values()]
    for interfaces in nics:
        for i in interfaces:
            if i.ip == ip:
                return i, interfaces
    return None


@ipaddresses_res.op("POST", "release")
def release(sim: Simulator, req: Request) -> Response:
    """Release the caller's reservation of ``ip``; ``force`` (admin) releases any address, unlinking a
    machine's."""
    form, state = req.form, sim.state
    ip = form.get("ip")
    if ip is None:
        raise bad_request("No provided ip!")
    force = _bool(req, "force")
    if force and not req.is_admin:
        raise forbidden("Force-releasing an IP address requires admin privileges.")
    if not _valid_ip(ip):
        raise bad_request({"ip": ["Enter a valid IPv4 or IPv6 address."]})
    row = state.user_reserved.get(ip)
    username = req.user.username if req.user else ""
    if not force:
        if row is None or row.owner != username:
            raise bad_request(RELEASE_REFUSED.format(ip=ip))
    elif row is None:
        held = _machine_row(sim, ip)
        if held is None:
            raise bad_request(f"IP address {ip} does not exist.")
        iface, _ = held
        iface.subnet_id, iface.ip, iface.auto, iface.mode = None, None, False, None  # unlink_ip_address
        state.used_ips.discard(ip)
        state.invalidate_all()
        return NO_CONTENT
    del state.user_reserved[ip]
    state.used_ips.discard(ip)
    for record in state.dns_resources.values():
        if ip in record.ips:
            record.ips.remove(ip)
    return NO_CONTENT


@ipaddresses_res.op("GET")
def list_addresses(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """The caller's reserved addresses; ``all`` (admin) every address with its type, ``owner`` (admin) one
    user's; ``ip`` narrows to one address."""
    q, state = req.query, sim.state
    show_all = _bool(req, "all")
    ip, owner = q.get("ip"), q.get("owner")
    if ip is not None and not _valid_ip(ip):
        raise bad_request("Parameter 'ip' must contain an IP address.")
    if show_all and not req.is_admin:
        raise forbidden("Listing all IP addresses requires admin privileges.")
    if owner is not None and not req.is_admin:
        raise forbidden("Listing another user's IP addresses requires admin privileges.")
    username = req.user.username if req.user else ""
    who = owner if owner is not None else (None if show_all else username)
    out = [
        _reservation_json(sim, r)
        for r in sorted(state.user_reserved.values(), key=lambda r: r.id)
        if (who is None or r.owner == who) and (ip is None or r.ip == ip)
    ]
    if show_all and owner is None:  # machines' STICKY and AUTO addresses have no user
        for m in state.machines.values():
            for i in m.interfaces:
                if i.ip and (ip is None or i.ip == ip):
                    kind = AUTO if i.auto else STICKY
                    out.append(_address_json(sim, i.ip, kind, None, [interface_json(state, m, i)]))
    return out


# -- reservedips/ -----------------------------------------------------------------------------------------
def reserved_ip_json(state: State, r: ReservedIp) -> dict[str, Any]:
    return {
        "id": r.id,
        "ip": r.ip,
        "subnet": subnet_json(state.subnets[r.subnet_id]),
        "mac_address": r.mac_address,
        "comment": r.comment,
        "resource_uri": f"{API}/reservedips/{r.id}/",
    }


def _macs_holding(sim: Simulator, ip: str) -> set[str] | None:
    """``StaticIPAddress.get_mac_addresses`` of the row holding ``ip``, or None when no row holds it."""
    state = sim.state
    if ip not in state.used_ips:
        return None
    held = _machine_row(sim, ip)
    if held is not None:
        return {held[0].mac_address.lower()}
    row = state.user_reserved.get(ip)
    return {row.mac} if row is not None and row.mac else set()


def _reserved_ip_form(sim: Simulator, req: Request) -> ReservedIp:
    """``ReservedIPForm`` for a new entry: field checks in field order, then ``clean``, then uniqueness."""
    form, state = req.form, sim.state
    errors: dict[str, list[str]] = {}
    raw_ip, raw_mac = form.get("ip") or "", form.get("mac_address") or ""
    ip: str | None = None
    if not raw_ip:
        errors["ip"] = ["This field is required."]
    elif not _valid_ip(raw_ip):
        errors["ip"] = ["Enter a valid IPv4 or IPv6 address."]
    else:
        ip = str(ipaddress.ip_address(raw_ip))
        macs = _macs_holding(sim, ip)
        if macs is not None and (not raw_mac or _mac(raw_mac) not in macs):
            errors["ip"] = [f"The ip {ip} is already in use by another machine."]
    mac: str | None = None
    if not raw_mac:
        errors["mac_address"] = ["This field is required."]
    elif not MAC.match(raw_mac):
        errors["mac_address"] = [f"'{raw_mac}' is not a valid MAC address."]
    else:
        mac = _mac(raw_mac)
    subnet: Subnet | None = None
    subnet_key = form.get("subnet") or ""
    if subnet_key:
        subnet = subnet_by_specifier(state, subnet_key)
        if subnet is None:
            errors["subnet"] = ["Select a valid choice. That choice is not one of the available choices."]
    if ip is not None and "subnet" not in errors:
        subnet = subnet or state.subnet_for_ip(ip)
        if subnet is None:
            errors["subnet"] = [f"There is no subnet for {ip}. Create the subnet and try again."]
        else:
            network = ipaddress.ip_network(subnet.cidr, strict=False)
            address = ipaddress.ip_address(ip)
            if address not in network:
                errors.setdefault("ip", []).append(f"{ip} is not part of the subnet.")
            elif address == network.network_address:
                errors.setdefault("ip", []).append("The network address cannot be a reserved IP.")
            elif address == network.broadcast_address:
                errors.setdefault("ip", []).append("The broadcast address cannot be a reserved IP.")
            else:
                dynamic: IpRange | None = state.range_for(subnet, ip, "dynamic")
                if dynamic is not None:
                    errors["ip"] = [
                        f"The reserved IP {ip} must be outside the dynamic range {dynamic.start_ip} - "
                        f"{dynamic.end_ip}."
                    ]
    if "ip" not in errors and any(r.ip == ip for r in state.reserved_ips.values()):
        errors["ip"] = ["Reserved IP with this IP address already exists."]
    if (
        not errors
        and subnet is not None
        and any(r.mac_address == mac and r.subnet_id == subnet.id for r in state.reserved_ips.values())
    ):
        errors["__all__"] = ["Reserved IP with this MAC address and Subnet already exists."]
    if errors:
        raise bad_request(errors)
    assert ip is not None
    assert mac is not None
    assert subnet is not None
    return ReservedIp(state.new_id("reservedip"), ip, subnet.id, mac, form.get("comment") or "")


def _reserved_ip(sim: Simulator, req: Request) -> ReservedIp:
    key = req.params["id"]
    entry = sim.state.reserved_ips.get(int(key)) if key.isdigit() else None
    if entry is None:
        raise not_found("ReservedIP")
    return entry


@reservedips_res.op("GET")
def list_reserved_ips(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """Every reserved IP (any user)."""
    return [reserved_ip_json(sim.state, r) for _, r in sorted(sim.state.reserved_ips.items())]


@reservedips_res.op("POST")
def create_reserved_ip(sim: Simulator, req: Request) -> dict[str, Any]:
    """Pin ``ip`` to ``mac_address`` (``subnet`` inferred from the IP when omitted; admin)."""
    if not req.is_admin:
        raise admin_only()
    entry = _reserved_ip_form(sim, req)
    sim.state.reserved_ips[entry.id] = entry
    return reserved_ip_json(sim.state, entry)


@reservedip_res.op("GET")
def read_reserved_ip(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a reserved IP by id."""
    return reserved_ip_json(sim.state, _reserved_ip(sim, req))


@reservedip_res.op("PUT")
def update_reserved_ip(sim: Simulator, req: Request) -> dict[str, Any]:
    """Change a reserved IP's ``comment`` (admin); ``ip``, ``mac_address`` and ``subnet`` are immutable
    (as in MAAS, a ``subnet`` sent at all counts as a change: the form compares its text with the id)."""
    if not req.is_admin:
        raise admin_only()
    entry = _reserved_ip(sim, req)
    form = req.form
    ip, mac = form.get("ip"), form.get("mac_address")
    if (
        (ip is not None and ip != entry.ip)
        or (mac is not None and mac != entry.mac_address)
        or "subnet" in form
    ):
        raise bad_request({"__all__": [IMMUTABLE]})
    if "comment" in form:
        entry.comment = form.get("comment") or ""
    return reserved_ip_json(sim.state, entry)


@reservedip_res.op("DELETE")
def delete_reserved_ip(sim: Simulator, req: Request) -> Response:
    """Delete a reserved IP (admin); an address already given to a deployed NIC stays until release."""
    if not req.is_admin:
        raise admin_only()
    entry = _reserved_ip(sim, req)
    del sim.state.reserved_ips[entry.id]
    return NO_CONTENT


# -- ipranges/ --------------------------------------------------------------------------------------------
def ip_range_json(sim: Simulator, r: IpRange) -> dict[str, Any]:
    return {
        "id": r.id,
        "type": r.type,
        "start_ip": r.start_ip,
        "end_ip": r.end_ip,
        "comment": r.comment,
        "user": sim.admin.to_json(),  # the inventory's ranges are the admin's
        "subnet": subnet_json(sim.state.subnets[r.subnet_id]),
        "resource_uri": f"{API}/ipranges/{r.id}/",
    }


@ipranges_res.op("GET")
def list_ip_ranges(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """Every IP range (dynamic and reserved) of every subnet."""
    return [ip_range_json(sim, r) for _, r in sorted(sim.state.ip_ranges.items())]


@iprange_res.op("GET")
def read_ip_range(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read an IP range by id."""
    key = req.params["id"]
    found = sim.state.ip_ranges.get(int(key)) if key.isdigit() else None
    if found is None:
        raise not_found("IPRange")
    return ip_range_json(sim, found)


__all__ = ["RESOURCES", "HttpError", "reserved_ip_json", "subnet_by_specifier"]
