"""Inventories: a YAML description of a MAAS (or a generated one) turned into simulator state.

The YAML shape (every section optional; see tools/src/capmaas_dev/simulator/inventories/sample.yaml)::

    zones: [{name, description}]            # "default" always exists
    pools: [{name, description}]            # "default" (id 0) always exists
    tags: [{name, comment, definition, kernel_opts}]
    domains: [{name, ttl, authoritative}]   # "maas" (id 0) always exists and is the default
    fabrics: [{name, class_type, vlans: [{vid, name}]}]   # "fabric-0" (id 0) always exists
    subnets: [{cidr, name, gateway_ip, dns_servers, fabric, vid, space,
               ranges: [{type: dynamic|reserved, start, end, comment}]}]
    boot_resources: [{name: ubuntu/jammy, architecture: amd64/generic, type: synced|uploaded, title}]
    users: [{username, api_key, admin, password}]
    machines: [{hostname, system_id, zone, pool, domain, arch, cpu_count, cpu_speed, memory, tags,
                disks: [{name, size, tags}],
                interfaces: [{name, mac, subnet, ip, tags, link_speed, fabric, vid}],
                devices: [{vendor_id, product_id, vendor_name, product_name, commissioning_driver,
                           bus: PCIE|USB, hardware_type: node|cpu|memory|storage|network|gpu, pci_address}],
                power_type, power_state, status, owner, commissioned}]
    vm_hosts: [{name, host (machine hostname), type, cores, memory, zone, pool, tags,
                cpu_over_commit_ratio, memory_over_commit_ratio,
                storage_pools: [{name, size, type, path, default}]}]

``arch`` is MAAS's ``arch/subarch`` (``arm64/generic``); allocate's ``arch=`` knows the architectures of the
boot resources and machines. ``devices`` are the PCI/USB devices commissioning found (allocate ``devices=``
matches them; a GPU is ``hardware_type: gpu``). Fabrics are listed in order (ids 0, 1, ...; the first is
``fabric-0`` unless named otherwise); a subnet is on VLAN ``vid`` (default 0) of its ``fabric`` (default the
first), and a VLAN a subnet names but its fabric does not declare is added to it. A NIC's VLAN and space are
its subnet's; an unlinked NIC is on fabric 0's untagged VLAN unless it names a ``fabric``/``vid`` (then
``link_subnet`` offers it only that VLAN's subnets, as MAAS does).

Sizes accept bytes or ``500G``/``2T`` (decimal, as MAAS counts storage); memory accepts MiB or ``16G`` (GiB).

Networking as MAAS sets it up when it commissions a machine: an interface with ``subnet`` and ``ip`` has a
static address; with ``subnet`` alone it is an AUTO link (an address from the subnet when deployment starts,
given back on release); without ``subnet`` it is linked to nothing, and MAAS refuses to deploy a machine none
of whose interfaces is linked. A machine without ``interfaces`` gets ``eth0`` AUTO-linked to the first subnet,
and an inventory with machines but no ``subnets`` gets one (``10.250.0.0/16``: a MAAS that can deploy always
has its rack's network). ``disks: []`` is a disk-less machine (MAAS deploys those to memory:
``ephemeral_deploy``). A ``manual`` power type keeps its ``power_state`` (default ``unknown``): MAAS neither
switches nor queries it. ``commissioned: false`` (default for status ``new``) makes a release end in New, as
MAAS's ``_finalize_release`` does when commissioning never passed.
"""

from __future__ import annotations

import ipaddress
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from capmaas_dev.simulator.models import (
    ANY_STATUS_BY_NAME,
    BootResource,
    Disk,
    Domain,
    Fabric,
    Interface,
    IpRange,
    Machine,
    NodeDevice,
    NodeStatus,
    Pool,
    StoragePool,
    Subnet,
    Tag,
    VmHost,
    Zone,
)
from capmaas_dev.simulator.state import State

#: The sample inventories shipped with the simulator as package data (``capmaas simulate --inventory sample``,
#: the demo's default): ``sample`` (3 zones, 12 machines of varied sizes and tags) and ``lxd`` (VM hosts).
INVENTORIES = Path(__file__).resolve().parent / "inventories"
SAMPLE_INVENTORY = INVENTORIES / "sample.yaml"
LXD_INVENTORY = INVENTORIES / "lxd.yaml"
#: libyaml's safe loader where PyYAML was built with it: the same YAML 1.1 safe subset as ``yaml.SafeLoader``,
#: parsed in C. Every simulator a test builds reads an inventory file, and the pure-Python parser was the
#: largest single cost of the simulator tests (docs/benchmarks/test-durations.md, "The xdist workers' CPU").
_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

