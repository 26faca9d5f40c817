"""Which MAAS machines a MaasMachine spec's selection fields match, the way MAAS 3.7's allocate matches them.

Why here and not a MAAS call per template: capacity counts every template against the one shared listing of
Ready machines (:mod:`capmaas.gateway.poller`), so matching must run locally. Each check follows the MAAS
3.7.3 source the allocate constraints were checked against (``maasserver/node_constraint_filter_forms.py``,
"l." below; see :mod:`capmaas.api.v1beta1.selection`):

- ``minCPU``/``minMemory``: ``cpu_count >= n`` and ``memory >= MiB`` (l.940-960);
- ``tags`` all present, ``notTags`` none present (l.990-1004); ``resourcePool`` / ``failureDomain`` by name;
- ``architecture``: ``arm64`` matches every ``arm64/<subarch>``, ``arm64/generic`` itself only (wildcards
  l.198-226);
- ``devices``: one device matches every key given, case-insensitively (``filter_by_devices`` l.1310-1318);
- ``interfaces``: each label independently has some interface with every property (l.531-611);
- storage: the first entry is the disk holding ``/`` (a Ready machine's boot disk) of at least
  ``minDiskSize`` GB with the root tags; each extra disk is a different unused disk, the groups with most tags
  first, the smallest that fits (``nodes_by_storage`` l.343-528). Sizes are decimal GB, as MAAS parses them.

Devices are not in MAAS's machine listing; the caller passes those it has read (``None``: not known yet, and a
spec with a device filter then does not match).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from capmaas import maas
from capmaas.api.v1beta1 import DeviceFilter, ExtraDisk, InterfaceConstraint, MaasMachineSpec

GB = 1000**3


@dataclass(frozen=True, slots=True)
class Selection:
    """The selection fields of one spec, in the shape the checks read (built once per template)."""

    min_cpu: int = 0
    min_memory: int = 0
    tags: frozenset[str] = frozenset()
    not_tags: frozenset[str] = frozenset()
    pool: str | None = None
    zone: str | None = None
    architecture: str | None = None
    device: DeviceFilter | None = None
    interfaces: tuple[InterfaceConstraint, ...] = ()
    root_gb: int = 0
    root_tags: frozenset[str] = frozenset()
    extra_disks: tuple[ExtraDisk, ...] = ()

    @classmethod
    def of(cls, spec: MaasMachineSpec) -> Selection:
        return cls(
            min_cpu=spec.min_cpu,
            min_memory=spec.min_memory,
            tags=frozenset(spec.tags or ()),
            not_tags=frozenset(spec.not_tags or ()),
            pool=spec.resource_pool or None,
            zone=spec.failure_domain or None,
            architecture=spec.architecture or None,
            device=spec.devices[0] if spec.devices else None,
            interfaces=tuple(spec.interfaces or ()),
            root_gb=spec.min_disk_size or 0,
            root_tags=frozenset(spec.root_disk_tags or ()),
            extra_disks=tuple(spec.extra_disks or ()),
        )

    @property
    def wants_devices(self) -> bool:
        return self.device is not None


def matches(sel: Selection, m: maas.Machine, devices: Sequence[maas.NodeDevice] | None = None) -> bool:
    """Whether MAAS's allocate would take ``m`` for ``sel`` (its state aside: the caller lists Ready ones).
    Cheapest checks first, and a constraint the spec does not give costs nothing: every template is matched
    against every Ready machine each time the inventory changes."""
    if m.cpu_count < sel.min_cpu or m.memory < sel.min_memory:
        return False
    if (sel.tags or sel.not_tags) and not tags_ok(sel, m):
        return False
    if (sel.pool is not None or sel.zone is not None) and not placement_ok(sel, m):
        return False
    if sel.architecture is not None and not architecture_ok(sel, m):
        return False
    if (sel.root_gb or sel.root_tags or sel.extra_disks) and not storage_ok(sel, m):
        return False
    if sel.interfaces and not interfaces_ok(sel, m):
        return False
    return sel.device is None or devices_ok(sel.device, devices)


def devices_ok(want: DeviceFilter, devices: Sequence[maas.NodeDevice] | None) -> bool:
    """Some device matches every key of ``want``; never while the machine's devices are not known."""
    return devices is not None and bool(matching_devices(want, devices))


