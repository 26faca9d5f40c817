"""``nodes/{system_id}/blockdevices/{id}/``: filesystems on a machine's whole disks.

Each op needs the machine to be Ready (admins only) or Allocated (its owner may): 409 otherwise, 403 for a
non-admin on a Ready machine. Done on an Allocated machine, the filesystem and mount are *acquired*: MAAS
deletes them when the machine is released, so they need no undoing. A disk with a partition table (the boot
disk under MAAS's default layout) cannot be formatted whole. Each op returns the block device as MAAS reports
it afterwards.
"""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["BlockDevices"]

_ONE = "nodes/{system_id}/blockdevices/{id}/"


class BlockDevices:
    """Operations on one block device of a machine."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self, system_id: str) -> builtins.list[models.BlockDevice]:
        """The machine's block devices."""
        return await self._http.models(
            models.BlockDevice, "GET", "nodes/{system_id}/blockdevices/", params={"system_id": system_id}
        )

    async def format(
        self,
        system_id: str,
        device: int,
        *,
        fstype: str,
        uuid: str | None = None,
        label: str | None = None,
    ) -> models.BlockDevice:
        """Put a ``fstype`` filesystem (``ext4``, ``xfs``, ``swap``, ...) on the whole device, replacing the
        one there; ``uuid`` must be a version-4 UUID."""
        form = [("fstype", fstype)]
        form += [(k, v) for k, v in (("uuid", uuid), ("label", label)) if v is not None]
        return await self._op(system_id, device, "format", form)

    async def unformat(self, system_id: str, device: int) -> models.BlockDevice:
        """Remove the device's filesystem (:class:`BadRequestError` when it is mounted or there is none)."""
        return await self._op(system_id, device, "unformat", [])

    async def mount(
        self, system_id: str, device: int, *, mount_point: str, mount_options: str | None = None
    ) -> models.BlockDevice:
        """Mount the device's filesystem at the absolute path ``mount_point``."""
        form = [("mount_point", mount_point)]
        if mount_options is not None:
            form.append(("mount_options", mount_options))
        return await self._op(system_id, device, "mount", form)

    async def unmount(self, system_id: str, device: int) -> models.BlockDevice:
        """Unmount the device's filesystem; it stays formatted."""
        return await self._op(system_id, device, "unmount", [])

    async def _op(
        self, system_id: str, device: int, op: str, form: builtins.list[tuple[str, str]]
    ) -> models.BlockDevice:
        return await self._http.model(
            models.BlockDevice, "POST", _ONE, op=op, params={"system_id": system_id, "id": device}, form=form
        )
