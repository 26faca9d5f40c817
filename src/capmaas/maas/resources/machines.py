"""``machines/``: find, allocate, deploy, release and look after bare-metal machines and VMs.

The write operations mirror MAAS 3.7's ``MachineHandler`` ops one to one; each returns the machine as MAAS
reports it *after* the call (e.g. status ``Deploying`` right after deploy), never a guess of ours.
"""

from __future__ import annotations

import base64
import builtins
from collections.abc import Iterable, Mapping, Sequence

import pydantic

from capmaas.maas import _http, models

__all__ = ["Machines"]

_ONE = "machines/{system_id}/"


def _statuses(status: models.NodeStatus | Iterable[models.NodeStatus] | None) -> builtins.list[str]:
    if status is None:
        return []
    if isinstance(status, models.NodeStatus):
        return [status.filter_name]
    return [s.filter_name for s in status]


def _flags(**flags: bool) -> builtins.list[tuple[str, str]]:
    """Only the flags that are set, as ``true``: MAAS defaults every one of them to false."""
    return [(name, models.form_bool(True)) for name, value in flags.items() if value]


def _optional(**values: str | None) -> builtins.list[tuple[str, str]]:
    return [(name, value) for name, value in values.items() if value is not None]


def _user_data(user_data: bytes | None) -> builtins.list[tuple[str, str]]:
    """MAAS wants ``user_data`` base64-encoded; taking bytes means callers cannot double-encode by mistake."""
    if user_data is None:
        return []
    if not isinstance(user_data, bytes | bytearray):
        raise TypeError(f"user_data must be bytes, not {type(user_data).__name__}")
    return [("user_data", base64.b64encode(user_data).decode("ascii"))]


