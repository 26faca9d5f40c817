"""MAAS gateway: one pooled client and one shared machine poller per (endpoint, identity).

Why a shared poller: the Go provider GETs each machine on every requeue, so MAAS load grows with machines x
requeues. Here every MaasMachine *registers* its system ID with the poller of its endpoint, and one
``machines.list(ids=...)`` call per interval (chunked by ``batch_size``) refreshes all of them. Polling is
adaptive *per machine*: every ``fast`` interval only the machines in a transitional state (deploying,
releasing, erasing, commissioning) or not yet seen are listed, and never more often (a burst of writes kicks
the poller, but must not make it list a growing set back to back); all watched machines are listed every
``idle`` interval (that is what notices a Deployed machine powered off or broken). Listing the steady machines
every fast interval too would cost O(machines) JSON per second: at 1,000 machines that was a quarter of the
operator's CPU. A change wakes exactly the object that registered the machine (``wake(key)``), so status
follows MAAS within about one fast interval without any per-machine request.

Writes (allocate, deploy, release, power on) go straight to MAAS and their responses are folded into the
snapshot, so a reconcile right after a write sees the new state without another read.

Budget per machine lifecycle on the happy path: allocate + deploy + release = 3 requests, plus its share of
the list calls (one call per interval for *all* machines in flight).

Sessions are keyed by (endpoint, sha256 of key+CA+insecure); a rotated identity Secret produces a new key,
hence a new session, and the session it replaced for that source is closed. The API key never leaves
:class:`~capmaas.reconcilers.ports.MaasCredentials` (not in repr, logs or messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Sequence

from capmaas import maas
from capmaas.maas import errors as maas_errors
from capmaas.reconcilers.lxd_port import VmHostSession
from capmaas.reconcilers.ports import DnsRecord, MaasCredentials

log = logging.getLogger(__name__)

#: States in which MAAS will change the machine by itself soon: machines in one are polled every fast
#: interval. Not ALLOCATED: MAAS leaves an allocated machine alone until we deploy it (and the deploy's answer
#: is folded in at once); a thousand machines waiting for their deploy must not make every poll list them.
TRANSITIONAL = frozenset(
    {
        maas.NodeStatus.DEPLOYING,
        maas.NodeStatus.RELEASING,
        maas.NodeStatus.DISK_ERASING,
        maas.NodeStatus.COMMISSIONING,
        maas.NodeStatus.TESTING,
    }
)

ClientFactory = Callable[[MaasCredentials], "maas.MaasClient"]
Wake = Callable[[str], None]


def _fingerprint(m: maas.Machine) -> tuple[object, ...]:
    """The fields whose change matters to a reconcile (a change wakes the owner)."""
    return (m.status, m.power_state, m.ip_addresses, m.hostname, m.owner, m.zone.name)


class MachinePoller:
    """Polls the watched system IDs of one session; see the module docstring."""

    def __init__(
        self,
        client: maas.MaasClient,
        *,
        fast: float,
        idle: float,
        batch_size: int,
        wake: Wake,
    ) -> None:
        self._client = client
        self._fast = fast
        self._idle = idle
        self._batch = max(1, batch_size)
        self._wake = wake
        self._watched: dict[str, str] = {}  # system_id -> owner key
        self._snap: dict[str, maas.Machine] = {}
        self._gone: set[str] = set()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.last_error: maas_errors.MaasError | None = None
        self.polls = 0
        self._seq = 0  # bumped by every put(); a poll older than a put must not overwrite what it put
        self._written: dict[str, int] = {}
        self._last_full = 0.0  # monotonic time of the last poll of every watched machine

    # --- registration ------------------------------------------------------------------------------------
    def watch(self, system_id: str, key: str) -> None:
        if self._watched.get(system_id) != key:
            self._watched[system_id] = key
            if system_id not in self._snap:
                self._kick.set()  # a machine we know nothing about (e.g. after a restart): poll soon

    def unwatch(self, system_id: str) -> None:
        self._watched.pop(system_id, None)
        self._written.pop(system_id, None)
        self._snap.pop(system_id, None)
        self._gone.discard(system_id)

    def forget_key(self, key: str) -> None:
        for sid in [s for s, k in self._watched.items() if k == key]:
            self.unwatch(sid)

    @property
    def watched(self) -> int:
        return len(self._watched)

    def snapshot(self, system_id: str) -> maas.Machine | None:
        return self._snap.get(system_id)

    def is_gone(self, system_id: str) -> bool:
        return system_id in self._gone

    def put(self, machine: maas.Machine) -> None:
        """Fold a write response into the snapshot; switches to fast polling if it is transitional."""
        self._seq += 1
        self._written[machine.system_id] = self._seq
        self._snap[machine.system_id] = machine
        self._gone.discard(machine.system_id)
        if machine.status in TRANSITIONAL:
            self._kick.set()

    def kick(self) -> None:
        self._kick.set()

    # --- the loop ----------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="capmaas-poller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _hot(self, system_id: str) -> bool:
        """Polled every fast interval: not seen yet, or MAAS is about to change it by itself."""
        m = self._snap.get(system_id)
        return m is None or m.status in TRANSITIONAL

    def _interval(self) -> float:
        if self.last_error is not None:
            return min(self._idle, max(self._fast, 5.0))
        if any(self._hot(sid) for sid in self._watched):
            return self._fast
        return max(self._fast, self._idle - (time.monotonic() - self._last_full))

    async def _run(self) -> None:
        last = -self._fast
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval()):
                    await self._kick.wait()
            self._kick.clear()
            if not self._watched:
                continue
            # A coalescing pause, at least until one fast interval after the last poll: many objects
            # registering or writing at once share one list call.
            await asyncio.sleep(max(min(0.05, self._fast), last + self._fast - time.monotonic()))
            last = time.monotonic()
            full = self.last_error is not None or time.monotonic() - self._last_full >= self._idle
            try:
                await self.poll_once(full=full)
            except Exception:  # the poller must outlive any surprise; reconciles fall back to their resync
                log.exception("MAAS poll failed unexpectedly")

    async def poll_once(self, *, full: bool = True) -> None:
        """One round of list calls over every watched system ID (``full=False``: only the hot ones, see the
        module docstring). Also used directly by tests."""
        if full:
            ids = list(self._watched)
            self._last_full = time.monotonic()
        else:
            ids = [sid for sid in self._watched if self._hot(sid)]
            if not ids:
                return
        started = self._seq
        found: dict[str, maas.Machine] = {}
        try:
            for start in range(0, len(ids), self._batch):
                chunk = ids[start : start + self._batch]
                for m in await self._client.machines.list(ids=chunk):
                    found[m.system_id] = m
        except maas_errors.MaasError as exc:
            if self.last_error is None:
                log.warning("MAAS poll failed: %s", type(exc).__name__)
            self.last_error = exc
            return
        self.polls += 1
        self.last_error = None
        for sid in ids:
            key = self._watched.get(sid)
            if key is None or self._written.get(sid, 0) > started:
                continue  # unwatched meanwhile, or a write answered after this poll was sent: newer
            new = found.get(sid)
            old = self._snap.get(sid)
            if new is None:
                if sid not in self._gone:
                    self._gone.add(sid)
                    self._snap.pop(sid, None)
                    self._wake(key)
                continue
            self._gone.discard(sid)
            self._snap[sid] = new
            if old is None or _fingerprint(old) != _fingerprint(new):
                self._wake(key)


class MaasSession(VmHostSession):
    """A :class:`~capmaas.reconcilers.ports.MaasPort`: pooled client + shared poller for one identity."""

    ZONES_TTL = 300.0

    def __init__(
        self,
        credentials: MaasCredentials,
        client: maas.MaasClient,
        poller: MachinePoller,
        *,
        max_concurrent_writes: int = 16,
    ) -> None:
        self.credentials = credentials
        self.client = client
        self.poller = poller
        # Writes queue here rather than in the HTTP connection pool: a burst of a thousand new machines must
        # not time out waiting for a connection (and must leave connections free for the shared poll).
        self._writes = asyncio.Semaphore(max(1, max_concurrent_writes))
        self._zones: tuple[float, tuple[str, ...]] | None = None
        self.last_used = time.monotonic()

    @property
    def endpoint(self) -> str:
        return self.credentials.endpoint

    def watch(self, system_id: str, key: str) -> None:
        self.poller.watch(system_id, key)

    def unwatch(self, system_id: str) -> None:
        self.poller.unwatch(system_id)

    def snapshot(self, system_id: str) -> maas.Machine | None:
        return self.poller.snapshot(system_id)

    def is_gone(self, system_id: str) -> bool:
        return self.poller.is_gone(system_id)

    async def find_by_agent(self, agent_name: str) -> Sequence[maas.Machine]:
        async with self._writes:
            machines = await self.client.machines.list(agent_name=agent_name)
        for m in machines:
            self.poller.put(m)
        return machines

    async def allocate(
        self, constraints: maas.AllocateConstraints, *, agent_name: str, comment: str
    ) -> maas.Machine:
        async with self._writes:
            m = await self.client.machines.allocate(constraints, agent_name=agent_name, comment=comment)
        self.poller.put(m)
        return m

    async def deploy(
        self,
        system_id: str,
        *,
        user_data: bytes,
        distro_series: str | None,
        hwe_kernel: str | None,
        ephemeral_deploy: bool,
        comment: str,
        register_vmhost: bool = False,
    ) -> maas.Machine:
        async with self._writes:
            m = await self.client.machines.deploy(
                system_id,
                user_data=user_data,
                distro_series=distro_series,
                hwe_kernel=hwe_kernel,
                ephemeral_deploy=ephemeral_deploy,
                comment=comment,
                register_vmhost=register_vmhost,
            )
        self.poller.put(m)
        return m

    async def release(
        self, system_id: str, *, erase: bool, secure_erase: bool, quick_erase: bool, comment: str
    ) -> maas.Machine | None:
        try:
            async with self._writes:
                m = await self.client.machines.release(
                    system_id,
                    erase=erase,
                    secure_erase=secure_erase,
                    quick_erase=quick_erase,
                    comment=comment,
                )
        except maas_errors.NotFoundError:
            self.poller._gone.add(system_id)
            return None
        self.poller.put(m)
        return m

    async def mark_broken(self, system_id: str, *, comment: str) -> None:
        async with self._writes:
            await self.client.machines.mark_broken(system_id, comment=comment)
        self.poller.kick()

    async def power_on(self, system_id: str, *, comment: str) -> None:
        async with self._writes:
            await self.client.machines.power_on(system_id, comment=comment)
        self.poller.kick()

    async def zones(self) -> Sequence[str]:
        now = time.monotonic()
        if self._zones is not None and now - self._zones[0] < self.ZONES_TTL:
            return self._zones[1]
        names = tuple(sorted(z.name for z in await self.client.zones.list()))
        self._zones = (now, names)
        return names

    async def dns_find(self, fqdn: str) -> DnsRecord | None:
        for r in await self.client.dns_resources.list(fqdn=fqdn):
            if r.fqdn == fqdn:
                return _record(r)
        return None

    async def dns_create(self, fqdn: str, ips: frozenset[str]) -> DnsRecord:
        return _record(await self.client.dns_resources.create(fqdn, sorted(ips)))

    async def dns_update(self, record_id: int, ips: frozenset[str]) -> None:
        await self.client.dns_resources.update(record_id, sorted(ips))

    async def dns_delete(self, record_id: int) -> None:
        with contextlib.suppress(maas_errors.NotFoundError):
            await self.client.dns_resources.delete(record_id)

    async def aclose(self) -> None:
        await self.poller.stop()
        await self.client.aclose()


def _record(r: maas.DnsResource) -> DnsRecord:
    return DnsRecord(id=r.id, fqdn=r.fqdn, ips=frozenset(a.ip for a in r.ip_addresses if a.ip))


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
