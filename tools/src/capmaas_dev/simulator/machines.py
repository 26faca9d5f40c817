"""``machines/`` and ``machines/{system_id}/``: MAAS 3.7's MachinesHandler and MachineHandler."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator import constraints
from capmaas_dev.simulator.forms import FormData, parse_bool
from capmaas_dev.simulator.http import (
    HttpError,
    Request,
    Response,
    admin_only,
    bad_request,
    conflict,
    forbidden,
    json_response,
    not_found,
    raw_json_response,
)
from capmaas_dev.simulator.models import ABORTABLE, RELEASABLE, TRANSITIONS, Machine, NodeStatus
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import machine_bytes, machine_dict, machines_bytes

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

S = NodeStatus
RESOURCES: list[Resource] = []
machines_res = resource(
    RESOURCES,
    "MachinesHandler",
    "machines/",
    anon_name="AnonMachinesHandler",
    anon_methods=frozenset({"GET", "POST"}),
)
machine_res = resource(RESOURCES, "MachineHandler", "machines/{system_id}/")
SERIES_VERSIONS = {
    "focal": "20.04",
    "jammy": "22.04",
    "noble": "24.04",
    "bionic": "18.04",
    "oracular": "24.10",
}
MAAS4_REMOVED = ("install_kvm", "register_vmhost", "install_rackd")


# -- helpers ----------------------------------------------------------------------------------------------
def visible(req: Request, m: Machine) -> bool:
    """Without RBAC a non-admin sees unowned machines and their own."""
    return req.is_admin or m.owner is None or (req.user is not None and m.owner == req.user.username)


def get_machine(sim: Simulator, req: Request, *, edit: bool = False) -> Machine:
    m = sim.state.machines.get(req.params["system_id"])
    if m is None:
        raise not_found("Machine")
    if not visible(req, m):
        raise forbidden()
    if edit and m.locked and not req.is_admin:
        raise forbidden()
    return m


def machine_response(sim: Simulator, m: Machine) -> Response:
    return raw_json_response(machine_bytes(sim.state, m, sim.maas4))


def bool_opt(form: FormData, key: str) -> bool:
    try:
        return parse_bool(form, key)
    except ValueError as exc:
        raise bad_request(str(exc)) from None


def params_of(req: Request) -> FormData:
    """Constraint parameters: the body, or the query string when the client put them there."""
    if len(req.form):
        return req.form
    return FormData((k, v) for k, v in req.query.items() if k != "op" and not k.startswith("oauth_"))


def check_maas4(sim: Simulator, form: FormData) -> None:
    if sim.maas4:
        for key in MAAS4_REMOVED:
            if bool_opt(form, key):
                raise bad_request(f"Support for {key} allocation parameter has been removed.")


# -- collection -------------------------------------------------------------------------------------------
@machines_res.op("GET")
def list_machines(sim: Simulator, req: Request) -> Response:
    """List machines, sorted by id, filtered as ReadNodesForm filters them."""
    c = constraints.parse(sim.state, req.query, acquire=False)
    state = sim.state
    candidates: list[Machine] | None = None
    if c.system_ids:
        candidates = [m for sid in c.system_ids if (m := state.machines.get(sid)) is not None]
    elif c.agent_names:
        candidates = [m for a in set(c.agent_names) for m in state.by_agent.get(a, {}).values()]
    elif c.hostnames:
        candidates = [m for h in c.hostnames if (m := state.by_hostname.get(h)) is not None]
    elif c.statuses is not None:
        candidates = [m for s in c.statuses for m in state.by_status[s].values()]
    if candidates is None:
        result = [m for m in state.machines.values() if visible(req, m) and c.matches(m)]
    else:
        result = sorted((m for m in candidates if visible(req, m) and c.matches(m)), key=lambda m: m.id)
    return raw_json_response(machines_bytes(state, result, sim.maas4))


@machines_res.op("GET", "list_allocated")
def list_allocated(sim: Simulator, req: Request) -> Response:
    """The caller's machines in status Allocated."""
    ids = set(req.query.getlist("id"))
    username = req.user.username if req.user else None
    result = [
        m
        for m in sim.state.by_status[S.ALLOCATED].values()
        if m.owner == username and (not ids or m.system_id in ids)
    ]
    result.sort(key=lambda m: m.id)
    return raw_json_response(machines_bytes(sim.state, result, sim.maas4))


