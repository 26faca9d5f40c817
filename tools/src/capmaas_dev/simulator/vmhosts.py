"""``vm-hosts/`` and the deprecated ``pods/`` alias (MAAS 3.7): list, read, update, delete, compose."""

from __future__ import annotations

import ipaddress
import re
import zlib
from typing import TYPE_CHECKING

from capmaas_dev.simulator.constraints import parse_storage
from capmaas_dev.simulator.forms import FormData
from capmaas_dev.simulator.http import (
    HttpError,
    Request,
    Response,
    admin_only,
    bad_request,
    unavailable,
)
from capmaas_dev.simulator.machines import bool_opt
from capmaas_dev.simulator.models import StoragePool, Subnet, VmHost
from capmaas_dev.simulator.router import Resource, resource
from capmaas_dev.simulator.serialize import API, vm_host_json

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator

RESOURCES: list[Resource] = []
_collections = [
    resource(RESOURCES, "VmHostsHandler", "vm-hosts/", vmhost=True),
    resource(RESOURCES, "PodsHandler", "pods/", vmhost=True),
]
_singles = [
    resource(RESOURCES, "VmHostHandler", "vm-hosts/{id}/", vmhost=True),
    resource(RESOURCES, "PodHandler", "pods/{id}/", vmhost=True),
]
GONE = "VM host (KVM) support has been removed from MAAS."


def _family(req: Request) -> str:
    return "pods" if req.path.startswith("/MAAS/api/2.0/pods/") else "vm-hosts"


def get_host(sim: Simulator, req: Request) -> VmHost:
    try:
        host = sim.state.vm_hosts.get(int(req.params["id"]))
    except ValueError:
        host = None
    if host is None:
        raise HttpError(404, "Not Found")
    return host


def require_admin(req: Request) -> None:
    if not req.is_admin:
        raise admin_only()


def list_hosts(sim: Simulator, req: Request) -> list[dict[str, object]]:
    """List VM hosts, ordered by id."""
    return [vm_host_json(sim.state, h, _family(req)) for _, h in sorted(sim.state.vm_hosts.items())]


def create_host(sim: Simulator, req: Request) -> dict[str, object]:
    """Register a VM host; its resources come from the machine at ``power_address`` when there is one."""
    require_admin(req)
    form = req.form
    kind = form.get("type") or ""
    if kind not in ("lxd", "virsh"):
        raise bad_request({"type": [f"Select a valid choice. {kind} is not one of the available choices."]})
    address = form.get("power_address") or ""
    if not address:
        raise bad_request({"power_address": ["This field is required."]})
    state = sim.state
    backing = next(
        (
            m
            for m in state.machines.values()
            if m.hostname in address or any(i.ip and i.ip in address for i in m.interfaces)
        ),
        None,
    )
    name = form.get("name") or (backing.hostname if backing else sim.petname())
    if any(h.name == name for h in state.vm_hosts.values()):
        raise bad_request({"name": ["Pod with this Name already exists."]})
    zone = state.zone_by_name(form.get("zone") or "") or state.default_zone
    pool = state.pool_by_name(form.get("pool") or "") or state.pools[0]
    hid = state.new_id("vmhost")
    size = sum(d.size for d in backing.disks) if backing else 1_000_000_000_000
    host = VmHost(
        id=hid,
        name=name,
        zone_id=zone.id,
        pool_id=pool.id,
        cores=backing.cpu_count if backing else 16,
        memory=backing.memory if backing else 65536,
        storage_pools=[StoragePool(state.new_id("storage_pool"), "default", size, default=True)],
        type=kind,
        tags=[t for v in form.getlist("tags") for t in v.split(",") if t],
        host_system_id=backing.system_id if backing else None,
        power_address=address,
    )
    state.vm_hosts[hid] = host
    return vm_host_json(state, host, _family(req))


