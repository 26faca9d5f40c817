"""A node's interfaces and block devices (M ``api/interfaces.py``, ``api/blockdevices.py``) and the machine
ops ``power_parameters`` and ``details`` (M ``api/nodes.py``).

Interfaces carry one link each (MAAS allows several static links per interface; one is what machines and the
VM-host preparation step use): ``link_subnet`` sets it, ``unlink_subnet`` removes it. ``create_bridge`` does
what ``BridgeInterfaceForm`` / ``AcquiredBridgeInterfaceForm`` do: on an Allocated machine the parent's link
moves to the bridge, otherwise the parent's link is reset and the bridge starts LINK_UP.

A STATIC link follows MAAS's rules (``InterfaceLinkForm``, ``Interface._link_subnet_static``): an explicit
address must be in the subnet and outside its dynamic ranges (400 form errors), must not clash with a
``reservedips/`` entry (409) and must have no address row yet (404 ``IP address is already in use.``, which
includes a USER_RESERVED address of ``ipaddresses/``); without one, a free address outside the subnet's
ranges is picked (503 when there is none). STATIC addresses are kept across release; AUTO ones are not.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.addresses import subnet_by_specifier
from capmaas_dev.simulator.forms import FormError, parse_bool
from capmaas_dev.simulator.http import (
    Request,
    Response,
    bad_request,
    conflict,
    forbidden,
    not_found,
    not_found_text,
    unavailable,
)
from capmaas_dev.simulator.machines import machine_res, visible
from capmaas_dev.simulator.models import Interface, Machine, NodeDevice, NodeStatus, Subnet
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import API, block_device_json, interface_json
from capmaas_dev.simulator.state import State

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

S = NodeStatus
RESOURCES: list[Resource] = []
interfaces_res = resource(RESOURCES, "InterfacesHandler", "nodes/{system_id}/interfaces/")
interface_res = resource(RESOURCES, "InterfaceHandler", "nodes/{system_id}/interfaces/{id}/")
blockdevices_res = resource(RESOURCES, "BlockDevicesHandler", "nodes/{system_id}/blockdevices/")
blockdevice_res = resource(RESOURCES, "BlockDeviceHandler", "nodes/{system_id}/blockdevices/{id}/")
nodedevices_res = resource(RESOURCES, "NodeDevicesHandler", "nodes/{system_id}/devices/")
nodedevice_res = resource(RESOURCES, "NodeDeviceHandler", "nodes/{system_id}/devices/{id}/")
#: ``ALLOWED_STATES`` of M ``api/interfaces.py``: where a machine's interfaces may be changed.
EDITABLE = frozenset({S.NEW, S.READY, S.FAILED_TESTING, S.ALLOCATED, S.BROKEN})
LINK_MODES = ("auto", "dhcp", "static", "link_up")
BRIDGE_TYPES = ("standard", "ovs")
DEFAULT_BRIDGE_FD = 15


# -- lookups and permissions ------------------------------------------------------------------------------
def _node(sim: Simulator, req: Request) -> Machine:
    m = sim.state.machines.get(req.params["system_id"])
    if m is None:
        raise not_found("Node")
    if not visible(req, m):
        raise forbidden()
    return m


def _interface(sim: Simulator, req: Request) -> tuple[Machine, Interface]:
    m = _node(sim, req)
    key = req.params["id"]
    iface = next((i for i in m.interfaces if str(i.id) == key or i.name == key), None)
    if iface is None:
        raise not_found("Interface")
    return m, iface


def _may_edit(req: Request, m: Machine) -> None:
    """``NodePermission.admin`` or ``edit``: an admin, or the owner of the machine."""
    if not (req.is_admin or (req.user is not None and m.owner == req.user.username)):
        raise forbidden()


def _may_admin(req: Request, m: Machine) -> None:
    """``NodePermission.admin``, which ``link_subnet``/``unlink_subnet`` ask of a machine's interface
    (``get_interface_or_404``): a superuser, on an unlocked machine; owning the machine is not enough."""
    if not req.is_admin or m.locked:
        raise forbidden()


def _editable_state(m: Machine, operation: str) -> None:
    if m.status not in EDITABLE:
        raise conflict(
            f"Cannot {operation} interface because the machine is not New, Ready, Allocated, or Broken."
        )


def _bool(req: Request, key: str, default: bool = False) -> bool:
    try:
        return parse_bool(req.form, key, default)
    except FormError as exc:
        raise bad_request(str(exc)) from None


# -- interfaces -------------------------------------------------------------------------------------------
@interfaces_res.op("GET")
def list_interfaces(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List a node's interfaces."""
    m = _node(sim, req)
    return [interface_json(sim.state, m, i) for i in m.interfaces]