class _ZoneOf(pydantic.BaseModel):
    """The one field of a listed machine that :meth:`Machines.zone_names` reads (every other is skipped by
    the parser, never made into objects)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")

    zone: models.Zone


class Machines:
    """Operations on ``machines/`` and ``machines/{system_id}/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(
        self,
        *,
        ids: Sequence[str] | None = None,
        agent_name: str | None = None,
        agent_names: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        zone: str | None = None,
        pool: str | None = None,
        status: models.NodeStatus | Iterable[models.NodeStatus] | None = None,
        tags: Sequence[str] | None = None,
        pods: Sequence[str] | None = None,
    ) -> builtins.list[models.Machine]:
        """Machines visible to us matching every filter (a filter's values OR, except tags: AND;
        ``agent_names``: held under any of them). ``pods`` names VM hosts: their VMs (MAAS matches the
        machine's BMC name)."""
        query: builtins.list[tuple[str, str]] = [("id", i) for i in ids or ()]
        query += [("agent_name", a) for a in agent_names or ()]
        query += [("hostname", h) for h in hostnames or ()]
        query += [("pod", p) for p in pods or ()]
        query += _optional(agent_name=agent_name, zone=zone, pool=pool)
        query += [("status", s) for s in _statuses(status)]
        query += [("tags", t) for t in tags or ()]
        return await self._http.models(models.Machine, "GET", "machines/", query=query)

    async def zone_names(self) -> builtins.set[str]:
        """The zones that hold a machine visible to us: the listing of every machine (MAAS's zone API has no
        machine counts), of which only each machine's zone is read. A full :class:`~models.Machine` is ~10
        KB of memory (its interfaces and disks): a MAAS of thousands made one call hold tens of MB at once
        (docs/scaling.md, "Memory at 200 machines")."""
        return {m.zone.name for m in await self._http.models(_ZoneOf, "GET", "machines/")}

    async def list_lenient(
        self, ids: Sequence[str]
    ) -> tuple[builtins.list[models.Machine], builtins.list[str]]:
        """The machines ``ids`` that parse, and the system IDs of those left out because they do not (the
        shared poll: one odd machine must not hide every other tenant's). Unlike :meth:`list`, which a
        caller uses to decide whether a machine exists, a machine left out here is *not* absent."""
        query = [("id", i) for i in ids]
        return await self._http.models_lenient(
            models.Machine, "GET", "machines/", key="system_id", query=query
        )

    async def list_status_lenient(
        self, status: models.NodeStatus, *, devices: str | None = None
    ) -> tuple[builtins.list[models.Machine], builtins.list[str]]:
        """Every machine visible to us in ``status`` that parses, and the system IDs of those that do not (the
        shared inventory of Ready machines: one odd machine must not hide the rest); ``devices``: only those
        with a PCI/USB device matching MAAS's ``devices=`` filter (``vendor_id=10de,...``)."""
        query = [("status", status.filter_name), *_optional(devices=devices)]
        return await self._http.models_lenient(
            models.Machine, "GET", "machines/", key="system_id", query=query
        )

    async def devices(self, system_id: str) -> builtins.list[models.NodeDevice]:
        """The PCI and USB devices MAAS found on the machine while commissioning (``nodes/{id}/devices/``)."""
        return await self._http.models(
            models.NodeDevice, "GET", "nodes/{system_id}/devices/", params={"system_id": system_id}
        )

    async def get(self, system_id: str) -> models.Machine:
        """One machine; :class:`NotFoundError` if MAAS does not know it."""
        return await self._http.model(models.Machine, "GET", _ONE, params={"system_id": system_id})

    async def allocate(
        self,
        constraints: models.AllocateConstraints | None = None,
        *,
        agent_name: str | None = None,
        comment: str | None = None,
        dry_run: bool = False,
    ) -> models.Machine:
        """Take the cheapest READY machine matching ``constraints`` (ALLOCATED, owned by us).

        Nothing matching is :class:`NoMachineAvailableError`. Not idempotent: record ``agent_name`` and
        look it up with :meth:`list` after a lost answer instead of allocating again.
        """
        form = (constraints or models.AllocateConstraints()).to_form()
        form += _optional(agent_name=agent_name, comment=comment)
        form += _flags(dry_run=dry_run)
        return await self._http.model(models.Machine, "POST", "machines/", op="allocate", form=form)

    async def deploy(
        self,
        system_id: str,
        *,
        user_data: bytes | None = None,
        distro_series: str | None = None,
        hwe_kernel: str | None = None,
        ephemeral_deploy: bool = False,
        install_kvm: bool = False,
        register_vmhost: bool = False,
        enable_hw_sync: bool = False,
        comment: str | None = None,
    ) -> models.Machine:
        """Start deploying (a READY machine is allocated first). ``user_data`` is raw bytes; we base64 it.

        ``distro_series`` is ``os/series`` (``ubuntu/jammy``) or a bare series; MAAS has no ``osystem`` field.
        """
        request = models.DeployRequest(
            user_data=user_data,
            distro_series=distro_series,
            hwe_kernel=hwe_kernel,
            ephemeral_deploy=ephemeral_deploy,
            install_kvm=install_kvm,
            register_vmhost=register_vmhost,
            enable_hw_sync=enable_hw_sync,
            comment=comment,
        )
        return await self.deploy_with(system_id, request)

    async def deploy_with(self, system_id: str, request: models.DeployRequest) -> models.Machine:
        """:meth:`deploy` of a :class:`~capmaas.maas.models.DeployRequest`."""
        r = request
        form = _user_data(r.user_data)
        form += _optional(distro_series=r.distro_series, hwe_kernel=r.hwe_kernel, comment=r.comment)
        form += _flags(
            ephemeral_deploy=r.ephemeral_deploy,
            install_kvm=r.install_kvm,
            register_vmhost=r.register_vmhost,
            enable_hw_sync=r.enable_hw_sync,
        )
        return await self._http.model(
            models.Machine, "POST", _ONE, op="deploy", params={"system_id": system_id}, form=form
        )

    @staticmethod
    def _release_form(
        erase: bool,
        secure_erase: bool,
        quick_erase: bool,
        force: bool,
        comment: str | None,
        *,
        scripts: Sequence[str] = (),
    ) -> builtins.list[tuple[str, str]]:
        form = _flags(erase=erase, secure_erase=secure_erase, quick_erase=quick_erase, force=force)
        if scripts:
            form.append(("scripts", ",".join(scripts)))  # MAAS splits the one value on commas
        return form + _optional(comment=comment)

    async def release(
        self,
        system_id: str,
        *,
        erase: bool = False,
        secure_erase: bool = False,
        quick_erase: bool = False,
        force: bool = False,
        comment: str | None = None,
        scripts: Sequence[str] = (),
    ) -> models.Machine:
        """Give the machine back (RELEASING or DISK_ERASING, then READY). READY/RELEASING is a no-op.
        ``scripts``: release scripts by name or tag (``wipe-disks``; ``none``)."""
        form = self._release_form(erase, secure_erase, quick_erase, force, comment, scripts=scripts)
        return await self._http.model(
            models.Machine, "POST", _ONE, op="release", params={"system_id": system_id}, form=form
        )

    async def release_many(
        self,
        system_ids: Sequence[str],
        *,
        erase: bool = False,
        secure_erase: bool = False,
        quick_erase: bool = False,
        force: bool = False,
        comment: str | None = None,
        scripts: Sequence[str] = (),
    ) -> builtins.list[str]:
        """Release several machines in one call; returns the ids MAAS released (READY ones are skipped)."""
        form = [("machines", s) for s in system_ids]
        form += self._release_form(erase, secure_erase, quick_erase, force, comment, scripts=scripts)
        data = await self._http.call("POST", "machines/", op="release", form=form)
        if not isinstance(data, list) or not all(isinstance(s, str) for s in data):
            raise self._http.shape_error("POST", "machines/?op=release", "a JSON list of system ids", data)
        return data

    async def power_on(
        self, system_id: str, *, user_data: bytes | None = None, comment: str | None = None
    ) -> models.Machine:
        """Power on (for an ALLOCATED machine MAAS starts a deployment)."""
        form = _user_data(user_data) + _optional(comment=comment)
        return await self._http.model(
            models.Machine, "POST", _ONE, op="power_on", params={"system_id": system_id}, form=form
        )

    async def power_off(
        self, system_id: str, *, stop_mode: str | None = None, comment: str | None = None
    ) -> models.Machine | None:
        """Power off (``stop_mode`` ``soft`` or ``hard``); None when MAAS sent no power action."""
        return await self._http.optional_model(
            models.Machine,
            "POST",
            _ONE,
            op="power_off",
            params={"system_id": system_id},
            form=_optional(stop_mode=stop_mode, comment=comment),
        )

    async def query_power_state(self, system_id: str) -> models.PowerState:
        """Ask the BMC now (MAAS may take up to a minute) rather than reading the cached ``power_state``."""
        data = await self._http.call("GET", _ONE, op="query_power_state", params={"system_id": system_id})
        if not isinstance(data, dict) or not isinstance(data.get("state"), str):
            raise self._http.shape_error("GET", _ONE + "?op=query_power_state", '{"state": ...}', data)
        return models.PowerState(data["state"])

    async def set_workload_annotations(
        self, system_id: str, annotations: Mapping[str, str]
    ) -> models.Machine:
        """Set (an empty value deletes) annotations on a machine we own; MAAS wipes them on release."""
        form = [(str(k), str(v)) for k, v in annotations.items()]
        return await self._http.model(
            models.Machine,
            "POST",
            _ONE,
            op="set_workload_annotations",
            params={"system_id": system_id},
            form=form,
        )

    async def mark_broken(self, system_id: str, *, comment: str | None = None) -> models.Machine:
        """Mark a machine we own BROKEN (releasing it first when it is releasable)."""
        return await self._simple_op(system_id, "mark_broken", comment)

    async def mark_fixed(self, system_id: str, *, comment: str | None = None) -> models.Machine:
        """Admin: BROKEN -> READY (or DEPLOYED if it was deployed before)."""
        return await self._simple_op(system_id, "mark_fixed", comment)

    async def abort(self, system_id: str, *, comment: str | None = None) -> models.Machine:
        """Abort commissioning, deploying, testing or disk erasing."""
        return await self._simple_op(system_id, "abort", comment)

    async def set_storage_layout(
        self,
        system_id: str,
        *,
        storage_layout: str,
        boot_size: str | None = None,
        root_size: str | None = None,
        root_device: int | None = None,
        vg_name: str | None = None,
        lv_name: str | None = None,
        lv_size: str | None = None,
    ) -> models.Machine:
        """Admin: apply a storage layout (``flat``, ``lvm``, ``bcache``, ``vmfs6``, ``vmfs7``, ``custom``,
        ``blank``); sizes take MAAS's ``K``/``M``/``G``/``T`` suffixes or ``%``, ``root_device`` is a block
        device id.

        MAAS allows it on a **Ready** machine only (:class:`ConflictError` ``Cannot change the storage layout
        on a machine that is not Ready.``) and the layout stays after release, for whoever allocates the
        machine next: a per-allocation storage intent uses :mod:`block_devices` on the Allocated machine
        instead, whose changes MAAS drops at release.
        """
        form = [("storage_layout", storage_layout)]
        form += _optional(
            boot_size=boot_size,
            root_size=root_size,
            root_device=None if root_device is None else str(root_device),
            vg_name=vg_name,
            lv_name=lv_name,
            lv_size=lv_size,
        )
        return await self._http.model(
            models.Machine, "POST", _ONE, op="set_storage_layout", params={"system_id": system_id}, form=form
        )

    async def delete(self, system_id: str, *, force: bool = False) -> None:
        """Admin: remove the machine from MAAS (a composed VM is decomposed). A second delete is 404."""
        query = [("force", "1")] if force else []
        await self._http.call("DELETE", _ONE, params={"system_id": system_id}, query=query)

    async def _simple_op(self, system_id: str, op: str, comment: str | None) -> models.Machine:
        return await self._http.model(
            models.Machine,
            "POST",
            _ONE,
            op=op,
            params={"system_id": system_id},
            form=_optional(comment=comment),
        )
