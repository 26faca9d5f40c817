"""MaasMachine: one CAPI Machine's MAAS server or LXD VM (InfraMachine in CAPI's terms).

Field names follow the Go provider (``minCPU``, ``minMemory``, ``systemID``...) so its manifests apply
unchanged; the LXD fields follow the LXD control-plane design (seed 003).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, crd_default, list_map, list_set, schema_extra
from capmaas.api.sizes import DiskSize, gigabytes
from capmaas.api.v1beta1.common import (
    API_VERSION,
    Conditions,
    Initialization,
    IPAddress,
    MachineAddress,
    ObjectMeta,
)
from capmaas.api.v1beta1.layout import DataFilesystem, NetworkLayout
from capmaas.api.v1beta1.maascluster import MaasName, ZoneName
from capmaas.api.v1beta1.selection import (
    ARCHITECTURE_PATTERN,
    DeviceFilter,
    DiskTag,
    ExtraDisk,
    InterfaceConstraint,
)
from capmaas.api.v1beta1.static_addresses import InterfaceAddress

#: ``osystem/series`` (ubuntu/jammy) or a custom image name (custom/k8s-1.31, u-2204-0-k-1311-0).
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*(/[A-Za-z0-9][A-Za-z0-9._+-]*)?$"
#: MAAS tag names: letters, digits, '-' and '_'.
TAG_PATTERN = r"^[A-Za-z0-9_-]+$"
#: MAAS system IDs are short lower-case alphanumerics (for example 4y3h7n).
SYSTEM_ID_PATTERN = r"^[a-z0-9]+$"
#: LXD object names (profiles, projects, storage pools).
LXD_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Linux network interface names.
IFACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
#: A MAAS subnet as compose's ``subnet=`` constraint takes it: its name, CIDR or id.
SUBNET_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"
#: The Go provider's ``vmConfig.network``: comma-separated MAAS subnets, one VM NIC each (at most 8).
GO_NETWORK_PATTERN = r"^ *[A-Za-z0-9][A-Za-z0-9_.:/-]* *(, *[A-Za-z0-9][A-Za-z0-9_.:/-]* *){0,7}$"
#: The Go provider's VM disk size when ``vmConfig.diskSize`` is not given (its CRD default).
GO_DEFAULT_VM_DISK_GB = 60
#: Most NICs one VM gets from ``lxdConfig.network`` (compose ``interfaces`` labels eth0..eth8).
MAX_VM_NICS = 9

ProvisioningMode = Literal["bare-metal", "lxd"]
PROVISIONING_MODE_BARE_METAL: ProvisioningMode = "bare-metal"
PROVISIONING_MODE_LXD: ProvisioningMode = "lxd"

TagName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=TAG_PATTERN)]
LXDName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=LXD_NAME_PATTERN)]
IfaceName = Annotated[str, StringConstraints(min_length=1, max_length=15, pattern=IFACE_PATTERN)]
SubnetRef = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=SUBNET_REF_PATTERN)]


class LXDStorage(K8sModel):
    """Root disk of the LXD VM (compose ``storage=root:<size>(<pool>)``)."""

    size: DiskSize | None = Field(
        None,
        description='Root disk size: gigabytes as an integer or a string with a unit (20, "20", "20G", '
        '"20GB", "20Gi"; binary units are rounded up to whole GB). Default: spec.minDiskSize, else the '
        "host's default.",
    )
    pool: LXDName | None = Field(
        None,
        description="VM host storage pool to create the disk in (compose selects the pool by this name). "
        "Default: the host's.",
    )

    @property
    def size_gb(self) -> int | None:
        """``size`` in whole gigabytes (10^9 bytes), or None when unset."""
        return None if self.size is None else gigabytes(self.size)


class StaticIP(K8sModel):
    """A fixed address for the VM's primary interface instead of DHCP/auto-assign."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.subnet) || !isCIDR(self.subnet) || !isIP(self.address)"
                    " || cidr(self.subnet).containsIP(self.address)",
                    "staticIP.address must lie inside staticIP.subnet",
                    field_path=".address",
                ),
                cel(
                    "!has(self.gateway)",
                    "lxdConfig.network.staticIP.gateway cannot be applied: MAAS 3.7's VM compose takes only "
                    "the address (interfaces ip=) and the VM gets the gateway configured on the MAAS subnet; "
                    "remove the field and set the gateway on the subnet in MAAS",
                    reason="FieldValueForbidden",
                    field_path=".gateway",
                ),
                cel(
                    "!has(self.dnsServers)",
                    "lxdConfig.network.staticIP.dnsServers cannot be applied: MAAS 3.7's VM compose has no "
                    "DNS parameter and the VM gets the DNS servers configured on the MAAS subnet; remove the "
                    "field and set them on the subnet in MAAS",
                    reason="FieldValueForbidden",
                    field_path=".dnsServers",
                ),
            ]
        )
    )

    address: IPAddress = Field(
        description="IP address to assign, without a prefix length (e.g. 10.0.0.10); sent as compose "
        "interfaces ip=<address>."
    )
    gateway: IPAddress | None = Field(
        None,
        description="Not supported: MAAS 3.7's compose cannot set it (the VM uses the MAAS subnet's "
        "gateway); refused at admission.",
    )
    subnet: Annotated[str, StringConstraints(min_length=3, max_length=49)] | None = Field(
        None,
        description="MAAS subnet CIDR the address belongs to (e.g. 10.0.0.0/24); sent as compose interfaces "
        "subnet_cidr=<subnet>.",
        json_schema_extra=schema_extra(rules=[cel("isCIDR(self)", "must be a CIDR such as 10.0.0.0/24")]),
    )
    dns_servers: Annotated[list[IPAddress], Field(max_length=4)] | None = Field(
        None,
        description="Not supported: MAAS 3.7's compose cannot set them (the VM uses the MAAS subnet's DNS "
        "servers); refused at admission.",
    )
    interface: IfaceName | None = Field(
        None,
        description="Interface name in the VM to configure (the compose interfaces label). Default: eth0.",
    )


