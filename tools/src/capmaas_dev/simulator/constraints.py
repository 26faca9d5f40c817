"""Machine constraints: ``ReadNodesForm`` (list filters) and ``AcquireNodeForm`` (allocate), MAAS's texts.

A parsed form becomes a list of small predicates, checked cheapest first, so scanning 5,000 READY machines in
cost order stays in the low milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from capmaas_dev.simulator.forms import FormData
from capmaas_dev.simulator.http import HttpError
from capmaas_dev.simulator.models import (
    ANY_STATUS_BY_NAME,
    Fabric,
    Interface,
    Machine,
    NodeStatus,
    vlan_id,
    vlan_name,
)
from capmaas_dev.simulator.state import State

#: ``FilterNodeForm``'s fields (M ``node_constraint_filter_forms.py``): both listing and allocate take them.
FILTER_KEYS = frozenset(
    {
        "arch",
        "not_arch",
        "tags",
        "not_tags",
        "fabrics",
        "not_fabrics",
        "fabric_classes",
        "not_fabric_classes",
        "subnets",
        "not_subnets",
        "link_speed",
        "vlans",
        "not_vlans",
        "zone",
        "not_in_zone",
        "system_id",
        "pool",
        "not_in_pool",
        "storage",
        "interfaces",
        "devices",
        "cpu_count",
        "cpu_speed",
        "mem",
        "pod",
        "not_pod",
        "pod_type",
        "not_pod_type",
        "owner",
        "not_owner",
        "power_state",
        "not_power_state",
        "deployment_target",
        "not_deployment_target",
    }
)
#: ``ReadNodesForm`` adds these (``GET machines/``).
READ_KEYS = FILTER_KEYS | {
    "id",
    "not_id",
    "hostname",
    "not_hostname",
    "mac_address",
    "domain",
    "not_domain",
    "agent_name",
    "not_agent_name",
    "status",
    "not_status",
    "simple_status",
    "not_simple_status",
}
#: ``AcquireNodeForm`` adds ``name`` (and redefines ``system_id``).
ACQUIRE_KEYS = FILTER_KEYS | {"name"}
ACQUIRE_OPTIONS = frozenset(
    {
        "agent_name",
        "comment",
        "bridge_all",
        "bridge_type",
        "bridge_stp",
        "bridge_fd",
        "dry_run",
        "verbose",
        "install_kvm",
        "register_vmhost",
        "ephemeral_deploy",
        "enable_hw_sync",
    }
)
#: ``IGNORED_FIELDS``: never "No such constraint." (allocate reads some of them as options).
IGNORED = frozenset(
    {
        "comment",
        "bridge_all",
        "bridge_type",
        "bridge_stp",
        "bridge_fd",
        "dry_run",
        "verbose",
        "op",
        "agent_name",
    }
)
POWER_STATES = ("on", "off", "unknown", "error")
DEPLOYMENT_TARGETS = {"disk": False, "memory": True}
STORAGE_RE = re.compile(r"^(?:(?P<label>[a-zA-Z0-9]+):)?(?P<size>[0-9.]+)(?:\((?P<tags>[^)]+)\))?$")
SIMPLE_STATUS = {
    "ready": {NodeStatus.READY},
    "allocated": {NodeStatus.ALLOCATED},
    "deployed": {NodeStatus.DEPLOYED},
    "failed": {
        NodeStatus.FAILED_COMMISSIONING,
        NodeStatus.FAILED_DEPLOYMENT,
        NodeStatus.FAILED_RELEASING,
        NodeStatus.FAILED_DISK_ERASING,
        NodeStatus.FAILED_TESTING,
    },
    "broken": {NodeStatus.BROKEN},
    "commissioning": {NodeStatus.COMMISSIONING, NodeStatus.TESTING},
    "deploying": {NodeStatus.DEPLOYING},
    "releasing": {NodeStatus.RELEASING, NodeStatus.DISK_ERASING},
    "new": {NodeStatus.NEW},
}

Predicate = Callable[[Machine], bool]


@dataclass
class StorageGroup:
    label: str
    size: int
    tags: frozenset[str]
    #: Whether the value gave a label (MAAS reports only labelled groups in ``constraints_by_type``).
    named: bool = True


@dataclass
class Constraints:
    """A parsed filter: predicates plus what MAAS prints about it in a no-match 409."""

    predicates: list[Predicate] = field(default_factory=list)
    described: dict[str, str] = field(default_factory=dict)
    system_ids: list[str] = field(default_factory=list)
    statuses: set[NodeStatus] | None = None
    agent_names: list[str] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)
    storage: list[StorageGroup] = field(default_factory=list)
    interfaces: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    #: ``devices``: key -> lower-cased value one node device must match
    devices: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    not_tags: list[str] = field(default_factory=list)
    #: ``pod``/``not_pod``/``pod_type``/``not_pod_type``: allocate's dynamic compose filters hosts by them.
    pods: dict[str, frozenset[str]] = field(default_factory=dict)
    zone: str | None = None
    pool: str | None = None
    cpu_count: int | None = None
    mem: int | None = None
    arch: str | None = None

    def matches(self, m: Machine) -> bool:
        return all(p(m) for p in self.predicates)

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.described.items()))


def _fmt_number(value: float) -> str:
    return repr(float(value))


def _numbers(form: FormData, key: str, message: str) -> float | None:
    values = [v for v in form.getlist(key) if v != ""]
    if not values:
        return None
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        raise HttpError(400, {key: [message]}) from None
    return min(numbers)


def known_architectures(state: State) -> set[str]:
    arches = {b.architecture for b in state.boot_resources.values()}
    arches.update(m.architecture for m in state.machines.values())
    return arches | {"amd64/generic"}


def parse(state: State, form: FormData, *, acquire: bool) -> Constraints:
    allowed = ACQUIRE_KEYS | ACQUIRE_OPTIONS if acquire else READ_KEYS
    for key in form:
        if key not in allowed and key not in IGNORED and not key.startswith("oauth_"):
            raise HttpError(400, {key: ["No such constraint."]})
    c = Constraints()
    p = c.predicates
    errors: dict[str, list[str]] = {}

    ids = [v for v in form.getlist("system_id" if acquire else "id") if v]
    if not acquire:
        ids += [v for v in form.getlist("system_id") if v]
    if ids:
        c.system_ids = list(dict.fromkeys(ids))
        wanted = set(ids)
        p.append(lambda m: m.system_id in wanted)
        if acquire:
            c.described["system_id"] = ",".join(c.system_ids)
    names = [v for v in form.getlist("name" if acquire else "hostname") if v]
    if names:
        hostnames = {n.split(".", 1)[0] for n in names}
        c.hostnames = sorted(hostnames)
        p.append(lambda m: m.hostname in hostnames)
        c.described["name" if acquire else "hostname"] = ",".join(names)
    agents = form.getlist("agent_name")
    if agents and not acquire:
        c.agent_names = agents
        agent_set = set(agents)
        p.append(lambda m: m.agent_name in agent_set)
    if not acquire:
        statuses = _statuses(form, "status", "simple_status", errors)
        if statuses:
            c.statuses = statuses
            p.append(lambda m: m.status in statuses)
        excluded = _statuses(form, "not_status", "not_simple_status", errors)
        if excluded:
            p.append(lambda m: m.status not in excluded)
        for key, attr in (
            ("not_id", "system_id"),
            ("not_hostname", "hostname"),
            ("not_agent_name", "agent_name"),
        ):
            values = set(form.getlist(key))
            if values:
                p.append(lambda m, a=attr, vs=values: getattr(m, a) not in vs)  # type: ignore[misc]
        not_domains = set(form.getlist("not_domain"))
        if not_domains:
            skip = {d.id for d in state.domains.values() if d.name in not_domains}
            p.append(lambda m: m.domain_id not in skip)
    _owner_power_target(form, c, errors)
    if not acquire:
        macs = {v.lower() for v in form.getlist("mac_address")}
        if macs:
            p.append(lambda m: any(i.mac_address.lower() in macs for i in m.interfaces))
        domains = set(form.getlist("domain"))
        if domains:
            ids_ = {d.id for d in state.domains.values() if d.name in domains}
            p.append(lambda m: m.domain_id in ids_)

    cpu = _numbers(form, "cpu_count", "Invalid CPU count: number required.")
    if cpu is not None:
        c.cpu_count = int(cpu)
        p.append(lambda m: m.cpu_count >= cpu)
        c.described["cpu_count"] = _fmt_number(cpu)
    mem = _numbers(form, "mem", "Invalid memory: number of MiB required.")
    if mem is not None:
        c.mem = int(mem)
        p.append(lambda m: m.memory >= mem)
        c.described["mem"] = _fmt_number(mem)
    speed = _numbers(form, "cpu_speed", "Invalid CPU speed: number required.")
    if speed is not None:
        p.append(lambda m: m.cpu_speed >= speed)
        c.described["cpu_speed"] = _fmt_number(speed)

    arches = [v for v in form.getlist("arch") if v]
    if arches:
        known = known_architectures(state)
        expanded: set[str] = set()
        for a in arches:
            hits = {k for k in known if k == a or k.split("/", 1)[0] == a}
            if not hits:
                errors["arch"] = ["Architecture not recognised."]
            expanded |= hits
        c.arch = min(expanded) if expanded else None
        p.append(lambda m: m.architecture in expanded)
        c.described["arch"] = ",".join(sorted(expanded))
    not_arches = [v for v in form.getlist("not_arch") if v]
    if not_arches:
        known = known_architectures(state)
        shunned: set[str] = set()
        for a in not_arches:
            hits = {k for k in known if k == a or k.split("/", 1)[0] == a}
            if not hits:
                errors["not_arch"] = ["Architecture not recognised."]
            shunned |= hits
        p.append(lambda m: m.architecture not in shunned)
        c.described["not_arch"] = ",".join(sorted(shunned))

    _tags(state, form, c, errors, acquire)
    _zones_pools(state, form, c, errors, acquire)
    _pods(form, c, state)
    _storage(form, c, errors)
    _interfaces(state, form, c, errors)
    _subnets(state, form, c)
    _fabrics_vlans(state, form, c)
    _link_speed_devices(form, c, errors)
    if errors:
        raise HttpError(400, errors)
    return c


def _choice_error(raw: str) -> list[str]:
    return [f"Select a valid choice. {raw} is not one of the available choices."]


def _statuses(form: FormData, key: str, simple_key: str, errors: dict[str, list[str]]) -> set[NodeStatus]:
    """``status``/``simple_status`` (or their ``not_`` forms): choices, a leading ``=`` allowed."""
    statuses: set[NodeStatus] = set()
    for raw in form.getlist(key):
        name = raw.lstrip("=").lower()
        if name not in ANY_STATUS_BY_NAME:
            errors[key] = _choice_error(raw)
        else:
            statuses.add(ANY_STATUS_BY_NAME[name])
    for raw in form.getlist(simple_key):
        if raw.lstrip("=").lower() not in SIMPLE_STATUS:
            errors[simple_key] = _choice_error(raw)
        else:
            statuses |= SIMPLE_STATUS[raw.lstrip("=").lower()]
    return statuses


def _owner_power_target(form: FormData, c: Constraints, errors: dict[str, list[str]]) -> None:
    """``owner``/``not_owner``, ``power_state``/``not_power_state`` and ``deployment_target``/
    ``not_deployment_target`` (``disk`` or ``memory``, i.e. ``ephemeral_deploy``)."""
    for key, negate in (("owner", False), ("not_owner", True)):
        owners = set(form.getlist(key))
        if owners:
            c.predicates.append(lambda m, vs=owners, n=negate: (m.owner in vs) != n)  # type: ignore[misc]
            c.described[key] = ",".join(sorted(owners))
    for key, negate in (("power_state", False), ("not_power_state", True)):
        states = {v.lstrip("=").lower() for v in form.getlist(key)}
        bad = [v for v in form.getlist(key) if v.lstrip("=").lower() not in POWER_STATES]
        if bad:
            errors[key] = _choice_error(bad[0])
        elif states:
            c.predicates.append(lambda m, vs=states, n=negate: (m.power_state in vs) != n)  # type: ignore[misc]
            c.described[key] = ",".join(sorted(states))
    for key, negate in (("deployment_target", False), ("not_deployment_target", True)):
        raw = form.getlist(key)
        bad = [v for v in raw if v.lstrip("=").lower() not in DEPLOYMENT_TARGETS]
        if bad:
            errors[key] = _choice_error(bad[0])
        elif raw:
            wanted = {DEPLOYMENT_TARGETS[v.lstrip("=").lower()] for v in raw}
            c.predicates.append(lambda m, w=wanted, n=negate: (m.ephemeral_deploy in w) != n)  # type: ignore[misc]
            c.described[key] = ",".join(sorted(v.lstrip("=").lower() for v in raw))


def _vlan_matches(spec: str, vlan: tuple[int, int, str]) -> bool:
    """A VLAN specifier against (fabric id, vid, name): its id (``id:5000``/``5000``), ``vid:<n>`` or
    ``name:<untagged|n|its name>``."""
    kind, sep, value = spec.partition(":")
    if not sep:
        kind, value = "id", spec
    fabric_id, vid, name = vlan
    return (kind, value) in (("id", str(vlan_id(fabric_id, vid))), ("vid", str(vid)), ("name", name))


def iface_vlan(state: State, i: Interface) -> tuple[Fabric, int, str]:
    """The fabric, vid and VLAN name of the VLAN an interface is on (``State.iface_vlan``)."""
    fabric_id, vid = state.iface_vlan(i)
    fabric = state.fabric(fabric_id)
    return fabric, vid, vlan_name(vid, fabric.vlans.get(vid, ""))


def _fabrics_vlans(state: State, form: FormData, c: Constraints) -> None:
    """``fabrics``/``fabric_classes``/``vlans`` (any interface on one) and their ``not_`` forms."""

    def fabrics_of(m: Machine) -> list[Fabric]:
        return [iface_vlan(state, i)[0] for i in m.interfaces]

    fabrics, not_fabrics = set(form.getlist("fabrics")), set(form.getlist("not_fabrics"))
    if fabrics:
        c.predicates.append(lambda m: any(f.name in fabrics for f in fabrics_of(m)))
    if not_fabrics:
        c.predicates.append(lambda m: not any(f.name in not_fabrics for f in fabrics_of(m)))
    classes, not_classes = set(form.getlist("fabric_classes")), set(form.getlist("not_fabric_classes"))
    if classes:
        c.predicates.append(lambda m: any(f.class_type in classes for f in fabrics_of(m)))
    if not_classes:
        c.predicates.append(lambda m: not any(f.class_type in not_classes for f in fabrics_of(m)))
    vlans, not_vlans = form.getlist("vlans"), form.getlist("not_vlans")
    if vlans or not_vlans:

        def on(m: Machine, specs: list[str]) -> bool:
            mine = {(f.id, vid, name) for f, vid, name in (iface_vlan(state, i) for i in m.interfaces)}
            return any(_vlan_matches(spec, v) for spec in specs for v in mine)

        if vlans:
            c.predicates.append(lambda m: all(on(m, [spec]) for spec in vlans))
        if not_vlans:
            c.predicates.append(lambda m: not on(m, not_vlans))
    for key in ("fabrics", "not_fabrics", "fabric_classes", "not_fabric_classes", "vlans", "not_vlans"):
        if form.getlist(key):
            c.described[key] = ",".join(form.getlist(key))


def _link_speed_devices(form: FormData, c: Constraints, errors: dict[str, list[str]]) -> None:
    """``link_speed``: some interface at least this fast (Mbit/s). ``devices``: one ``key=value,...`` value
    (a CharField: the last one sent counts) whose keys must all be ``DEVICE_CONSTRAINT_NAMES`` (M
    ``devices_validator``, l.191-195) and must all hold for ONE node device, case-insensitively
    (``filter_by_devices``, l.1310-1318: a repeated key keeps its last value)."""
    speed = _numbers(form, "link_speed", "Invalid link speed: number required.")
    if speed is not None:
        c.predicates.append(
            lambda m: any(i.type == "physical" and i.link_speed >= speed for i in m.interfaces)
        )
        c.described["link_speed"] = _fmt_number(speed)
    devices = form.get("devices")
    if not devices:
        return
    wanted: dict[str, str] = {}
    for chunk in devices.split(","):
        key, eq, value = chunk.partition("=")
        if key not in DEVICE_KEYS:
            errors["devices"] = [
                f"Unknown devices constraint: '{key}"
            ]  # sic: MAAS's text has no closing quote
            return
        if eq:
            wanted[key] = value.lower()
    c.devices = wanted
    c.predicates.append(lambda m: match_devices(m, wanted) is not None)
    c.described["devices"] = devices


#: ``DEVICE_CONSTRAINT_NAMES`` (M ``node_constraint_filter_forms.py:137-143``).
DEVICE_KEYS = frozenset({"vendor_id", "product_id", "vendor_name", "product_name", "commissioning_driver"})


def match_devices(m: Machine, wanted: dict[str, str]) -> list[int] | None:
    """The machine's devices matching every key (``__iexact``), or None when none does."""
    hits = [d.id for d in m.node_devices if all(getattr(d, k).lower() == v for k, v in wanted.items())]
    return hits or None


