"""Typed views of what MAAS returns, and of what we send it.

Response models are frozen pydantic models that *ignore* fields they do not name (MAAS adds fields between
releases, and a machine JSON has ~90 of them) and *require* the few fields a caller cannot do without, so a
truncated or foreign answer fails loudly at the edge (as :class:`~capmaas.maas.errors.ResponseParseError`)
instead of deep inside a reconciler. Field names and units follow MAAS's JSON exactly (``memory`` in MiB,
``storage`` in MB, VM host ``local_storage`` in bytes); see the MAAS API reference.

Request models (:class:`AllocateConstraints`, :class:`ComposeRequest`) know how to turn themselves into
MAAS's form fields, with repeated keys for lists.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import pydantic

from capmaas.maas import _compact

__all__ = [
    "AllocateConstraints",
    "BlockDevice",
    "BootResource",
    "ComposeRequest",
    "ComposedMachine",
    "DeployRequest",
    "DnsResource",
    "Domain",
    "Fabric",
    "Filesystem",
    "Interface",
    "InterfaceLink",
    "IpAddress",
    "IpRange",
    "Machine",
    "NodeDevice",
    "NodeStatus",
    "Partition",
    "PodRef",
    "PoolRef",
    "PowerState",
    "ReservedIp",
    "ReservedIpAddress",
    "ResourcePool",
    "StoragePool",
    "Subnet",
    "Tag",
    "TagUpdateResult",
    "User",
    "Version",
    "VlanRef",
    "VmHost",
    "VmHostHostRef",
    "VmHostResources",
    "Zone",
    "ZoneRef",
]

FormFields = list[tuple[str, str]]


class _Model(pydantic.BaseModel):
    """Base of response models: frozen, unknown fields ignored."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")


class _OneOf:
    """A :class:`NodeStatus` predicate: the state is one of these (by name); declared in the enum with
    ``enum.nonmember``."""

    def __init__(self, *names: str) -> None:
        self.names = frozenset(names)

    def __get__(self, state: NodeStatus, owner: type | None = None) -> bool:
        return state.name in self.names


class NodeStatus(enum.IntEnum):
    """MAAS ``NODE_STATUS`` codes (``maascommon/enums/node.py``); ``.name`` is MAAS's constant name.

    A code newer than this enum reads as :attr:`UNKNOWN` rather than failing: one machine in a state we do
    not know must not fail a list call that covers every tenant's machines."""

    UNKNOWN = -1
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
    def filter_name(self) -> str:
        """The value the ``status=`` list filter takes (lower-case name, e.g. ``failed_deployment``)."""
        return self.name.lower()

    @classmethod
    def _missing_(cls, value: object) -> NodeStatus | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.UNKNOWN
        return None

    # The groupings callers decide by, named once here (a set spelled out in each caller drifted apart).
    #: A MAAS user holds the machine: allocated to one, on its way to Deployed or failed there.
    held = enum.nonmember(_OneOf("ALLOCATED", "DEPLOYING", "DEPLOYED", "FAILED_DEPLOYMENT", "BROKEN"))
    #: No user holds the machine, or none will once MAAS is done releasing it.
    let_go = enum.nonmember(_OneOf("NEW", "READY", "RELEASING", "DISK_ERASING"))
    #: MAAS is releasing the machine (and may be erasing its disks): it comes back by itself.
    releasing = enum.nonmember(_OneOf("RELEASING", "DISK_ERASING"))
    #: Back in MAAS's hands: in the pool (New, Ready) or kept out of it (Broken).
    released = enum.nonmember(_OneOf("READY", "NEW", "BROKEN"))
    #: Allocated, Deploying or Deployed: the states every provisioning mode takes the same way.
    deploy_path = enum.nonmember(_OneOf("ALLOCATED", "DEPLOYING", "DEPLOYED"))
    #: Deploying or Deployed: the machine runs (or boots into) its workload.
    running = enum.nonmember(_OneOf("DEPLOYED", "DEPLOYING"))
    #: New, Commissioning or Testing: a machine (a composed VM) MAAS is still bringing in.
    commissioning = enum.nonmember(_OneOf("NEW", "COMMISSIONING", "TESTING"))
    #: Failed to commission, test or deploy, or Broken: the machine needs someone before it is usable.
    failed = enum.nonmember(_OneOf("FAILED_COMMISSIONING", "FAILED_TESTING", "FAILED_DEPLOYMENT", "BROKEN"))
    #: MAAS changes the machine by itself soon (deploying, releasing, commissioning, testing).
    transitional = enum.nonmember(
        _OneOf("DEPLOYING", "RELEASING", "DISK_ERASING", "COMMISSIONING", "TESTING")
    )
    #: MAAS lets an admin edit the machine's interfaces (``api/interfaces.py``).
    interfaces_editable = enum.nonmember(_OneOf("NEW", "READY", "ALLOCATED", "BROKEN", "FAILED_TESTING"))

    @classmethod
    def where(cls, predicate: Callable[[NodeStatus], bool]) -> tuple[NodeStatus, ...]:
        """The states for which ``predicate`` holds (e.g. a list call's ``status=`` filter)."""
        return tuple(s for s in cls if predicate(s))


