"""Bonds and VLAN interfaces on a machine (M ``api/interfaces.py`` ``create_bond``/``create_vlan``,
``forms/interface.py`` ``BondInterfaceForm``/``VLANInterfaceForm``, ``models/interface.py``).

Both ops need ``NodePermission.admin`` (a superuser, on an unlocked machine: owning it is not enough) and a
machine that is New, Ready, Failed testing, Allocated or Broken (409 otherwise). The answer is the new
interface; its one link is LINK_UP without a subnet (``Interface.ensure_link_up``: the simulator has no
discovered addresses), so the caller links it afterwards (``link_subnet``). Creating a bond clears every link
of its parents, STATIC ones included (``Interface._update_parents``); the parents keep their VLAN. Bonds and
VLAN interfaces are not ``acquired``: made on an Allocated machine, they survive its release.

Form errors are 400 JSON ``{field: [messages]}`` in MAAS's words; the bond's model checks that run at save
(only physical parents; a name taken on the node) come after the form's, as in MAAS.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.forms import FormData
from capmaas_dev.simulator.http import Request, bad_request
from capmaas_dev.simulator.models import FabricVid, Interface, Machine
from capmaas_dev.simulator.nodes import _editable_state, _may_admin, _node, interfaces_res
from capmaas_dev.simulator.router import Resource
from capmaas_dev.simulator.serialize import interface_json
from capmaas_dev.simulator.state import State

#: None of its own: its ops hang on another module's resources (``core`` imports it for them).
RESOURCES: list[Resource] = []

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

Errors = dict[str, list[str]]
#: ``INTERFACE_NAME_REGEXP`` and its message (M ``models/interface.py:72``, ``:555-565``).
NAME_RE = re.compile(r"^[\w\-_.:]{1,15}$")
NAME_MESSAGE = (
    "The interface name must be 1 to 15 characters long and can only contain alphanumeric characters, "
    "hyphens ('-'), underscores ('_'), periods ('.'), and colons (':')."
)
MAC_RE = re.compile(r"^([0-9a-fA-F]{1,2}[:.-]?){5}[0-9a-fA-F]{1,2}$")
#: ``BOND_*_CHOICES`` (M ``maasserver/enum.py:773-820``); the first of each is the form's ``initial``.
BOND_MODES = (
    "balance-rr",
    "active-backup",
    "balance-xor",
    "broadcast",
    "802.3ad",
    "balance-tlb",
    "balance-alb",
)
LACP_RATES = ("fast", "slow")
XMIT_HASH_POLICIES = ("layer2", "layer2+3", "layer3+4", "encap2+3", "encap3+4")
#: ``BondInterfaceForm``'s integer fields: (min, max, initial).
BOND_INTS: dict[str, tuple[int, int | None, int]] = {
    "bond_miimon": (0, None, 100),
    "bond_downdelay": (0, None, 0),
    "bond_updelay": (0, None, 0),
    "bond_num_grat_arp": (0, 255, 1),
}
MIN_MTU = 552  # "Linux doesn't allow lower than 552 for the MTU." (InterfaceForm.mtu)
INVALID_CHOICE = "Select a valid choice. That choice is not one of the available choices."


def node_label(m: Machine) -> str:
    """``Node.__str__``: ``system_id (hostname)``."""
    return f"{m.system_id} ({m.hostname})" if m.hostname else m.system_id


def _add(errors: Errors, key: str, message: str) -> None:
    errors.setdefault(key, []).append(message)


def _int(form: FormData, key: str, errors: Errors, low: int, high: int | None = None) -> int | None:
    """A Django ``IntegerField(min_value, max_value, required=False)``."""
    text = (form.get(key) or "").strip()
    if not text:
        return None
    if not re.fullmatch(r"[+-]?\d+", text):
        _add(errors, key, "Enter a whole number.")
        return None
    value = int(text)
    if value < low:
        _add(errors, key, f"Ensure this value is greater than or equal to {low}.")
    elif high is not None and value > high:
        _add(errors, key, f"Ensure this value is less than or equal to {high}.")
    return value


def _choice(form: FormData, key: str, choices: tuple[str, ...], errors: Errors) -> str | None:
    """A ``ChoiceField`` with MAAS's ``compose_invalid_choice_text`` message."""
    value = form.get(key) or ""
    if not value:
        return None
    if value not in choices:
        listing = ", ".join(f"'{c}'" for c in choices)
        _add(errors, key, f"'{value}' is not a valid {key}.  It should be one of: {listing}.")
        return None
    return value


