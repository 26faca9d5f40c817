"""``devices/`` (M ``api/devices.py``) and ``account/`` (M ``api/account.py``: the caller's tokens)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.http import (
    JSON_UTF8,
    Request,
    Response,
    bad_request,
    forbidden,
    json_response,
    not_found,
)
from capmaas_dev.simulator.inventory import new_system_id
from capmaas_dev.simulator.models import Device, Interface
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import device_json

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

RESOURCES: list[Resource] = []
devices_res = resource(RESOURCES, "DevicesHandler", "devices/")
device_res = resource(RESOURCES, "DeviceHandler", "devices/{system_id}/")
account_res = resource(RESOURCES, "AccountHandler", "account/")
MAC = re.compile(r"^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$")
HOSTNAME = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$")
NO_CONTENT = Response(204, b"", "text/plain")


def _visible(req: Request, d: Device) -> bool:
    return req.is_admin or d.owner is None or (req.user is not None and d.owner == req.user.username)


@devices_res.op("GET")
def list_devices(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List devices, filtered by ``id``, ``hostname``, ``mac_address``, ``domain``, ``zone``."""
    q, state = req.query, sim.state
    ids, names = set(q.getlist("id")), set(q.getlist("hostname"))
    macs = {m.lower() for m in q.getlist("mac_address")}
    out = []
    for d in sorted(state.devices.values(), key=lambda d: d.id):
        if not _visible(req, d) or (ids and d.system_id not in ids) or (names and d.hostname not in names):
            continue
        if macs and not any(i.mac_address.lower() in macs for i in d.interfaces):
            continue
        if q.get("domain") and state.domains[d.domain_id].name != q.get("domain"):
            continue
        if q.get("zone") and state.zones[d.zone_id].name != q.get("zone"):
            continue
        out.append(device_json(state, d))
    return out


@devices_res.op("POST")
def create_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a device from ``mac_addresses`` (required), ``hostname``, ``domain``, ``parent`` and
    ``description`` (``DeviceWithMACsForm``); the caller owns it."""
    form, state = req.form, sim.state
    errors: dict[str, list[str]] = {}
    macs = [m for v in form.getlist("mac_addresses") for m in v.replace(",", " ").split()]
    if not macs:
        errors["mac_addresses"] = ["This field is required."]
    bad = [m for m in macs if not MAC.match(m)]
    if bad:
        errors["mac_addresses"] = [f"'{bad[0]}' is not a valid MAC address."]
    used = {i.mac_address.lower() for m in state.machines.values() for i in m.interfaces}
    used |= {i.mac_address.lower() for d in state.devices.values() for i in d.interfaces}
    taken = [m for m in macs if m.lower() in used]
    if taken and not bad:
        errors["mac_addresses"] = [f"MAC address {taken[0]} already in use."]
    hostname = form.get("hostname") or sim.petname()
    if not HOSTNAME.match(hostname):
        errors["hostname"] = [f"Invalid hostname: {hostname}"]
    elif hostname in state.by_hostname or any(d.hostname == hostname for d in state.devices.values()):
        errors["hostname"] = [f'Node with hostname "{hostname}" already exists']
    domain = state.domains.get(state.default_domain_id)
    if form.get("domain"):
        key = form.get("domain") or ""
        domain = state.domains.get(int(key)) if key.isdigit() else state.domain_by_name(key)
        if domain is None:
            errors["domain"] = ["Select a valid choice. That choice is not one of the available choices."]
    parent = form.get("parent") or None
    if parent and parent not in state.machines and parent not in state.devices:
        errors["parent"] = ["Select a valid choice. That choice is not one of the available choices."]
    if errors:
        raise bad_request(errors)
    assert domain is not None
    device = Device(
        id=state.new_id("machine"),
        system_id=_new_system_id(sim),
        hostname=hostname,
        domain_id=domain.id,
        zone_id=state.default_zone.id,
        owner=req.user.username if req.user else None,
        parent=parent,
        description=form.get("description") or "",
        interfaces=[
            Interface(state.new_id("interface"), f"eth{n}", mac, mode="link_up") for n, mac in enumerate(macs)
        ],
    )
    state.devices[device.system_id] = device
    return device_json(state, device)


def _new_system_id(sim: Simulator) -> str:
    while True:
        sid = new_system_id(sim.state, sim.rng)
        if sid not in sim.state.devices:
            return sid


def _device(sim: Simulator, req: Request, *, write: bool = False) -> Device:
    d = sim.state.devices.get(req.params["system_id"])
    if d is None:
        raise not_found("Device")
    if not _visible(req, d) or (write and not req.is_admin and d.owner != (req.user and req.user.username)):
        raise forbidden()
    return d


@device_res.op("GET")
def read_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a device."""
    return device_json(sim.state, _device(sim, req))


@device_res.op("PUT")
def update_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Update a device's hostname, description, domain or parent (owner or admin)."""
    d = _device(sim, req, write=True)
    form, state = req.form, sim.state
    if form.get("hostname"):
        d.hostname = form.get("hostname") or d.hostname
    if "description" in form:
        d.description = form.get("description") or ""
    if form.get("domain"):
        key = form.get("domain") or ""
        domain = state.domains.get(int(key)) if key.isdigit() else state.domain_by_name(key)
        if domain is None:
            raise bad_request(
                {"domain": ["Select a valid choice. That choice is not one of the available choices."]}
            )
        d.domain_id = domain.id
    if "parent" in form:
        d.parent = form.get("parent") or None
    return device_json(state, d)


@device_res.op("DELETE")
def delete_device(sim: Simulator, req: Request) -> Response:
    """Delete a device (owner or admin)."""
    d = _device(sim, req, write=True)
    del sim.state.devices[d.system_id]
    return NO_CONTENT


# -- account ----------------------------------------------------------------------------------------------
@account_res.op("GET", "list_authorisation_tokens")
def list_tokens(sim: Simulator, req: Request) -> Response:
    """The caller's tokens as ``[{name, token}]`` (``token`` is ``consumer:key:secret``)."""
    assert req.user is not None
    tokens = [{"name": t.name, "token": t.api_key} for t in sim.auth.user_tokens(req.user)]
    return json_response(tokens, content_type=JSON_UTF8)


@account_res.op("POST", "create_authorisation_token")
def create_token(sim: Simulator, req: Request) -> Response:
    """A new token for the caller."""
    assert req.user is not None
    t = sim.auth.create_token(req.user, req.form.get("name"))
    body = {"token_key": t.key, "token_secret": t.secret, "consumer_key": t.consumer_key, "name": t.name}
    return json_response(body, content_type=JSON_UTF8)


@account_res.op("POST", "delete_authorisation_token")
def delete_token(sim: Simulator, req: Request) -> Response:
    """Delete one of the caller's tokens (``token_key``)."""
    assert req.user is not None
    key = req.form.get("token_key")
    if not key:
        raise bad_request("No provided token_key!")
    if not sim.auth.delete_token(req.user, key):
        raise not_found("Token")
    return NO_CONTENT