class PowerState(enum.StrEnum):
    """MAAS ``POWER_STATE``; a value newer than this enum reads as ``unknown`` rather than failing."""

    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"
    ERROR = "error"

    @classmethod
    def _missing_(cls, value: object) -> PowerState:
        return cls.UNKNOWN


class Zone(_Model):
    """A physical zone (the CAPI failure domain); MAAS nests the same object in machines and VM hosts."""

    id: int
    name: str
    description: str = ""


class ResourcePool(_Model):
    """A resource pool; MAAS nests the same object in machines and VM hosts."""

    id: int
    name: str
    description: str = ""


ZoneRef = Zone  # the names nested zones and pools had before they were known to be the same objects
PoolRef = ResourcePool


class PodRef(_Model):
    """The VM host (pod) a machine is a VM of."""

    id: int
    name: str
    resource_uri: str = ""


class VlanRef(_Model):
    """A VLAN as nested in subnets and interfaces."""

    id: int
    name: str = ""
    vid: int = 0
    fabric: str = ""
    fabric_id: int | None = None
    mtu: int | None = None
    dhcp_on: bool = False
    space: str | None = None


class Fabric(_Model):
    """A fabric (``fabrics/``) with its VLANs. ``create_vlan`` takes a VLAN's ``id`` from here, not its
    802.1Q tag (``vid``)."""

    id: int
    name: str
    class_type: str | None = None
    vlans: tuple[VlanRef, ...] = ()


class Subnet(_Model):
    """A subnet (``subnets/``, and nested in interface links)."""

    id: int
    name: str
    cidr: str
    vlan: VlanRef | None = None
    space: str | None = None
    gateway_ip: str | None = None
    dns_servers: tuple[str, ...] = ()
    managed: bool = True
    description: str = ""


class InterfaceLink(_Model):
    """One link (address assignment) of an interface."""

    id: int
    mode: str
    ip_address: str | None = None
    subnet: Subnet | None = None


def _object_or_empty(value: object) -> object:
    """MAAS keeps an interface's ``params`` as JSON that old rows hold as ``""``: anything but an object
    reads as no parameters."""
    return value if isinstance(value, dict) else {}


class Interface(_Model):
    """A machine network interface (``interface_set[]``). ``params`` holds a bond's ``bond_*`` settings (and
    ``mtu``/``accept-ra`` when set), a bridge's ``bridge_*``."""

    id: int
    name: str
    type: str = "physical"
    mac_address: str | None = None
    enabled: bool = True
    tags: tuple[str, ...] = ()
    links: tuple[InterfaceLink, ...] = ()
    vlan: VlanRef | None = None
    parents: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    link_connected: bool = True
    link_speed: int = 0  # Mbit/s the link negotiated (0: unknown or not physical)
    params: dict[str, Any] = pydantic.Field(default_factory=dict)

    _params = pydantic.field_validator("params", mode="before")(_object_or_empty)


def _null_as_empty(value: object) -> object:
    """A nullable array column (block device and partition ``tags``): null reads as empty."""
    return () if value is None else value