@machines_res.op("GET", "is_registered", anonymous=True)
@machines_res.op("GET", "is_registered")
def is_registered(sim: Simulator, req: Request) -> bool:
    """Whether a machine with the given MAC address exists."""
    mac = (req.query.get("mac_address") or "").lower()
    if not mac:
        raise bad_request({"mac_address": ["This field is required."]})
    return any(i.mac_address.lower() == mac for m in sim.state.machines.values() for i in m.interfaces)


@machines_res.op("POST", "allocate")
def allocate(sim: Simulator, req: Request) -> Response:
    """Allocate the cheapest READY machine matching the constraints (atomic: no await in here)."""
    form = params_of(req)
    check_maas4(sim, form)
    c = constraints.parse(sim.state, form, acquire=True)
    dry_run = bool_opt(form, "dry_run")
    for key in ("verbose", "bridge_all", "bridge_stp", "install_kvm", "register_vmhost"):
        bool_opt(form, key)
    username = req.user.username if req.user else ""
    chosen: Machine | None = None
    for m in sim.state.ready_by_cost():
        if m.locked or (m.owner is not None and m.owner != username):
            continue
        if c.matches(m):
            chosen = m
            break
    if chosen is None and not c.system_ids and not sim.maas4:
        chosen = sim.compose_for_allocate(c)
    if chosen is None:
        raise conflict(no_match_message(form, c))
    by_type: dict[str, Any] = {}
    if c.storage:
        by_type["storage"] = constraints.match_storage(chosen, c.storage)
    if c.interfaces:
        by_type["interfaces"] = constraints.match_interfaces(sim.state, chosen, c.interfaces)
    if not dry_run:
        sim.acquire(chosen, username, form.get("agent_name") or "", form.get("comment"))
    body = machine_dict(sim.state, chosen, sim.maas4)
    body["constraints_by_type"] = by_type
    return json_response(body)


def no_match_message(form: FormData, c: constraints.Constraints) -> str:
    if c.system_ids:
        return f"No machine with system ID {c.system_ids[0]} available."
    desc = c.describe()
    if not desc:
        return "No machine available."
    grouped = [(k, v) for k, v in form.grouped(exclude=("op",)) if not k.startswith("oauth_")]
    return f'No available machine matches constraints: {grouped} (resolved to "{desc}")'


#: MAAS's built-in release script and its tags (``builtin_scripts/release_scripts/maas_wipe.py``), plus the
#: ``none`` choice of ``ReleaseForm``'s ``scripts`` field; admins may upload more (not modelled).
WIPE_CHOICES = frozenset({"wipe-disks", "wipe", "disk", "storage"})
RELEASE_SCRIPT_CHOICES = WIPE_CHOICES | {"none"}


def release_erases(form: FormData) -> bool:
    """``ReleaseForm``: ``scripts`` (comma-separated, or repeated) must name release scripts by name or tag,
    else 400 in Django's ``MultipleChoiceField`` words; erase flags add ``wipe-disks``. True when the
    release wipes the disks (Disk erasing)."""
    scripts = [p for v in form.getlist("scripts") for p in v.split(",")]
    bad = next((v for v in scripts if v not in RELEASE_SCRIPT_CHOICES), None)
    if bad is not None:
        raise bad_request({"scripts": [f"Select a valid choice. {bad} is not one of the available choices."]})
    flags = any(bool_opt(form, k) for k in ("erase", "secure_erase", "quick_erase"))
    return flags or any(v in WIPE_CHOICES for v in scripts)


