"""``users/``: who we are (``whoami`` tells an operator whether its key is an admin's)."""

from __future__ import annotations

import builtins

from capmaas.maas import _http, models

__all__ = ["Users"]


class Users:
    """Operations on ``users/``."""

    def __init__(self, http: _http.Http) -> None:
        self._http = http

    async def whoami(self) -> models.User:
        """The user the API key belongs to."""
        return await self._http.model(models.User, "GET", "users/", op="whoami")

    async def list(self) -> builtins.list[models.User]:
        """All users, ordered by username."""
        return await self._http.models(models.User, "GET", "users/")

    async def get(self, username: str) -> models.User:
        """One user by name."""
        return await self._http.model(models.User, "GET", "users/{username}/", params={"username": username})