LINK_SPEED = 10000  # every simulated physical NIC (serialize.interface_json)


def _tags(state: State, form: FormData, c: Constraints, errors: dict[str, list[str]], acquire: bool) -> None:
    tags = [t.strip() for v in form.getlist("tags") for t in v.replace(",", " ").split() if t.strip()]
    not_tags = [t.strip() for v in form.getlist("not_tags") for t in v.replace(",", " ").split() if t.strip()]
    unknown = [t for t in tags if t not in state.tags]
    if unknown:
        errors["tags"] = ["No such tag(s): " + ", ".join(repr(t) for t in unknown) + "."]
    if tags:
        c.tags = tags
        required = frozenset(tags)
        c.predicates.append(lambda m: required <= m.tags)
        c.described["tags"] = ",".join(tags)
    if not_tags:
        c.not_tags = not_tags
        forbidden = frozenset(not_tags)
        c.predicates.append(lambda m: not (forbidden & m.tags))
        c.described["not_tags"] = ",".join(not_tags)


def _zones_pools(
    state: State, form: FormData, c: Constraints, errors: dict[str, list[str]], acquire: bool
) -> None:
    for key, kind, lookup in (
        ("zone", "zone", state.zone_by_name),
        ("pool", "pool", state.pool_by_name),
    ):
        values = [v for v in form.getlist(key) if v]
        if not values:
            continue
        found = [lookup(v) for v in values]
        missing = [v for v, f in zip(values, found, strict=True) if f is None]
        if missing:  # both forms: zone and pool are multiple-choice fields in MAAS 3.7 (a list -> "(s)")
            errors[key] = [f"No such {kind}(s): {', '.join(missing)}."]
            continue
        wanted = {f.id for f in found if f is not None}
        attr = f"{key}_id"
        c.predicates.append(lambda m, a=attr, w=wanted: getattr(m, a) in w)  # type: ignore[misc]
        c.described[key] = ",".join(values)
        if key == "zone":
            c.zone = values[0]
        else:
            c.pool = values[0]
    for key, kind, lookup in (
        ("not_in_zone", "zone", state.zone_by_name),
        ("not_in_pool", "pool", state.pool_by_name),
    ):
        values = [v for v in form.getlist(key) if v]
        if not values:
            continue
        missing = [v for v in values if lookup(v) is None]
        if missing:
            errors[key] = [f"No such {kind}(s): {', '.join(missing)}."]
            continue
        excluded = {f.id for v in values if (f := lookup(v)) is not None}
        attr = "zone_id" if kind == "zone" else "pool_id"
        c.predicates.append(lambda m, a=attr, x=excluded: getattr(m, a) not in x)  # type: ignore[misc]
        c.described[key] = ",".join(sorted(values))