class Filesystem(_Model):
    """The filesystem on a block device or partition; ``mount_point`` None when it is not mounted."""

    fstype: str
    uuid: str | None = None
    label: str | None = None
    mount_point: str | None = None
    mount_options: str | None = None


class Partition(_Model):
    """A partition of a block device (``partitions[]``); sizes in bytes."""

    id: int
    size: int = 0
    uuid: str | None = None
    path: str | None = None
    bootable: bool = False
    tags: tuple[str, ...] = ()
    filesystem: Filesystem | None = None
    used_for: str = ""

    _tags = pydantic.field_validator("tags", mode="before")(_null_as_empty)


class BlockDevice(_Model):
    """A machine's block device (``blockdevice_set[]``, ``boot_disk``, ``nodes/{sid}/blockdevices/``); sizes
    in bytes. ``filesystem`` is the one on the whole device (None when it is partitioned or bare)."""

    id: int
    name: str
    type: str = "physical"
    size: int = 0
    tags: tuple[str, ...] = ()
    filesystem: Filesystem | None = None
    partitions: tuple[Partition, ...] = ()
    used_for: str = ""
    id_path: str | None = None
    serial: str | None = None
    path: str | None = None
    used_size: int = 0
    available_size: int = 0
    partition_table_type: str | None = None

    _tags = pydantic.field_validator("tags", mode="before")(_null_as_empty)


class NodeDevice(_Model):
    """A PCI or USB device of a machine (``nodes/{system_id}/devices/``), found while commissioning; ids are
    four hex digits as MAAS stores them."""

    id: int
    bus_name: str = ""
    vendor_id: str = ""
    product_id: str = ""
    vendor_name: str = ""
    product_name: str = ""
    commissioning_driver: str = ""


class Machine(_Model):
    """A MAAS machine (``machines/{system_id}/``). ``memory`` is MiB, ``storage`` MB (float)."""

    system_id: str
    hostname: str
    status: NodeStatus
    fqdn: str = ""
    status_name: str = ""
    status_message: str | None = None
    error_description: str = ""
    power_state: PowerState = PowerState.UNKNOWN
    power_type: str = ""
    zone: Zone
    pool: ResourcePool | None = None
    tag_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    interface_set: tuple[Interface, ...] = ()
    blockdevice_set: tuple[BlockDevice, ...] = ()
    boot_disk: BlockDevice | None = None
    owner: str | None = None
    owner_data: dict[str, str] = pydantic.Field(default_factory=dict)
    workload_annotations: dict[str, str] = pydantic.Field(default_factory=dict)
    cpu_count: int = 0
    memory: int = 0
    storage: float = 0.0
    architecture: str | None = None
    physicalblockdevice_set: tuple[BlockDevice, ...] = ()
    osystem: str = ""
    distro_series: str = ""
    hwe_kernel: str | None = None
    ephemeral_deploy: bool = False
    locked: bool = False
    pod: PodRef | None = None
    virtualmachine_id: int | None = None
    description: str = ""
    resource_uri: str = ""

    @pydantic.model_validator(mode="after")
    def _kept_small(self) -> Machine:
        """Each machine compacted as soon as it is validated (capmaas.maas._compact)."""
        return _compact.at_validation(self)


class VmHostResources(_Model):
    """``total``/``used``/``available`` of a VM host: cores, memory (MiB), local storage (bytes)."""

    cores: int = 0
    memory: int = 0
    local_storage: int = 0


class StoragePool(_Model):
    """A storage pool of a VM host; sizes in bytes."""

    id: str | int
    name: str
    type: str = ""
    path: str = ""
    total: int = 0
    used: int = 0
    available: int = 0
    default: bool = False


class VmHostHostRef(_Model):
    """The machine a VM host runs on (``system_id`` None when MAAS does not know it)."""

    system_id: str | None = None


class VmHost(_Model):
    """A VM host (``vm-hosts/{id}/``; ``pods/`` in older MAAS). ``available`` is not over-commit scaled."""

    id: int
    name: str
    type: str = ""
    tags: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    total: VmHostResources
    used: VmHostResources
    available: VmHostResources
    zone: Zone | None = None
    pool: ResourcePool | None = None
    cpu_over_commit_ratio: float = 1.0
    memory_over_commit_ratio: float = 1.0
    storage_pools: tuple[StoragePool, ...] = ()
    default_storage_pool: str | None = None
    host: VmHostHostRef | None = None
    default_macvlan_mode: str | None = None
    version: str = ""


