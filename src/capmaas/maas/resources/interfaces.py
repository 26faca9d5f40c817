"""``nodes/{system_id}/interfaces/``: a machine's bonds and VLAN interfaces, and its address links (MAAS's
``link_subnet`` family).

Every op here needs admin (MAAS checks ``NodePermission.admin`` even for the machine's owner) and a machine
that is New, Ready, Failed testing, Allocated or Broken (409 otherwise). ``interface`` is the interface's
id or name. A STATIC link is written at once and kept across release; an AUTO link gets its address when
deployment starts and gives it back on release. Bonds and VLAN interfaces made on an Allocated machine are
not undone by its release: whoever made them deletes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from capmaas.maas import _http, models

__all__ = ["Interfaces"]

_ALL = "nodes/{system_id}/interfaces/"
_ONE = "nodes/{system_id}/interfaces/{id}/"


class Interfaces:
    """Operations on one interface of a node."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def create_bond(
        self,
        system_id: str,
        *,
        name: str,
        parents: Sequence[int],
        bond_mode: str | None = None,
        bond_lacp_rate: str | None = None,
        bond_xmit_hash_policy: str | None = None,
        mtu: int | None = None,
        bond_miimon: int | None = None,
        bond_downdelay: int | None = None,
        bond_updelay: int | None = None,
        bond_num_grat_arp: int | None = None,
        vlan: int | None = None,
        mac_address: str | None = None,
        tags: Sequence[str] = (),
    ) -> models.Interface:
        """Bond the physical interfaces ``parents`` (ids) as ``name``; returns the bond.

        MAAS clears every link of the parents (STATIC addresses included) and the bond starts with one
        LINK_UP link: link it afterwards (:meth:`link_subnet`). Unset settings take MAAS's defaults
        (``balance-rr``, lacp ``fast``, ``layer2``, miimon 100). ``vlan`` is a VLAN's id (default: the first
        parent's). Parents on different VLANs, a parent already in a bond/VLAN/bridge, or none, are
        :class:`BadRequestError` with MAAS's text.
        """
        form = [("name", name)] + [("parents", str(p)) for p in parents]
        form += _set(
            bond_mode=bond_mode,
            bond_lacp_rate=bond_lacp_rate,
            bond_xmit_hash_policy=bond_xmit_hash_policy,
            mtu=mtu,
            bond_miimon=bond_miimon,
            bond_downdelay=bond_downdelay,
            bond_updelay=bond_updelay,
            bond_num_grat_arp=bond_num_grat_arp,
            vlan=vlan,
            mac_address=mac_address,
            tags=",".join(tags) or None,
        )
        return await self._http.model(
            models.Interface, "POST", _ALL, op="create_bond", params={"system_id": system_id}, form=form
        )

    async def create_vlan(
        self,
        system_id: str,
        *,
        parent: int,
        vlan: int,
        mtu: int | None = None,
        name: str | None = None,
        tags: Sequence[str] = (),
    ) -> models.Interface:
        """A VLAN interface on ``parent`` (an interface id) for ``vlan``, which is the VLAN's **id** (as in
        :meth:`~capmaas.maas.resources.fabrics.Fabrics.list`), not its 802.1Q tag. The VLAN must be tagged
        and on the parent's fabric; the name defaults to ``<parent>.<vid>``. Returns the new interface
        (LINK_UP; link it afterwards)."""
        form = [
            ("parent", str(parent)),
            ("vlan", str(vlan)),
            *_set(mtu=mtu, name=name, tags=",".join(tags) or None),
        ]
        return await self._http.model(
            models.Interface, "POST", _ALL, op="create_vlan", params={"system_id": system_id}, form=form
        )

    async def delete(self, system_id: str, interface: str | int) -> None:
        """Delete an interface (its addresses go back to their subnets; a VLAN interface or bond left
        without parents goes with it). A second delete is :class:`NotFoundError`."""
        await self._http.call("DELETE", _ONE, params={"system_id": system_id, "id": interface})

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


def _set(**values: str | int | None) -> list[tuple[str, str]]:
    """Form fields for the values given; nothing for unset ones, so MAAS applies its defaults."""
    return [(k, str(v)) for k, v in values.items() if v is not None]