class LXDNetwork(K8sModel):
    """Network attachment of the LXD VM, sent as MAAS compose's ``interfaces`` constraint map.

    Each VM NIC is one label (eth0, eth1, ...); its constraints pick the VM host's interface the NIC attaches
    to: ``name=`` (a host interface by name: a bridge gives a bridged NIC, anything else macvlan),
    ``subnet=`` (the host interface on that MAAS subnet) and ``ip=``/``subnet_cidr=`` (a static address).
    """

    bridge: IfaceName | None = Field(
        None,
        description="VM host interface the VM's first NIC (eth0) attaches to, e.g. br0 (compose interfaces "
        "eth0:name=<bridge>).",
    )
    devices: Annotated[list[IfaceName], Field(max_length=8)] | None = Field(
        None,
        description="More VM host interfaces, one extra VM NIC each: eth1, eth2, ... in this order "
        "(compose interfaces eth<n>:name=<device>; at most 8).",
        json_schema_extra=list_set(),
    )
    subnets: Annotated[list[SubnetRef], Field(max_length=MAX_VM_NICS)] | None = Field(
        None,
        description="MAAS subnets (name, CIDR or id) of the VM's NICs, eth0 first (compose interfaces "
        "eth<n>:subnet=<subnet>); combined with bridge/devices of the same NIC. The Go provider's "
        "lxd.vmConfig.network lands here.",
    )
    static_ip: StaticIP | None = Field(
        None,
        alias="staticIP",
        description="Fixed address of one VM NIC (compose interfaces ip=, subnet_cidr=); gateway and DNS "
        "come from the MAAS subnet.",
    )

    def compose_interfaces(self, default_parent: str | None = None) -> str | None:
        """The compose ``interfaces`` value, e.g. ``eth0:name=br0,subnet=10.0.0.0/24;eth1:name=eno2``.

        ``default_parent`` (the cluster's ``lxdConfig.nicParent``) is eth0's host interface when ``bridge``
        is unset. None when nothing constrains the NICs (MAAS then uses the host's default network).
        """
        labels: dict[str, list[str]] = {}
        parent = self.bridge or default_parent
        if parent:
            labels.setdefault("eth0", []).append(f"name={parent}")
        for i, device in enumerate(self.devices or (), start=1):
            labels.setdefault(f"eth{i}", []).append(f"name={device}")
        for i, subnet in enumerate(self.subnets or ()):
            labels.setdefault(f"eth{i}", []).append(f"subnet={subnet}")
        if self.static_ip is not None:
            iface = labels.setdefault(self.static_ip.interface or "eth0", [])
            if self.static_ip.subnet:
                iface.append(f"subnet_cidr={self.static_ip.subnet}")
            iface.append(f"ip={self.static_ip.address}")
        if not labels:
            return None
        return ";".join(f"{label}:{','.join(parts)}" for label, parts in labels.items())


