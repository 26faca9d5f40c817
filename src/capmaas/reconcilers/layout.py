"""A bare-metal MaasMachine's network and storage intent (``spec.network``, ``spec.filesystems``), applied to
the server after allocation and before deploy, and undone before the server is released.

MAAS 3.7.3's rules decide the design (docs/operating.md "Hardware selection"):

- Bonds and VLAN interfaces may be made while the server is Allocated (admin key), and MAAS does **not**
  undo them at release: capmaas deletes what it made, and gives the bonded NICs back the links they had
  (creating a bond clears its parents' links). What it made is written down (``…/layout-made``) *before*
  each create, so a crash in between leaves it known; on a pass after a crash, what MAAS already shows (by
  name, read fresh) is not made again.
- A filesystem + mount on a whole data disk is allowed while Allocated, and MAAS deletes such "acquired"
  filesystems at release on its own: nothing to undo.
- Storage layouts, RAID and volume groups are Ready-only and survive allocations: not done per allocation.
- A server that cannot take the intent (a NIC or disk it lacks, a VLAN MAAS does not have on the NIC's
  fabric) or an intent MAAS refuses is released, not marked broken, with ``LayoutRefused`` (MAAS's words),
  and the next server tried after a backoff.

MAAS requests per machine: one ``GET machines/{id}/`` to start from what MAAS has now, one write per bond,
VLAN, link, format and mount, one more read of the machine when anything was made (the deploy and the
address pins work on it); ``GET fabrics/`` once when VLANs are asked for. Undo: two reads and one write per
thing made or link restored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from capmaas import maas
from capmaas.api.v1beta1 import Bond, DataFilesystem, Vlan
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers import facts
from capmaas.reconcilers.credentials import maas_step
from capmaas.reconcilers.keys import LAYOUT_MADE
from capmaas.reconcilers.ports import BondRequest, MaasPort
from capmaas.reconcilers.scope import MachineScope

#: A link as it is given back: (mode, subnet CIDR, static address or "").
Link = tuple[str, str, str]


class Refused(Exception):
    """The server cannot take the intent, or MAAS refused part of it (the message: which, in MAAS's words)."""


@dataclass
class Made:
    """What capmaas made on the held server (``…/layout-made``) and the links its bonds took from the NICs."""

    bonds: list[str] = field(default_factory=list)
    vlans: list[str] = field(default_factory=list)
    links: dict[str, list[Link]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Made:
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            return cls(
                bonds=[str(b) for b in raw.get("bonds") or ()],
                vlans=[str(v) for v in raw.get("vlans") or ()],
                links={
                    str(nic): [(str(m), str(c), str(ip)) for m, c, ip in links]
                    for nic, links in (raw.get("links") or {}).items()
                },
            )
        except (ValueError, TypeError, AttributeError):
            return cls()  # not ours to trust: nothing recorded means nothing is deleted

    def dump(self) -> str | None:
        if not (self.bonds or self.vlans or self.links):
            return None
        return json.dumps(
            {"bonds": self.bonds, "vlans": self.vlans, "links": self.links}, separators=(",", ":")
        )


def wanted(scope: MachineScope) -> bool:
    """Whether the MaasMachine asks for any network or storage intent."""
    spec = scope.want
    return bool(spec.filesystems or (spec.network and (spec.network.bonds or spec.network.vlans)))


def _refusal(what: str, exc: maas_errors.MaasError) -> Refused:
    if isinstance(exc, maas_errors.BadRequestError) and exc.field_errors:
        said = facts.refusal_text(exc.field_errors)
    elif isinstance(exc, maas_errors.ApiError):
        said = facts.maas_text(exc.body, exc.status)
    else:
        said = str(exc)
    return Refused(f"MAAS refused {what}: {said}")


def _links(nic: maas.Interface) -> list[Link]:
    return [
        (link.mode.lower(), link.subnet.cidr, link.ip_address or "")
        for link in nic.links
        if link.subnet is not None and link.mode.lower() in ("auto", "dhcp", "static")
    ]


def _linked(iface: maas.Interface, cidr: str) -> bool:
    return any(link.subnet is not None and link.subnet.cidr == cidr for link in iface.links)


def _disk(m: maas.Machine, fs: DataFilesystem, taken: set[int]) -> maas.BlockDevice | None:
    """The data disk ``fs`` names: by name, else the first unused one with all its tags (no boot disk)."""
    boot = m.boot_disk.id if m.boot_disk is not None else None
    for d in m.blockdevice_set:
        if d.id == boot or d.id in taken:
            continue
        mounted = d.filesystem is not None and d.filesystem.mount_point == fs.mount_point
        if fs.disk is not None:
            if d.name == fs.disk:
                return d
            continue
        free = d.filesystem is None and not d.partitions
        if set(fs.disk_tags or ()) <= set(d.tags) and (free or mounted):
            return d
    return None


def unfit(m: maas.Machine, scope: MachineScope) -> str | None:
    """Why server ``m`` (as MAAS has it now) cannot take the intent, or None."""
    spec = scope.want
    nics = {i.name for i in m.interface_set}
    bonds = {b.name for b in (spec.network.bonds if spec.network else None) or ()}
    for b in (spec.network.bonds if spec.network else None) or ():
        missing = [n for n in b.interfaces if n not in nics] if b.name not in nics else []
        if missing:
            return f"MAAS machine {m.system_id} has no interface {', '.join(missing)} (for bond {b.name})"
    for v in (spec.network.vlans if spec.network else None) or ():
        if v.parent not in nics and v.parent not in bonds:
            return f"MAAS machine {m.system_id} has no interface {v.parent} (for VLAN {v.vid})"
    taken: set[int] = set()
    for fs in spec.filesystems or ():
        d = _disk(m, fs, taken)
        if d is None:
            which = fs.disk or f"an unused data disk tagged {sorted(fs.disk_tags or ())}"
            return f"MAAS machine {m.system_id} has no {which} (for {fs.mount_point})"
        taken.add(d.id)
    return None


async def apply(scope: MachineScope, port: MaasPort, m: maas.Machine) -> maas.Machine:
    """Make the intent on the held, Allocated server ``m``; returns the server as MAAS has it after. Raises
    :class:`Refused` (release it) or a reconcile error (retry)."""
    sid = m.system_id
    with maas_step(f"reading {sid}"):
        now = await port.read_machine(sid)
    if (why := unfit(now, scope)) is not None:
        raise Refused(why)
    spec = scope.want
    nics = {i.name: i for i in now.interface_set}
    made = Made.parse(scope.annotation(LAYOUT_MADE))
    changed = False
    with maas_step(f"shaping {sid}"):
        for b in (spec.network.bonds if spec.network else None) or ():
            iface = nics.get(b.name)
            if iface is None:
                iface = await _bond(scope, port, sid, b, nics=nics, made=made)
                nics[b.name] = iface
                changed = True
            if b.subnet and not _linked(iface, b.subnet):
                await _link(port, sid, iface, b.subnet, f"bond {b.name}")
                changed = True
        vlans = (spec.network.vlans if spec.network else None) or ()
        fabrics = await port.fabrics() if any(v.name not in nics for v in vlans) else ()
        for v in vlans:
            iface = nics.get(v.name)
            if iface is None:
                iface = await _vlan(scope, port, sid, v, nics=nics, fabrics=fabrics, made=made)
                nics[v.name] = iface
                changed = True
            if v.subnet and not _linked(iface, v.subnet):
                await _link(port, sid, iface, v.subnet, f"VLAN interface {v.name}")
                changed = True
        taken: set[int] = set()
        for fs in spec.filesystems or ():
            d = _disk(now, fs, taken)
            assert d is not None  # unfit() checked
            taken.add(d.id)
            changed |= await _filesystem(port, sid, d, fs)
    if not changed:
        return now
    with maas_step(f"reading {sid}"):
        return await port.read_machine(sid)


async def _record(scope: MachineScope, made: Made) -> None:
    scope.set_annotation(LAYOUT_MADE, made.dump())
    await scope.flush()  # before the create: a crash leaves it known


async def _bond(
    scope: MachineScope, port: MaasPort, sid: str, b: Bond, *, nics: dict[str, maas.Interface], made: Made
) -> maas.Interface:
    for n in b.interfaces:
        made.links.setdefault(n, _links(nics[n]))  # what the bond will clear, as it is before the first try
    if b.name not in made.bonds:
        made.bonds.append(b.name)
    await _record(scope, made)
    request = BondRequest(
        name=b.name,
        parents=tuple(nics[n].id for n in b.interfaces),
        mode=b.mode,
        lacp_rate=b.lacp_rate,
        xmit_hash_policy=b.xmit_hash_policy,
        mtu=b.mtu,
    )
    try:
        return await port.create_bond(sid, request)
    except (maas_errors.BadRequestError, maas_errors.ConflictError) as exc:
        raise _refusal(f"bond {b.name} of {', '.join(b.interfaces)}", exc) from exc


async def _vlan(
    scope: MachineScope,
    port: MaasPort,
    sid: str,
    v: Vlan,
    *,
    nics: dict[str, maas.Interface],
    fabrics: Sequence[maas.Fabric],
    made: Made,
) -> maas.Interface:
    parent = nics[v.parent]
    fabric_id = parent.vlan.fabric_id if parent.vlan is not None else None
    fabric = next((f for f in fabrics if f.id == fabric_id), None)
    vlan = next((x for x in (fabric.vlans if fabric else ()) if x.vid == v.vid), None)
    if fabric is None or vlan is None:
        where = f"fabric {fabric.name}" if fabric is not None else f"the fabric of {v.parent}"
        raise Refused(f"MAAS has no VLAN {v.vid} on {where} (for {v.name}); define it in MAAS")
    if v.name not in made.vlans:
        made.vlans.append(v.name)
    await _record(scope, made)
    try:
        return await port.create_vlan(sid, parent=parent.id, vlan=vlan.id, mtu=v.mtu)
    except (maas_errors.BadRequestError, maas_errors.ConflictError) as exc:
        raise _refusal(f"VLAN {v.vid} on {v.parent}", exc) from exc


async def _link(port: MaasPort, sid: str, iface: maas.Interface, cidr: str, what: str) -> None:
    try:
        await port.link_subnet(sid, iface.id, mode="auto", subnet=cidr)
    except (maas_errors.BadRequestError, maas_errors.ConflictError, maas_errors.NotFoundError) as exc:
        raise _refusal(f"an AUTO link of {what} to {cidr}", exc) from exc


async def _filesystem(port: MaasPort, sid: str, d: maas.BlockDevice, fs: DataFilesystem) -> bool:
    """Format and mount ``d`` as ``fs`` asks; False when MAAS already has it so."""
    have = d.filesystem
    if have is not None and have.fstype == fs.fstype and have.mount_point == fs.mount_point:
        return False
    try:
        if have is None or have.fstype != fs.fstype:
            await port.format_disk(sid, d.id, fstype=fs.fstype)
        await port.mount_disk(sid, d.id, mount_point=fs.mount_point, mount_options=fs.mount_options)
    except (maas_errors.BadRequestError, maas_errors.ConflictError) as exc:
        raise _refusal(f"{fs.fstype} on {d.name} at {fs.mount_point}", exc) from exc
    return True


def made_names(scope: MachineScope) -> list[str]:
    """The interfaces of ``…/layout-made`` (for messages)."""
    made = Made.parse(scope.annotation(LAYOUT_MADE))
    return [*made.vlans, *made.bonds]


async def undo(scope: MachineScope, port: MaasPort, m: maas.Machine | None) -> bool:
    """Delete the VLAN interfaces and bonds of ``…/layout-made`` that MAAS shows on server ``m`` (held,
    proven ours) and give their NICs back their links; the annotation is cleared with the caller's next
    write. False when MAAS allows no interface edit in the server's state now (Deployed, Deploying, Failed
    deployment): nothing sent, the annotation kept, the caller undoes it later (after the release, see
    :mod:`~capmaas.reconcilers.baremetal`). With ``m`` None (not ours any more) nothing is sent."""
    made = Made.parse(scope.annotation(LAYOUT_MADE))
    if m is None or not (made.bonds or made.vlans):
        scope.set_annotation(LAYOUT_MADE, None)
        return True
    sid = m.system_id
    with maas_step(f"undoing the network layout of {sid}"):
        try:
            now = await port.read_machine(sid)
            if not now.status.interfaces_editable:
                return False
            nics = {i.name: i for i in now.interface_set}
            gone = False
            for name in [*made.vlans, *made.bonds]:  # VLANs first: one may sit on a bond
                iface = nics.get(name)
                if iface is not None:
                    await port.delete_interface(sid, iface.id)
                    gone = True
            if gone:
                now = await port.read_machine(sid)
                nics = {i.name: i for i in now.interface_set}
            for nic, links in made.links.items():
                iface = nics.get(nic)
                if iface is None:
                    continue
                for mode, cidr, ip in links:
                    if _linked(iface, cidr):
                        continue
                    try:
                        await port.link_subnet(sid, iface.id, mode=mode, subnet=cidr, ip_address=ip or None)
                    except (maas_errors.BadRequestError, maas_errors.ConflictError) as exc:
                        # e.g. the STATIC address was taken meanwhile: the release goes on, a person may
                        # relink
                        said = _refusal(f"the {mode} link of {nic} to {cidr}", exc)
                        scope.event("Warning", "LinkNotRestored", f"{sid}: {said}")
        except maas_errors.NotFoundError:
            pass  # the machine is gone from MAAS: nothing left to undo
    scope.set_annotation(LAYOUT_MADE, None)
    return True