def _parents(m: Machine, keys: list[str], errors: Errors) -> list[Interface]:
    """A ``ModelMultipleChoiceField`` over the node's interfaces, by id."""
    found: list[Interface] = []
    for key in keys:
        if not key.strip().isdigit():
            _add(errors, "parents", f"\u201c{key}\u201d is not a valid value.")
            return []
        match = next((i for i in m.interfaces if i.id == int(key)), None)
        if match is None:
            _add(errors, "parents", f"Select a valid choice. {key} is not one of the available choices.")
            return []
        if match not in found:
            found.append(match)
    return found


def _vlan(state: State, form: FormData, errors: Errors) -> FabricVid | None:
    """The ``vlan`` ``ModelChoiceField``: a VLAN's id (not its 802.1Q tag)."""
    key = form.get("vlan") or ""
    if not key:
        return None
    vlan = state.vlan_by_id(key)
    if vlan is None:
        _add(errors, "vlan", INVALID_CHOICE)
    return vlan


def _common_params(form: FormData, errors: Errors) -> dict[str, Any]:
    """``InterfaceForm.set_extra_parameters``: ``mtu`` and ``accept-ra`` when given."""
    params: dict[str, Any] = {}
    mtu = _int(form, "mtu", errors, MIN_MTU)
    if mtu is not None:
        params["mtu"] = mtu
    accept_ra = (form.get("accept_ra") or "").lower()
    if accept_ra in ("true", "1", "on", "yes", "false", "0", "off", "no"):
        params["accept-ra"] = accept_ra in ("true", "1", "on", "yes")
    return params


def _tags(form: FormData) -> list[str]:
    """The ``tags`` field (a Postgres array in a ``SimpleArrayField``): comma-separated."""
    return [t.strip() for t in (form.get("tags") or "").split(",") if t.strip()]


def _has_children(m: Machine, iface: Interface, kind: str | None = None) -> list[Interface]:
    return [c for c in m.interfaces if iface.name in c.parents and (kind is None or c.type == kind)]


def _clear_links(state: State, iface: Interface) -> None:
    """``Interface.clear_all_links``: every link goes, a STATIC address back to its subnet; the VLAN stays."""
    iface.vlan = state.iface_vlan(iface)
    if iface.ip:
        state.used_ips.discard(iface.ip)
    iface.subnet_id, iface.ip, iface.auto, iface.mode = None, None, False, None


