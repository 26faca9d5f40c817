"""``dnsresources/``: DNS records, used for a cluster's control-plane endpoint name."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from capmaas.maas import _http, models

__all__ = ["DnsResources"]

_ONE = "dnsresources/{id}/"


class DnsResources:
    """Operations on ``dnsresources/``; writes are admin-only."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(
        self, *, fqdn: str | None = None, domain: str | None = None
    ) -> builtins.list[models.DnsResource]:
        """DNS resources, optionally filtered by ``fqdn`` or ``domain``."""
        query = [(k, v) for k, v in (("fqdn", fqdn), ("domain", domain)) if v is not None]
        return await self._http.models(models.DnsResource, "GET", "dnsresources/", query=query)

    async def create(
        self, fqdn: str, ip_addresses: Sequence[str], *, address_ttl: int | None = None
    ) -> models.DnsResource:
        """A record ``fqdn`` -> ``ip_addresses`` (the domain must exist; IPs go space-separated)."""
        form = [("fqdn", fqdn), ("ip_addresses", " ".join(ip_addresses))]
        if address_ttl is not None:
            form.append(("address_ttl", str(address_ttl)))
        return await self._http.model(models.DnsResource, "POST", "dnsresources/", form=form)

    async def update(self, id: int, ip_addresses: Sequence[str]) -> models.DnsResource:
        """Replace the record's addresses (e.g. when control-plane machines come and go)."""
        form = [("ip_addresses", " ".join(ip_addresses))]
        return await self._http.model(models.DnsResource, "PUT", _ONE, params={"id": id}, form=form)

    async def delete(self, id: int) -> None:
        """Remove the record."""
        await self._http.call("DELETE", _ONE, params={"id": id})
