"""What a MaasMachineTemplate's status should say about MAAS: how many matching servers are Ready now
(``status.available``), and the hardware the cluster autoscaler builds a from-zero node group with
(``status.capacity``/``status.nodeInfo``).

Pure functions over one session's inventory (:mod:`capmaas.gateway.inventory`), so every template of a MAAS
is counted from the same listing with no request of its own:

- bare metal: the Ready machines the spec's selection matches (:mod:`capmaas.gateway.matching`); capacity is
  the smallest CPU count, memory and root disk among them, plus the device count per resource name
  (``nvidia.com/gpu`` by default for vendor ``10de``) when the template selects devices. The smallest is the
  safe side: the autoscaler must not expect more than any server MAAS may hand out has.
- LXD: the VM slots on the VM hosts placement would use for the namespace (``capmaas.placement``'s filters,
  the LXD provisioner's candidates), each host counting as many VMs of the template's size as its free
  cores, memory (over-commit included) and storage pool hold; the capacity is the VM's own size.

While nothing matches, or MAAS is not listed yet, the capacity falls back to the template's minimums
(:func:`capmaas.api.v1beta1.capacity_for`), and the ``MaasCapacity`` condition says which.
Every capacity value is a quantity *string*: the autoscaler reads the map with ``NestedStringMap``, which
drops it whole for one number in it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capmaas import maas, placement
from capmaas.api import conditions as C
from capmaas.api.related import ObjectMeta
from capmaas.api.v1beta1 import PROVISIONING_MODE_LXD, DeviceFilter, MaasMachineSpec, capacity_for
from capmaas.gateway import matching
from capmaas.gateway.inventory import Inventory
from capmaas.reconcilers import lxd_placer

GB = 1000**3
#: MAAS architecture names (the part before ``/``) -> the Node's ``kubernetes.io/arch``; others are left out.
NODE_ARCH = {"amd64": "amd64", "arm64": "arm64", "s390x": "s390x", "ppc64el": "ppc64le", "ppc64le": "ppc64le"}


@dataclass(frozen=True)
class Count:
    """What MAAS has for one template: how many, and the capacity/architecture of the smallest."""

    available: int
    capacity: Mapping[str, str] = field(default_factory=dict)  # empty: none matched (use the minimums)
    architecture: str | None = None
    #: Ready machines that match but for their devices, which are not read yet.
    devices_unread: tuple[str, ...] = ()
    message: str = ""


def is_lxd(spec: MaasMachineSpec) -> bool:
    return spec.canonical().provisioning_mode == PROVISIONING_MODE_LXD


def node_arch(architecture: str | None) -> str | None:
    return NODE_ARCH.get((architecture or "").split("/", 1)[0])


def _common_arch(names: Sequence[str | None]) -> str | None:
    arches = {node_arch(a) for a in names}
    return next(iter(arches)) if len(arches) == 1 else None


def device_resources(
    want: DeviceFilter, devices: Sequence[maas.NodeDevice], resources: Mapping[str, str]
) -> dict[str, int]:
    """Matching devices of one machine per resource name (vendors without one are not counted)."""
    out: dict[str, int] = {}
    for d in matching.matching_devices(want, devices):
        name = resources.get(d.vendor_id.lower())
        if name:
            out[name] = out.get(name, 0) + 1
    return out


def count_machines(spec: MaasMachineSpec, inventory: Inventory, resources: Mapping[str, str]) -> Count | None:
    """Bare metal: the Ready machines ``spec`` matches (see the module docstring); None while the machines
    with the template's devices have not been listed yet."""
    ready = inventory.ready or {}
    sel = matching.Selection.of(spec.canonical())
    hardware = dataclasses.replace(sel, device=None)
    candidates = [m for m in ready.values() if matching.matches(hardware, m)]
    matched = candidates
    unread: tuple[str, ...] = ()
    if sel.device is not None:
        with_device = inventory.device_listing(sel.device.to_constraint())
        if with_device is None:
            return None
        candidates = [m for m in candidates if m.system_id in with_device]
        unread = tuple(m.system_id for m in candidates if m.system_id not in inventory.devices)
        want = sel.device
        matched = [m for m in candidates if matching.devices_ok(want, inventory.devices.get(m.system_id))]
    # The messages name no figure but the template's own: an unrelated machine changing state must not
    # rewrite every template's status.
    tail = f"; the devices of {len(unread)} more are being read" if unread else ""
    if not matched:
        return Count(
            0,
            devices_unread=unread,
            message=f"no Ready server in MAAS matches{tail}: capacity from the template's minimums",
        )
    roots = [matching.root_disk(m) for m in matched]
    capacity = {
        "cpu": str(min(m.cpu_count for m in matched)),
        "memory": f"{min(m.memory for m in matched)}Mi",
    }
    if all(r is not None and r.size > 0 for r in roots):
        capacity["ephemeral-storage"] = f"{min(r.size for r in roots if r is not None) // GB}G"
    if sel.device is not None:
        per = [
            device_resources(sel.device, inventory.devices.get(m.system_id, ()), resources) for m in matched
        ]
        for name in sorted({n for p in per for n in p}):
            least = min(p.get(name, 0) for p in per)
            if least > 0:
                capacity[name] = str(least)
    return Count(
        len(matched),
        capacity,
        _common_arch([m.architecture for m in matched]),
        unread,
        f"matching servers Ready in MAAS: {len(matched)}{tail}; capacity from the smallest of them",
    )


