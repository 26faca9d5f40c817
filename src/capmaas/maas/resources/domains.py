"""``domains/``: DNS domains MAAS is authoritative for."""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["Domains"]


class Domains:
    """Operations on ``domains/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.Domain]:
        """All domains (the default one is usually ``maas``)."""
        return await self._http.models(models.Domain, "GET", "domains/")