def _pods(form: FormData, c: Constraints, state: State) -> None:
    """3.7 matches these against the machine's BMC: a VM's BMC is its pod (name, type ``lxd``/``virsh``); bare
    metal's BMC has no pod name and the machine's power type. So ``not_pod_type=lxd`` keeps bare metal."""

    def pod_name(m: Machine) -> str | None:
        host = state.vm_hosts.get(m.pod_id) if m.pod_id is not None else None
        return host.name if host else None

    def bmc_type(m: Machine) -> str | None:
        host = state.vm_hosts.get(m.pod_id) if m.pod_id is not None else None
        return host.type if host else m.power_type

    for key, fn, negate in (
        ("pod", pod_name, False),
        ("not_pod", pod_name, True),
        ("pod_type", bmc_type, False),
        ("not_pod_type", bmc_type, True),
    ):
        values = frozenset(form.getlist(key))
        if values:
            c.pods[key] = values
            c.predicates.append(lambda m, f=fn, vs=values, n=negate: (f(m) in vs) != n)  # type: ignore[misc]
            c.described[key] = ",".join(sorted(values))


def pod_allowed(c: Constraints, name: str, type_: str, tags: set[str]) -> bool:
    """Whether allocate may compose on this VM host (``get_allocated_composed_machine``'s pod filters)."""
    p = c.pods
    if ("pod" in p and name not in p["pod"]) or ("pod_type" in p and type_ not in p["pod_type"]):
        return False
    if name in p.get("not_pod", ()) or type_ in p.get("not_pod_type", ()):
        return False
    # ``tags__contains`` both ways: the host has every wanted tag, and is left out if it has all not_tags.
    return set(c.tags) <= tags and not (c.not_tags and set(c.not_tags) <= tags)