@interface_res.op("GET")
def read_interface(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read an interface (by id or name)."""
    m, iface = _interface(sim, req)
    return interface_json(sim.state, m, iface)


@interface_res.op("DELETE")
def delete_interface(sim: Simulator, req: Request) -> Response:
    """Delete an interface (``NodePermission.admin``: owning the machine is not enough; editable states).

    Its addresses go back to their subnets, and a child left without parents goes with it (M
    ``models/signals/interfaces.py`` ``delete_children_interface_handler``); other children lose it from
    ``parents``."""
    m, iface = _interface(sim, req)
    _may_admin(req, m)
    _editable_state(m, "delete interface")
    _remove_interface(sim.state, m, iface)
    m.cached_json = None
    return Response(204, b"", "text/plain")


def _remove_interface(state: State, m: Machine, iface: Interface) -> None:
    if iface not in m.interfaces:
        return
    if iface.ip:
        state.used_ips.discard(iface.ip)
    m.interfaces.remove(iface)
    for child in [c for c in m.interfaces if iface.name in c.parents]:
        if len(child.parents) == 1:
            _remove_interface(state, m, child)
        else:
            child.parents.remove(iface.name)


@interfaces_res.op("POST", "create_bridge")
def create_bridge(sim: Simulator, req: Request) -> dict[str, Any]:
    """Create a bridge on one parent interface (``BridgeInterfaceForm``; admin)."""
    m = _node(sim, req)
    if not req.is_admin:
        raise forbidden()
    _editable_state(m, "create bridge")
    form = req.form
    errors: dict[str, list[str]] = {}
    parent_keys = form.getlist("parent") or form.getlist("parents")
    parents = [i for k in parent_keys for i in m.interfaces if str(i.id) == k or i.name == k]
    parent: Interface | None = None
    if len(parents) != 1 or len(parent_keys) != 1:
        errors["parent"] = ["A bridge interface must have exactly one parent."]
    else:
        parent = parents[0]
        if parent.type == "bridge":
            errors["parent"] = ["A bridge interface can't have another bridge interface as parent."]
        elif any(parent.name in c.parents and c.type in ("bridge", "bond") for c in m.interfaces):
            errors["parent"] = [
                "A bridge interface can't have a parent that is already in a bond or a bridge."
            ]
    name = form.get("name") or (f"br-{parent.name}" if parent else "")
    if any(i.name == name for i in m.interfaces):
        errors["name"] = [f"Node {m.hostname} already has an interface named '{name}'."]
    bridge_type = form.get("bridge_type") or BRIDGE_TYPES[0]
    if bridge_type not in BRIDGE_TYPES:
        listing = ", ".join(f"'{t}'" for t in BRIDGE_TYPES)
        errors["bridge_type"] = [
            f"'{bridge_type}' is not a valid bridge_type.  It should be one of: {listing}."
        ]
    fd_text = form.get("bridge_fd") or ""
    bridge_fd = DEFAULT_BRIDGE_FD
    if fd_text:
        if not fd_text.lstrip("-").isdigit():
            errors["bridge_fd"] = ["Enter a whole number."]
        elif int(fd_text) < 0:
            errors["bridge_fd"] = ["Ensure this value is greater than or equal to 0."]
        else:
            bridge_fd = int(fd_text)
    stp = _bool(req, "bridge_stp")
    if errors:
        raise bad_request(errors)
    assert parent is not None
    bridge = Interface(
        id=sim.state.new_id("interface"),
        name=name,
        mac_address=form.get("mac_address") or parent.mac_address,
        type="bridge",
        parents=[parent.name],
        params={"bridge_type": bridge_type, "bridge_stp": stp, "bridge_fd": bridge_fd},
    )
    if m.status is S.ALLOCATED:  # AcquiredBridgeInterfaceForm.save: the parent's addresses move to the bridge
        bridge.subnet_id, bridge.ip, bridge.auto, bridge.mode = (
            parent.subnet_id,
            parent.ip,
            parent.auto,
            parent.mode,
        )
    else:  # a new child resets the parent's links; the bridge comes up LINK_UP (ensure_link_up)
        if parent.ip:
            sim.state.used_ips.discard(parent.ip)
        bridge.subnet_id, bridge.mode = parent.subnet_id, "link_up"
    parent.ip, parent.auto, parent.mode = None, False, None
    parent.subnet_id = None
    m.interfaces.append(bridge)
    m.cached_json = None
    return interface_json(sim.state, m, bridge)


@interface_res.op("POST", "link_subnet")
def link_subnet(sim: Simulator, req: Request) -> dict[str, Any]:
    """Link the interface to a subnet (``InterfaceLinkForm``): AUTO, DHCP, STATIC or LINK_UP."""
    m, iface = _interface(sim, req)
    _may_admin(req, m)
    _editable_state(m, "link subnet")
    form, state = req.form, sim.state
    errors: dict[str, list[str]] = {}
    for bond in (c for c in m.interfaces if iface.name in c.parents and c.type == "bond"):
        errors["bond"] = [f"Cannot link interface({iface.name}) when interface is in a bond({bond.name})."]
    mode = (form.get("mode") or "").lower()
    if not mode:
        errors["mode"] = ["This field is required."]
    elif mode not in LINK_MODES:
        listing = ", ".join(f"'{x}'" for x in LINK_MODES)
        errors["mode"] = [f"'{form.get('mode')}' is not a valid mode.  It should be one of: {listing}."]
    subnet_key = form.get("subnet") or ""
    subnet = subnet_by_specifier(state, subnet_key) if subnet_key else None
    # The form offers only the subnets of the interface's VLAN (InterfaceLinkForm.__init__); the simulator
    # knows the VLAN of bonds, VLAN interfaces and bond parents (a NIC's follows its subnet).
    pinned = iface.vlan is not None and not _bool(req, "force")
    if subnet is not None and pinned and (subnet.fabric_id, subnet.vid) != iface.vlan:
        subnet = None
    if subnet_key and subnet is None:
        errors["subnet"] = ["Select a valid choice. That choice is not one of the available choices."]
    elif subnet is None and mode in ("auto", "static"):
        errors["subnet"] = ["This field is required."]
    ip = form.get("ip_address") or None
    if mode == "static" and subnet is not None and ip:
        errors.update(_static_ip_errors(state, subnet, ip))
    if mode == "link_up" and iface.subnet_id is not None and link_active(iface) and not _bool(req, "force"):
        errors["mode"] = [
            "Cannot configure interface to link up (with no IP address) while other links are already "
            "configured. Specify force=True to override this behavior and delete all links."
        ]
    if errors:
        raise bad_request(errors)
    static_ip = _claim_static(state, iface, subnet, ip) if mode == "static" and subnet is not None else None
    if iface.ip:
        state.used_ips.discard(iface.ip)
    iface.subnet_id = subnet.id if subnet is not None else iface.subnet_id
    iface.ip, iface.auto, iface.mode = None, False, None
    if static_ip is not None:  # written at once (a STICKY row), kept across release
        iface.ip = static_ip
        state.used_ips.add(static_ip)
    elif mode == "auto":  # the address comes at deployment (claim_auto_ips)
        iface.auto = True
    else:
        iface.mode = mode
    m.cached_json = None
    return interface_json(state, m, iface)


def subnet_label(subnet: Subnet) -> str:
    """How MAAS writes a subnet in messages (``Subnet.__str__``): ``name:cidr(vid=N)``."""
    return f"{subnet.name}:{subnet.cidr}(vid={subnet.vid})"


def _static_ip_errors(state: State, subnet: Subnet, ip: str) -> dict[str, list[str]]:
    """``InterfaceLinkForm._clean_mode_static``: the address is in the subnet and outside its dynamic ranges
    (an address inside a *reserved* range is accepted)."""
    try:
        inside = ipaddress.ip_address(ip) in ipaddress.ip_network(subnet.cidr, strict=False)
    except ValueError:
        return {"ip_address": ["Enter a valid IPv4 or IPv6 address."]}
    if not inside:
        return {"ip_address": [f"IP address is not in the given subnet '{subnet_label(subnet)}'."]}
    dynamic = state.range_for(subnet, ip, "dynamic")
    if dynamic is not None:
        return {
            "ip_address": [f"IP address is inside a dynamic range {dynamic.start_ip} to {dynamic.end_ip}."]
        }
    return {}


def _claim_static(state: State, iface: Interface, subnet: Subnet, ip: str | None) -> str:
    """``Interface._link_subnet_static``: the given address unless a ``reservedips/`` entry of another MAC or
    address stands in the way (409) or some row already has it (404; the interface's own address too, as
    MAAS adds a link rather than replacing one); without one, a free address (503 when none). The
    auto-pick skips ranges and used addresses but, as in MAAS, not ``reservedips/`` entries."""
    if ip is None:
        picked = state.free_ip(subnet)
        if picked is None:
            raise unavailable(f"No more IPs available in subnet: {subnet.cidr}.")
        return picked
    mac = iface.mac_address.lower()
    pins = [r for r in state.reserved_ips.values() if r.mac_address == mac or r.ip == ip]
    if len(pins) > 1:
        raise conflict(
            f"The MAC address {mac} or the static IP {ip} are associated with a reserved IP and cannot be "
            "used."
        )
    if pins and pins[0].ip != ip:
        raise conflict(
            f"The static IP {ip} does not match the reserved IP {pins[0].ip} for the MAC address {mac}."
        )
    if pins and pins[0].mac_address != mac:
        raise conflict(f"The static IP {ip} is already reserved for the MAC address {pins[0].mac_address}.")
    if ip in state.used_ips:
        raise not_found_text("IP address is already in use.")
    return ip


def link_active(iface: Interface) -> bool:
    return iface.mode != "link_up"


@interface_res.op("POST", "unlink_subnet")
def unlink_subnet(sim: Simulator, req: Request) -> dict[str, Any]:
    """Remove the interface's link ``id`` (``InterfaceUnlinkForm``)."""
    m, iface = _interface(sim, req)
    _may_admin(req, m)
    _editable_state(m, "unlink subnet")
    link_id = req.form.get("id") or ""
    if link_id != str(iface.id) or (iface.subnet_id is None and iface.mode is None):
        raise bad_request({"id": ["Select a valid choice. That choice is not one of the available choices."]})
    if iface.ip:
        sim.state.used_ips.discard(iface.ip)
    iface.subnet_id, iface.ip, iface.auto, iface.mode = None, None, False, None
    m.cached_json = None
    return interface_json(sim.state, m, iface)


# -- block devices ----------------------------------------------------------------------------------------
@blockdevices_res.op("GET")
def list_block_devices(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """List a machine's block devices."""
    m = _node(sim, req)
    return [block_device_json(m, d) for d in m.disks]


@blockdevice_res.op("GET")
def read_block_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Read a block device (by id or name)."""
    m = _node(sim, req)
    key = req.params["id"]
    disk = next((d for d in m.disks if str(d.id) == key or d.name == key), None)
    if disk is None:
        raise not_found("BlockDevice")
    return block_device_json(m, disk)


# -- PCI/USB devices (M api/nodedevices.py) ------------------------------------------------------------------
BUSES = {"PCIE": 1, "USB": 2}
HARDWARE_TYPES = {"node": 0, "cpu": 1, "memory": 2, "storage": 3, "network": 4, "gpu": 5}
#: ``translate_hardware_type`` (M ``models/script.py``): the aliases it accepts for each type.
HARDWARE_TYPE_ALIASES = {
    **dict.fromkeys(("node", "machine", "controller", "other", "generic"), "node"),
    **dict.fromkeys(("cpu", "processor"), "cpu"),
    **dict.fromkeys(("memory", "ram"), "memory"),
    **dict.fromkeys(("storage", "disk", "ssd"), "storage"),
    **dict.fromkeys(("network", "net", "interface"), "network"),
    **dict.fromkeys(("gpu", "graphics"), "gpu"),
}
HARDWARE_TYPE_LABELS = {"node": "Node", "cpu": "CPU", "memory": "Memory", "storage": "Storage",
                        "network": "Network", "gpu": "GPU"}  # fmt: skip


def node_device_json(m: Machine, d: NodeDevice) -> dict[str, Any]:
    """``NodeDeviceHandler.fields`` (M ``api/nodedevices.py:129-147``)."""
    bus_number, device_number = divmod(d.id, 256)
    return {
        "id": d.id,
        "bus": BUSES[d.bus],
        "bus_name": d.bus,
        "hardware_type": HARDWARE_TYPES[d.hardware_type],
        "hardware_type_name": HARDWARE_TYPE_LABELS[d.hardware_type],
        "system_id": m.system_id,
        "numa_node": 0,
        "physical_blockdevice": None,
        "physical_interface": None,
        "vendor_id": d.vendor_id,
        "product_id": d.product_id,
        "vendor_name": d.vendor_name,
        "product_name": d.product_name,
        "commissioning_driver": d.commissioning_driver,
        "bus_number": bus_number,
        "device_number": device_number,
        "pci_address": (d.pci_address or f"0000:{bus_number:02x}:{device_number:02x}.0")
        if d.bus == "PCIE"
        else None,
        "resource_uri": f"{API}/nodes/{m.system_id}/devices/{d.id}/",
    }


@nodedevices_res.op("GET")
def list_node_devices(sim: Simulator, req: Request) -> list[dict[str, Any]]:
    """A node's PCI/USB devices, filtered by ``bus``, ``hardware_type`` and (case-insensitively) the ids,
    names and driver; a bus or type MAAS does not know is a plain-text 400 in its words."""
    m = _node(sim, req)
    devices = list(m.node_devices)
    bus = req.query.get("bus")
    if bus is not None:
        by_number = {str(v): k for k, v in BUSES.items()}
        if bus.isdigit() and bus not in by_number:
            raise bad_request("Invalid bus numeric value!")
        name = by_number.get(bus) or (bus.upper() if bus in ("PCIE", "pcie", "USB", "usb") else None)
        if name is None:
            raise bad_request("Bus must be PCIE or USB!")
        devices = [d for d in devices if d.bus == name]
    kind = req.query.get("hardware_type")
    if kind is not None:
        by_number = {str(v): k for k, v in HARDWARE_TYPES.items()}
        if kind.isdigit() and kind not in by_number:
            raise bad_request("Invalid hardware type numeric value.")
        wanted = by_number.get(kind) or HARDWARE_TYPE_ALIASES.get(kind.lower())
        if wanted is None:
            raise bad_request("Hardware type must be node, cpu, memory, storage, or gpu")
        devices = [d for d in devices if d.hardware_type == wanted]
    for key in ("vendor_id", "product_id", "vendor_name", "product_name", "commissioning_driver"):
        value = req.query.get(key)
        if value is not None:
            devices = [d for d in devices if str(getattr(d, key)).lower() == value.lower()]
    return [node_device_json(m, d) for d in devices]


@nodedevice_res.op("GET")
def read_node_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """One device by id, ``bus:device`` numbers or PCI address."""
    m = _node(sim, req)
    key = req.params["id"]
    for d in m.node_devices:
        j = node_device_json(m, d)
        if key in (str(d.id), f"{j['bus_number']}:{j['device_number']}", j["pci_address"]):
            return j
    raise not_found("NodeDevice")


# -- machine ops ------------------------------------------------------------------------------------------
@machine_res.op("GET", "power_parameters")
def power_parameters(sim: Simulator, req: Request) -> dict[str, Any]:
    """The machine's power parameters (``NodePermission.admin_read``: admins; others 403)."""
    m = _node(sim, req)
    if not req.is_admin:
        raise forbidden()
    host = sim.state.vm_hosts.get(m.pod_id) if m.pod_id is not None else None
    if host is not None:
        params: dict[str, Any] = {"power_address": host.power_address, "instance_name": m.hostname}
        if host.type == "lxd":
            params["project"] = "default"
        return params
    if m.power_type == "manual":
        return {}
    return {
        "power_address": f"10.255.{m.id // 256 % 256}.{m.id % 256}",
        "power_user": "maas",
        "power_pass": f"sim-{m.system_id}",
        "power_driver": "LAN_2_0",
        "power_boot_type": "auto",
        "privilege_level": "OPERATOR",
        "cipher_suite_id": "3",
        "k_g": "",
        "mac_address": "",
        "workaround_flags": ["opensesspriv"],
    }


@machine_res.op("GET", "details")
def details(sim: Simulator, req: Request) -> Response:
    """The commissioning ``lshw`` and ``lldp`` output, BSON-encoded (``application/bson``) like MAAS's."""
    m = _node(sim, req)
    lshw = (
        f'<?xml version="1.0" standalone="yes" ?><list><node id="{m.hostname}" class="system">'
        f"<product>SimServer</product><vendor>Simulated</vendor><serial>{m.system_id.upper()}</serial>"
        "</node></list>"
    ).encode()
    lldp = b'<?xml version="1.0" encoding="UTF-8"?><lldp label="LLDP neighbors"/>'
    return Response(200, bson_document({"lshw": lshw, "lldp": lldp}), "application/bson")


def bson_document(fields: dict[str, bytes | None]) -> bytes:
    """A BSON document of binary (subtype 0) or null values: what ``bson.BSON.encode`` makes of MAAS's
    ``{name: bson.Binary(data) or None}``."""
    body = b""
    for name, value in fields.items():
        key = name.encode() + b"\x00"
        if value is None:
            body += b"\x0a" + key
        else:
            body += b"\x05" + key + struct.pack("<i", len(value)) + b"\x00" + value
    return struct.pack("<i", len(body) + 5) + body + b"\x00"
