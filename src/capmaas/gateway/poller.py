"""The shared machine poller of one MAAS session: see :mod:`capmaas.gateway` for why it exists.

Polling is adaptive *per machine*: every ``fast`` interval only the machines in a transitional state
(deploying, releasing, erasing, commissioning) or not yet seen are listed, and never more often (a burst of
writes kicks the poller, but must not make it list a growing set back to back); all watched machines are
read at least every ``idle`` interval (that is what notices a Deployed machine powered off or broken): a
hot list call's spare room (up to the batch size) carries the steady machines about to be due, so while
machines are in flight the steady ones cost no list calls of their own (``MachinePoller._round``). While only
machines being released or erased are in flight, the hot list runs every :data:`RELEASE_SLOWDOWN` fast
intervals instead: nobody waits on a release to become Ready (the deletion just ends a little later), and
each list call then carries more machines (list calls are most of a lifecycle's MAAS requests beyond
allocate, deploy and release when machines are spread over several operator shards). Machines deploying are
listed every fast interval while at least :data:`FRESH_BATCH` of them turned hot since the last list (their
answers are likely in, and one call carries them all); otherwise every ``hot_max`` seconds: a machine MAAS
is deploying for minutes, or a trickle of a few deploys a second, needs no list call per second each.
Listing the steady machines every fast interval too would cost O(machines) JSON per second (see
docs/benchmarks). A change wakes exactly the object that registered the machine (``wake(key)``), so status
follows MAAS within about one fast interval (``hot_max`` at most) without any per-machine request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from capmaas import maas
from capmaas.gateway.inventory import Inventory
from capmaas.maas import errors as maas_errors

log = logging.getLogger(__name__)

# Machines in a ``NodeStatus.transitional`` state (MAAS changes them by itself soon) are polled every fast
# interval. Not ALLOCATED: MAAS leaves an allocated machine alone until we deploy it (and the deploy's answer
# is folded in at once); a thousand machines waiting for their deploy must not make every poll list them.
# Of those, the ``releasing`` ones are what a deletion waits on (no readiness lag depends on them).
#: Fast intervals between hot lists while every hot machine is releasing.
RELEASE_SLOWDOWN = 3
#: Machines turned hot since the last list (a deploy answered, or not seen yet) that bring the next list
#: forward to one fast interval after the last; fewer wait up to ``hot_max``.
FRESH_BATCH = 10

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
        deadline: float | None = None,
        hot_max: float | None = None,
    ) -> None:
        self._client = client
        self._deadline = deadline  # seconds one poll round may take, all its list calls together
        self._fast = fast
        self._hot_max = max(fast, hot_max if hot_max is not None else fast)
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
        self._seen: dict[str, float] = {}  # system_id -> monotonic time MAAS last told us its state
        self._fresh: set[str] = set()  # turned hot (deploying, or not seen yet) since the last list of them
        # The watched machines that are hot (:meth:`_hot`), and of those the ones not being released: kept as
        # the snapshot and the registrations change (:meth:`_note`), so the loop's checks after every kick
        # read a set's size instead of walking every watched machine (a walk per kick was quadratic in a
        # burst: docs/benchmarks/per-machine.md, session 40).
        self._hot_ids: set[str] = set()
        self._waiting: set[str] = set()
        #: The Ready machines (and VM hosts) templates count capacity on; listed in this loop, only while
        #: wanted (:mod:`capmaas.gateway.inventory`).
        self.inventory = Inventory(client, interval=idle)
        self.inventory.pace = fast

    # --- registration ------------------------------------------------------------------------------------
    def watch(self, system_id: str, key: str) -> None:
        if self._watched.get(system_id) != key:
            self._watched[system_id] = key
            self._note(system_id)
            if system_id not in self._snap:
                self._fresh.add(system_id)
                self._kick.set()  # a machine we know nothing about (e.g. after a restart): poll soon

    def unwatch(self, system_id: str) -> None:
        self._watched.pop(system_id, None)
        self._written.pop(system_id, None)
        self._snap.pop(system_id, None)
        self._gone.discard(system_id)
        self._fresh.discard(system_id)
        self._seen.pop(system_id, None)
        self._note(system_id)

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

    def mark_gone(self, system_id: str) -> None:
        """MAAS answered a write on ``system_id`` with 404: it is gone, without waiting for the next poll."""
        self._gone.add(system_id)

    def put(self, machine: maas.Machine) -> None:
        """Fold a write response into the snapshot; switches to fast polling if it is transitional."""
        self._seq += 1
        self._written[machine.system_id] = self._seq
        self._snap[machine.system_id] = machine
        self._gone.discard(machine.system_id)
        self._seen[machine.system_id] = time.monotonic()  # an allocate's answer comes before its watch()
        self._note(machine.system_id)
        self.inventory.fold(machine)
        if machine.status.transitional:
            if not machine.status.releasing:
                self._fresh.add(machine.system_id)
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
        return m is None or m.status.transitional

    def _note(self, system_id: str) -> None:
        """Bring ``system_id``'s place in the hot sets up to date; called after every change of its
        registration or its snapshot (a snapshot is frozen: its state changes only with a new one)."""
        if system_id in self._watched and self._hot(system_id):
            self._hot_ids.add(system_id)
            m = self._snap.get(system_id)
            if m is None or not m.status.releasing:
                self._waiting.add(system_id)
            else:
                self._waiting.discard(system_id)
        else:
            self._hot_ids.discard(system_id)
            self._waiting.discard(system_id)

    def spacing(self) -> float:
        """Least time from one poll to the next while machines are hot (see the module docstring)."""
        if len(self._fresh) >= FRESH_BATCH:
            return self._fast
        if self._waiting:  # a watched machine not seen yet, or in flight other than being released
            return self._hot_max
        return min(self._idle, self._fast * RELEASE_SLOWDOWN)

    def _interval(self) -> float:
        base = self._watch_interval()
        inventory = self.inventory.due_in(time.monotonic())
        return base if inventory is None else min(base, inventory)

    def _watch_interval(self) -> float:
        if self.last_error is not None:
            return min(self._idle, max(self._fast, 5.0))
        if self._hot_ids:
            return self.spacing()
        return max(self._fast, self._idle - self._oldest_age())

    def _age(self, system_id: str, now: float) -> float:
        """Seconds since MAAS last told us the machine's state (a list or a write answer)."""
        seen = self._seen.get(system_id)
        return self._idle if seen is None else now - seen

    def _oldest_age(self) -> float:
        now = time.monotonic()
        return max((self._age(sid, now) for sid in self._watched), default=0.0)

    def _round(self) -> list[str]:
        """The system IDs of one poll round: the hot ones, and the steady ones that are due (see the module
        docstring). When one steady machine has not been read for an idle interval, every steady machine not
        read for half of one comes along (the next round is then half an interval away at the soonest, and
        the rounds of a steady fleet stay whole). Otherwise the last list call's spare room, up to the batch
        size, carries the steady machines that would be due within two spacings: a call MAAS answers anyway,
        and each machine is still read about once per idle interval."""
        now = time.monotonic()
        hot_ids = self._hot_ids
        hot = [sid for sid in self._watched if sid in hot_ids]
        ages = {sid: self._age(sid, now) for sid in self._watched if sid not in hot_ids}
        if ages and max(ages.values()) >= self._idle:
            return hot + [sid for sid, age in ages.items() if age >= self._idle / 2]
        if not hot:
            return []
        room = -len(hot) % self._batch
        soon = self._idle - 2 * self.spacing()
        due = sorted((sid for sid, age in ages.items() if age >= soon), key=ages.__getitem__, reverse=True)
        return hot + due[:room]

    async def _run(self) -> None:
        last = -self._fast
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval()):
                    await self._kick.wait()
            self._kick.clear()
            await self._inventory_round()
            if not self._watched:
                continue
            # A coalescing pause, at least until one spacing (see spacing) after the last poll: many objects
            # registering or writing at once share one list call.
            await asyncio.sleep(min(0.05, self._fast))
            while (wait := last + self.spacing() - time.monotonic()) > 0:
                self._kick.clear()  # a machine turning hot meanwhile may shorten the spacing: look again
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._kick.wait()
            last = time.monotonic()
            try:
                await self.poll_once(full=self.last_error is not None)
            except Exception:  # the poller must outlive any surprise; reconciles fall back to their resync
                log.exception("MAAS poll failed unexpectedly")

    async def _inventory_round(self) -> None:
        """The inventory's listing when due (its own schedule, in this one loop)."""
        if not self.inventory.wanted:
            return
        try:
            async with asyncio.timeout(self._deadline):
                await self.inventory.refresh()
        except TimeoutError:
            log.warning("MAAS inventory listing gave up after its %ss deadline", self._deadline)
        except Exception:  # the poller must outlive any surprise
            log.exception("MAAS inventory listing failed unexpectedly")

    async def poll_once(self, *, full: bool = True) -> None:
        """One round of list calls over every watched system ID (``full=False``: the hot ones and the steady
        ones that are due, see :meth:`_round`), ``batch_size`` IDs a call, one call after the other. Each
        call's machines are folded in as soon as it is answered (their owners are woken without waiting for
        the rest of the round); a failed call ends the round there, the calls before it kept. Also used
        directly by tests."""
        ids = list(self._watched) if full else self._round()
        if not ids:
            return
        self._fresh &= self._watched.keys()  # put() of a machine nobody watches (any more)
        for sid in self._seen.keys() - self._watched.keys():
            del self._seen[sid]
        fresh = self._fresh.intersection(ids)
        self._fresh -= fresh  # a put() meanwhile makes its machine fresh again
        try:
            async with asyncio.timeout(self._deadline):
                for start in range(0, len(ids), self._batch):
                    chunk = ids[start : start + self._batch]
                    started, asked = self._seq, time.monotonic()
                    machines, skipped = await self._client.machines.list_lenient(chunk)
                    self._fold(chunk, {m.system_id: m for m in machines}, set(skipped), started, asked)
        except TimeoutError:
            self._fresh |= fresh & self._watched.keys()
            log.warning("MAAS poll gave up after its %ss deadline", self._deadline)
            self.last_error = maas_errors.RequestTimeoutError(
                f"the poll of {len(ids)} machines took longer than {self._deadline}s",
                request=maas_errors.RequestInfo("GET", "machines/", "machines/"),
            )
            return
        except maas_errors.MaasError as exc:
            self._fresh |= fresh & self._watched.keys()
            if self.last_error is None:
                log.warning("MAAS poll failed: %s", type(exc).__name__)
            self.last_error = exc
            return
        self.polls += 1
        self.last_error = None

    def _fold(
        self, ids: list[str], found: dict[str, maas.Machine], unreadable: set[str], started: int, asked: float
    ) -> None:
        """One list call's answer over ``ids`` (asked at ``asked``, after put number ``started``): ``found``
        the machines it returned, ``unreadable`` those MAAS returned in a shape we do not read (not gone)."""
        for sid in ids:
            if sid in self._watched:
                self._seen[sid] = asked
        for sid in ids:
            key = self._watched.get(sid)
            if key is None or self._written.get(sid, 0) > started or sid in unreadable:
                continue  # unwatched meanwhile, or a write answered after this poll was sent: newer
            new = found.get(sid)
            old = self._snap.get(sid)
            if new is None:
                if sid not in self._gone:
                    self._gone.add(sid)
                    self._snap.pop(sid, None)
                    self._note(sid)
                    self._wake(key)
                continue
            self._gone.discard(sid)
            self._snap[sid] = new
            self._note(sid)
            self.inventory.fold(new)
            if old is None or _fingerprint(old) != _fingerprint(new):
                self._wake(key)