class LXDConfig(K8sModel):
    """How to compose the LXD VM. Only allowed when provisioningMode is lxd."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.profile)",
                    "lxdConfig.profile cannot be applied: MAAS 3.7's VM compose has no profile parameter "
                    "(MAAS builds the VM's devices itself); remove the field and express the NICs with "
                    "lxdConfig.network and the disk with lxdConfig.storage",
                    reason="FieldValueForbidden",
                    field_path=".profile",
                ),
            ]
        )
    )

    profile: LXDName | None = Field(
        None,
        description="Not supported: MAAS 3.7's compose has no profile parameter; refused at admission "
        "(use network and storage).",
    )
    storage: LXDStorage | None = Field(None, description="Root disk size and storage pool.")
    network: LXDNetwork | None = Field(
        None, description="Host interfaces, subnets and optional static IP of the VM's NICs."
    )
    vm_host: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = Field(
        None,
        alias="vmHost",
        description="Pin the VM to this MAAS VM host (name or numeric id) instead of letting placement pick.",
    )
    project: LXDName | None = Field(
        None,
        description="LXD project of the VM host to compose on: MAAS composes in the project the VM host was "
        "registered with, so placement only considers VM hosts registered with this project. Default: any.",
    )


class GoVMConfig(K8sModel):
    """The Go provider's ``spec.lxd.vmConfig`` (accepted as an alias of ``lxdConfig``)."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.interfaceLinkModes)",
                    "lxd.vmConfig.interfaceLinkModes cannot be applied: MAAS 3.7's VM compose sets no link "
                    "modes and capmaas does not relink a VM's interfaces after commissioning; remove the "
                    "field (use lxdConfig.network.staticIP for a fixed address)",
                    reason="FieldValueForbidden",
                    field_path=".interfaceLinkModes",
                ),
                cel(
                    "!has(self.autoStart) || self.autoStart",
                    "lxd.vmConfig.autoStart: false cannot be applied: MAAS powers a composed VM on when it "
                    "deploys it and has no autostart setting; remove the field or set it to true",
                    reason="FieldValueForbidden",
                    field_path=".autoStart",
                ),
            ]
        )
    )

    disk_size: int | None = Field(
        None,
        ge=1,
        le=65536,
        description=f"VM disk size in GB; the VM gets the larger of this and spec.minDiskSize (default "
        f"{GO_DEFAULT_VM_DISK_GB}, as in the Go provider). Same as lxdConfig.storage.size.",
    )
    storage_pool: LXDName | None = Field(
        None, description="VM host storage pool for the disk. Same as lxdConfig.storage.pool."
    )
    network: Annotated[str, StringConstraints(max_length=600, pattern=GO_NETWORK_PATTERN)] | None = Field(
        None,
        description='MAAS subnets of the VM\'s NICs, comma-separated, eth0 first ("subnetA,subnetB"). '
        "Same as lxdConfig.network.subnets.",
    )
    interface_link_modes: (
        Annotated[
            dict[str, Annotated[str, StringConstraints(max_length=16)]],
            Field(json_schema_extra={"maxProperties": 16}),
        ]
        | None
    ) = Field(
        None,
        description="Not supported (MAAS compose sets no link modes and capmaas does not relink interfaces); "
        "refused at admission.",
    )
    auto_start: bool | None = Field(
        None,
        description="Only true is accepted: MAAS powers the VM on when it deploys it (there is no LXD "
        "autostart setting in MAAS's API).",
    )