def sizes_ok(sel: Selection, m: maas.Machine) -> bool:
    return m.cpu_count >= sel.min_cpu and m.memory >= sel.min_memory


def tags_ok(sel: Selection, m: maas.Machine) -> bool:
    have = set(m.tag_names)
    return sel.tags <= have and not (sel.not_tags & have)


def placement_ok(sel: Selection, m: maas.Machine) -> bool:
    if sel.pool is not None and (m.pool is None or m.pool.name != sel.pool):
        return False
    return sel.zone is None or m.zone.name == sel.zone


def architecture_ok(sel: Selection, m: maas.Machine) -> bool:
    """``arm64`` is every ``arm64/*`` (MAAS's wildcard); ``arm64/generic`` only itself."""
    if sel.architecture is None:
        return True
    have = m.architecture or ""
    if "/" in sel.architecture:
        return have == sel.architecture
    return have.split("/", 1)[0] == sel.architecture


def matching_devices(want: DeviceFilter, devices: Sequence[maas.NodeDevice]) -> list[maas.NodeDevice]:
    """The devices that match every key of ``want`` (``__iexact``)."""
    pairs = [
        (v.lower(), attr)
        for v, attr in (
            (want.vendor_id, "vendor_id"),
            (want.product_id, "product_id"),
            (want.vendor_name, "vendor_name"),
            (want.product_name, "product_name"),
            (want.commissioning_driver, "commissioning_driver"),
        )
        if v is not None
    ]
    return [d for d in devices if all(str(getattr(d, attr)).lower() == v for v, attr in pairs)]


def root_disk(m: maas.Machine) -> maas.BlockDevice | None:
    """The disk holding ``/`` on a Ready machine: MAAS's boot disk (else the first physical disk)."""
    if m.boot_disk is not None:
        return m.boot_disk
    return m.physicalblockdevice_set[0] if m.physicalblockdevice_set else None


def storage_ok(sel: Selection, m: maas.Machine) -> bool:
    if not (sel.root_gb or sel.root_tags or sel.extra_disks):
        return True
    if "partition" in sel.root_tags or any("partition" in (d.tags or ()) for d in sel.extra_disks):
        return False  # a partition is asked for: a Ready machine's layout is not known to have a free one
    root = root_disk(m)
    if root is None or root.size < sel.root_gb * GB or not sel.root_tags <= set(root.tags):
        return False
    used = {root.id}
    for extra in sorted(sel.extra_disks, key=lambda d: len(d.tags or ()), reverse=True):
        need, tags = extra.size_gb * GB, set(extra.tags or ())
        fits = sorted(
            (
                d
                for d in m.physicalblockdevice_set
                if d.id not in used and d.size >= need and tags <= set(d.tags)
            ),
            key=lambda d: d.size,
        )
        if not fits:
            return False
        used.add(fits[0].id)
    return True


def interfaces_ok(sel: Selection, m: maas.Machine) -> bool:
    return all(any(interface_ok(c, i) for i in m.interface_set) for c in sel.interfaces)


def _subnets(i: maas.Interface) -> list[maas.Subnet]:
    return [link.subnet for link in i.links if link.subnet is not None]


def _vlan_ok(spec: str, vlan: maas.VlanRef | None) -> bool:
    """A VLAN specifier: its MAAS id, ``id:``, ``vid:``, ``name:`` or ``fabric:``."""
    if vlan is None:
        return False
    kind, sep, value = spec.partition(":")
    if not sep:
        kind, value = "id", spec
    name = vlan.name or ("untagged" if vlan.vid == 0 else str(vlan.vid))
    return (kind, value) in (
        ("id", str(vlan.id)),
        ("vid", str(vlan.vid)),
        ("name", name),
        ("fabric", vlan.fabric),
        ("fabric", str(vlan.fabric_id)),
    )


