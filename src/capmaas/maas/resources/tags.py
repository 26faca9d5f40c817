"""``tags/``: machine tags (an allocate constraint); writes are admin-only."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from capmaas.maas import _http, models

__all__ = ["Tags"]


class Tags:
    """Operations on ``tags/`` and ``tags/{name}/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def list(self) -> builtins.list[models.Tag]:
        """All tags."""
        return await self._http.models(models.Tag, "GET", "tags/")

    async def get(self, name: str) -> models.Tag:
        """One tag by name."""
        return await self._http.model(models.Tag, "GET", "tags/{name}/", params={"name": name})

    async def create(
        self,
        name: str,
        *,
        comment: str | None = None,
        definition: str | None = None,
        kernel_opts: str | None = None,
    ) -> models.Tag:
        """Admin: a new tag (``definition`` is an XPath; leave it out for a manual tag)."""
        form = [("name", name)]
        form += [
            (k, v)
            for k, v in (("comment", comment), ("definition", definition), ("kernel_opts", kernel_opts))
            if v is not None
        ]
        return await self._http.model(models.Tag, "POST", "tags/", form=form)

    async def update_nodes(
        self,
        name: str,
        *,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
        definition: str | None = None,
    ) -> models.TagUpdateResult:
        """Admin: tag (``add``) and untag (``remove``) machines by system id."""
        form = [("add", s) for s in add] + [("remove", s) for s in remove]
        if definition is not None:
            form.append(("definition", definition))
        return await self._http.model(
            models.TagUpdateResult,
            "POST",
            "tags/{name}/",
            op="update_nodes",
            params={"name": name},
            form=form,
        )
