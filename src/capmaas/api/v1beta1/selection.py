"""Hardware selection: MaasMachine fields that become MAAS 3.7 allocate constraints.

Each shape follows what MAAS's ``AcquireNodeForm`` parses (``maasserver/node_constraint_filter_forms.py``
at tag 3.7.3, "l." below) so that what the CRD admits, MAAS's parser accepts: a value holding a character
the parser splits on (``,`` ``;`` ``(`` ``)``) would be cut into a different constraint, so the patterns
refuse it at admission. The string forms MAAS wants are built by :func:`capmaas.reconcilers.facts.selection`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, list_set, schema_extra
from capmaas.api.sizes import DiskSize, gigabytes

__all__ = [
    "ARCHITECTURE_PATTERN",
    "ROOT_LABEL",
    "DeviceFilter",
    "DiskTag",
    "ExtraDisk",
    "InterfaceConstraint",
]

#: ``amd64``, ``arm64/generic``, ``armhf/hardbank``: MAAS's ``arch/subarch`` names, or the primary part alone
#: (MAAS expands it to every subarchitecture it knows, ``get_architecture_wildcards`` l.218).
ARCHITECTURE_PATTERN = r"^[a-z0-9]+(/[a-z0-9][a-z0-9._-]*)?$"
#: A PCI/USB id as MAAS stores it (four hex digits, e.g. ``10de``); MAAS compares case-insensitively.
HEX_ID_PATTERN = r"^[0-9A-Fa-f]{4}$"
#: A device vendor/product name: ``devices=`` is split on ``,`` (l.1314), so a name may not hold one.
DEVICE_NAME_PATTERN = r"^[^,]+$"
#: A kernel driver name (``nvidia``, ``mlx5_core``).
DRIVER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: A labeled-constraint label (``validate_constraint_label_name``,
#: provisioningserver/utils/constraints.py:127).
LABEL_PATTERN = r"^[a-zA-Z0-9]+[a-zA-Z0-9_-]*$"
#: A storage label: ``STORAGE_REGEX``'s ``[a-zA-Z0-9]+`` (l.70).
STORAGE_LABEL_PATTERN = r"^[a-zA-Z0-9]+$"
#: A value in the ``interfaces`` map: the parser splits on ``;`` and ``,`` (constraints.py:83,97).
IFACE_VALUE_PATTERN = r"^[^,;]+$"
#: A disk tag inside ``storage=...(tag,tag)``: ``,`` separates tags and ``)`` ends the list (l.72).
DISK_TAG_PATTERN = r"^[A-Za-z0-9_.-]+$"

DeviceName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=DEVICE_NAME_PATTERN)]
IfaceValue = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=IFACE_VALUE_PATTERN)]
DiskTag = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=DISK_TAG_PATTERN)]


# Why the shapes: DeviceFilter's keys are DEVICE_CONSTRAINT_NAMES (l.137-143), matched in one nodedevice query
# (filter_by_devices, l.1310-1318), so one device must satisfy them all. InterfaceConstraint's keys are
# NETWORKING_CONSTRAINT_NAMES (l.106-134) as InterfaceQueriesMixin.get_specifiers_q (models/interface.py)
# matches them. ExtraDisk is one STORAGE_REGEX group (l.69-74) after the root one; MAAS takes the smallest
# unused disk that fits (nodes_by_storage, l.475-491).


class DeviceFilter(K8sModel):
    """A PCI or USB device the machine must have (MAAS devices=): one device must match every key given, each compared exactly but case-insensitively."""  # noqa: E501

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "has(self.vendorID) || has(self.productID) || has(self.vendorName)"
                    " || has(self.productName) || has(self.commissioningDriver)",
                    "a device filter needs at least one of vendorID, productID, vendorName, productName, "
                    "commissioningDriver",
                )
            ]
        )
    )

    vendor_id: (
        Annotated[str, StringConstraints(min_length=4, max_length=4, pattern=HEX_ID_PATTERN)] | None
    ) = Field(None, alias="vendorID", description="PCI/USB vendor id, four hex digits (NVIDIA: 10de).")
    product_id: (
        Annotated[str, StringConstraints(min_length=4, max_length=4, pattern=HEX_ID_PATTERN)] | None
    ) = Field(None, alias="productID", description="PCI/USB product id, four hex digits.")
    vendor_name: DeviceName | None = Field(
        None, description="Vendor name as MAAS shows it (e.g. NVIDIA Corporation); no commas."
    )
    product_name: DeviceName | None = Field(
        None, description="Product name as MAAS shows it (e.g. GA102GL [RTX A6000]); no commas."
    )
    commissioning_driver: (
        Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=DRIVER_PATTERN)] | None
    ) = Field(None, description="Kernel driver the device used while commissioning (e.g. nvidia, mlx5_core).")

    def to_constraint(self) -> str:
        """MAAS's ``devices=`` value: ``vendor_id=10de,product_name=...`` in a fixed key order."""
        pairs = (
            ("vendor_id", self.vendor_id),
            ("product_id", self.product_id),
            ("vendor_name", self.vendor_name),
            ("product_name", self.product_name),
            ("commissioning_driver", self.commissioning_driver),
        )
        return ",".join(f"{k}={v}" for k, v in pairs if v is not None)


