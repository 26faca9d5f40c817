"""``boot-resources/``: the OS images MAAS can deploy, to check a MaasMachine's ``image`` early."""

from __future__ import annotations

import builtins
from typing import Literal

from capmaas.maas import _http, models

__all__ = ["BootResources"]


class BootResources:
    """Operations on ``boot-resources/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(
        self, *, type: Literal["synced", "uploaded"] | None = None
    ) -> builtins.list[models.BootResource]:
        """Images, optionally only ``synced`` or ``uploaded`` ones."""
        query = [("type", type)] if type is not None else []
        return await self._http.models(models.BootResource, "GET", "boot-resources/", query=query)
