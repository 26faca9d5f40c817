"""``vm-hosts/``: LXD/virsh hosts that MAAS composes VMs on (removed in MAAS 4.0, which answers 410 Gone)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from capmaas.maas import _http, models

__all__ = ["VmHosts"]

_ONE = "vm-hosts/{id}/"

UpdateValue = str | int | float | bool | Sequence[str]


def _update_form(fields: dict[str, UpdateValue]) -> builtins.list[tuple[str, str]]:
    form: builtins.list[tuple[str, str]] = []
    for key, value in fields.items():
        if isinstance(value, bool):
            form.append((key, models.form_bool(value)))
        elif isinstance(value, str | int | float):
            form.append((key, str(value)))
        else:
            form.extend((key, str(v)) for v in value)
    return form


class VmHosts:
    """Operations on ``vm-hosts/`` and ``vm-hosts/{id}/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.VmHost]:
        """All VM hosts with their total/used/available resources."""
        return await self._http.models(models.VmHost, "GET", "vm-hosts/")

    async def get(self, id: int) -> models.VmHost:
        """One VM host; :class:`NotFoundError` if unknown."""
        return await self._http.model(models.VmHost, "GET", _ONE, params={"id": id})

    async def compose(self, id: int, request: models.ComposeRequest | None = None) -> models.ComposedMachine:
        """Admin: create a VM on the host. It appears as a machine going Commissioning -> Ready.

        Over-commit is :class:`ServiceUnavailableError` (without ``Retry-After``, so it is not retried).
        """
        form = (request or models.ComposeRequest()).to_form()
        return await self._http.model(
            models.ComposedMachine, "POST", _ONE, op="compose", params={"id": id}, form=form
        )

    async def update(self, id: int, **fields: UpdateValue) -> models.VmHost:
        """Admin: change ``name``, ``tags``, ``zone``/``pool`` (names), over-commit ratios; lists repeat."""
        return await self._http.model(
            models.VmHost, "PUT", _ONE, params={"id": id}, form=_update_form(fields)
        )

    async def add_tag(self, id: int, tag: str) -> models.VmHost:
        """Admin: tag the host (``op=add_tag``; a tag with ``,`` is refused with 400)."""
        return await self._http.model(
            models.VmHost, "POST", _ONE, op="add_tag", params={"id": id}, form=[("tag", tag)]
        )

    async def remove_tag(self, id: int, tag: str) -> models.VmHost:
        """Admin: remove a tag from the host (``op=remove_tag``)."""
        return await self._http.model(
            models.VmHost, "POST", _ONE, op="remove_tag", params={"id": id}, form=[("tag", tag)]
        )

    async def delete(self, id: int, *, decompose: bool = False) -> None:
        """Admin: remove the VM host (``decompose`` also destroys its VMs)."""
        query = [("decompose", models.form_bool(True))] if decompose else []
        await self._http.call("DELETE", _ONE, params={"id": id}, query=query)