SYSTEM_ID_ALPHABET = "abcdefghkmnpqrstwxy34678"
IP_RANGE_TYPES = ("dynamic", "reserved")


def _add_range(state: State, subnet: Subnet, entry: dict[str, Any]) -> None:
    """An IP range of ``subnet``: both ends inside it, in order (what MAAS's ``IPRangeForm`` insists on)."""
    where = f"subnets: {subnet.cidr}: ranges"
    kind = str(entry.get("type", ""))
    if kind not in IP_RANGE_TYPES:
        raise InventoryError(f"{where}: type must be dynamic or reserved, not {kind!r}")
    network = ipaddress.ip_network(subnet.cidr, strict=False)
    try:
        start = ipaddress.ip_address(str(_require(entry, "start", where)))
        end = ipaddress.ip_address(str(_require(entry, "end", where)))
    except ValueError as exc:
        raise InventoryError(f"{where}: {exc}") from exc
    if start not in network or end not in network or end < start:  # type: ignore[operator]
        raise InventoryError(f"{where}: {start}-{end} is not an ordered range inside {subnet.cidr}")
    rid = state.new_id("iprange")
    state.ip_ranges[rid] = IpRange(rid, subnet.id, kind, str(start), str(end), str(entry.get("comment", "")))


DEFAULT_SUBNET: dict[str, Any] = {"cidr": "10.250.0.0/16", "name": "default"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)B?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


class InventoryError(ValueError):
    """The inventory is malformed; the message names the offending entry."""


@dataclass(slots=True)
class UserSpec:
    username: str
    api_key: str | None = None
    admin: bool = False
    password: str | None = None


