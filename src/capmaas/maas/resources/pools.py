"""``resourcepools/``: resource pools, a placement constraint for allocate and compose."""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["ResourcePools"]


class ResourcePools:
    """Operations on ``resourcepools/`` (one pool lives at the singular ``resourcepool/{id}/``)."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.ResourcePool]:
        """Pools visible to us, ordered by name."""
        return await self._http.models(models.ResourcePool, "GET", "resourcepools/")

    async def get(self, id: int | str) -> models.ResourcePool:
        """One pool by id (MAAS also accepts its name here)."""
        return await self._http.model(models.ResourcePool, "GET", "resourcepool/{id}/", params={"id": id})
