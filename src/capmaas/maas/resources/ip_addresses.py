"""``ipaddresses/``: addresses reserved for use outside MAAS (``USER_RESERVED``), owned by the caller.

A reserved address is never handed to a machine, so it cannot be moved onto one either: ``link_subnet``
with it answers 404 ``IP address is already in use.``; pin a machine's address with ``reservedips/``
(:class:`~capmaas.maas.resources.reserved_ips.ReservedIps`) instead.
"""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["IpAddresses"]

_PATH = "ipaddresses/"


class IpAddresses:
    """Operations on ``ipaddresses/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def reserve(
        self,
        *,
        subnet: str | None = None,
        ip: str | None = None,
        hostname: str | None = None,
        mac: str | None = None,
    ) -> models.ReservedIpAddress:
        """Reserve ``ip`` (its subnet is the best match), or a free address of ``subnet`` (CIDR, id, name or
        specifier). ``hostname`` (``host`` or ``host.domain``) also makes MAAS create or extend that DNS
        record. An address in use is :class:`NotFoundError`, one in a dynamic range
        :class:`ForbiddenError`, a full subnet :class:`ServiceUnavailableError`. Not idempotent: after a
        lost answer, look the address up with :meth:`list`."""
        form = [
            (k, v) for k, v in (("subnet", subnet), ("ip", ip), ("hostname", hostname), ("mac", mac)) if v
        ]
        return await self._http.model(models.ReservedIpAddress, "POST", _PATH, op="reserve", form=form)

    async def release(self, ip: str, *, force: bool = False) -> None:
        """Release our reservation of ``ip``; ``force`` (admin) releases any address, a machine's included.
        One that is not ours (or gone) is :class:`BadRequestError`."""
        form = [("ip", ip)]
        if force:
            form.append(("force", models.form_bool(True)))
        await self._http.call("POST", _PATH, op="release", form=form)

    async def list(
        self, *, ip: str | None = None, all: bool = False
    ) -> builtins.list[models.ReservedIpAddress]:
        """Our reserved addresses (only ``ip`` if given); ``all`` (admin): every address of every type and
        user, machines' included."""
        query = [("ip", ip)] if ip is not None else []
        if all:
            query.append(("all", models.form_bool(True)))
        return await self._http.models(models.ReservedIpAddress, "GET", _PATH, query=query)
