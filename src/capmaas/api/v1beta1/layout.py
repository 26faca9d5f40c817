"""Network and storage intent for a bare-metal machine (``MaasMachineSpec.network`` / ``.filesystems``):
applied through MAAS's own endpoints to the server capmaas allocated, after the allocate and before the
deploy, and undone before the server is released.

What MAAS 3.7.3 allows per allocation decides what is here (docs/operating.md "Hardware selection"): bonds,
VLAN interfaces and their AUTO links (admin, New/Ready/Allocated/Broken; bonds and VLANs survive release, so
capmaas deletes what it made), and a filesystem + mount on a whole data disk (allowed while Allocated; MAAS
deletes such "acquired" filesystems at release). Storage layouts, RAID and volume groups are **Ready-only and
persist across allocations**: no per-allocation form exists, so they are not offered here; select servers
whose commissioned layout matches instead (``rootDiskTags``, ``extraDisks``, tags).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, list_map, list_set, schema_extra

IFACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
Iface = Annotated[str, StringConstraints(min_length=1, max_length=15, pattern=IFACE_PATTERN)]
Cidr = Annotated[
    str,
    StringConstraints(min_length=3, max_length=49),
    Field(json_schema_extra=schema_extra(rules=[cel("isCIDR(self)", "must be a CIDR such as 10.0.0.0/24")])),
]
#: MAAS's ``BOND_MODE`` (enum.py l.773-780); MAAS's own default is balance-rr.
BondMode = Literal[
    "balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb"
]
#: MAAS's ``BOND_XMIT_HASH_POLICY`` (enum.py l.805-810).
XmitHashPolicy = Literal["layer2", "layer2+3", "layer3+4", "encap2+3", "encap3+4"]
#: The ``FILESYSTEM_FORMAT_TYPE_CHOICES`` (enum.py l.637-650) that make sense on a whole data disk.
FsType = Literal["ext4", "xfs", "btrfs", "ext2", "vfat", "fat32"]
Mtu = Annotated[int, Field(ge=552, le=65535)]


class Bond(K8sModel):
    """A bond of the server's NICs (MAAS ``create_bond``)."""

    name: Iface = Field(description="Name of the bond interface, e.g. bond0.")
    interfaces: Annotated[list[Iface], Field(min_length=1, max_length=8)] = Field(
        description="The NICs to bond, by their MAAS names (e.g. [eno1, eno2]); they must be on one VLAN. "
        "MAAS removes their own links: give the bond a subnet.",
        json_schema_extra=list_set(),
    )
    mode: BondMode | None = Field(None, description="Bonding mode. Default (MAAS's): balance-rr.")
    lacp_rate: Literal["fast", "slow"] | None = Field(None, description="LACP rate (802.3ad). MAAS: fast.")
    xmit_hash_policy: XmitHashPolicy | None = Field(None, description="Transmit hash policy. MAAS: layer2.")
    mtu: Mtu | None = Field(None, description="MTU of the bond.")
    subnet: Cidr | None = Field(
        None,
        description="The MAAS subnet (CIDR) the bond is linked to in AUTO mode (MAAS assigns the address).",
    )


class Vlan(K8sModel):
    """A tagged VLAN interface on a NIC or bond (MAAS ``create_vlan``)."""

    parent: Iface = Field(description="A NIC (MAAS name) or a bond of spec.network.bonds.")
    vid: Annotated[int, Field(ge=1, le=4094)] = Field(
        description="The 802.1Q tag. The VLAN must exist in MAAS on the parent's fabric (capmaas looks up "
        "its MAAS id)."
    )
    mtu: Mtu | None = Field(None, description="MTU of the VLAN interface.")
    subnet: Cidr | None = Field(None, description="The MAAS subnet (CIDR) linked in AUTO mode.")

    @property
    def name(self) -> str:
        """MAAS's default name of the VLAN interface: ``<parent>.<vid>``."""
        return f"{self.parent}.{self.vid}"


class NetworkLayout(K8sModel):
    """Bonds and VLANs made on the server before deploy and deleted before it is released."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.vlans) || !has(self.bonds) || self.vlans.all(v, "
                    "self.bonds.all(b, !(v.parent in b.interfaces)))",
                    "a VLAN cannot be on a NIC that is in a bond (MAAS: put it on the bond)",
                    field_path=".vlans",
                ),
            ]
        )
    )

    bonds: Annotated[list[Bond], Field(max_length=4)] | None = Field(
        None, description="Bonds to make.", json_schema_extra=list_map("name")
    )
    vlans: Annotated[list[Vlan], Field(max_length=16)] | None = Field(
        None, description="VLAN interfaces to make.", json_schema_extra=list_map("parent", "vid")
    )


class DataFilesystem(K8sModel):
    """A filesystem on a whole data disk (not the boot disk), mounted at ``mountPoint``."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[cel("has(self.disk) || has(self.diskTags)", "name the disk: disk or diskTags")]
        )
    )

    disk: Iface | None = Field(None, description="The block device by its MAAS name (e.g. sdb).")
    disk_tags: Annotated[list[Annotated[str, StringConstraints(min_length=1, max_length=256)]], Field(
        max_length=8
    )] | None = Field(
        None,
        description="Or: the first unused data disk carrying all these MAAS block-device tags (e.g. [nvme]).",
        json_schema_extra=list_set(),
    )  # fmt: skip
    fstype: FsType = Field(description="Filesystem type (MAAS op=format fstype).")
    mount_point: Annotated[str, StringConstraints(min_length=2, max_length=255, pattern=r"^/[^\s,]*$")] = (
        Field(description="Absolute mount point, e.g. /var/lib/containerd.")
    )
    mount_options: Annotated[str, StringConstraints(max_length=255, pattern=r"^[^\s]*$")] | None = Field(
        None, description="Mount options (MAAS op=mount mount_options), e.g. noatime."
    )
