"""The simulator's records: what MAAS keeps in its database, reduced to what the API shows.

NODE_STATUS codes, labels and the legal transitions are MAAS 3.7's (``maascommon/enums/node.py``,
``maasserver/node_status.py``); they are data here so tests can check every edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class NodeStatus(IntEnum):
    NEW = 0
    COMMISSIONING = 1
    FAILED_COMMISSIONING = 2
    MISSING = 3
    READY = 4
    RESERVED = 5
    DEPLOYED = 6
    RETIRED = 7
    BROKEN = 8
    DEPLOYING = 9
    ALLOCATED = 10
    FAILED_DEPLOYMENT = 11
    RELEASING = 12
    FAILED_RELEASING = 13
    DISK_ERASING = 14
    FAILED_DISK_ERASING = 15
    RESCUE_MODE = 16
    ENTERING_RESCUE_MODE = 17
    FAILED_ENTERING_RESCUE_MODE = 18
    EXITING_RESCUE_MODE = 19
    FAILED_EXITING_RESCUE_MODE = 20
    TESTING = 21
    FAILED_TESTING = 22

    @property
    def label(self) -> str:
        return LABELS[self]


S = NodeStatus
LABELS: dict[NodeStatus, str] = {
    S.NEW: "New",
    S.COMMISSIONING: "Commissioning",
    S.FAILED_COMMISSIONING: "Failed commissioning",
    S.MISSING: "Missing",
    S.READY: "Ready",
    S.RESERVED: "Reserved",
    S.DEPLOYED: "Deployed",
    S.RETIRED: "Retired",
    S.BROKEN: "Broken",
    S.DEPLOYING: "Deploying",
    S.ALLOCATED: "Allocated",
    S.FAILED_DEPLOYMENT: "Failed deployment",
    S.RELEASING: "Releasing",
    S.FAILED_RELEASING: "Releasing failed",
    S.DISK_ERASING: "Disk erasing",
    S.FAILED_DISK_ERASING: "Failed disk erasing",
    S.RESCUE_MODE: "Rescue mode",
    S.ENTERING_RESCUE_MODE: "Entering rescue mode",
    S.FAILED_ENTERING_RESCUE_MODE: "Failed to enter rescue mode",
    S.EXITING_RESCUE_MODE: "Exiting rescue mode",
    S.FAILED_EXITING_RESCUE_MODE: "Failed to exit rescue mode",
    S.TESTING: "Testing",
    S.FAILED_TESTING: "Failed testing",
}

TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    S.NEW: frozenset(
        {S.COMMISSIONING, S.READY, S.TESTING, S.BROKEN, S.MISSING, S.RETIRED, S.ENTERING_RESCUE_MODE}
    ),
    S.COMMISSIONING: frozenset(
        {S.READY, S.FAILED_COMMISSIONING, S.NEW, S.BROKEN, S.MISSING, S.RETIRED, S.TESTING}
    ),
    S.FAILED_COMMISSIONING: frozenset({S.COMMISSIONING, S.TESTING, S.BROKEN, S.MISSING, S.RETIRED, S.NEW}),
    S.MISSING: frozenset({S.NEW, S.READY, S.ALLOCATED, S.DEPLOYED, S.BROKEN, S.COMMISSIONING}),
    S.READY: frozenset(
        {
            S.ALLOCATED,
            S.RESERVED,
            S.COMMISSIONING,
            S.TESTING,
            S.ENTERING_RESCUE_MODE,
            S.RETIRED,
            S.MISSING,
            S.BROKEN,
        }
    ),
    S.RESERVED: frozenset({S.READY, S.ALLOCATED, S.RELEASING, S.BROKEN, S.MISSING, S.RETIRED}),
    S.ALLOCATED: frozenset(
        {
            S.DEPLOYING,
            S.READY,
            S.RELEASING,
            S.DISK_ERASING,
            S.BROKEN,
            S.MISSING,
            S.RETIRED,
            S.ENTERING_RESCUE_MODE,
            S.TESTING,
        }
    ),
    S.DEPLOYING: frozenset(
        {
            S.DEPLOYED,
            S.FAILED_DEPLOYMENT,
            S.ALLOCATED,
            S.READY,
            S.RELEASING,
            S.DISK_ERASING,
            S.BROKEN,
            S.MISSING,
        }
    ),
    S.DEPLOYED: frozenset(
        {
            S.RELEASING,
            S.DISK_ERASING,
            S.READY,
            S.ALLOCATED,
            S.BROKEN,
            S.MISSING,
            S.ENTERING_RESCUE_MODE,
            S.TESTING,
        }
    ),
    S.FAILED_DEPLOYMENT: frozenset(
        {
            S.RELEASING,
            S.DISK_ERASING,
            S.READY,
            S.ALLOCATED,
            S.BROKEN,
            S.MISSING,
            S.ENTERING_RESCUE_MODE,
            S.TESTING,
        }
    ),
    S.RELEASING: frozenset(
        {
            S.READY,
            S.NEW,
            S.FAILED_RELEASING,
            S.FAILED_DISK_ERASING,
            S.BROKEN,
            S.MISSING,
            S.ALLOCATED,
            S.RESERVED,
            S.DEPLOYED,
            S.FAILED_DEPLOYMENT,
        }
    ),
    S.FAILED_RELEASING: frozenset({S.RELEASING, S.DISK_ERASING, S.READY, S.BROKEN, S.MISSING}),
    S.DISK_ERASING: frozenset({S.READY, S.RELEASING, S.FAILED_DISK_ERASING, S.BROKEN}),
    S.FAILED_DISK_ERASING: frozenset({S.DISK_ERASING, S.RELEASING, S.READY, S.BROKEN, S.MISSING}),
    S.BROKEN: frozenset(
        {S.READY, S.DEPLOYED, S.COMMISSIONING, S.RELEASING, S.DISK_ERASING, S.ENTERING_RESCUE_MODE, S.TESTING}
    ),
    S.RETIRED: frozenset({S.NEW, S.READY, S.BROKEN, S.MISSING}),
    S.TESTING: frozenset({S.READY, S.FAILED_TESTING, S.NEW, S.DEPLOYED, S.BROKEN, S.MISSING}),
    S.FAILED_TESTING: frozenset({S.TESTING, S.READY, S.BROKEN, S.MISSING, S.COMMISSIONING}),
    S.ENTERING_RESCUE_MODE: frozenset({S.RESCUE_MODE, S.FAILED_ENTERING_RESCUE_MODE, S.BROKEN}),
    S.FAILED_ENTERING_RESCUE_MODE: frozenset({S.ENTERING_RESCUE_MODE, S.BROKEN, S.READY}),
    S.RESCUE_MODE: frozenset({S.EXITING_RESCUE_MODE, S.BROKEN}),
    S.EXITING_RESCUE_MODE: frozenset({S.READY, S.DEPLOYED, S.FAILED_EXITING_RESCUE_MODE, S.BROKEN}),
    S.FAILED_EXITING_RESCUE_MODE: frozenset({S.EXITING_RESCUE_MODE, S.BROKEN}),
}

RELEASABLE = frozenset(
    {
        S.ALLOCATED,
        S.RESERVED,
        S.BROKEN,
        S.DEPLOYING,
        S.DEPLOYED,
        S.FAILED_DEPLOYMENT,
        S.FAILED_DISK_ERASING,
        S.FAILED_RELEASING,
    }
)
ABORTABLE = frozenset({S.DISK_ERASING, S.COMMISSIONING, S.DEPLOYING, S.TESTING})
# Statuses in which a machine belongs to somebody (used by the invariant check).
OWNED = frozenset({S.ALLOCATED, S.DEPLOYING, S.DEPLOYED, S.FAILED_DEPLOYMENT, S.RELEASING})
#: ``ALLOCATED_NODE_STATUSES`` (M ``maasserver/enum.py:152-165``): where the acquired filesystems count.
ALLOCATED_STATES = frozenset(
    {
        S.ALLOCATED,
        S.DEPLOYING,
        S.DEPLOYED,
        S.FAILED_DEPLOYMENT,
        S.RELEASING,
        S.FAILED_RELEASING,
        S.DISK_ERASING,
        S.FAILED_DISK_ERASING,
        S.RESCUE_MODE,
        S.ENTERING_RESCUE_MODE,
        S.FAILED_ENTERING_RESCUE_MODE,
        S.EXITING_RESCUE_MODE,
        S.FAILED_EXITING_RESCUE_MODE,
        S.TESTING,
        S.FAILED_TESTING,
    }
)
ANY_STATUS_BY_NAME: dict[str, NodeStatus] = {s.name.lower(): s for s in NodeStatus}


@dataclass(slots=True)
class Zone:
    id: int
    name: str
    description: str = ""


@dataclass(slots=True)
class Pool:
    id: int
    name: str
    description: str = ""


@dataclass(slots=True)
class Tag:
    name: str
    definition: str = ""
    comment: str = ""
    kernel_opts: str = ""


@dataclass(slots=True)
class Domain:
    id: int
    name: str
    ttl: int | None = None
    authoritative: bool = True


@dataclass(slots=True)
class Subnet:
    id: int
    name: str
    cidr: str
    gateway_ip: str | None = None
    dns_servers: list[str] = field(default_factory=list)
    vid: int = 0
    space: str = "undefined"
    description: str = ""
    #: The fabric its VLAN is on (denormalised from :class:`Fabric` so a subnet renders without the state).
    fabric_id: int = 0
    fabric: str = "fabric-0"
    #: Its VLAN's name; empty: MAAS's default (``untagged`` for vid 0, else the vid).
    vlan_name: str = ""


@dataclass(slots=True)
class Fabric:
    """A fabric (M ``models/fabric.py``) and its VLANs by vid (their names; empty: MAAS's default name).

    A VLAN's id is :func:`vlan_id` of its fabric and vid: MAAS numbers VLAN rows from 5001; here fabric 0's
    VLANs are ``5000 + vid`` (what the one-fabric simulator always used) and fabric ``n``'s ``5000 * (n + 1)
    + vid`` (vids stay below 4095, so ids never collide)."""

    id: int
    name: str
    class_type: str | None = None
    vlans: dict[int, str] = field(default_factory=dict)


VLAN_ID_BASE = 5000
FabricVid = tuple[int, int]  # (fabric id, vid): a VLAN


def vlan_id(fabric_id: int, vid: int) -> int:
    return VLAN_ID_BASE * (fabric_id + 1) + vid


def vlan_name(vid: int, name: str = "") -> str:
    """MAAS's default VLAN name: ``untagged`` for vid 0, else the vid as text."""
    return name or ("untagged" if vid == 0 else str(vid))


@dataclass(slots=True)
class BootResource:
    id: int
    name: str
    architecture: str
    type: str = "Synced"
    title: str = ""
    base_image: str = ""
    subarches: str = "generic"


@dataclass(slots=True)
class Disk:
    id: int
    name: str
    size: int  # bytes
    tags: list[str] = field(default_factory=list)
    #: A composed VM's disk: the id of the VM host storage pool backing it (its ``storage_pool``).
    pool_id: int | None = None
    #: The filesystem made on the whole disk (``op=format``) outside an allocation (``acquired=False``).
    fs: Filesystem | None = None
    #: The ``acquired`` filesystem: the copy ``_create_acquired_filesystems`` makes at allocation, or one
    #: formatted while allocated. It is the effective one while the machine is allocated; release drops it.
    acquired_fs: Filesystem | None = None


#: ``FILESYSTEM_FORMAT_TYPE_CHOICES`` (M ``maasserver/enum.py:637-650``), in MAAS's order.
FORMAT_FSTYPES = ("ext2", "ext4", "xfs", "fat32", "vfat", "swap", "ramfs", "tmpfs", "btrfs", "zfsroot")


@dataclass(slots=True)
class Filesystem:
    """A ``Filesystem`` row on a whole block device (M ``models/filesystem.py``)."""

    fstype: str
    uuid: str
    label: str | None = None
    mount_point: str | None = None
    mount_options: str | None = None

    @property
    def mounted(self) -> bool:
        return self.mount_point is not None


@dataclass(slots=True)
class Interface:
    id: int
    name: str
    mac_address: str
    subnet_id: int | None = None
    ip: str | None = None
    #: An AUTO link: MAAS claims ``ip`` from the subnet when deployment starts and gives it back on release.
    auto: bool = False
    type: str = "physical"  # physical | bridge | bond | vlan
    parents: list[str] = field(default_factory=list)  # names of the parent interfaces (bridge, bond)
    params: dict[str, object] = field(default_factory=dict)
    #: The link's mode when it is not plain AUTO/STATIC: ``dhcp`` or ``link_up`` (None: derived)
    mode: str | None = None
    tags: list[str] = field(default_factory=list)
    #: Mbit/s the NIC reports (MAAS ``link_speed``; a physical NIC's, 0 for virtual ones in the JSON).
    link_speed: int = 10000
    #: The VLAN it is on when set explicitly (bonds, VLAN interfaces, their parents); None: its subnet's
    #: VLAN, or fabric 0's untagged VLAN when it has no subnet (``State.iface_vlan``).
    vlan: FabricVid | None = None


@dataclass(slots=True)
class DnsResource:
    id: int
    name: str
    domain_id: int
    ips: list[str] = field(default_factory=list)
    address_ttl: int | None = None
    #: Addresses it listed that were AUTO IPs since freed by a release: MAAS keeps the link to the address
    #: row, whose ``ip`` is now null, so the record shows one ``{"ip": null, ...}`` entry for each.
    released_ips: int = 0


@dataclass(slots=True)
class StoragePool:
    id: int
    name: str
    total: int  # bytes
    type: str = "dir"
    path: str = "/var/lib/lxd/storage-pools/default"
    default: bool = False


@dataclass(slots=True)
class VmHost:
    id: int
    name: str
    zone_id: int
    pool_id: int
    cores: int
    memory: int  # MiB
    storage_pools: list[StoragePool]
    type: str = "lxd"
    tags: list[str] = field(default_factory=list)
    cpu_over_commit_ratio: float = 1.0
    memory_over_commit_ratio: float = 1.0
    host_system_id: str | None = None
    architectures: list[str] = field(default_factory=lambda: ["amd64/generic"])
    power_address: str = ""
    default_macvlan_mode: str | None = None
    version: str = "5.21.1"
    # system_id -> (cores, memory MiB, {storage pool id: bytes})
    vms: dict[str, tuple[int, int, dict[int, int]]] = field(default_factory=dict)

    def used(self) -> tuple[int, int, dict[int, int]]:
        cores = sum(v[0] for v in self.vms.values())
        memory = sum(v[1] for v in self.vms.values())
        storage: dict[int, int] = {p.id: 0 for p in self.storage_pools}
        for _, _, disks in self.vms.values():
            for pool_id, size in disks.items():
                storage[pool_id] = storage.get(pool_id, 0) + size
        return cores, memory, storage


@dataclass(slots=True)
class NodeDevice:
    """A PCI or USB device commissioning found (M ``models/nodedevice.py``); allocate's ``devices=`` matches
    these. ``hardware_type`` is MAAS's name (``node``, ``cpu``, ``memory``, ``storage``, ``network``,
    ``gpu``)."""

    id: int
    bus: str  # PCIE | USB
    vendor_id: str
    product_id: str
    vendor_name: str = ""
    product_name: str = ""
    commissioning_driver: str = ""
    hardware_type: str = "node"
    pci_address: str | None = None


@dataclass(slots=True, eq=False)
class Machine:
    id: int
    system_id: str
    hostname: str
    domain_id: int
    zone_id: int
    pool_id: int
    architecture: str = "amd64/generic"
    cpu_count: int = 1
    cpu_speed: int = 2000
    memory: int = 1024
    disks: list[Disk] = field(default_factory=list)
    interfaces: list[Interface] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    node_devices: list[NodeDevice] = field(default_factory=list)
    power_type: str = "ipmi"
    power_state: str = "off"
    status: NodeStatus = NodeStatus.READY
    previous_status: NodeStatus = NodeStatus.READY
    owner: str | None = None
    agent_name: str = ""
    osystem: str = ""
    distro_series: str = ""
    hwe_kernel: str | None = None
    swap_size: int | None = None
    ephemeral_deploy: bool = False
    enable_hw_sync: bool = False
    install_kvm: bool = False
    register_vmhost: bool = False
    user_data: bytes | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    error_description: str = ""
    status_message: str | None = None
    status_action: str | None = ""
    description: str = ""
    locked: bool = False
    pod_id: int | None = None
    virtualmachine_id: int | None = None
    dynamic: bool = False
    commissioned: bool = True
    hardware_uuid: str = ""
    #: The storage layout last applied (``set_storage_layout``): ``flat`` keeps MAAS's default partitions
    #: on the boot disk, ``blank`` none.
    storage_layout: str = "flat"
    # Bumped on every status change: a pending timed transition scheduled in an older epoch is void.
    epoch: int = 0
    #: When the OS booted by the last ``op=power_on`` of this Deployed machine is up (None: no boot pending).
    boot_due: float | None = None
    cached_json: bytes | None = None

    @property
    def cost(self) -> float:
        """MAAS ``reorder_nodes_by_cost``: smaller machines are handed out first."""
        return self.cpu_count + self.memory / 1024.0

    @property
    def storage_mb(self) -> float:
        return sum(d.size for d in self.disks) / 1000 / 1000


@dataclass(slots=True)
class DnsData:
    """A DNS resource record (CNAME, MX, NS, SRV, TXT, ...) of a DNS resource (M ``models/dnsdata.py``)."""

    id: int
    dnsresource_id: int
    rrtype: str
    rrdata: str
    ttl: int | None = None


@dataclass(slots=True)
class Device:
    """A device: a node MAAS only tracks (addresses, DNS), never deploys (M ``models/node.py: Device``)."""

    id: int
    system_id: str
    hostname: str
    domain_id: int
    zone_id: int
    owner: str | None = None
    parent: str | None = None  # the parent node's system_id
    description: str = ""
    interfaces: list[Interface] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class IpRange:
    """An IP range of a subnet (M ``models/iprange.py``): ``dynamic`` (DHCP) or ``reserved``."""

    id: int
    subnet_id: int
    type: str
    start_ip: str
    end_ip: str
    comment: str = ""


@dataclass(slots=True)
class UserReservedIp:
    """A ``StaticIPAddress`` of alloc_type USER_RESERVED, made by ``ipaddresses/?op=reserve`` or by a DNS
    resource naming an address no row has: owned by ``owner``, never handed to a machine until released."""

    id: int
    ip: str
    subnet_id: int | None
    owner: str
    #: ``mac``: MAAS made an ``unknown``-type interface with this MAC carrying the address.
    mac: str | None = None


@dataclass(slots=True)
class ReservedIp:
    """A ``reservedips/`` entry (M ``models/reservedip.py``): ``ip`` pinned to ``mac_address`` on a subnet."""

    id: int
    ip: str
    subnet_id: int
    mac_address: str
    comment: str = ""