@machines_res.op("POST", "release")
def release_many(sim: Simulator, req: Request) -> list[str]:
    """Release several machines; READY ones are skipped; returns the ids actually released."""
    ids = list(dict.fromkeys(req.form.getlist("machines")))
    erase = release_erases(req.form)
    unknown = [sid for sid in ids if sid not in sim.state.machines]
    if unknown:
        raise bad_request(f"Unknown machine(s): {', '.join(unknown)}.")
    machines = [sim.state.machines[sid] for sid in ids]
    denied = [m.system_id for m in machines if not can_edit(req, m)]
    if denied:
        listing = ", ".join(denied)
        raise forbidden(
            f"You don't have the required permission to release the following machine(s): {listing}."
        )
    bad = [m for m in machines if m.status is not S.READY and m.status not in RELEASABLE]
    if bad:
        listing = ", ".join(f"{m.system_id} ('{m.status.label}')" for m in bad)
        raise conflict(f"Machine(s) cannot be released in their current state: {listing}.")
    released = []
    for m in machines:
        if m.status is not S.READY:
            sim.start_release(m, erase)
            released.append(m.system_id)
    return released


def editable_machine(sim: Simulator, req: Request) -> Machine:
    """The machine of a write: visible, not locked (unless admin), and unowned or the caller's (or admin)."""
    m = get_machine(sim, req, edit=True)
    if not can_edit(req, m):
        raise forbidden()
    return m


def can_edit(req: Request, m: Machine) -> bool:
    if req.is_admin:
        return True
    return not m.locked and (m.owner is None or (req.user is not None and m.owner == req.user.username))


# -- one machine ------------------------------------------------------------------------------------------
@machine_res.op("GET")
def read_machine(sim: Simulator, req: Request) -> Response:
    """Read a machine."""
    return machine_response(sim, get_machine(sim, req))


@machine_res.op("PUT")
def update_machine(sim: Simulator, req: Request) -> Response:
    """Update a machine (admin)."""
    m = get_machine(sim, req)
    if not req.is_admin:
        raise forbidden()
    form = req.form
    state = sim.state
    errors: dict[str, list[str]] = {}
    hostname = form.get("hostname")
    if hostname and hostname != m.hostname:
        if hostname in state.by_hostname:
            errors["hostname"] = [f'Node with hostname "{hostname}" already exists']
        else:
            state.rename(m, hostname)
    for key in ("zone", "pool"):
        value = form.get(key)
        if value:
            found = state.zone_by_name(value) if key == "zone" else state.pool_by_name(value)
            if found is None:
                errors[key] = [f"Select a valid choice. {value} is not one of the available choices."]
            else:
                setattr(m, f"{key}_id", found.id)
    for key in ("cpu_count", "memory"):
        value = form.get(key)
        if value:
            try:
                number = int(value)
            except ValueError:
                errors[key] = ["Enter a whole number."]
                continue
            state.resize(m, **{key: number})
    if "swap_size" in form:  # MachineForm.clean_swap_size: bytes, or a K/M/G/T (decimal) suffix; "" clears it
        try:
            m.swap_size = parse_swap_size(form.get("swap_size") or "")
        except ValueError:
            errors["swap_size"] = [f"Invalid size for swap: {form.get('swap_size')}"]
    for key in ("description", "architecture", "power_type"):
        value = form.get(key)
        if value is not None:
            setattr(m, key, value)
    if errors:
        raise bad_request(errors)
    m.cached_json = None
    return machine_response(sim, m)


@machine_res.op("DELETE")
def delete_machine(sim: Simulator, req: Request) -> Response:
    """Delete a machine (admin); a composed VM is decomposed and its host gets the resources back."""
    m = get_machine(sim, req)
    if not req.is_admin:
        raise forbidden()
    sim.remove_hosted_vm_hosts(m, force=bool_opt(req.query, "force"))
    sim.delete_machine(m)
    return Response(204, b"", "text/plain")