class ComposedMachine(_Model):
    """The answer to ``vm-hosts/{id}/?op=compose``: the new machine's id and URI."""

    system_id: str
    resource_uri: str = ""


class Tag(_Model):
    """A tag; ``definition`` is an XPath expression, empty for manual tags."""

    name: str
    definition: str = ""
    comment: str = ""
    kernel_opts: str | None = None


class TagUpdateResult(_Model):
    """The answer to ``tags/{name}/?op=update_nodes``."""

    added: int
    removed: int


class IpAddress(_Model):
    """An IP address object as nested in DNS resources."""

    ip: str | None = None
    alloc_type: int | None = None
    alloc_type_name: str | None = None


class DnsResource(_Model):
    """A DNS resource (``dnsresources/``); its A/AAAA records are ``ip_addresses``."""

    id: int
    fqdn: str
    address_ttl: int | None = None
    ip_addresses: tuple[IpAddress, ...] = ()

    @property
    def ips(self) -> tuple[str, ...]:
        """The addresses as plain strings."""
        return tuple(a.ip for a in self.ip_addresses if a.ip)


def _username(value: object) -> object:
    """MAAS nests the owner as a user object; the username is what a caller compares."""
    if isinstance(value, dict):
        return value.get("username")
    return value


def _text(value: object) -> object:
    """MAAS stores some comments as nullable text: null reads as ""."""
    return "" if value is None else value


class ReservedIpAddress(_Model):
    """A ``StaticIPAddress`` as ``ipaddresses/`` shows it (``op=reserve`` answers one, ``GET`` lists them).

    MAAS's answer has no id: an address is named by ``ip``. ``alloc_type`` is MAAS's ``IPADDRESS_TYPE``
    (0 AUTO, 1 STICKY, 4 USER_RESERVED, 5 DHCP, 6 DISCOVERED); ``owner`` is the owner's username, None for
    a machine's own address.
    """

    ip: str
    alloc_type: int
    alloc_type_name: str = ""
    owner: str | None = None
    subnet: Subnet | None = None

    _owner = pydantic.field_validator("owner", mode="before")(_username)


class ReservedIp(_Model):
    """A ``reservedips/`` entry (MAAS 3.6+): ``ip`` pinned to ``mac_address`` on ``subnet``. When that NIC has
    an AUTO link on the subnet, deployment gives it exactly this address; the entry survives release."""

    id: int
    ip: str
    mac_address: str
    subnet: Subnet | None = None
    comment: str = ""

    _comment = pydantic.field_validator("comment", mode="before")(_text)


class IpRange(_Model):
    """An IP range of a subnet (``ipranges/``): ``type`` is ``dynamic`` (DHCP) or ``reserved``; MAAS hands
    neither to a machine's AUTO or auto-picked STATIC link."""

    id: int
    type: str
    start_ip: str
    end_ip: str
    subnet: Subnet | None = None
    comment: str = ""

    _comment = pydantic.field_validator("comment", mode="before")(_text)


class Domain(_Model):
    """A DNS domain."""

    id: int
    name: str
    ttl: int | None = None
    authoritative: bool = True
    resource_record_count: int = 0
    is_default: bool = False


class BootResource(_Model):
    """An OS image MAAS can deploy (``boot-resources/``): ``type`` is ``Synced`` or ``Uploaded``."""

    id: int
    type: str
    name: str
    architecture: str
    base_image: str | None = None
    title: str | None = None


class Version(_Model):
    """``version/``: e.g. ``3.7.3`` and capabilities such as ``authenticate-api``."""

    version: str
    subversion: str = ""
    capabilities: tuple[str, ...] = ()


class User(_Model):
    """A MAAS user (``users/?op=whoami``)."""

    username: str
    email: str | None = None
    is_superuser: bool = False
    is_local: bool = True