class GoMachineLXD(K8sModel):
    """The Go provider's ``spec.lxd``: ``enabled: true`` means provisioningMode lxd."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.vmConfig) || (has(self.enabled) && self.enabled)",
                    "lxd.vmConfig needs lxd.enabled: true (a bare-metal machine has no VM to configure)",
                    reason="FieldValueForbidden",
                    field_path=".vmConfig",
                ),
            ]
        )
    )

    enabled: bool | None = Field(
        None,
        description="true: compose this machine as an LXD VM on a MAAS VM host (same as provisioningMode: "
        "lxd). Immutable.",
    )
    vm_config: GoVMConfig | None = Field(
        None, description="VM disk, storage pool and subnets (same as lxdConfig.storage / network)."
    )

    def lxd_config(self, min_disk_size: int | None) -> LXDConfig:
        """The canonical ``lxdConfig`` this Go form means (disk = max(diskSize or 60, minDiskSize))."""
        vm = self.vm_config or GoVMConfig()
        disk = max(vm.disk_size or GO_DEFAULT_VM_DISK_GB, min_disk_size or 0)
        subnets = [part.strip() for part in (vm.network or "").split(",") if part.strip()]
        network = LXDNetwork(subnets=subnets) if subnets else None
        return LXDConfig(storage=LXDStorage(size=disk, pool=vm.storage_pool), network=network)


class ReleaseOptions(K8sModel):
    """What MAAS does to the disks when the machine is released on delete."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "(!has(self.secureErase) || !self.secureErase)"
                    " && (!has(self.quickErase) || !self.quickErase)"
                    " || (has(self.erase) && self.erase)",
                    "secureErase and quickErase need erase: true",
                )
            ]
        )
    )

    erase: bool | None = Field(None, description="Erase the disks on release (MAAS release erase=true).")
    secure_erase: bool | None = Field(
        None, description="Use the disks' secure-erase feature when erasing; MAAS falls back to a full wipe."
    )
    quick_erase: bool | None = Field(
        None, description="Wipe only the start and end of each disk (fast, not secure) when erasing."
    )
    scripts: (
        Annotated[
            list[
                Annotated[
                    str,
                    StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$"),
                ]
            ],
            Field(max_length=16),
        ]
        | None
    ) = Field(
        None,
        description="MAAS release scripts to run on release, by name or tag (MAAS release scripts=, e.g. "
        "wipe-disks, or a script an admin uploaded with script_type release); none: no script. A name MAAS "
        "does not know keeps the machine held and shows MAAS's answer in the Deleting condition.",
        json_schema_extra=list_set(),
    )
    force: bool | None = Field(
        None,
        description="Let MAAS remove VM host records left on the machine (MAAS release force=true). capmaas "
        "never sends it while a VM is on such a host: it waits for the VMs to be deleted (VMHostInUse).",
    )


class Adoption(K8sModel):
    """A machine MAAS already shows Deployed, taken under this MaasMachine without a deploy (issue 24)."""

    system_id: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=SYSTEM_ID_PATTERN)] = (
        Field(
            alias="systemID",
            description="System ID of the MAAS machine to adopt: Deployed, owned by the MAAS user of the "
            "cluster's identity, held by no other MaasMachine. Nothing is deployed; deleting the "
            "MaasMachine releases it (releaseOptions apply).",
        )
    )