def read_host(sim: Simulator, req: Request) -> dict[str, object]:
    """Read a VM host."""
    return vm_host_json(sim.state, get_host(sim, req), _family(req))


def _ratio(form: FormData, key: str, errors: dict[str, list[str]]) -> float | None:
    value = form.get(key)
    if value is None or value == "":
        return None
    try:
        ratio = float(value)
    except ValueError:
        errors[key] = ["Enter a number."]
        return None
    if not 0 <= ratio <= 10:
        errors[key] = [
            "Ensure this value is less than or equal to 10."
            if ratio > 10
            else "Ensure this value is greater than or equal to 0."
        ]
        return None
    return ratio


def update_host(sim: Simulator, req: Request) -> dict[str, object]:
    """Update name, tags, zone, pool, over-commit ratios, default storage pool, macvlan mode (admin)."""
    host = get_host(sim, req)
    require_admin(req)
    form, state = req.form, sim.state
    errors: dict[str, list[str]] = {}
    cpu = _ratio(form, "cpu_over_commit_ratio", errors)
    mem = _ratio(form, "memory_over_commit_ratio", errors)
    zone = state.zone_by_name(form.get("zone") or "") if form.get("zone") else None
    if form.get("zone") and zone is None:
        errors["zone"] = [f"Select a valid choice. {form.get('zone')} is not one of the available choices."]
    pool = state.pool_by_name(form.get("pool") or "") if form.get("pool") else None
    if form.get("pool") and pool is None:
        errors["pool"] = [f"Select a valid choice. {form.get('pool')} is not one of the available choices."]
    mode = form.get("default_macvlan_mode")
    if mode and mode not in ("bridge", "passthru", "private", "vepa"):
        errors["default_macvlan_mode"] = [
            f"Select a valid choice. {mode} is not one of the available choices."
        ]
    default_pool = form.get("default_storage_pool")
    if default_pool and not any(default_pool in (p.name, str(p.id)) for p in host.storage_pools):
        errors["default_storage_pool"] = [
            "Select a valid choice. That choice is not one of the available choices."
        ]
    if errors:
        raise bad_request(errors)
    if cpu is not None:
        host.cpu_over_commit_ratio = cpu
    if mem is not None:
        host.memory_over_commit_ratio = mem
    if zone is not None:
        host.zone_id = zone.id
    if pool is not None:
        host.pool_id = pool.id
    if mode:
        host.default_macvlan_mode = mode
    if default_pool:
        for p in host.storage_pools:
            p.default = default_pool in (p.name, str(p.id))
    if form.get("name"):
        host.name = form.get("name") or host.name
    if "tags" in form:
        host.tags = [t for v in form.getlist("tags") for t in v.split(",") if t]
    return vm_host_json(state, host, _family(req))


def delete_host(sim: Simulator, req: Request) -> Response:
    """Delete a VM host and its VMs' machines (``decompose=true`` also destroys the VMs on the host)."""
    host = get_host(sim, req)
    require_admin(req)
    sim.delete_vm_host(host, decompose=bool_opt(req.query, "decompose") or bool_opt(req.form, "decompose"))
    return Response(204, b"", "text/plain")


def _int_field(
    form: FormData, key: str, *, default: int, low: int, high: int, errors: dict[str, list[str]]
) -> int:
    raw = form.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        errors[key] = ["Enter a whole number."]
        return default
    if value < low:
        errors[key] = [f"Ensure this value is greater than or equal to {low}."]
    elif value > high:
        errors[key] = [f"Ensure this value is less than or equal to {high}."]
    return value