class InterfaceConstraint(K8sModel):
    """An interface the machine must have (one label of MAAS interfaces=label:key=value,...): every property given holds for it."""  # noqa: E501

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "has(self.name) || has(self.fabric) || has(self.space) || has(self.vlan) || has(self.vid)"
                    " || has(self.subnet) || has(self.subnetCIDR) || has(self.linkSpeed) || has(self.tags)",
                    "an interface constraint needs at least one of name, fabric, space, vlan, vid, subnet, "
                    "subnetCIDR, linkSpeed, tags",
                )
            ]
        )
    )

    label: Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=LABEL_PATTERN)] = Field(
        description="The constraint's label (MAAS reports the matched interface under it); unique."
    )
    name: IfaceValue | None = Field(None, description="Interface name, e.g. eth0 (MAAS key name).")
    fabric: IfaceValue | None = Field(None, description="Fabric name or id of the interface's VLAN (fabric).")
    space: IfaceValue | None = Field(None, description="Space of the interface's VLAN, name or id (space).")
    vlan: IfaceValue | None = Field(
        None, description="VLAN specifier: its MAAS id, or vid:<n>, name:<name>, fabric:<fabric> (vlan)."
    )
    vid: int | None = Field(None, ge=0, le=4094, description="802.1Q id of the interface's VLAN; 0 untagged.")
    subnet: IfaceValue | None = Field(
        None, description="Subnet specifier the interface has an address on: id, name:, cidr:, ip: (subnet)."
    )
    subnet_cidr: IfaceValue | None = Field(
        None, alias="subnetCIDR", description="CIDR of a subnet the interface is linked to (subnet_cidr)."
    )
    link_speed: int | None = Field(
        None, ge=1, le=1_000_000, description="Minimum link speed in Mbit/s (link_speed, >=)."
    )
    tags: (
        Annotated[
            list[
                Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
            ],
            Field(max_length=8),
        ]
        | None
    ) = Field(None, description="Interface tags it must all have (tag=a&&b).", json_schema_extra=list_set())

    def to_constraint(self) -> str:
        """``label:key=value,...`` in a fixed key order."""
        pairs: list[tuple[str, object]] = [
            ("name", self.name),
            ("fabric", self.fabric),
            ("space", self.space),
            ("vlan", self.vlan),
            ("vid", self.vid),
            ("subnet", self.subnet),
            ("subnet_cidr", self.subnet_cidr),
            ("link_speed", self.link_speed),
            ("tag", "&&".join(self.tags) if self.tags else None),
        ]
        return f"{self.label}:" + ",".join(f"{k}={v}" for k, v in pairs if v is not None)


class ExtraDisk(K8sModel):
    """An unused disk besides the root disk (MAAS storage=root:N,<label>:<size>(<tags>)) of at least size GB with every tag."""  # noqa: E501

    label: Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=STORAGE_LABEL_PATTERN)] = (
        Field(
            description="The disk's label (MAAS reports the matched block device under it); unique, "
            "not root.",
            json_schema_extra=schema_extra(
                rules=[cel("self != 'root'", "root is the root disk's label (minDiskSize)")]
            ),
        )
    )
    size: DiskSize = Field(description="Minimum size: gigabytes as an integer or a string with a unit.")
    tags: Annotated[list[DiskTag], Field(max_length=8)] | None = Field(
        None, description="Block-device tags it must all have (e.g. ssd, nvme).", json_schema_extra=list_set()
    )

    @property
    def size_gb(self) -> int:
        return gigabytes(self.size)


#: The label capmaas gives the root disk entry (``minDiskSize``), always first as MAAS wants it.
ROOT_LABEL = "root"