def _subnet_ok(spec: str, subnets: Sequence[maas.Subnet]) -> bool:
    for s in subnets:
        forms = {s.cidr, s.name, str(s.id), f"id:{s.id}", f"cidr:{s.cidr}", f"name:{s.name}"}
        if s.space:
            forms.add(f"space:{s.space}")
        if s.vlan is not None:
            forms.add(f"vid:{s.vlan.vid}")
        if spec in forms:
            return True
    return False


def interface_ok(c: InterfaceConstraint, i: maas.Interface) -> bool:
    """Every property the constraint gives holds for interface ``i`` (``get_specifiers_q``)."""
    vlan = i.vlan
    subnets = _subnets(i)
    checks = (
        c.name is None or i.name == c.name,
        c.fabric is None or (vlan is not None and c.fabric in (vlan.fabric, str(vlan.fabric_id))),
        c.space is None or (vlan is not None and (vlan.space or "undefined") == c.space),
        c.vlan is None or _vlan_ok(c.vlan, vlan),
        c.vid is None or (vlan is not None and vlan.vid == c.vid),
        c.subnet is None or _subnet_ok(c.subnet, subnets),
        c.subnet_cidr is None or any(s.cidr == c.subnet_cidr for s in subnets),
        c.link_speed is None or (i.type == "physical" and i.link_speed >= c.link_speed),
        not c.tags or set(c.tags) <= set(i.tags),
    )
    return all(checks)


def emptied_by(
    sel: Selection, ready: Sequence[maas.Machine], device_holders: frozenset[str] | None = None
) -> tuple[str, int] | None:
    """Which constraint left no Ready machine, and how many matched every constraint before it (MAAS's 409
    lists them all but does not say which). Constraints are applied in the order a person would relax them
    (sizes first, hardware last); ``device_holders`` are the machines MAAS lists for the ``devices`` filter
    (None: not known, that step is skipped). None when the machines match everything (taken meanwhile) or
    none is listed."""
    steps: list[tuple[str, bool, Callable[[maas.Machine], bool]]] = [
        (f"minCPU {sel.min_cpu}", bool(sel.min_cpu), lambda m: m.cpu_count >= sel.min_cpu),
        (f"minMemory {sel.min_memory} MiB", bool(sel.min_memory), lambda m: m.memory >= sel.min_memory),
        (f"resourcePool {sel.pool}", sel.pool is not None,
         lambda m: m.pool is not None and m.pool.name == sel.pool),
        (f"zone {sel.zone}", sel.zone is not None, lambda m: m.zone.name == sel.zone),
        (f"tags {sorted(sel.tags)}", bool(sel.tags), lambda m: sel.tags <= set(m.tag_names)),
        (f"notTags {sorted(sel.not_tags)}", bool(sel.not_tags),
         lambda m: not (sel.not_tags & set(m.tag_names))),
        (f"architecture {sel.architecture}", sel.architecture is not None,
         lambda m: architecture_ok(sel, m)),
        ("the disks (minDiskSize, rootDiskTags, extraDisks)",
         bool(sel.root_gb or sel.root_tags or sel.extra_disks), lambda m: storage_ok(sel, m)),
        ("interfaces", bool(sel.interfaces), lambda m: interfaces_ok(sel, m)),
        ("devices", sel.device is not None and device_holders is not None,
         lambda m: device_holders is not None and m.system_id in device_holders),
    ]  # fmt: skip
    left = list(ready)
    if not left:
        return None
    for what, given, ok in steps:
        if not given:
            continue
        kept = [m for m in left if ok(m)]
        if not kept:
            return what, len(left)
        left = kept
    return None