def compose(sim: Simulator, req: Request) -> dict[str, str]:
    """Compose a VM; it appears as a machine going Commissioning -> Ready (admin)."""
    host = get_host(sim, req)
    require_admin(req)
    form, state = req.form, sim.state
    errors: dict[str, list[str]] = {}
    pinned = [p for v in form.getlist("pinned_cores") for p in v.split(",") if p.strip()]
    cores = (
        len(pinned) if pinned else _int_field(form, "cores", default=1, low=1, high=host.cores, errors=errors)
    )
    memory = _int_field(form, "memory", default=2048, low=1024, high=host.memory, errors=errors)
    arch = form.get("architecture") or host.architectures[0]
    if arch not in host.architectures:
        errors["architecture"] = [f"Select a valid choice. {arch} is not one of the available choices."]
    hostname = form.get("hostname") or ""
    if hostname and hostname in state.by_hostname:
        errors["hostname"] = [f'Node with hostname "{hostname}" already exists']
    zone_id = state.default_zone.id
    pool_id = host.pool_id
    for key in ("zone", "pool", "domain"):
        raw = form.get(key)
        if not raw:
            continue
        table: dict[int, object] = {"zone": state.zones, "pool": state.pools, "domain": state.domains}[key]  # type: ignore[assignment]
        if not raw.isdigit() or int(raw) not in table:
            errors[key] = ["Select a valid choice. That choice is not one of the available choices."]
        elif key == "zone":
            zone_id = int(raw)
        elif key == "pool":
            pool_id = int(raw)
    storage_text = form.get("storage") or "root:8(local)"
    groups = parse_storage(storage_text)
    if groups is None:
        errors["storage"] = [f'Malformed storage constraint, "{storage_text}".']
    if form.get("interfaces") and host.host_system_id is None:
        raise bad_request("Pod must be on a known host if interfaces are specified.")
    nics = compose_network(sim, host, form.get("interfaces") or "", errors)
    if errors:
        raise bad_request(errors)
    assert groups is not None
    disks = []
    for g in groups:
        pool = pick_storage_pool(host, set(g.tags))
        if pool is None:
            raise unavailable(
                f"Unable to compose machine because: storage pool {sorted(g.tags)[0]!r} does not exist."
            )
        disks.append((g.label, g.size, pool))
    check_capacity(host, cores, memory, disks)
    m = sim.compose(
        host,
        cores=cores,
        memory=memory,
        disks=disks,
        hostname=hostname or sim.petname(),
        zone_id=zone_id,
        pool_id=pool_id,
        architecture=arch,
        skip_commissioning=bool_opt(form, "skip_commissioning"),
        nics=nics,
    )
    return {"system_id": m.system_id, "resource_uri": f"{API}/machines/{m.system_id}/"}


#: One VM NIC asked for by a compose ``interfaces`` label: its name, subnet and static address (None: the
#: host's network, an AUTO link).
Nic = tuple[str, int | None, str | None]
_LABEL = re.compile(r"[a-zA-Z0-9]+[a-zA-Z0-9_-]*$")
_FORMAT = "'<label>:<key>=<value>[,<key2>=<value2>[,...]]'"


def ifname_for_label(label: str) -> str:
    """provisioningserver ``get_ifname_for_label``: ``0`` is ``eth0``; a name over 15 bytes is hashed."""
    if label.isnumeric():
        label = f"eth{int(label)}"
    raw = label.encode()
    if len(raw) > 15:
        digest = f"{zlib.crc32(raw) & 0xFFFFFFFF:05x}"[-5:]
        return f"eth-{digest}-{raw[-5:].decode(errors='replace')}"
    return label


def parse_label_map(value: str) -> dict[str, dict[str, list[str]]]:
    """``parse_labeled_constraint_map`` (provisioningserver/utils/constraints.py), raising its messages
    as ``ValueError``. A bare ``key=value,...`` (no label) is the simulator's one-NIC shorthand: ``eth0``."""
    if ":" not in value and ";" not in value:
        value = f"eth0:{value}"
    result: dict[str, dict[str, list[str]]] = {}
    for constraint in value.split(";"):
        label, sep, rest = constraint.partition(":")
        if not sep:
            raise ValueError(f"Malformed constraint: '{constraint}' (required format: {_FORMAT})")
        if not _LABEL.match(label):
            raise ValueError(
                f"Invalid label name: '{label}' (Must begin with an alphanumeric character, and include only "
                "alphanumeric characters, dashes, and underscores.)"
            )
        if label in result:
            raise ValueError(f"Constraint label defined more than once: '{label}'")
        pairs: dict[str, list[str]] = {}
        for kvp in rest.split(","):
            key, eq, item = kvp.partition("=")
            if not eq:
                raise ValueError(f"Malformed key/value pair in constraint: '{kvp}'")
            pairs.setdefault(key, []).append(item)
        result[label] = pairs
    return result


