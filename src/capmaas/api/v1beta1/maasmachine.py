"""MaasMachine: one CAPI Machine's MAAS server or LXD VM (InfraMachine in CAPI's terms).

Field names follow the Go provider (``minCPU``, ``minMemory``, ``systemID``...) so its manifests apply
unchanged; the LXD fields follow the LXD control-plane design (seed 003) and issue 5.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, crd_default, list_set, schema_extra
from capmaas.api.v1beta1.common import API_VERSION, Conditions, Initialization, MachineAddress, ObjectMeta
from capmaas.api.v1beta1.maascluster import MaasName, ZoneName

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

ProvisioningMode = Literal["bare-metal", "lxd"]
PROVISIONING_MODE_BARE_METAL: ProvisioningMode = "bare-metal"
PROVISIONING_MODE_LXD: ProvisioningMode = "lxd"

TagName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=TAG_PATTERN)]
LXDName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=LXD_NAME_PATTERN)]
IfaceName = Annotated[str, StringConstraints(min_length=1, max_length=15, pattern=IFACE_PATTERN)]
IPAddress = Annotated[
    str,
    StringConstraints(min_length=2, max_length=45),
    Field(
        json_schema_extra=schema_extra(rules=[cel("isIP(self)", "must be an IP address such as 10.0.0.10")])
    ),
]


class LXDStorage(K8sModel):
    """Root disk of the LXD VM."""

    size: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Root disk size in GB. Default: spec.minDiskSize, else the host's default.",
    )
    pool: LXDName | None = Field(
        None, description="VM host storage pool to create the disk in. Default: the host's."
    )


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
                )
            ]
        )
    )

    address: IPAddress = Field(description="IP address to assign, without a prefix length (e.g. 10.0.0.10).")
    gateway: IPAddress | None = Field(None, description="Default gateway IP address.")
    subnet: Annotated[str, StringConstraints(min_length=3, max_length=49)] | None = Field(
        None,
        description="MAAS subnet CIDR the address belongs to (e.g. 10.0.0.0/24).",
        json_schema_extra=schema_extra(rules=[cel("isCIDR(self)", "must be a CIDR such as 10.0.0.0/24")]),
    )
    dns_servers: Annotated[list[IPAddress], Field(max_length=4)] | None = Field(
        None, description="DNS server IP addresses (at most 4)."
    )
    interface: IfaceName | None = Field(
        None, description="Interface name in the VM to configure. Default: eth0."
    )


class LXDNetwork(K8sModel):
    """Network attachment of the LXD VM."""

    bridge: IfaceName | None = Field(
        None, description="Host bridge the VM's primary NIC attaches to (e.g. br0)."
    )
    devices: Annotated[list[IfaceName], Field(max_length=8)] | None = Field(
        None,
        description="Additional host interfaces/bridges to attach, one VM NIC each (at most 8).",
        json_schema_extra=list_set(),
    )
    static_ip: StaticIP | None = Field(
        None, alias="staticIP", description="Fixed IP configuration for the primary interface."
    )


class LXDConfig(K8sModel):
    """How to compose the LXD VM. Only allowed when provisioningMode is lxd."""

    profile: LXDName | None = Field(
        None, description="LXD profile to apply to the VM. Default: the host's default."
    )
    storage: LXDStorage | None = Field(None, description="Root disk size and storage pool.")
    network: LXDNetwork | None = Field(None, description="Bridge, extra NICs and optional static IP.")
    vm_host: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = Field(
        None,
        alias="vmHost",
        description="Pin the VM to this MAAS VM host (name or numeric id) instead of letting placement pick.",
    )
    project: LXDName | None = Field(None, description="LXD project to create the VM in. Default: the host's.")


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
