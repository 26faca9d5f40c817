"""Filesystems on whole block devices and the storage layout (M ``api/blockdevices.py`` ``format``/
``unformat``/``mount``/``unmount``, ``forms/__init__.py`` ``FormatBlockDeviceForm``, ``forms/filesystem.py``
``MountFilesystemForm``; ``api/machines.py`` ``set_storage_layout``).

The block-device ops need ``NodePermission.edit`` (not locked; the machine unowned, the caller's, or the
caller an admin: else an empty 403) and a machine that is Ready (admins only: 403 with MAAS's text) or
Allocated (the owner may); otherwise 409. While the machine is allocated they act on its *acquired*
filesystems (copies made at allocation, ``State.create_acquired_filesystems``), which release deletes: a
disk formatted and mounted on an Allocated machine is bare again once it is released.

``set_storage_layout`` needs admin and a Ready machine (409 otherwise) and persists across allocations, which
is why a provider does not apply its per-machine storage intent with it. ``flat`` and ``blank`` are modelled
(MAAS's default partitions on the boot disk, or none; both drop every filesystem, as MAAS clears the storage
configuration first); the other layouts are refused with a 400 saying the simulator does not model them.
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

from capmaas_dev.simulator.http import HttpError, Request, bad_request, conflict, forbidden, not_found
from capmaas_dev.simulator.machines import machine_res, machine_response
from capmaas_dev.simulator.models import FORMAT_FSTYPES, Disk, Filesystem, Machine, NodeStatus
from capmaas_dev.simulator.nodes import _node, blockdevice_res
from capmaas_dev.simulator.router import Resource
from capmaas_dev.simulator.serialize import block_device_json
from capmaas_dev.simulator.state import State

#: None of its own: its ops hang on another module's resources (``core`` imports it for them).
RESOURCES: list[Resource] = []

if TYPE_CHECKING:
    from capmaas_dev.simulator.core import Simulator
    from capmaas_dev.simulator.http import Response

S = NodeStatus
#: ``UUID4Field`` (M ``forms/__init__.py:2895-2905``) and ``AbsolutePathField`` (``:2908-2928``).
UUID4_RE = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?4[0-9a-fA-F]{3}-?[89abAB][0-9a-fA-F]{3}-?[0-9a-fA-F]{12}"
)
PATH_RE = re.compile(r"^(?:/[^/]*)*$")
#: ``STORAGE_LAYOUTS`` names (M ``storage_layouts.py:1039-1052``; MAAS lists them in frozenset order).
STORAGE_LAYOUTS = ("bcache", "blank", "custom", "flat", "lvm", "vmfs6", "vmfs7")
MODELLED_LAYOUTS = ("flat", "blank")


def _device(sim: Simulator, req: Request) -> tuple[Machine, Disk]:
    """``BlockDevice.objects.get_block_device_or_404(..., NodePermission.edit)``."""
    m = _node(sim, req)
    key = req.params["id"]
    disk = next((d for d in m.disks if str(d.id) == key or d.name == key), None)
    if disk is None:
        raise not_found("BlockDevice")
    user = req.user.username if req.user is not None else None
    if m.locked or not (req.is_admin or m.owner is None or m.owner == user):
        raise forbidden()
    return m, disk


def _gate(req: Request, m: Machine, operation: str) -> None:
    """``raise_error_for_invalid_state_on_allocated_operations`` (M ``api/blockdevices.py:58-69``)."""
    if m.status not in (S.READY, S.ALLOCATED):
        raise conflict(f"Cannot {operation} block device because the machine is not Ready or Allocated.")
    if m.status is S.READY and not req.is_admin:
        raise forbidden(
            f"Cannot {operation} block device because you don't have the permissions on a Ready machine."
        )


def _set_effective(m: Machine, d: Disk, fs: Filesystem | None) -> None:
    """Write the filesystem the machine's state makes effective: the acquired one while allocated."""
    if m.status is S.ALLOCATED:
        d.acquired_fs = fs
    else:
        d.fs = fs
    m.cached_json = None


def _has_partitions(m: Machine, d: Disk) -> bool:
    return bool(block_device_json(m, d)["partitions"])