def _slots(host: placement.HostCandidate, request: placement.VMRequest) -> int:
    """VMs of ``request``'s size the host still holds (the placement filters' arithmetic, repeated)."""
    pool = host.storage_pool(request.storage_pool)
    if pool is None:
        return 0
    fits = (
        (host.cores_capacity - host.cores_used) / request.cores,
        (host.memory_capacity_mib - host.memory_used_mib) / request.memory_mib,
        (pool.total_bytes - pool.used_bytes) / request.disk_bytes,
    )
    return max(0, math.floor(min(fits)))


def count_vm_slots(body: Mapping[str, Any], spec: MaasMachineSpec, inventory: Inventory) -> Count:
    """LXD: VM slots on the hosts placement would use for the template's namespace."""
    hosts = inventory.vm_hosts or ()
    meta = body.get("metadata", {})
    namespace = str(meta.get("namespace", ""))
    cands = []
    for h in hosts:
        if (h.type and h.type != "lxd") or (h.capabilities and "composable" not in h.capabilities):
            continue
        sid = h.host.system_id if h.host else None
        cands.append(lxd_placer.candidate(h, inventory.host_machines.get(sid) if sid else None))
    listing = lxd_placer.Listing(0.0, {h.id: h for h in hosts}, tuple(cands))
    usable = lxd_placer.tenant_candidates(listing, namespace)
    request = lxd_placer.vm_request(ObjectMeta.from_body(meta), spec.canonical(), None, namespace)
    kept = placement.filter_hosts(request, usable).kept
    slots = sum(_slots(h, request) for h in kept)
    if slots == 0:
        return Count(
            0, message=f"no VM host of the {len(usable)} usable ones has room: capacity from the template"
        )
    by_id = {h.id: h for h in hosts}
    arch = _common_arch([a for h in kept for a in by_id[h.id].architectures] or [None])
    capacity = dict(capacity_for(spec).capacity or {})
    return Count(
        slots, capacity, arch, message=f"{slots} VM slots on {len(kept)} VM hosts: capacity is the VM's size"
    )


def count(
    body: Mapping[str, Any], spec: MaasMachineSpec, inventory: Inventory, resources: Mapping[str, str]
) -> Count | None:
    """The template's count, or None while the inventory has not been listed."""
    if inventory.ready is None or (is_lxd(spec) and inventory.vm_hosts is None):
        return None
    if is_lxd(spec):
        return count_vm_slots(body, spec, inventory)
    return count_machines(spec, inventory, resources)


def minimums(spec: MaasMachineSpec, resources: Mapping[str, str]) -> dict[str, Any]:
    """``capacity``/``nodeInfo`` from the spec alone (the fallback): with the device the template selects
    counted once when its vendor has a resource name (the least a matching server has)."""
    want = capacity_for(spec).to_k8s()
    canonical = spec.canonical()
    if canonical.devices and not is_lxd(spec):
        vendor = (canonical.devices[0].vendor_id or "").lower()
        if vendor in resources:
            want["capacity"][resources[vendor]] = "1"
    arch = node_arch(canonical.architecture)
    if arch:
        want["nodeInfo"]["architecture"] = arch
    return want


def desired(
    spec: MaasMachineSpec, counted: Count | None, why_not: str, resources: Mapping[str, str]
) -> tuple[dict[str, Any], tuple[bool, str, str] | None]:
    """``({capacity, nodeInfo, available?}, (condition status, reason, message) | None)``: with no count
    (``why_not`` says why), the minimums and no ``available``; tied to no cluster at all (``why_not`` ""),
    no condition either (the template keeps its spec-only status)."""
    want = minimums(spec, resources)
    if counted is None:
        if not why_not:
            return want, None
        return want, (False, C.MAAS_NOT_LISTED_REASON, f"{why_not}: capacity from the template's minimums")
    if counted.devices_unread and not counted.capacity:  # not known yet: no count, no Warning
        return want, (False, C.MAAS_NOT_LISTED_REASON, counted.message)
    want["available"] = counted.available
    if not counted.capacity:
        return want, (False, C.NO_MATCHING_SERVERS_REASON, counted.message)
    want["capacity"] = dict(counted.capacity)
    if counted.architecture:
        want["nodeInfo"]["architecture"] = counted.architecture
    return want, (True, C.COUNTED_IN_MAAS_REASON, counted.message)
