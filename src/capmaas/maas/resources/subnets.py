"""``subnets/``: MAAS subnets (MAAS offers no filters; filter by ``cidr`` on our side)."""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["Subnets"]


class Subnets:
    """Operations on ``subnets/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.Subnet]:
        """All subnets."""
        return await self._http.models(models.Subnet, "GET", "subnets/")