@blockdevice_res.op("POST", "format")
def format_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Format the whole device (``FormatBlockDeviceForm``): ``fstype`` (required), ``uuid``, ``label``."""
    m, d = _device(sim, req)
    _gate(req, m, "format")
    form = req.form
    errors: dict[str, list[str]] = {}
    fstype = form.get("fstype") or ""
    if not fstype:
        errors["fstype"] = ["This field is required."]
    elif fstype not in FORMAT_FSTYPES:
        errors["fstype"] = [f"Select a valid choice. {fstype} is not one of the available choices."]
    fs_uuid = form.get("uuid") or ""
    if fs_uuid and not (32 <= len(fs_uuid) <= 36 and UUID4_RE.search(fs_uuid)):
        errors["uuid"] = ["Enter a valid value."]
    if errors:
        raise bad_request(errors)
    if _has_partitions(m, d):
        raise bad_request({"__all__": ["Cannot format block device with a partition table."]})
    label = form.get("label") or ""  # a CharField: "" when not given
    fs = Filesystem(fstype, fs_uuid or str(uuid.uuid4()), label)
    _set_effective(m, d, fs)
    return block_device_json(m, d)


@blockdevice_res.op("POST", "unformat")
def unformat_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Remove the device's filesystem; a mounted one must be unmounted first."""
    m, d = _device(sim, req)
    _gate(req, m, "unformat")
    fs = State.effective_fs(m, d)
    if fs is None:
        raise bad_request("Block device is not formatted.")
    if fs.mounted:
        raise bad_request(
            "Filesystem is mounted and cannot be unformatted. Unmount the filesystem before unformatting the "
            "block device."
        )
    _set_effective(m, d, None)
    return block_device_json(m, d)


@blockdevice_res.op("POST", "mount")
def mount_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Mount the device's filesystem at ``mount_point`` (not for swap) with ``mount_options``."""
    m, d = _device(sim, req)
    _gate(req, m, "mount")
    fs = State.effective_fs(m, d)
    form = req.form
    if fs is None:
        raise bad_request({"__all__": ["Cannot mount an unformatted partition or block device."]})
    errors: dict[str, list[str]] = {}
    mount_point = form.get("mount_point") or ""
    if fs.fstype != "swap":
        if not mount_point:
            errors["mount_point"] = ["This field is required."]
        elif len(mount_point) > 4095 or not PATH_RE.match(mount_point):
            errors["mount_point"] = ["Enter a valid value."]
    if errors:
        raise bad_request(errors)
    fs.mount_point = mount_point if fs.fstype != "swap" else "none"
    fs.mount_options = form.get("mount_options") or ""  # a CharField: "" when not given
    m.cached_json = None
    return block_device_json(m, d)


@blockdevice_res.op("POST", "unmount")
def unmount_device(sim: Simulator, req: Request) -> dict[str, Any]:
    """Unmount the device's filesystem (it stays formatted)."""
    m, d = _device(sim, req)
    _gate(req, m, "unmount")
    fs = State.effective_fs(m, d)
    if fs is None:
        raise bad_request("Block device is not formatted.")
    if not fs.mounted:
        raise bad_request("Filesystem is already unmounted.")
    fs.mount_point = fs.mount_options = None
    m.cached_json = None
    return block_device_json(m, d)


@machine_res.op("POST", "set_storage_layout")
def set_storage_layout(sim: Simulator, req: Request) -> Response:
    """Apply a storage layout to a Ready machine (admin); ``flat`` and ``blank`` are modelled."""
    m = _node(sim, req)
    if not req.is_admin or m.locked:
        raise forbidden()
    if m.status is not S.READY:
        raise conflict("Cannot change the storage layout on a machine that is not Ready.")
    layout = req.form.get("storage_layout") or ""
    if not layout:
        raise bad_request({"storage_layout": ["This field is required."]})
    if layout not in STORAGE_LAYOUTS:
        listing = ", ".join(f"'{n}'" for n in STORAGE_LAYOUTS)
        message = f"'{layout}' is not a valid storage_layout.  It should be one of: {listing}."
        raise bad_request({"storage_layout": [message]})
    if not m.disks:
        raise bad_request("Machine is missing a boot disk; no storage layout can be applied.")
    if layout not in MODELLED_LAYOUTS:
        raise HttpError(400, f"The simulator does not model the '{layout}' storage layout.")
    for d in m.disks:
        d.fs = d.acquired_fs = None
    m.storage_layout = layout
    m.cached_json = None
    return machine_response(sim, m)