def compose_network(sim: Simulator, host: VmHost, value: str, errors: dict[str, list[str]]) -> list[Nic]:
    """One VM NIC per label of ``interfaces`` (``eth0:subnet=<subnet>,ip=<address>;eth1:space=<space>``), in
    the map's order, like ``ComposeMachineForm._get_requested_machine_interfaces_via_constraints``; [] when
    nothing is asked (``compose`` then gives the VM one NIC on the host's network)."""
    if not value.strip():
        return []
    try:
        labels = parse_label_map(value)
    except ValueError as exc:
        errors["interfaces"] = [str(exc)]
        return []
    host_machine = sim.state.machines.get(host.host_system_id or "")
    host_ifaces = {i.name: i.subnet_id for i in host_machine.interfaces} if host_machine else {}
    nics: list[Nic] = []
    problems: list[str] = []
    taken = set(sim.state.used_ips)
    for label, pairs in labels.items():
        subnet_id, ip, problem = _label_nic(sim, label, pairs, host_ifaces, taken)
        if problem:
            problems.append(problem)
        if ip:
            taken.add(ip)
        nics.append((ifname_for_label(label), subnet_id, ip))
    if problems:
        errors["interfaces"] = problems
    return nics


def _label_nic(
    sim: Simulator,
    label: str,
    pairs: dict[str, list[str]],
    host_ifaces: dict[str, int | None],
    taken: set[str],
) -> tuple[int | None, str | None, str | None]:
    """The subnet and static address of one label, or the problem with it (the simulator's sentences)."""
    first = {k: v[0] for k, v in pairs.items() if v}
    want, ip = first.get("subnet_cidr") or first.get("subnet"), first.get("ip") or None
    try:
        address = ipaddress.ip_address(ip) if ip else None
    except ValueError:
        return None, None, f"'{ip}' is not a valid IP address."
    on_host = host_ifaces.get(first.get("name", ""))  # ``name=``: the host interface's network
    if not (want or ip or "vid" in first or "space" in first):
        return on_host, None, None

    def fits(s: Subnet) -> bool:
        if want:
            return want in (s.cidr, s.name, str(s.id))
        if address is not None:
            return address in ipaddress.ip_network(s.cidr, strict=False)
        if "vid" in first and first["vid"] != str(s.vid):
            return False
        return "space" not in first or first["space"] == s.space

    # ``get_best_subnet_for_ip``: the most specific subnet holding the address
    matches = sorted(
        filter(fits, sim.state.subnets.values()), key=lambda s: -ipaddress.ip_network(s.cidr).prefixlen
    )
    if on_host is not None and any(s.id == on_host for s in matches):
        matches = [sim.state.subnets[on_host]]
    subnet = matches[0] if matches else None
    if subnet is None:
        if not (want or ip or "vid" in first):  # a space no subnet is in: the host's network, as before
            return on_host, None, None
        shown = f"{label}:" + ",".join(f"{k}={v}" for k, vs in pairs.items() for v in vs)
        return None, None, f"No subnet matches {shown!r}."
    if address is not None and address not in ipaddress.ip_network(subnet.cidr, strict=False):
        return subnet.id, ip, f"IP address {ip} is not in subnet {subnet.cidr}."
    if ip in taken:
        return subnet.id, ip, f"IP address {ip} is already in use."
    return subnet.id, ip, None


