"""The pool of MAAS sessions, one per (endpoint, identity): the operator's
:class:`~capmaas.reconcilers.ports.MaasConnector`."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable

from capmaas import maas
from capmaas.gateway.poller import MachinePoller, Wake
from capmaas.gateway.session import MaasSession
from capmaas.reconcilers.ports import MaasCredentials

log = logging.getLogger(__name__)

ClientFactory = Callable[[MaasCredentials], maas.MaasClient]


def credentials_key(c: MaasCredentials) -> tuple[str, str]:
    """Pool key: the endpoint plus a hash of everything secret or trust-related (never the key itself)."""
    digest = hashlib.sha256(f"{c.api_key}\0{c.ca_data or ''}\0{c.insecure}".encode()).hexdigest()[:16]
    return (c.endpoint.rstrip("/"), digest)


class MaasConnections:
    """The pool (a :class:`~capmaas.reconcilers.ports.MaasConnector`).

    The first connect of an identity checks it with ``whoami`` (one request per identity, not per machine), so
    a wrong key is reported on the MaasCluster as an invalid-credentials condition instead of failing deep in
    an allocate. A failed check is not cached: the next reconcile tries again (with the caller's backoff).
    """

    def __init__(
        self,
        *,
        client_factory: ClientFactory,
        fast: float,
        idle: float,
        batch_size: int,
        wake: Wake,
        max_concurrent_writes: int = 16,
    ):
        self._factory = client_factory
        self._fast, self._idle, self._batch = fast, idle, batch_size
        self._wake = wake
        self._max_writes = max_concurrent_writes
        self._sessions: dict[tuple[str, str], MaasSession] = {}
        self._by_source: dict[str, tuple[str, str]] = {}
        self._lock = asyncio.Lock()

    async def connect(self, credentials: MaasCredentials) -> MaasSession:
        key = credentials_key(credentials)
        session = self._sessions.get(key)
        if session is None:
            async with self._lock:
                session = self._sessions.get(key)
                if session is None:
                    session = await self._open(credentials)
                    self._sessions[key] = session
        session.last_used = time.monotonic()
        previous = self._by_source.get(credentials.source)
        if previous is not None and previous != key:
            await self._retire(previous)
        self._by_source[credentials.source] = key
        return session

    async def _open(self, credentials: MaasCredentials) -> MaasSession:
        client = self._factory(credentials)  # InvalidApiKeyError for a malformed key
        try:
            await client.whoami()
        except BaseException:
            await client.aclose()
            raise
        poller = MachinePoller(
            client, fast=self._fast, idle=self._idle, batch_size=self._batch, wake=self._wake
        )
        poller.start()
        log.info("MAAS session opened for %s (%s)", credentials.endpoint, credentials.source)
        return MaasSession(credentials, client, poller, max_concurrent_writes=self._max_writes)

    async def _retire(self, key: tuple[str, str]) -> None:
        if key in self._by_source.values() and list(self._by_source.values()).count(key) > 1:
            return
        session = self._sessions.pop(key, None)
        if session is not None:
            log.info("MAAS credentials rotated for %s; closing the old session", session.endpoint)
            await session.aclose()

    def forget_key(self, key: str) -> None:
        """An object is gone: stop polling whatever it registered."""
        for s in self._sessions.values():
            s.poller.forget_key(key)

    def sessions(self) -> list[MaasSession]:
        return list(self._sessions.values())

    async def aclose(self) -> None:
        for s in list(self._sessions.values()):
            await s.aclose()
        self._sessions.clear()