@machine_res.op("POST", "deploy")
def deploy(sim: Simulator, req: Request) -> Response:
    """Deploy an operating system; a READY machine is allocated to the caller first."""
    m = editable_machine(sim, req)
    form = req.form
    check_maas4(sim, form)
    if bool_opt(form, "install_rackd"):
        raise bad_request("Deploying a machine as a rackd has been disabled and it's not supported anymore.")
    install_kvm, register = bool_opt(form, "install_kvm"), bool_opt(form, "register_vmhost")
    # A machine without disks can only run from memory: MAAS deploys it ephemerally (``is_diskless``).
    ephemeral = bool_opt(form, "ephemeral_deploy") or not m.disks
    hw_sync = bool_opt(form, "enable_hw_sync")
    if (install_kvm or register) and not req.is_admin:
        raise forbidden("Only administratros can deploy VM hosts")
    if (install_kvm or register) and ephemeral:
        raise bad_request("A machine can not be a VM host if it is deployed to memory.")
    osystem, series = resolve_distro(sim, form.get("distro_series") or "")
    check_on_network(sim, m)
    username = req.user.username if req.user else ""
    if m.status is S.READY:
        if m.owner is not None and m.owner != username:
            raise conflict("Can't allocate a machine belonging to another user.")
        sim.acquire(m, username, form.get("agent_name") or "", form.get("comment"))
    if S.DEPLOYING not in TRANSITIONS[m.status]:
        raise conflict(f"Can't deploy a machine that is in the '{m.status.label}' state")
    if form.get("agent_name"):
        sim.state.set_agent(m, form.get("agent_name") or "")
    m.osystem, m.distro_series = osystem, series
    m.hwe_kernel = form.get("hwe_kernel") or default_kernel(osystem, series)
    m.ephemeral_deploy, m.enable_hw_sync = ephemeral, hw_sync
    m.install_kvm, m.register_vmhost = install_kvm, register
    m.user_data = decode_user_data(form.get("user_data"))
    sim.start_deploy(m)
    return machine_response(sim, m)


def default_kernel(osystem: str, series: str) -> str | None:
    """``validate_hwe_kernel`` without a kernel asked for: an Ubuntu series gets its GA kernel."""
    version = SERIES_VERSIONS.get(series)
    return f"ga-{version}" if osystem == "ubuntu" and version else None


def check_on_network(sim: Simulator, m: Machine) -> None:
    """``Node._start_deployment``: a machine with no interface linked to a subnet cannot deploy. MAAS raises
    it inside the deploy's transaction, so nothing of the request (the allocation, the series) is kept."""
    if not sim.state.has_network_link(m):
        raise bad_request({"network": ["Node must be configured to use a network"]})


