"""``ipranges/``, read-only: the dynamic (DHCP) and reserved ranges of each subnet.

MAAS hands no address inside either kind to an AUTO link or an auto-picked STATIC link, and refuses an
explicit STATIC address inside a dynamic range; a caller choosing addresses itself reads them here.
"""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["IpRanges"]


class IpRanges:
    """Operations on ``ipranges/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.IpRange]:
        """Every IP range of every subnet."""
        return await self._http.models(models.IpRange, "GET", "ipranges/")