@interfaces_res.op("POST", "create_bond")
def create_bond(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a bond of physical interfaces (``BondInterfaceForm``; admin)."""
    m = _node(sim, req)
    _may_admin(req, m)
    _editable_state(m, "create bond")
    form, state = req.form, sim.state
    errors: Errors = {}
    name = form.get("name") or ""
    if not name:
        _add(errors, "name", "This field is required.")
    elif not NAME_RE.match(name):
        _add(errors, "name", NAME_MESSAGE)
    mac = form.get("mac_address") or ""
    if mac and not MAC_RE.match(mac):
        _add(errors, "mac_address", f"'{mac}' is not a valid MAC address.")
    parents = _parents(m, form.getlist("parents"), errors)
    vlan = _vlan(state, form, errors)
    params = _common_params(form, errors)
    chosen = {
        "bond_mode": _choice(form, "bond_mode", BOND_MODES, errors),
        "bond_lacp_rate": _choice(form, "bond_lacp_rate", LACP_RATES, errors),
        "bond_xmit_hash_policy": _choice(form, "bond_xmit_hash_policy", XMIT_HASH_POLICIES, errors),
    }
    for key, (low, high, _) in BOND_INTS.items():
        chosen[key] = _int(form, key, errors, low, high)  # type: ignore[assignment]
    if "parents" not in errors:
        if not parents:
            _add(errors, "parents", "A bond interface must have one or more parents.")
        else:
            mac = mac or parents[0].mac_address
            in_use = sorted(p.name for p in parents if _has_children(m, p))
            if in_use:
                _add(errors, "parents", f"Interfaces already in-use: {', '.join(in_use)}.")
            vlan = vlan if vlan is not None else state.iface_vlan(parents[0])  # _set_default_vlan
            if {state.iface_vlan(p) for p in parents} != {vlan}:
                _add(errors, "parents", "All parents must belong to the same VLAN.")
    if not mac and "mac_address" not in errors:
        _add(errors, "mac_address", "This field cannot be blank.")
    if errors:
        raise bad_request(errors)
    # What the model's clean() refuses when the form saves it (BondInterface.clean, Meta.unique_together).
    if any(p.type != "physical" for p in parents):
        raise bad_request({"parents": ["Only physical interfaces can be bonded."]})
    if any(i.name == name for i in m.interfaces):
        raise bad_request({"__all__": ["Interface with this Node config and Name already exists."]})
    defaults = {"bond_mode": BOND_MODES[0], "bond_lacp_rate": LACP_RATES[0],
                "bond_xmit_hash_policy": XMIT_HASH_POLICIES[0],
                **{k: initial for k, (_, _, initial) in BOND_INTS.items()}}  # fmt: skip
    params.update({k: v if v is not None else defaults[k] for k, v in chosen.items()})
    for parent in parents:
        _clear_links(state, parent)
        parent.vlan = vlan
    bond = Interface(
        id=state.new_id("interface"),
        name=name,
        mac_address=mac.lower(),
        type="bond",
        parents=[p.name for p in parents],
        params=params,
        mode="link_up",
        tags=_tags(form),
        vlan=vlan,
    )
    m.interfaces.append(bond)
    m.cached_json = None
    return interface_json(state, m, bond)


@interfaces_res.op("POST", "create_vlan")
def create_vlan(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a VLAN interface on one parent (``VLANInterfaceForm``; admin). ``vlan`` is the VLAN's id."""
    m = _node(sim, req)
    _may_admin(req, m)
    _editable_state(m, "create VLAN")
    form, state = req.form, sim.state
    errors: Errors = {}
    # The API copies ``parent`` into ``parents`` (one value) and renames the form's errors back.
    keys = [form.getlist("parent")[-1]] if form.getlist("parent") else form.getlist("parents")
    parents = _parents(m, keys, errors)
    if "parents" not in errors:
        if len(parents) != 1:
            _add(errors, "parents", "A VLAN interface must have exactly one parent.")
        elif parents[0].type == "vlan":
            _add(errors, "parents", "A VLAN interface can't have another VLAN interface as parent.")
        elif _has_children(m, parents[0], "bond"):
            _add(errors, "parents", "A VLAN interface can't have a parent that is already in a bond.")
    vlan = _vlan(state, form, errors)
    if "vlan" not in errors:
        if vlan is None:
            _add(errors, "vlan", "A VLAN interface must be connected to a tagged VLAN.")
        elif vlan[1] == 0:
            _add(errors, "vlan", "A VLAN interface can only belong to a tagged VLAN.")
    name = form.get("name") or ""
    if name and not NAME_RE.match(name):
        _add(errors, "name", NAME_MESSAGE)
    params = _common_params(form, errors)
    if "vlan" not in errors and "parents" not in errors and vlan is not None:
        parent = parents[0]
        if state.iface_vlan(parent)[0] != vlan[0]:
            _add(
                errors,
                "vlan",
                "A VLAN interface can only belong to a tagged VLAN on the same fabric as its parent "
                "interface.",
            )
        if "name" not in errors:
            name = name or f"{parent.name}.{vlan[1]}"  # build_vlan_interface_name
            if any(i.name == name for i in m.interfaces):
                _add(errors, "name", f"Node {node_label(m)} already has an interface named '{name}'.")
    if errors:
        if "parents" in errors:
            errors["parent"] = errors.pop("parents")
        raise bad_request(errors)
    assert vlan is not None
    parent = parents[0]
    child = Interface(
        id=state.new_id("interface"),
        name=name,
        mac_address=parent.mac_address,
        type="vlan",
        parents=[parent.name],
        params=params,
        mode="link_up",
        tags=_tags(form),
        vlan=vlan,
    )
    m.interfaces.append(child)
    m.cached_json = None
    return interface_json(state, m, child)
