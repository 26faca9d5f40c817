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
from capmaas.reconcilers.ports import MaasCredentials, identity_fingerprint

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
    an allocate; the user it names makes the session's identity fingerprint (every reference the reconcilers
    write from this session's answers is bound to it).

    Tenants choose their endpoints, so one endpoint must never hold up another: each (endpoint, identity) has
    its own lock (concurrent first connects of one identity share one ``whoami``; another identity's connect
    never waits for it), and a connect that timed out is remembered for ``negative_ttl`` seconds, during which
    every connect of that identity fails at once with the same error instead of waiting for the endpoint
    again (a tarpit endpoint costs one request deadline per ``negative_ttl``, not one per reconcile).
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
        negative_ttl: float = 5.0,
        poll_deadline: float | None = None,
        hot_max: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._factory = client_factory
        self._fast, self._idle, self._batch = fast, idle, batch_size
        self._wake = wake
        self._max_writes = max_concurrent_writes
        self._negative_ttl = negative_ttl
        self._poll_deadline = poll_deadline
        self._hot_max = hot_max
        self._clock = clock
        self._sessions: dict[tuple[str, str], MaasSession] = {}
        self._by_source: dict[str, tuple[str, str]] = {}
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}  # lock, connects using it
        self._failed: dict[tuple[str, str], tuple[float, maas.MaasError]] = {}

    async def connect(self, credentials: MaasCredentials) -> MaasSession:
        key = credentials_key(credentials)
        session = self._sessions.get(key)
        if session is None:
            session = await self._first_connect(key, credentials)
        session.last_used = time.monotonic()
        previous = self._by_source.get(credentials.source)
        if previous is not None and previous != key:
            await self._retire(previous)
        self._by_source[credentials.source] = key
        return session

    async def _first_connect(self, key: tuple[str, str], credentials: MaasCredentials) -> MaasSession:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                session = self._sessions.get(key)
                if session is not None:
                    return session
                failed = self._failed.get(key)
                if failed is not None and self._clock() < failed[0]:
                    raise failed[1]
                try:
                    session = await self._open(credentials)
                except maas.RequestTimeoutError as exc:
                    # Only a connect that waited out its deadline is remembered: a fast failure (refused,
                    # reset, an error answer) costs nothing to try again, and recovers at the next attempt.
                    self._failed[key] = (self._clock() + self._negative_ttl, exc)
                    raise
                self._failed.pop(key, None)
                self._sessions[key] = session
                return session
        finally:
            lock, users = self._locks[key]
            if users > 1:
                self._locks[key] = (lock, users - 1)
            else:
                del self._locks[key]  # nobody waits: no lock is kept per identity ever seen
            self._expire_failures()

    def _expire_failures(self) -> None:
        now = self._clock()
        for k in [k for k, (until, _) in self._failed.items() if until <= now]:
            del self._failed[k]

    async def _open(self, credentials: MaasCredentials) -> MaasSession:
        client = self._factory(credentials)  # InvalidApiKeyError for a malformed key
        try:
            user = await client.whoami()
        except BaseException:
            await client.aclose()
            raise
        poller = MachinePoller(
            client,
            fast=self._fast,
            idle=self._idle,
            batch_size=self._batch,
            wake=self._wake,
            deadline=self._poll_deadline,
            hot_max=self._hot_max,
        )
        poller.start()
        log.info("MAAS session opened for %s (%s)", credentials.endpoint, credentials.source)
        return MaasSession(
            credentials,
            client,
            poller,
            max_concurrent_writes=self._max_writes,
            identity=identity_fingerprint(credentials.endpoint, user.username),
        )

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
