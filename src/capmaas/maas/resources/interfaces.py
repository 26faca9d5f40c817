"""``nodes/{system_id}/interfaces/{id}/``: a machine's address links (MAAS's ``link_subnet`` family).

Every op here needs admin (MAAS checks ``NodePermission.admin`` even for the machine's owner) and a machine
that is New, Ready, Failed testing, Allocated or Broken (409 otherwise). ``interface`` is the interface's
id or name. A STATIC link is written at once and kept across release; an AUTO link gets its address when
deployment starts and gives it back on release.
"""

from __future__ import annotations

from capmaas.maas import _http, models

__all__ = ["Interfaces"]

_ONE = "nodes/{system_id}/interfaces/{id}/"


class Interfaces:
    """Operations on one interface of a node."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def link_subnet(
        self,
        system_id: str,
        interface: str | int,
        *,
        mode: str,
        subnet: str | int | None = None,
        ip_address: str | None = None,
        default_gateway: bool = False,
        force: bool = False,
    ) -> models.Interface:
        """Link the interface to ``subnet`` in ``mode`` (``auto``, ``dhcp``, ``static``, ``link_up``).

        STATIC takes ``ip_address`` or picks a free one. An address already in use (another machine's, or
        reserved through ``ipaddresses/``) is :class:`NotFoundError` (``IP address is already in use.``);
        one inside a dynamic range :class:`BadRequestError`; one clashing with a ``reservedips/`` entry
        :class:`ConflictError`; a full subnet :class:`ServiceUnavailableError`.
        """
        form = [("mode", mode)]
        if subnet is not None:
            form.append(("subnet", str(subnet)))
        if ip_address is not None:
            form.append(("ip_address", ip_address))
        if default_gateway:
            form.append(("default_gateway", models.form_bool(True)))
        if force:
            form.append(("force", models.form_bool(True)))
        return await self._http.model(
            models.Interface,
            "POST",
            _ONE,
            op="link_subnet",
            params={"system_id": system_id, "id": interface},
            form=form,
        )

    async def unlink_subnet(self, system_id: str, interface: str | int, link_id: int) -> models.Interface:
        """Remove the link ``link_id`` (an entry of ``links[].id``); a STATIC address goes back to the
        subnet."""
        return await self._http.model(
            models.Interface,
            "POST",
            _ONE,
            op="unlink_subnet",
            params={"system_id": system_id, "id": interface},
            form=[("id", str(link_id))],
        )