class _Request(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    def _form(self, scalars: tuple[str, ...], lists: tuple[str, ...] = ()) -> FormFields:
        """Form fields in the given order: each set scalar once, each list value repeated under its key;
        nothing for what is unset, so MAAS applies its own defaults."""
        fields: FormFields = [(k, str(v)) for k in scalars if (v := getattr(self, k)) is not None]
        fields += [(k, v) for k in lists for v in getattr(self, k)]
        return fields


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeployRequest:
    """What ``machines/{id}/?op=deploy`` sends; unset fields send nothing (MAAS applies its defaults).

    A dataclass, not a validated model: ``user_data`` must already be bytes (the client base64-encodes it
    and refuses text, so nobody double-encodes by mistake)."""

    user_data: bytes | None = None
    distro_series: str | None = None  # ``os/series`` (``ubuntu/jammy``) or a bare series
    hwe_kernel: str | None = None
    ephemeral_deploy: bool = False
    install_kvm: bool = False
    register_vmhost: bool = False
    enable_hw_sync: bool = False
    comment: str | None = None


class AllocateConstraints(_Request):
    """What ``machines/?op=allocate`` must match. Every given constraint must hold (AND).

    ``mem`` is MiB; ``storage`` is MAAS's ``label:sizeGB(tag,...),...`` (the first entry is the disk holding
    ``/``); ``interfaces`` is ``label:key=value,...;...``; ``devices`` is one ``key=value,...`` that a single
    PCI/USB device must match (MAAS reads one ``devices`` value). ``arch`` is ``arch/subarch`` or a primary
    architecture MAAS expands. ``tags`` must all be present, ``not_tags`` none of them.
    ``not_pod_type`` leaves out machines whose BMC has that power type: ``lxd`` keeps composed LXD VMs
    (Ready between commissioning and their own allocate) away from a bare-metal allocate. In 3.7 it is an
    exclusion on ``bmc.power_type``, so bare metal (an IPMI/Redfish/... BMC) still matches.
    """

    cpu_count: int | None = None
    mem: int | None = None
    tags: tuple[str, ...] = ()
    not_tags: tuple[str, ...] = ()
    zone: str | None = None
    not_in_zone: tuple[str, ...] = ()
    not_pod_type: tuple[str, ...] = ()
    pool: str | None = None
    arch: str | None = None
    storage: str | None = None
    interfaces: str | None = None
    devices: str | None = None
    system_id: str | None = None
    name: str | None = None

    def to_form(self) -> FormFields:
        """Form fields in a stable order, repeated keys for lists, nothing for unset constraints."""
        return self._form(
            (
                "name",
                "system_id",
                "arch",
                "cpu_count",
                "mem",
                "zone",
                "pool",
                "storage",
                "interfaces",
                "devices",
            ),
            ("tags", "not_tags", "not_in_zone", "not_pod_type"),
        )


class ComposeRequest(_Request):
    """What ``vm-hosts/{id}/?op=compose`` should build. ``memory`` MiB; ``zone``/``pool`` are MAAS ids.

    ``storage`` is ``label:sizeGB(pool),...`` (e.g. ``root:20(default)``); ``interfaces`` a labeled map.
    """

    cores: int | None = None
    memory: int | None = None
    storage: str | None = None
    interfaces: str | None = None
    hostname: str | None = None
    zone: int | None = None
    pool: int | None = None
    domain: int | None = None
    architecture: str | None = None
    skip_commissioning: bool = False

    def to_form(self) -> FormFields:
        """Form fields for the given values only; MAAS applies its own defaults to the rest."""
        fields = self._form(
            ("hostname", "cores", "memory", "storage", "interfaces", "zone", "pool", "domain", "architecture")
        )
        if self.skip_commissioning:
            fields.append(("skip_commissioning", form_bool(True)))
        return fields


def form_bool(value: bool) -> str:
    """MAAS's boolean form value (formencode ``StringBool`` accepts ``true``/``false``)."""
    return "true" if value else "false"


_compact.share(
    within=(Filesystem, Partition, BlockDevice),
    across=(Zone, ResourcePool, PodRef, VlanRef, Subnet),
    at_validation=(Machine,),
)
