"""``fabrics/``: MAAS fabrics and their VLANs (a VLAN's ``id`` is what ``create_vlan`` takes)."""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["Fabrics"]


class Fabrics:
    """Operations on ``fabrics/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.Fabric]:
        """All fabrics, each with its VLANs."""
        return await self._http.models(models.Fabric, "GET", "fabrics/")
