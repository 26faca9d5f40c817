"""Leader election on a ``coordination.k8s.io/v1`` Lease, the client-go / controller-runtime model.

Why: two ``capmaas run`` processes serving the same objects each allocate a MAAS machine for every
MaasMachine (both see "no machine yet"). kopf's peering only pauses kopf's own handlers; our per-object loops
and the MAAS pollers run outside them, so it never was a lock. A Lease is what every controller-runtime
provider uses, and the same RBAC and tooling (``kubectl get lease``) apply.

The algorithm is client-go's ``leaderelection`` package:

- a candidate GETs the Lease; none: it creates one naming itself. A Lease held by someone else counts as
  expired only once ``leaseDurationSeconds`` have passed *on this candidate's own clock* since it last saw
  the record change (no clock comparison between hosts). An expired or released Lease (empty holder) is
  taken with an update carrying the read ``resourceVersion``: of two candidates, one gets 409 and loses.
- the leader renews every ``retry_period``. A renew that has not succeeded within ``renew_deadline`` of the
  last successful one ends its leadership; ``renew_deadline < lease_duration``, so it stops *before* any
  standby can take the Lease over.

Fencing, inside this process: :meth:`LeaderElector.is_leader` is true only until ``renew_deadline`` after
the *start* of the last successful renew (the apiserver stored that renew no earlier, so no standby can
take over before ``lease_duration`` after it). It is a monotonic-clock check, not a flag set by the renew
task, so a starved event loop (or a stalled renew) cannot leave a stale leader writing: every MAAS and
Kubernetes write checks it (:mod:`capmaas.operator.fencing` wraps the clients). What it cannot cover is a
request already on the wire when leadership ends; MAAS has no fencing token, so the reconcilers'
crash-safety (agent-name lookups, the ``…/allocating`` mark) still has to hold for such a request.

The Lease requests use a :class:`KubeHttp` of their own (two connections), never queued behind a burst of
object writes, and the operator runs the election on a thread of its own with its own event loop
(:class:`LeaseThread`): on a saturated process the main loop can be busy with reconciles for longer than the
renew deadline, and a renewal that had to wait for it made the leader drop its own Lease. The fence stays a
monotonic-clock check that any thread may read; losing the Lease still stops every loop and ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from capmaas.operator.kubehttp import KubeHttp, KubeHttpError

log = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LeaderElectionError(Exception):
    """The Lease could not be read or written (any status other than a lost race)."""


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration "
                f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration})"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of ``Lease.spec`` the election uses."""

    holder: str
    lease_duration: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> LeaseRecord:
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def micro_time(t: float | None = None) -> str:
    """A Kubernetes ``MicroTime`` (RFC 3339, microseconds, UTC)."""
    when = datetime.datetime.fromtimestamp(time.time() if t is None else t, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def default_identity() -> str:
    """Pod name (``POD_NAME``, else the host name) + ``_`` + a random suffix, as controller-runtime does: a
    restarted container of the same pod is a new candidate, never mistaken for the old holder."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "capmaas"
    return f"{base}_{uuid.uuid4()}"


def default_namespace(watched: str | None) -> str:
    """Where the Lease lives when not configured: ``POD_NAMESPACE``, the service account's namespace in a
    pod, the watched namespace, else ``default``."""
    if ns := os.environ.get("POD_NAMESPACE"):
        return ns
    with contextlib.suppress(OSError), open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
        if ns := f.read().strip():
            return ns
    return watched or "default"


def default_lease_name(namespace: str | None, watch_filter: str | None) -> str:
    """``capmaas-leader``, plus a hash of the scope when it is narrowed: processes serving the same objects
    share a Lease, shards serving different ones never do."""
    if not namespace and not watch_filter:
        return "capmaas-leader"
    digest = hashlib.sha256(f"{namespace or ''}\0{watch_filter or ''}".encode()).hexdigest()[:10]
    return f"capmaas-leader-{digest}"


class LeaderElector:
    """Acquire, hold and release one Lease. :meth:`run` returns when leadership is lost (or never won before
    ``stop`` is set); ``on_started`` runs once when it is won."""

    def __init__(self, http: KubeHttp, settings: LeaseSettings) -> None:
        self._http = http
        self.settings = settings
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # monotonic time the observed record last changed
        self._rv: str | None = None
        self._valid_until = 0.0  # monotonic; see is_leader
        self.acquired_at: float | None = None  # wall time leadership was won
        self.previous: LeaseRecord | None = None  # the record we took over (another holder's)

    # --- fencing -----------------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    def remaining(self) -> float:
        return self._valid_until - time.monotonic()

    # --- the Lease API -----------------------------------------------------------------------------------
    def _path(self, name: str | None = None) -> str:
        path = LEASES.format(namespace=quote(self.settings.namespace))
        return f"{path}/{quote(name)}" if name else path

    async def _call(self, method: str, path: str, body: dict[str, Any] | None, budget: float) -> Any:
        async with asyncio.timeout(max(0.05, budget)):
            return await self._http.request(
                method, path, body=body, content_type="application/json" if body else None, priority=-1
            )

    async def try_acquire_or_renew(self, budget: float) -> bool:
        """One attempt within ``budget`` seconds; True if this candidate holds the Lease afterwards."""
        s = self.settings
        started = time.monotonic()
        now = micro_time()
        try:
            lease = await self._call("GET", self._path(s.name), None, budget)
        except KubeHttpError as exc:
            if exc.status != 404:
                raise LeaderElectionError(f"reading Lease {s.namespace}/{s.name}: {exc}") from exc
            record = LeaseRecord(s.identity, s.lease_duration, now, now, 0)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace},
                "spec": record.to_spec(),
            }
            try:
                left = budget - (time.monotonic() - started)
                created = await self._call("POST", self._path(), body, left)
            except KubeHttpError as exc2:
                if exc2.status == 409:
                    return False  # another candidate created it first
                raise LeaderElectionError(f"creating Lease {s.namespace}/{s.name}: {exc2}") from exc2
            self._won(record, created, started, previous=None)
            return True
        current = LeaseRecord.from_spec(lease.get("spec") or {})
        if current != self._observed:
            self._observed, self._observed_at = current, time.monotonic()
        if (
            current.holder
            and current.holder != s.identity
            and time.monotonic() < self._observed_at + current.lease_duration
        ):
            return False  # held by someone else and not expired (on our clock)
        mine = current.holder == s.identity
        record = LeaseRecord(
            holder=s.identity,
            lease_duration=s.lease_duration,
            acquire_time=current.acquire_time if mine else now,
            renew_time=now,
            transitions=current.transitions if mine else current.transitions + 1,
        )
        meta = lease.get("metadata") or {}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": s.name,
                "namespace": s.namespace,
                "resourceVersion": meta.get("resourceVersion"),
            },
            "spec": record.to_spec(),
        }
        try:
            updated = await self._call("PUT", self._path(s.name), body, budget - (time.monotonic() - started))
        except KubeHttpError as exc:
            if exc.status == 409:
                return False  # someone wrote the Lease since our read: they won this round
            raise LeaderElectionError(f"updating Lease {s.namespace}/{s.name}: {exc}") from exc
        self._won(record, updated, started, previous=None if mine else current)
        return True

    def _won(self, record: LeaseRecord, lease: Any, started: float, previous: LeaseRecord | None) -> None:
        self._observed, self._observed_at = record, time.monotonic()
        self._rv = (lease.get("metadata") or {}).get("resourceVersion") if isinstance(lease, dict) else None
        # From the start of the request: the apiserver stored the record no earlier than that.
        self._valid_until = started + self.settings.renew_deadline
        if self.acquired_at is None:
            self.acquired_at = time.time()
            self.previous = previous if previous is not None and previous.holder else None

    async def release(self) -> None:
        """Give the Lease up at once (graceful stop), so a standby need not wait for it to expire."""
        s = self.settings
        if not self.is_leader() or self._rv is None:
            return
        self._valid_until = 0.0
        now = micro_time()
        record = LeaseRecord("", 1, now, now, self._observed.transitions if self._observed else 0)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": s.name, "namespace": s.namespace, "resourceVersion": self._rv},
            "spec": record.to_spec(),
        }
        try:
            await self._call("PUT", self._path(s.name), body, s.retry_period)
        except (KubeHttpError, TimeoutError) as exc:
            log.warning("releasing Lease %s/%s failed: %s", s.namespace, s.name, exc)
        else:
            log.info("released Lease %s/%s", s.namespace, s.name)

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- the loops ---------------------------------------------------------------------------------------
    def _jitter(self) -> float:
        return self.settings.retry_period * (1 + 0.2 * random.random())  # jitter, not security

    async def _attempt(self, budget: float) -> bool:
        try:
            return await self.try_acquire_or_renew(budget)
        except (LeaderElectionError, TimeoutError) as exc:
            log.warning("leader election: %s", str(exc) or f"{type(exc).__name__}: no answer in time")
            return False

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease (retrying every ``retry_period``, with jitter)."""
        s = self.settings
        log.info("waiting for Lease %s/%s (identity %s)", s.namespace, s.name, s.identity)
        while True:
            if await self._attempt(s.renew_deadline):
                return
            await asyncio.sleep(self._jitter())

    async def hold(self) -> None:
        """Renew until a renew fails to succeed within ``renew_deadline``; return then (leadership lost)."""
        s = self.settings
        while True:
            await asyncio.sleep(s.retry_period)
            while self.is_leader():
                # The whole time left: a loaded apiserver may take seconds, and a renew is worth waiting for.
                if await self._attempt(self.remaining()):
                    break
                if self._observed is not None and self._observed.holder not in ("", s.identity):
                    log.error("Lease %s/%s is held by %s now", s.namespace, s.name, self._observed.holder)
                    self._valid_until = 0.0  # someone else holds it: no point waiting for the deadline
                    return
                await asyncio.sleep(min(s.retry_period / 4, max(0.0, self.remaining())))
            else:
                self._valid_until = 0.0
                return

    async def run(self, on_started: Callable[[], Awaitable[None]]) -> None:
        """Acquire, call ``on_started``, hold; return when leadership is lost."""
        await self.acquire()
        s = self.settings
        prev = self.previous
        renewed = parse_micro_time(prev.renew_time) if prev is not None else None
        expired = renewed + prev.lease_duration if prev is not None and renewed is not None else None
        log.info(
            "became leader of Lease %s/%s as %s: acquired_at=%.3f previous_holder=%s previous_expiry=%s",
            s.namespace, s.name, s.identity, self.acquired_at or 0.0, prev.holder if prev else "-",
            f"{expired:.3f}" if expired is not None else "-",
        )  # fmt: skip
        await on_started()
        await self.hold()
        log.error(
            "lost the Lease %s/%s (no renew within %.1fs): stopping every loop", s.namespace, s.name,
            s.renew_deadline,
        )  # fmt: skip


class LeaseThread:
    """:class:`LeaderElector` on a thread of its own, with its own event loop and HTTP client: the renewals
    never wait for the operator's main loop. Same use as the elector: :meth:`run` returns (on the caller's
    loop) when leadership is lost, :meth:`is_leader` is the fence, :meth:`release` gives the Lease up.

    ``make_http`` builds the Lease client; it opens its connections on the thread's loop (an aiohttp session
    belongs to the loop it is used on)."""

    def __init__(self, make_http: Callable[[], KubeHttp], settings: LeaseSettings) -> None:
        self.elector = LeaderElector(make_http(), settings)
        self.settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ended: asyncio.Future[None] | None = None  # on the caller's loop: the thread has finished
        self._stop_requested = False

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    def remaining(self) -> float:
        return self.elector.remaining()

    @property
    def acquired_at(self) -> float | None:
        return self.elector.acquired_at

    async def run(self, on_started: Callable[[], Awaitable[None]]) -> None:
        """Start the election thread; once it holds the Lease, call ``on_started`` here; return when the
        thread reports leadership lost (the fence has closed by then, whatever this loop was doing)."""
        main = asyncio.get_running_loop()
        won: asyncio.Future[None] = main.create_future()
        lost: asyncio.Future[None] = main.create_future()
        self._ended = main.create_future()

        def settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
            if fut.done():
                return
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc)

        def post(fut: asyncio.Future[None], exc: BaseException | None = None) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody to tell
                main.call_soon_threadsafe(settle, fut, exc)

        async def started() -> None:
            post(won)  # not awaited: the renewals must not wait for the caller's loop

        async def thread_main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            if self._stop_requested:  # release() ran before this loop existed
                self._stop.set()
            election = asyncio.create_task(self.elector.run(started), name="lease")
            stopping = asyncio.create_task(self._stop.wait(), name="lease stop")
            try:
                await asyncio.wait({election, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if election.done():
                    error = election.exception()
                    post(won, error or LeaderElectionError("leadership lost before it began"))
                    post(lost, error)
                    return
                election.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await election
                await self.elector.release()
            finally:
                stopping.cancel()
                await self.elector.aclose()

        def body() -> None:
            try:
                asyncio.run(thread_main())
            except BaseException as exc:  # reported to the caller, which ends the process
                log.exception("leader election thread failed")
                post(won, exc)
                post(lost, exc)
            finally:
                if self._ended is not None:
                    post(self._ended)

        self._thread = threading.Thread(target=body, name="leader-election", daemon=True)
        self._thread.start()
        await asyncio.shield(won)
        await on_started()
        await asyncio.shield(lost)

    async def release(self) -> None:
        """Give the Lease up (if held) and end the thread; idempotent."""
        self._stop_requested = True
        loop, stop, thread = self._loop, self._stop, self._thread
        if thread is None or not thread.is_alive():
            return
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop just ended
                loop.call_soon_threadsafe(stop.set)
        if self._ended is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._ended), self.settings.renew_deadline)

    async def aclose(self) -> None:
        await self.release()