def parse_size(value: object, what: str) -> int:
    """Bytes from an int or a string like ``500G``/``1.5T`` (decimal) or ``64GiB`` (binary)."""
    if isinstance(value, bool):
        raise InventoryError(f"{what}: not a size: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise InventoryError(f"{what}: not a size: {value!r}")
    number, unit, binary = match.groups()
    base = 1024 if binary else 1000
    return int(float(number) * base ** _POWERS[unit.upper()])


def parse_memory(value: object, what: str) -> int:
    """MiB from an int (MiB) or a string like ``16G`` (GiB)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    size = parse_size(value if str(value)[-1:].lower() in "ib" else f"{value}iB", what)
    return size // (1024 * 1024)


def _require(entry: dict[str, Any], key: str, where: str) -> Any:
    if key not in entry:
        raise InventoryError(f"{where}: missing required field {key!r}")
    return entry[key]


def _list(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InventoryError(f"{key}: expected a list of mappings")
    return value


@dataclass
class Inventory:
    """A parsed inventory description; :meth:`build` turns it into fresh simulator state."""

    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, path: str | Path) -> Inventory:
        try:
            data = yaml.load(Path(path).read_text(), Loader=_LOADER)
        except yaml.YAMLError as exc:
            raise InventoryError(f"{path}: invalid YAML: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InventoryError(f"{path}: the top level must be a mapping")
        inventory = cls(data)
        inventory.build()  # validate now, so a bad file fails at load time with its message
        return inventory

    @classmethod
    def generate(cls, machines: int = 100, zones: int = 3, vmhosts: int = 0, seed: int = 0) -> Inventory:
        return cls(generate_data(machines=machines, zones=zones, vmhosts=vmhosts, seed=seed))

    def users(self) -> list[UserSpec]:
        out = []
        for entry in _list(self.data, "users"):
            out.append(
                UserSpec(
                    str(_require(entry, "username", "users")),
                    entry.get("api_key"),
                    bool(entry.get("admin", False)),
                    entry.get("password"),
                )
            )
        return out

    def build(self) -> State:
        state = State()
        state.zones[1] = Zone(1, "default", "")
        state.next_ids["zone"] = 2
        state.pools[0] = Pool(0, "default", "Default pool")
        state.domains[0] = Domain(0, "maas", None, True)
        for entry in _list(self.data, "zones"):
            name = str(_require(entry, "name", "zones"))
            if state.zone_by_name(name) is None:
                zid = state.new_id("zone")
                state.zones[zid] = Zone(zid, name, str(entry.get("description", "")))
        for entry in _list(self.data, "pools"):
            name = str(_require(entry, "name", "pools"))
            if state.pool_by_name(name) is None:
                pid = state.new_id("pool")
                state.pools[pid] = Pool(pid, name, str(entry.get("description", "")))
        for entry in _list(self.data, "tags"):
            name = str(_require(entry, "name", "tags"))
            state.tags[name] = Tag(
                name,
                str(entry.get("definition", "")),
                str(entry.get("comment", "")),
                str(entry.get("kernel_opts", "")),
            )
        for entry in _list(self.data, "domains"):
            name = str(_require(entry, "name", "domains"))
            if state.domain_by_name(name) is None:
                did = state.new_id("domain")
                state.domains[did] = Domain(
                    did, name, entry.get("ttl"), bool(entry.get("authoritative", True))
                )
        _fabrics(state, _list(self.data, "fabrics"))
        subnets = _list(self.data, "subnets")
        if not subnets and _list(self.data, "machines"):
            subnets = [DEFAULT_SUBNET]
        for entry in subnets:
            cidr = str(_require(entry, "cidr", "subnets"))
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise InventoryError(f"subnets: invalid cidr {cidr!r}") from exc
            sid = state.new_id("subnet")
            fabric = _subnet_fabric(state, entry)
            vid = int(entry.get("vid", 0))
            if not 0 <= vid <= 4094:
                raise InventoryError(f"subnets: {cidr}: vid must be 0-4094, not {vid}")
            fabric.vlans.setdefault(vid, "")
            state.subnets[sid] = Subnet(
                sid,
                str(entry.get("name", cidr)),
                cidr,
                entry.get("gateway_ip"),
                list(entry.get("dns_servers", [])),
                vid,
                str(entry.get("space", "undefined")),
                fabric_id=fabric.id,
                fabric=fabric.name,
                vlan_name=fabric.vlans[vid],
            )
            for r in entry.get("ranges") or []:
                _add_range(state, state.subnets[sid], r)
        for entry in _list(self.data, "boot_resources"):
            bid = state.new_id("boot")
            kind = str(entry.get("type", "synced")).capitalize()
            if kind not in ("Synced", "Uploaded"):
                raise InventoryError(f"boot_resources: type must be synced or uploaded, not {kind!r}")
            state.boot_resources[bid] = BootResource(
                bid,
                str(_require(entry, "name", "boot_resources")),
                str(entry.get("architecture", "amd64/generic")),
                kind,
                str(entry.get("title", "")),
                str(entry.get("base_image", "")),
            )
        rng = random.Random(0)
        for entry in _list(self.data, "machines"):
            state.add_machine(_machine(state, entry, rng))
        for m in state.machines.values():  # deployed before the simulator started: it has its addresses
            if m.status in (NodeStatus.DEPLOYED, NodeStatus.DEPLOYING):
                state.claim_auto_ips(m)
        for entry in _list(self.data, "vm_hosts"):
            _vm_host(state, entry)
        return state


def _fabrics(state: State, entries: list[dict[str, Any]]) -> None:
    """The ``fabrics`` section: ids in order from 0; each with its VLANs (vid 0 always)."""
    for n, entry in enumerate(entries):
        name = str(entry.get("name", f"fabric-{n}"))
        if any(f.name == name for f in state.fabrics.values()):
            raise InventoryError(f"fabrics: duplicate name {name!r}")
        class_type = entry.get("class_type")
        fabric = Fabric(n, name, None if class_type is None else str(class_type), {0: ""})
        for vlan in entry.get("vlans") or []:
            vid = int(_require(vlan, "vid", f"fabrics: {name}: vlans"))
            if not 0 <= vid <= 4094:
                raise InventoryError(f"fabrics: {name}: vid must be 0-4094, not {vid}")
            fabric.vlans[vid] = str(vlan.get("name") or "")
        state.fabrics[n] = fabric
    state.fabric(0)


def _subnet_fabric(state: State, entry: dict[str, Any]) -> Fabric:
    name = entry.get("fabric")
    if name is None:
        return state.fabric(0)
    found = next((f for f in state.fabrics.values() if f.name == str(name)), None)
    if found is None:
        raise InventoryError(f"subnets: {entry.get('cidr')}: no fabric named {name!r}")
    return found


def _nic_vlan(state: State, entry: dict[str, Any], where: str) -> tuple[int, int]:
    """An unlinked NIC's VLAN: ``fabric`` (name, default the first) and ``vid`` (default 0), declared."""
    name = str(entry.get("fabric", state.fabric(0).name))
    fabric = next((f for f in state.fabrics.values() if f.name == name), None)
    if fabric is None:
        raise InventoryError(f"{where}: interface {entry.get('name')}: no fabric named {name!r}")
    vid = int(entry.get("vid", 0))
    if vid not in state.vlans_of(fabric.id):
        raise InventoryError(f"{where}: interface {entry.get('name')}: fabric {name} has no VLAN {vid}")
    return (fabric.id, vid)


def new_system_id(state: State, rng: random.Random) -> str:
    while True:
        sid = "".join(rng.choice(SYSTEM_ID_ALPHABET) for _ in range(6))
        if sid not in state.machines:
            return sid


def _machine(state: State, entry: dict[str, Any], rng: random.Random) -> Machine:
    hostname = str(_require(entry, "hostname", "machines"))
    where = f"machines[{hostname}]"
    if hostname in state.by_hostname:
        raise InventoryError(f"{where}: duplicate hostname")
    sid = str(entry.get("system_id") or new_system_id(state, rng))
    if sid in state.machines:
        raise InventoryError(f"{where}: duplicate system_id {sid!r}")
    zone = state.zone_by_name(str(entry.get("zone", "default")))
    pool = state.pool_by_name(str(entry.get("pool", "default")))
    domain = state.domain_by_name(str(entry.get("domain", "maas")))
    if zone is None or pool is None or domain is None:
        raise InventoryError(f"{where}: unknown zone, pool or domain")
    tags = {str(t) for t in entry.get("tags", [])}
    for tag in sorted(tags - set(state.tags)):
        state.tags[tag] = Tag(tag)
    mid = state.new_id("machine")
    disks = []
    disk_entries = entry.get("disks")
    for n, d in enumerate([{"name": "sda", "size": "500G"}] if disk_entries is None else disk_entries):
        for tag in d.get("tags", []):
            state.tags.setdefault(str(tag), Tag(str(tag)))
        disks.append(
            Disk(
                state.new_id("disk"),
                str(d.get("name", f"sd{chr(97 + n)}")),
                parse_size(_require(d, "size", where), where),
                [str(t) for t in d.get("tags", [])],
            )
        )
    interfaces = []
    first_subnet = next(iter(state.subnets.values()), None)
    default_nic: dict[str, Any] = {"name": "eth0"}
    if first_subnet is not None:
        default_nic["subnet"] = first_subnet.cidr
    for n, i in enumerate(entry.get("interfaces") or [default_nic]):
        subnet_id = None
        if i.get("subnet") is not None:
            subnet = next((s for s in state.subnets.values() if i["subnet"] in (s.cidr, s.name)), None)
            if subnet is None:
                raise InventoryError(f"{where}: unknown subnet {i['subnet']!r}")
            subnet_id = subnet.id
        iid = state.new_id("interface")
        mac = str(i.get("mac") or f"52:54:00:{(iid >> 16) & 255:02x}:{(iid >> 8) & 255:02x}:{iid & 255:02x}")
        ip = i.get("ip")
        name = str(i.get("name", f"eth{n}"))
        nic_tags = [str(t) for t in i.get("tags", [])]
        vlan = _nic_vlan(state, i, where) if ("fabric" in i or "vid" in i) else None
        if vlan is not None and subnet_id is not None:
            raise InventoryError(f"{where}: interface {name}: a NIC with a subnet is on the subnet's VLAN")
        interfaces.append(
            Interface(
                iid,
                name,
                mac,
                subnet_id,
                ip,
                auto=subnet_id is not None and not ip,
                tags=nic_tags,
                link_speed=int(i.get("link_speed", 10000)),
                vlan=vlan,
            )
        )
    node_devices = [_node_device(state, d, where) for d in entry.get("devices") or []]
    status_name = str(entry.get("status", "ready")).lower()
    if status_name not in ANY_STATUS_BY_NAME:
        raise InventoryError(f"{where}: unknown status {status_name!r}")
    status = ANY_STATUS_BY_NAME[status_name]
    owner = entry.get("owner")
    if status in (NodeStatus.ALLOCATED, NodeStatus.DEPLOYED, NodeStatus.DEPLOYING) and not owner:
        owner = "admin"
    power_type = str(entry.get("power_type", "ipmi"))
    default_power = "on" if status is NodeStatus.DEPLOYED else "off"
    m = Machine(
        id=mid,
        system_id=sid,
        hostname=hostname,
        domain_id=domain.id,
        zone_id=zone.id,
        pool_id=pool.id,
        architecture=str(entry.get("arch", "amd64/generic")),
        cpu_count=int(entry.get("cpu_count", 4)),
        cpu_speed=int(entry.get("cpu_speed", 2400)),
        memory=parse_memory(entry.get("memory", 8192), where),
        disks=disks,
        interfaces=interfaces,
        tags=tags,
        node_devices=node_devices,
        power_type=power_type,
        power_state=str(entry.get("power_state", "unknown" if power_type == "manual" else default_power)),
        status=status,
        owner=owner,
        commissioned=bool(entry.get("commissioned", status is not NodeStatus.NEW)),
        status_message=status.label,  # MAAS shows its last event's text; the status is the closest
        hardware_uuid=f"{mid:08x}-0000-4000-8000-{sid.encode().hex():0>12}"[:36],
    )
    if status is NodeStatus.DEPLOYED:
        m.osystem, m.distro_series = "ubuntu", "jammy"
    return m


DEVICE_BUSES = ("PCIE", "USB")
HARDWARE_TYPES = ("node", "cpu", "memory", "storage", "network", "gpu")
_HEX4 = re.compile(r"^[0-9a-fA-F]{4}$")


def _node_device(state: State, d: dict[str, Any], where: str) -> NodeDevice:
    """A PCI/USB device as commissioning records it: ids are four hex digits (lower case, as LXD gives)."""
    vendor, product = str(_require(d, "vendor_id", where)), str(_require(d, "product_id", where))
    if not (_HEX4.match(vendor) and _HEX4.match(product)):
        raise InventoryError(f"{where}: devices: vendor_id and product_id are four hex digits")
    bus = str(d.get("bus", "PCIE")).upper()
    kind = str(d.get("hardware_type", "node")).lower()
    if bus not in DEVICE_BUSES or kind not in HARDWARE_TYPES:
        raise InventoryError(f"{where}: devices: bus is PCIE or USB, hardware_type one of {HARDWARE_TYPES}")
    return NodeDevice(
        state.new_id("node_device"),
        bus,
        vendor.lower(),
        product.lower(),
        str(d.get("vendor_name", "")),
        str(d.get("product_name", "")),
        str(d.get("commissioning_driver", "")),
        kind,
        d.get("pci_address"),
    )


def _vm_host(state: State, entry: dict[str, Any]) -> VmHost:
    name = str(_require(entry, "name", "vm_hosts"))
    where = f"vm_hosts[{name}]"
    host_sid = None
    backing = None
    if entry.get("host"):
        backing = state.by_hostname.get(str(entry["host"]))
        if backing is None:
            raise InventoryError(f"{where}: unknown backing machine {entry['host']!r}")
        host_sid = backing.system_id
    zone = state.zone_by_name(str(entry.get("zone"))) if entry.get("zone") else None
    pool = state.pool_by_name(str(entry.get("pool"))) if entry.get("pool") else None
    if (entry.get("zone") and zone is None) or (entry.get("pool") and pool is None):
        raise InventoryError(f"{where}: unknown zone or pool")
    if zone is None:
        zone = state.zones[backing.zone_id] if backing else state.default_zone
    if pool is None:
        pool = state.pools[backing.pool_id] if backing else state.pools[0]
    pools = []
    for n, p in enumerate(entry.get("storage_pools") or [{"name": "default", "size": "1T"}]):
        pname = str(p.get("name", f"pool{n}"))
        pools.append(
            StoragePool(
                state.new_id("storage_pool"),
                pname,
                parse_size(_require(p, "size", where), where),
                str(p.get("type", "dir")),
                str(p.get("path", f"/var/snap/lxd/common/lxd/storage-pools/{pname}")),
                bool(p.get("default", False)),
            )
        )
    if not any(p.default for p in pools):
        pools[0].default = True
    hid = state.new_id("vmhost")
    host = VmHost(
        id=hid,
        name=name,
        zone_id=zone.id,
        pool_id=pool.id,
        cores=int(entry.get("cores", backing.cpu_count if backing else 16)),
        memory=parse_memory(entry.get("memory", backing.memory if backing else 65536), where),
        storage_pools=pools,
        type=str(entry.get("type", "lxd")),
        tags=[str(t) for t in entry.get("tags", [])],
        cpu_over_commit_ratio=float(entry.get("cpu_over_commit_ratio", 1.0)),
        memory_over_commit_ratio=float(entry.get("memory_over_commit_ratio", 1.0)),
        host_system_id=host_sid,
        power_address=str(entry.get("power_address", f"https://{name}:8443")),
    )
    state.vm_hosts[hid] = host
    return host


SHAPES = [  # (cpu_count, memory MiB, disk GB, weight)
    (2, 4096, 120, 2),
    (4, 8192, 240, 4),
    (8, 16384, 480, 5),
    (16, 32768, 960, 4),
    (32, 131072, 1920, 2),
    (64, 262144, 3840, 1),
]
GEN_TAGS = ["ssd", "nvme", "gpu", "10g", "hdd", "storage"]


def generate_data(machines: int, zones: int, vmhosts: int, seed: int) -> dict[str, Any]:
    """A deterministic inventory of ``machines`` machines spread over ``zones`` zones; the first ``vmhosts``
    are deployed and back LXD VM hosts (one per machine, round-robin over the zones)."""
    if machines < 0 or zones < 1 or vmhosts < 0 or vmhosts > machines:
        raise InventoryError("generate: need machines >= vmhosts >= 0 and zones >= 1")
    rng = random.Random(seed)
    zone_names = [f"az{n + 1}" for n in range(zones)]
    network = ipaddress.ip_network("10.0.0.0/16" if machines < 60000 else "10.0.0.0/8")
    shapes = [s for s in SHAPES for _ in range(s[3])]
    out_machines: list[dict[str, Any]] = []
    out_hosts: list[dict[str, Any]] = []
    for n in range(machines):
        zone = zone_names[n % zones]
        if n < vmhosts:
            cpu, mem, disk = 64, 262144, 3840
            tags = ["vmhost"]
        else:
            cpu, mem, disk, _ = rng.choice(shapes)
            tags = sorted(rng.sample(GEN_TAGS, rng.randint(0, 2)))
        hostname = f"m{n + 1:05d}"
        out_machines.append(
            {
                "hostname": hostname,
                "zone": zone,
                "pool": "default" if n % 4 else "compute",
                "cpu_count": cpu,
                "memory": mem,
                "tags": tags,
                "disks": [{"name": "sda", "size": disk * 1000**3, "tags": ["ssd"] if "ssd" in tags else []}],
                "interfaces": [{"name": "eth0", "subnet": str(network), "ip": str(network[10 + n])}],
                "status": "deployed" if n < vmhosts else "ready",
            }
        )
        if n < vmhosts:
            out_hosts.append(
                {
                    "name": f"vmhost{n + 1:03d}",
                    "host": hostname,
                    "zone": zone,
                    "cores": cpu,
                    "memory": mem,
                    "cpu_over_commit_ratio": 4.0,
                    "memory_over_commit_ratio": 1.5,
                    "storage_pools": [{"name": "default", "size": disk * 1000**3}],
                    # An admin's hosts for every tenant (capmaas's shared tag, docs/security.md): the
                    # operator places a namespace's VMs only on hosts tagged for it or shared.
                    "tags": ["capmaas-shared"],
                }
            )
    return {
        "zones": [{"name": z} for z in zone_names],
        "pools": [{"name": "compute", "description": "Generated compute pool"}],
        "tags": [{"name": t} for t in [*GEN_TAGS, "vmhost"]],
        "subnets": [{"cidr": str(network), "name": "generated", "gateway_ip": str(network[1])}],
        "boot_resources": [
            {"name": "ubuntu/jammy", "architecture": "amd64/generic", "title": "22.04 LTS"},
            {"name": "ubuntu/noble", "architecture": "amd64/generic", "title": "24.04 LTS"},
        ],
        "machines": out_machines,
        "vm_hosts": out_hosts,
    }