def parse_swap_size(value: str) -> int | None:
    if value == "":
        return None
    factor = {"K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}.get(value[-1:], 1)
    return int(value[:-1] if factor > 1 else value) * factor


def decode_user_data(value: str | None) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        return value.encode()


def resolve_distro(sim: Simulator, value: str) -> tuple[str, str]:
    """``ubuntu/jammy``, ``jammy``, ``ubuntu/22.04`` or ``22.04`` -> (osystem, series)."""
    choices: dict[str, tuple[str, str]] = {}
    names = [b.name for b in sim.state.boot_resources.values()] or ["ubuntu/jammy", "ubuntu/noble"]
    for name in names:
        os_name, _, series = name.partition("/")
        if not series:
            os_name, series = "custom", name
        pair = (os_name, series)
        choices[f"{os_name}/{series}"] = pair
        choices.setdefault(series, pair)
        version = SERIES_VERSIONS.get(series)
        if version:
            choices[f"{os_name}/{version}"] = pair
            choices.setdefault(version, pair)
    if not value:
        default = "ubuntu/jammy" if "ubuntu/jammy" in choices else next(iter(choices))
        return choices[default]
    if value not in choices:
        listing = ", ".join(f"'{n}'" for n in ["", *sorted({f"{o}/{s}" for o, s in choices.values()})])
        raise bad_request(
            {"distro_series": [f"'{value}' is not a valid distro_series.  It should be one of: {listing}."]}
        )
    return choices[value]


@machine_res.op("POST", "release")
def release(sim: Simulator, req: Request) -> Response:
    """Release a machine; READY or RELEASING is a successful no-op."""
    m = editable_machine(sim, req)
    form = req.form
    erase = release_erases(form)
    force = bool_opt(form, "force")
    if m.status in (S.READY, S.RELEASING):
        return machine_response(sim, m)
    if m.status not in RELEASABLE:
        raise conflict(f"Machine cannot be released in its current state ('{m.status.label}').")
    sim.remove_hosted_vm_hosts(m, force=force)
    sim.release_log.append((m.system_id, erase))
    sim.start_release(m, erase)
    if m.system_id not in sim.state.machines:  # a dynamic (allocate-composed) VM is gone
        return json_response(machine_dict(sim.state, m, sim.maas4))
    return machine_response(sim, m)


@machine_res.op("POST", "power_on")
def power_on(sim: Simulator, req: Request) -> Response:
    """Power on; for an Allocated machine this starts a deployment."""
    m = editable_machine(sim, req)
    if m.owner is None:
        raise conflict("Can't start node: it hasn't been allocated.")
    if m.status is S.ALLOCATED:
        check_on_network(sim, m)
        if req.form.get("user_data"):
            m.user_data = decode_user_data(req.form.get("user_data"))
        if not m.osystem:
            m.osystem, m.distro_series = resolve_distro(sim, "")
        sim.start_deploy(m)
    else:
        # ``Node._start`` outside Allocated: a power ON workflow (never a cycle of a running machine), none at
        # all for ``manual`` power (its power_state stays); the answer is the machine either way.
        sim.power_action(m, "on")
        m.cached_json = None
    return machine_response(sim, m)


@machine_res.op("POST", "power_off")
def power_off(sim: Simulator, req: Request) -> Response:
    """Power off (``api/nodes.py`` ``power_off`` → ``Node._stop``): any status, no owner needed; the status
    (Deployed included) and the owner stay. ``stop_mode`` is not validated (only the IPMI driver reads it,
    ``soft`` or anything else = hard). A machine MAAS cannot stop (``manual`` power: ``can_be_stopped`` is
    false) gets no power action and the answer is JSON ``null``."""
    m = editable_machine(sim, req)
    if not sim.power_action(m, "off"):
        return json_response(None)
    m.cached_json = None
    return machine_response(sim, m)


@machine_res.op("GET", "query_power_state")
def query_power_state(sim: Simulator, req: Request) -> dict[str, str]:
    """The BMC's power state."""
    return {"state": get_machine(sim, req).power_state}


@machine_res.op("POST", "set_workload_annotations")
@machine_res.op("POST", "set_owner_data")
def set_workload_annotations(sim: Simulator, req: Request) -> Response:
    """Set (or, with an empty value, delete) workload annotations on a machine the caller owns."""
    m = get_machine(sim, req)
    if req.user is None or m.owner != req.user.username:
        raise conflict("Cannot set workload annotation: it hasn't been acquired.")
    for key in req.form:
        if key == "op":
            continue
        value = req.form.get(key) or ""
        if value:
            m.annotations[key] = value
        else:
            m.annotations.pop(key, None)
    m.cached_json = None
    return machine_response(sim, m)


@machine_res.op("POST", "mark_broken")
def mark_broken(sim: Simulator, req: Request) -> Response:
    """Mark broken; only the owner may (admins included)."""
    m = get_machine(sim, req, edit=True)
    if req.user is None or m.owner != req.user.username:
        raise forbidden()
    sim.mark_broken(m, req.form.get("comment") or req.form.get("error_description") or "")
    return machine_response(sim, m)


@machine_res.op("POST", "mark_fixed")
def mark_fixed(sim: Simulator, req: Request) -> Response:
    """Mark a broken machine fixed (admin)."""
    m = get_machine(sim, req)
    if not req.is_admin:
        raise admin_only()
    if m.status is not S.BROKEN:
        raise conflict("Can't mark a non-broken node as 'Ready'.")
    sim.mark_fixed(m)
    return machine_response(sim, m)


@machine_res.op("POST", "abort")
def abort(sim: Simulator, req: Request) -> Response:
    """Abort the current operation (deploying, erasing, commissioning, testing)."""
    m = editable_machine(sim, req)
    if m.status not in ABORTABLE:
        raise conflict(f"Cannot abort in current state: node {m.system_id} is in state {m.status.label}.")
    sim.abort(m)
    return machine_response(sim, m)


def unrecognised(req: Request) -> HttpError:
    return bad_request(f"Unrecognised signature: method={req.method} op={req.op}")
