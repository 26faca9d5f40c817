"""``zones/``: physical zones, which capmaas uses as Cluster API failure domains."""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["Zones"]


class Zones:
    """Operations on ``zones/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.Zone]:
        """All zones, ordered by name (there is always ``default``)."""
        return await self._http.models(models.Zone, "GET", "zones/")

    async def get(self, name: str) -> models.Zone:
        """One zone by name (zones are addressed by name, not id)."""
        return await self._http.model(models.Zone, "GET", "zones/{name}/", params={"name": name})
