"""``reservedips/`` (MAAS 3.6+): pin an address to a MAC on a subnet.

Unlike an ``ipaddresses/`` reservation, the entry is not an address in use: when the NIC with that MAC has
an AUTO link on the subnet, deployment gives it exactly this address, and MAAS keeps the address away from
other interfaces. The entry survives release, so a machine gets the same address on every deployment.
Writes are admin-only.
"""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["ReservedIps"]

_ONE = "reservedips/{id}/"


class ReservedIps:
    """Operations on ``reservedips/`` and ``reservedips/{id}/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def create(
        self, *, ip: str, mac_address: str, subnet: str | None = None, comment: str = ""
    ) -> models.ReservedIp:
        """Admin: reserve ``ip`` for ``mac_address`` (``subnet`` is inferred from the IP when omitted). An
        IP or a (MAC, subnet) pair already reserved is :class:`BadRequestError`."""
        form = [("ip", ip), ("mac_address", mac_address)]
        if subnet is not None:
            form.append(("subnet", subnet))
        if comment:
            form.append(("comment", comment))
        return await self._http.model(models.ReservedIp, "POST", "reservedips/", form=form)

    async def list(self) -> builtins.list[models.ReservedIp]:
        """Every entry (any user may read them)."""
        return await self._http.models(models.ReservedIp, "GET", "reservedips/")

    async def get(self, id: int) -> models.ReservedIp:
        """One entry; :class:`NotFoundError` if unknown."""
        return await self._http.model(models.ReservedIp, "GET", _ONE, params={"id": id})

    async def delete(self, id: int) -> None:
        """Admin: remove the entry (a machine deployed with the address keeps it until release)."""
        await self._http.call("DELETE", _ONE, params={"id": id})