class MaasMachineSpec(K8sModel):
    """Desired state of a MaasMachine: the MAAS constraints and how to deploy."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.lxdConfig) || (has(self.provisioningMode) && self.provisioningMode == 'lxd')",
                    "lxdConfig is only allowed when provisioningMode is lxd",
                    reason="FieldValueForbidden",
                    field_path=".lxdConfig",
                ),
                cel(
                    "!has(self.registerVMHost) || !self.registerVMHost"
                    " || !has(self.provisioningMode) || self.provisioningMode == 'bare-metal'",
                    "registerVMHost is only allowed for bare-metal machines",
                    reason="FieldValueForbidden",
                    field_path=".registerVMHost",
                ),
                cel(
                    "!has(self.lxd) || (!has(self.lxdConfig)"
                    " && (!has(self.provisioningMode) || self.provisioningMode == 'bare-metal'))",
                    "spec.lxd is the Go provider's spelling of provisioningMode: lxd plus lxdConfig; set one "
                    "form, not both (remove spec.lxd, or remove provisioningMode: lxd and lxdConfig)",
                    reason="FieldValueForbidden",
                    field_path=".lxd",
                ),
                cel(
                    "!has(self.registerVMHost) || !self.registerVMHost"
                    " || !has(self.lxd) || !has(self.lxd.enabled) || !self.lxd.enabled",
                    "registerVMHost is only allowed for bare-metal machines (spec.lxd.enabled is true)",
                    reason="FieldValueForbidden",
                    field_path=".registerVMHost",
                ),
                cel(
                    "(has(self.lxd) && has(self.lxd.enabled) && self.lxd.enabled)"
                    " == (has(oldSelf.lxd) && has(oldSelf.lxd.enabled) && oldSelf.lxd.enabled)",
                    "lxd.enabled is immutable (like provisioningMode)",
                    field_path=".lxd",
                ),
                cel(
                    "(!has(self.provisioningMode) || self.provisioningMode == 'bare-metal')"
                    " && (!has(self.lxd) || !has(self.lxd.enabled) || !self.lxd.enabled)"
                    " || (!has(self.architecture) && !has(self.notTags) && !has(self.devices)"
                    " && !has(self.interfaces) && !has(self.extraDisks) && !has(self.rootDiskTags))",
                    "architecture, notTags, devices, interfaces, extraDisks and rootDiskTags select a "
                    "bare-metal machine (MAAS allocate); an LXD VM is composed, not selected",
                    reason="FieldValueForbidden",
                ),
                cel(
                    "(!has(self.provisioningMode) || self.provisioningMode == 'bare-metal')"
                    " && (!has(self.lxd) || !has(self.lxd.enabled) || !self.lxd.enabled)"
                    " || !has(self.addresses)",
                    "addresses are for bare-metal machines; an LXD VM takes a fixed address from "
                    "lxdConfig.network.staticIP",
                    reason="FieldValueForbidden",
                    field_path=".addresses",
                ),
                cel(
                    "(!has(self.provisioningMode) || self.provisioningMode == 'bare-metal')"
                    " && (!has(self.lxd) || !has(self.lxd.enabled) || !self.lxd.enabled)"
                    " || (!has(self.network) && !has(self.filesystems))",
                    "network and filesystems shape a bare-metal server; an LXD VM is composed with lxdConfig",
                    reason="FieldValueForbidden",
                ),
            ]
        )
    )

    image: Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=IMAGE_PATTERN)] = Field(
        description="Image to deploy: osystem/series (e.g. ubuntu/jammy) or the name of a custom image "
        "(e.g. custom/k8s-1.31). Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "image is immutable")]),
    )
    min_cpu: int = Field(
        alias="minCPU",
        ge=1,
        le=4096,
        description="Minimum number of CPU cores; also the VM's core count in lxd mode. Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "minCPU is immutable")]),
    )
    min_memory: int = Field(
        alias="minMemory",
        ge=1024,
        le=16777216,
        description="Minimum memory in MB (at least 1024); also the VM's memory in lxd mode. Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "minMemory is immutable")]),
    )
    min_disk_size: int | None = Field(
        None,
        ge=1,
        le=1048576,
        description="Minimum root disk size in GB; also the VM's disk size in lxd mode.",
    )
    tags: Annotated[list[TagName], Field(max_length=32)] | None = Field(
        None,
        description="MAAS tags the machine (or VM host in lxd mode) must have, all of them (at most 32).",
        json_schema_extra=list_set(),
    )
    resource_pool: MaasName | None = Field(None, description="MAAS resource pool to allocate from.")
    architecture: (
        Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=ARCHITECTURE_PATTERN)] | None
    ) = Field(
        None,
        description="MAAS architecture (allocate arch=): arch/subarch such as arm64/generic, or amd64 for "
        "any amd64 subarchitecture. MAAS refuses a name it has no boot image for (Architecture not "
        "recognised.). Bare metal only.",
    )
    not_tags: Annotated[list[TagName], Field(max_length=32)] | None = Field(
        None,
        description="MAAS tags the machine must not have, none of them (allocate not_tags=; at most 32). "
        "Bare metal only.",
        json_schema_extra=list_set(),
    )
    devices: Annotated[list[DeviceFilter], Field(max_length=1)] | None = Field(
        None,
        description="A PCI/USB device the machine must have (allocate devices=), e.g. [{vendorID: 10de}] for "
        "an NVIDIA GPU. One entry: MAAS 3.7 reads a single devices= value per allocate (a repeated one "
        "replaces the first); to require two kinds of device, tag the machines. Bare metal only.",
    )
    interfaces: Annotated[list[InterfaceConstraint], Field(max_length=8)] | None = Field(
        None,
        description="Network interfaces the machine must have (allocate interfaces=label:key=value,...): for "
        "each entry an interface with all its properties, e.g. one on space api and one on fabric storage "
        "(MAAS matches each entry on its own, so two may match the same interface). Bare metal only.",
        json_schema_extra=list_map("label"),
    )
    root_disk_tags: Annotated[list[DiskTag], Field(max_length=8)] | None = Field(
        None,
        description="Block-device tags the root disk must have (e.g. ssd): the tag list of the storage= "
        "constraint's first (root) entry, whose size is minDiskSize. Bare metal only.",
        json_schema_extra=list_set(),
    )
    extra_disks: Annotated[list[ExtraDisk], Field(max_length=8)] | None = Field(
        None,
        description="Unused disks the machine must have besides the root disk, by minimum size and tags "
        "(allocate storage=root:<minDiskSize>,<label>:<size>(<tags>),...). Bare metal only.",
        json_schema_extra=list_map("label"),
    )
    failure_domain: ZoneName | None = Field(
        None,
        description="MAAS zone to place the machine in. Normally taken from the CAPI Machine; capmaas writes "
        "the zone it chose here.",
    )
    system_id: (
        Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=SYSTEM_ID_PATTERN)] | None
    ) = Field(
        None,
        alias="systemID",
        description="MAAS system ID of the machine allocated (or VM composed) for this MaasMachine. Written "
        "by capmaas; kept in spec so it survives clusterctl move.",
    )
    provider_id: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = Field(
        None,
        alias="providerID",
        description="Provider ID, maas://<zone>/<systemID> (bare metal) or maas-lxd://<zone>/<systemID> "
        "(LXD VM); equal to the Node's spec.providerID. Written by capmaas.",
    )
    provisioning_mode: ProvisioningMode = Field(
        "bare-metal",
        description="bare-metal allocates a whole MAAS machine; lxd composes a VM on a MAAS LXD VM host. "
        "Immutable.",
        json_schema_extra=schema_extra(
            crd_default("bare-metal"), rules=[cel("self == oldSelf", "provisioningMode is immutable")]
        ),
    )
    lxd_config: LXDConfig | None = Field(
        None, description="How to compose the VM (profile, storage, network, host, project); lxd mode only."
    )
    register_vm_host: bool | None = Field(
        None,
        alias="registerVMHost",
        description="Deploy this bare-metal machine as a MAAS LXD VM host (MAAS register_vmhost), so LXD "
        "MaasMachines can be composed on it.",
    )
    deploy_in_memory: bool | None = Field(
        None,
        description="Deploy into RAM without touching the disks (MAAS ephemeral_deploy; needs a recent MAAS "
        "and plenty of memory).",
    )
    hwe_kernel: (
        Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")] | None
    ) = Field(None, description="Kernel to deploy, for example hwe-22.04 or ga-22.04. Default: the image's.")
    release_options: ReleaseOptions | None = Field(
        None, description="Disk erasure when the machine is released on delete (bare metal only)."
    )
    adopt: Adoption | None = Field(
        None,
        description="Adopt a machine MAAS already shows Deployed instead of allocating and deploying one "
        "(bare metal only; set by privileged users only, like systemID: the chart's admission policy). "
        "MAAS cannot change a machine's owner or agent name: the machine must already be owned by the MAAS "
        "user of the cluster's identity. Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "adopt is immutable")]),
    )
    addresses: Annotated[list[InterfaceAddress], Field(max_length=8)] | None = Field(
        None,
        description="Fixed addresses for the server's interfaces (bare metal only), each from an IP pool "
        "(Cluster API IPAM) or literal; MAAS gives them at deploy through reservedips/ pins that capmaas "
        "removes before release. Immutable.",
        json_schema_extra=schema_extra(
            list_map("interface"), rules=[cel("self == oldSelf", "addresses is immutable")]
        ),
    )
    network: NetworkLayout | None = Field(
        None,
        description="Bonds and VLAN interfaces made on the server after allocation and before deploy (MAAS "
        "create_bond/create_vlan, AUTO links), deleted before it is released (bare metal only; needs an "
        "admin MAAS key). Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "network is immutable")]),
    )
    filesystems: Annotated[list[DataFilesystem], Field(max_length=8)] | None = Field(
        None,
        description="Filesystems on whole data disks, formatted and mounted in MAAS before deploy (MAAS "
        "deletes them at release). Storage layouts, RAID and volume groups are not offered: MAAS allows them "
        "only on Ready servers and keeps them across allocations; select servers by their commissioned "
        "layout instead (rootDiskTags, extraDisks). Immutable.",
        json_schema_extra=schema_extra(
            list_map("mountPoint"), rules=[cel("self == oldSelf", "filesystems is immutable")]
        ),
    )
    lxd: GoMachineLXD | None = Field(
        None,
        description="The Go provider's (spectrocloud/cluster-api-provider-maas) LXD form, accepted so its "
        "manifests apply unchanged: lxd.enabled: true is provisioningMode: lxd, lxd.vmConfig is lxdConfig "
        "(diskSize -> storage.size, storagePool -> storage.pool, network -> network.subnets). Cannot be "
        "combined with provisioningMode: lxd or lxdConfig.",
    )

    @property
    def is_lxd(self) -> bool:
        """Whether this machine is an LXD VM, in either spelling."""
        return self.canonical().provisioning_mode == PROVISIONING_MODE_LXD

    def canonical(self) -> MaasMachineSpec:
        """This spec in capmaas's canonical form, whichever spelling the user wrote.

        - the Go provider's ``lxd.enabled: true`` becomes ``provisioningMode: lxd`` with the ``lxdConfig`` its
          ``vmConfig`` means, and ``lxd`` is dropped;
        - an LXD VM's ``lxdConfig.storage.size`` becomes whole gigabytes (an int), defaulting to
          ``minDiskSize`` when unset.

        Reconcilers read the result instead of the raw spec, so both spellings do the same thing.
        """
        mode = self.provisioning_mode
        config = self.lxd_config
        if self.lxd is not None and self.lxd.enabled:
            mode = PROVISIONING_MODE_LXD
            config = self.lxd.lxd_config(self.min_disk_size)
        if mode == PROVISIONING_MODE_LXD:
            config = config or LXDConfig()
            storage = config.storage or LXDStorage()
            size = storage.size_gb if storage.size is not None else self.min_disk_size
            config = config.model_copy(update={"storage": storage.model_copy(update={"size": size})})
        return self.model_copy(update={"provisioning_mode": mode, "lxd_config": config, "lxd": None})


class VMResourceUsage(K8sModel):
    """Resources the LXD VM actually holds on its host."""

    allocated_cores: int | None = Field(None, ge=0, description="CPU cores allocated to the VM.")
    allocated_memory: int | None = Field(None, ge=0, description="Memory allocated to the VM, in MB.")
    allocated_disk: int | None = Field(None, ge=0, description="Disk allocated to the VM, in GB.")


class MaasMachineStatus(K8sModel):
    """Observed state of a MaasMachine, written by capmaas."""

    ready: bool | None = Field(
        None, description="True once the machine is deployed (v1beta1 contract field)."
    )
    initialization: Initialization | None = Field(
        None, description="Provisioning progress read by Cluster API (v1beta2 contract)."
    )
    machine_state: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None,
        description="MAAS status of the machine, e.g. Allocated, Deploying, Deployed, Failed deployment.",
    )
    machine_powered: bool | None = Field(None, description="Whether MAAS reports the machine powered on.")
    hostname: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        None, description="MAAS host name of the machine (the future Node name)."
    )
    addresses: Annotated[list[MachineAddress], Field(max_length=32)] | None = Field(
        None, description="Addresses of the machine (copied by Cluster API to the Machine)."
    )
    failure_domain: ZoneName | None = Field(None, description="MAAS zone the machine is in.")
    provisioning_mode: ProvisioningMode | None = Field(None, description="How the machine was provisioned.")
    lxd_host: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        None, description="MAAS VM host the LXD VM runs on (lxd mode)."
    )
    lxd_project: LXDName | None = Field(None, description="LXD project the VM was created in (lxd mode).")
    vm_resource_usage: VMResourceUsage | None = Field(
        None,
        alias="vmResourceUsage",
        description="Cores, memory and disk the VM holds on its host (lxd mode).",
    )
    attempts: int | None = Field(
        None, ge=0, description="How many MAAS machines were allocated for this MaasMachine so far (retries)."
    )
    conditions: Conditions | None = Field(
        None,
        description="Current state: Ready, MachineProvisioned, Paused, and in lxd mode LXDHostSelected, "
        "LXDResourcesAllocated, LXDVMCreated, LXDVMDeployed.",
    )
    failure_reason: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        None, description="Deprecated (v1beta1 contract): a terminal problem's reason. Prefer conditions."
    )
    failure_message: Annotated[str, StringConstraints(max_length=10240)] | None = Field(
        None, description="Deprecated (v1beta1 contract): a terminal problem's message. Prefer conditions."
    )


class MaasMachine(K8sModel):
    """MaasMachine is the MAAS server or LXD virtual machine behind one Cluster API Machine."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasMachine"] = Field("MaasMachine", description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasMachineSpec = Field(description="Desired state of the MaasMachine.")
    status: MaasMachineStatus = Field(
        default_factory=MaasMachineStatus, description="Observed state of the MaasMachine."
    )