def split_outside_parens(value: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def parse_storage(value: str) -> list[StorageGroup] | None:
    groups = []
    for n, item in enumerate(split_outside_parens(value)):
        match = STORAGE_RE.match(item.strip())
        if not match:
            return None
        try:
            size = int(float(match["size"]) * 1000**3)
        except ValueError:
            return None
        tags = frozenset(t.strip() for t in (match["tags"] or "").split(",") if t.strip())
        groups.append(StorageGroup(match["label"] or str(n), size, tags))
    return groups


#: MAAS's ``STORAGE_REGEX`` (l.69-74), unanchored: ``storage_validator`` finds the groups and re-renders them.
MAAS_STORAGE_RE = re.compile(r"(?:(?P<label>[a-zA-Z0-9]+)\:)?(?P<size>[0-9.]+)(?:\((?P<tags>[^)]+)\))?")


def storage_valid(value: str) -> bool:
    """``storage_validator`` (l.77-103): the value is exactly its parsed groups joined by commas."""
    groups = MAAS_STORAGE_RE.findall(value)
    rendered = [(f"{n}:" if n else "") + size + (f"({tags})" if tags else "") for n, size, tags in groups]
    return bool(groups) and ",".join(rendered) == value


def _storage(form: FormData, c: Constraints, errors: dict[str, list[str]]) -> None:
    value = form.get("storage")
    if not value:
        return
    groups = parse_storage(value) if storage_valid(value) else None
    if groups is None:
        errors["storage"] = [f'Malformed storage constraint, "{value}".']
        return
    for g, (label, _, _) in zip(groups, MAAS_STORAGE_RE.findall(value), strict=True):
        g.named = bool(label)
    c.storage = groups
    c.predicates.append(lambda m: match_storage(m, groups) is not None)
    c.described["storage"] = value


def match_storage(m: Machine, groups: list[StorageGroup]) -> dict[str, list[int]] | None:
    """``nodes_by_storage`` (l.343-528): the first group is the disk holding ``/`` (here the boot disk, the
    first, where the default flat layout puts it), the others each an unused disk of the rest, the smallest
    that fits, the groups with most tags first. A ``partition`` tag asks for a partition, which no simulated
    machine has. None when the machine cannot satisfy them all; else label -> [disk id] for named groups."""
    if not m.disks or any("partition" in g.tags for g in groups):
        return None
    head, *tail = groups
    root = m.disks[0]
    if root.size < head.size or not head.tags <= set(root.tags):
        return None
    matched: list[tuple[StorageGroup, int]] = [(head, root.id)]
    used = {root.id}
    for g in sorted(tail, key=lambda g: len(g.tags), reverse=True):
        fits = sorted(
            (d for d in m.disks if d.id not in used and d.size >= g.size and g.tags <= set(d.tags)),
            key=lambda d: d.size,
        )
        if not fits:
            return None
        used.add(fits[0].id)
        matched.append((g, fits[0].id))
    out: dict[str, list[int]] = {}
    for g, disk_id in matched:
        if g.named:
            out.setdefault(g.label, []).append(disk_id)
    return out


#: ``NETWORKING_CONSTRAINT_NAMES`` (M ``node_constraint_filter_forms.py:106-134``).
INTERFACE_KEYS = frozenset(
    {
        "id", "not_id", "fabric", "not_fabric", "fabric_class", "not_fabric_class", "ip", "not_ip", "mode",
        "name", "not_name", "hostname", "not_hostname", "subnet", "not_subnet", "space", "not_space",
        "subnet_cidr", "not_subnet_cidr", "type", "vlan", "not_vlan", "vid", "not_vid", "tag", "not_tag",
        "link_speed",
    }
)  # fmt: skip
_LABEL_RE = re.compile(r"[a-zA-Z0-9]+[a-zA-Z0-9_-]*$")


def parse_labeled_map(value: str) -> list[tuple[str, dict[str, list[str]]]]:
    """``parse_labeled_constraint_map`` (M ``provisioningserver/utils/constraints.py:49-120``), its texts as
    ValueError: ``label:key=value[,key=value];label2:...``, labels unique, a key may repeat."""
    if len(value) <= 1:
        return []
    out: list[tuple[str, dict[str, list[str]]]] = []
    for constraint in value.split(";"):
        label, sep, rest = constraint.partition(":")
        if not sep:
            raise ValueError(
                f"Malformed constraint: '{constraint}' (required format: "
                "'<label>:<key>=<value>[,<key2>=<value2>[,...]]')"
            )
        if not _LABEL_RE.match(label):
            raise ValueError(
                f"Invalid label name: '{label}' (Must begin with an alphanumeric character, and include only "
                "alphanumeric characters, dashes, and underscores.)"
            )
        if any(label == seen for seen, _ in out):
            raise ValueError(f"Constraint label defined more than once: '{label}'")
        pairs: dict[str, list[str]] = {}
        for kvp in rest.split(","):
            key, eq, val = kvp.partition("=")
            if not eq:
                raise ValueError(f"Malformed key/value pair in constraint: '{kvp}'")
            pairs.setdefault(key, []).append(val)
        out.append((label, pairs))
    return out


def _interfaces(state: State, form: FormData, c: Constraints, errors: dict[str, list[str]]) -> None:
    """``interfaces``: the map must parse, then every key be a networking constraint name (the field's
    validators in that order, l.614-629 and 176-188)."""
    value = form.get("interfaces")
    if not value or not value.strip():
        return
    try:
        labeled = parse_labeled_map(value)
    except ValueError as exc:
        errors["interfaces"] = [str(exc)]
        return
    for _, pairs in labeled:
        unknown = next((k for k in pairs if k not in INTERFACE_KEYS), None)
        if unknown is not None:
            errors["interfaces"] = [f"Unknown interfaces constraint: '{unknown}"]  # sic: no closing quote
            return
    modes = {v.strip().lower() for _, pairs in labeled for v in pairs.get("mode", [])}
    if modes - {"unconfigured"}:  # raised while filtering, outside the form: a plain-text 400
        raise HttpError(400, "The only valid value for 'mode' is 'unconfigured'.")
    if not labeled:
        return
    c.interfaces = labeled
    c.predicates.append(lambda m: match_interfaces(state, m, labeled) is not None)
    c.described["interfaces"] = value


def _iface_value(state: State, m: Machine, i: Interface, key: str, want: str) -> bool:
    """One interface key (``InterfaceQueriesMixin.get_specifiers_q``, M ``models/interface.py:96-185``). An
    interface's VLAN is ``State.iface_vlan``'s; its space is its subnet's."""
    subnet = state.subnets.get(i.subnet_id) if i.subnet_id is not None else None
    fabric, vid, name = iface_vlan(state, i)
    if key == "id":
        return want.strip().isdigit() and int(want) == i.id
    if key == "name":
        return i.name == want
    if key == "hostname":
        return m.hostname == want
    if key == "type":
        return i.type == want
    if key == "ip":
        return i.ip == want
    if key == "mode":
        return not i.ip
    if key == "fabric":
        return want in (fabric.name, str(fabric.id))
    if key == "fabric_class":
        return fabric.class_type == want
    if key == "space":
        return (subnet.space if subnet is not None else "undefined") == want
    if key == "vlan":
        return _vlan_matches(want, (fabric.id, vid, name))
    if key == "vid":
        return want.strip().isdigit() and int(want) == vid
    if key == "subnet":
        return subnet is not None and want in (
            subnet.cidr,
            subnet.name,
            str(subnet.id),
            f"id:{subnet.id}",
            f"cidr:{subnet.cidr}",
            f"name:{subnet.name}",
            f"space:{subnet.space}",
            f"vid:{subnet.vid}",
        )
    if key == "subnet_cidr":
        return subnet is not None and subnet.cidr == want
    if key == "tag":
        return set(want.split("&&")) <= set(i.tags)
    if key == "link_speed":
        try:
            return i.type == "physical" and i.link_speed >= float(want)
        except ValueError:
            return False
    return False


def _iface_ok(state: State, m: Machine, i: Interface, pairs: dict[str, list[str]]) -> bool:
    """Every key holds (a ``not_`` key must not); a repeated key holds for any of its values."""
    for key, values in pairs.items():
        negate = key.startswith("not_")
        base = key[4:] if negate else key
        hit = any(_iface_value(state, m, i, base, v) for v in values)
        if hit == negate:
            return False
    return True


def match_interfaces(
    state: State, m: Machine, labeled: list[tuple[str, dict[str, list[str]]]]
) -> dict[str, list[int]] | None:
    """``nodes_by_interface`` (l.531-611): each label independently (two labels may match the same
    interface), label -> every matching interface id; None when some label matches none."""
    out: dict[str, list[int]] = {}
    for label, pairs in labeled:
        hits = [i.id for i in m.interfaces if _iface_ok(state, m, i, pairs)]
        if not hits:
            return None
        out[label] = hits
    return out


def _subnets(state: State, form: FormData, c: Constraints) -> None:
    for key, negate in (("subnets", False), ("not_subnets", True)):
        values = form.getlist(key)
        if not values:
            continue
        ids = {
            s.id
            for s in state.subnets.values()
            for v in values
            if v in (s.cidr, s.name, f"id:{s.id}", str(s.id), f"space:{s.space}")
        }
        if negate:
            c.predicates.append(lambda m, w=ids: not any(i.subnet_id in w for i in m.interfaces))  # type: ignore[misc]
        else:  # _match_all: on a subnet of every value given
            groups = [
                {
                    s.id
                    for s in state.subnets.values()
                    if v in (s.cidr, s.name, f"id:{s.id}", str(s.id), f"space:{s.space}", f"cidr:{s.cidr}")
                }
                for v in values
            ]
            c.predicates.append(
                lambda m, gs=groups: all(any(i.subnet_id in g for i in m.interfaces) for g in gs)  # type: ignore[misc]
            )
        c.described[key] = ",".join(sorted(values))