def pick_storage_pool(host: VmHost, tags: set[str]) -> StoragePool | None:
    """LXD selects storage pools by name from the tags; no tags (or MAAS's default ``local``) -> default."""
    named = [p for p in host.storage_pools if p.name in tags]
    if named:
        return named[0]
    if tags - {"local"}:
        return None
    return next(p for p in host.storage_pools if p.default)


def check_capacity(host: VmHost, cores: int, memory: int, disks: list[tuple[str, int, StoragePool]]) -> None:
    """``check_over_commit_ratios`` plus the LXD driver's storage check: 503 when the host cannot fit it."""
    used_cores, used_mem, used_storage = host.used()
    message = ""
    if used_cores + cores > host.cores * host.cpu_over_commit_ratio:
        message += (
            f"CPU overcommit ratio is {float(host.cpu_over_commit_ratio)} and there are "
            f"{host.cores - used_cores} available resources; {cores} requested."
        )
    if used_mem + memory > host.memory * host.memory_over_commit_ratio:
        message += (
            f"Memory overcommit ratio is {float(host.memory_over_commit_ratio)} and there are "
            f"{host.memory - used_mem} available resources; {memory} requested."
        )
    if message:
        raise unavailable(f"Unable to compose KVM instance in '{host.name}'. {message}")
    wanted: dict[int, int] = {}
    for _, size, pool in disks:
        wanted[pool.id] = wanted.get(pool.id, 0) + size
    short = [p.name for p in host.storage_pools if used_storage.get(p.id, 0) + wanted.get(p.id, 0) > p.total]
    if short:
        raise unavailable(
            "Unable to compose machine because: Not enough storage space on storage pools: "
            + ", ".join(short)
        )


def fits(host: VmHost, cores: int, memory: int, disks: list[tuple[str, int, StoragePool]]) -> bool:
    try:
        check_capacity(host, cores, memory, disks)
    except HttpError:
        return False
    return True


def refresh(sim: Simulator, req: Request) -> dict[str, object]:
    """Refresh the host's resources (nothing changes in a simulation)."""
    host = get_host(sim, req)
    require_admin(req)
    return vm_host_json(sim.state, host, _family(req))


def parameters(sim: Simulator, req: Request) -> dict[str, str]:
    """The host's power parameters (admin)."""
    host = get_host(sim, req)
    require_admin(req)
    params = {"power_address": host.power_address}
    if host.type == "lxd":
        params["project"] = "default"
    return params


def add_tag(sim: Simulator, req: Request) -> dict[str, object]:
    """Add a tag to the host (admin)."""
    return _change_tag(sim, req, add=True)


def remove_tag(sim: Simulator, req: Request) -> dict[str, object]:
    """Remove a tag from the host (admin)."""
    return _change_tag(sim, req, add=False)


def _change_tag(sim: Simulator, req: Request, *, add: bool) -> dict[str, object]:
    host = get_host(sim, req)
    require_admin(req)
    tag = req.form.get("tag") or ""
    if not tag:
        raise bad_request({"tag": ["This field is required."]})
    if "," in tag:
        raise bad_request('Tag may not contain a ",".')
    if add and tag not in host.tags:
        host.tags.append(tag)
    elif not add and tag in host.tags:
        host.tags.remove(tag)
    return vm_host_json(sim.state, host, _family(req))


for _res in _collections:
    _res.op("GET")(list_hosts)
    _res.op("POST")(create_host)
for _res in _singles:
    _res.op("GET")(read_host)
    _res.op("PUT")(update_host)
    _res.op("DELETE")(delete_host)
    _res.op("POST", "compose")(compose)
    _res.op("POST", "refresh")(refresh)
    _res.op("GET", "parameters")(parameters)
    _res.op("POST", "add_tag")(add_tag)
    _res.op("POST", "remove_tag")(remove_tag)
