"""The shared inventory of one MAAS session: its Ready machines (and, for LXD templates, its VM hosts), what
MaasMachineTemplate capacity is counted from (:mod:`capmaas.operator.capacity`).

Why one listing per session and not a MAAS query per template: a template's count is a local match over the
Ready machines (:mod:`capmaas.gateway.matching`), so a thousand templates on one MAAS cost what one costs: one
``GET machines/?status=ready`` per ``interval`` (and ``GET vm-hosts/`` plus one listing of the hosts' own
machines while an LXD template is counted). Between listings, the machine poller folds what it learns
(an allocate's answer, a watched machine turning Ready after its release) in at once (:meth:`Inventory.fold`),
so capmaas's own allocations and releases show without waiting for the next listing.

PCI/USB devices are not in MAAS's machine listing. Each distinct ``devices=`` filter the templates use is
listed with the Ready machines (``GET machines/?status=ready&devices=...``: MAAS's own device match, one
request per filter per round, shared by every template with that filter), and only the machines it names
that a template could take have their devices read (``GET nodes/{id}/devices/``, for the device *count*),
once, at most ``device_reads`` per round; a machine's devices are forgotten when it leaves the Ready listing
(re-read if it comes back: a recommissioning may have changed them).

The inventory runs inside the session's :class:`~capmaas.gateway.poller.MachinePoller` loop (one task, one
schedule); it is listed only while some template wants it (:meth:`Inventory.want`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from capmaas import maas
from capmaas.maas import errors as maas_errors

log = logging.getLogger(__name__)

#: Seconds between Ready listings unless configured (the poller's idle interval is the usual setting).
DEFAULT_INTERVAL = 30.0
#: Device reads per round unless configured.
DEFAULT_DEVICE_READS = 20
#: Listing intervals a ``devices=`` filter is kept listed after the last count that asked for it.
FILTER_TTL = 3


class Inventory:
    """What one session knows of MAAS's free capacity; see the module docstring."""

    def __init__(self, client: maas.MaasClient, *, interval: float = DEFAULT_INTERVAL) -> None:
        self._client = client
        self.interval = interval
        self.device_reads = DEFAULT_DEVICE_READS
        self.pace = 1.0  # seconds between rounds while device reads are queued (the poller's fast interval)
        #: Called (no arguments) whenever what the inventory holds changed.
        self.on_change: Callable[[], None] = lambda: None
        self._wanted: dict[str, bool] = {}  # key -> whether it needs VM hosts
        self.ready: dict[str, maas.Machine] | None = None  # None: not listed yet
        self.vm_hosts: tuple[maas.VmHost, ...] | None = None
        self.host_machines: dict[str, maas.Machine] = {}
        self.devices: dict[str, tuple[maas.NodeDevice, ...]] = {}
        self._device_queue: dict[str, None] = {}
        #: ``devices=`` filter -> the Ready machines MAAS lists for it (None: not listed yet).
        self.device_filters: dict[str, frozenset[str] | None] = {}
        #: ``devices=`` filter -> when a count last asked for it; one not asked for in :data:`FILTER_TTL`
        #: intervals is no longer listed.
        self._filters_asked: dict[str, float] = {}
        self.listed_at: float | None = None  # monotonic time of the last Ready listing
        self.last_error: maas_errors.MaasError | None = None
        self.version = 0  # bumped on every change
        self.requests = 0  # MAAS requests the inventory sent (for measuring its cost)
        self._due = False

    # --- interest ----------------------------------------------------------------------------------------
    def want(self, key: str, *, vm_hosts: bool = False) -> bool:
        """``key`` (a template) counts on this inventory; True when that makes a listing due now."""
        new = key not in self._wanted or (vm_hosts and not self._wanted[key])
        self._wanted[key] = vm_hosts
        if new and (self.ready is None or (vm_hosts and self.vm_hosts is None)):
            self._due = True
            return True
        return False

    def drop(self, key: str) -> None:
        self._wanted.pop(key, None)
        if not self._wanted:
            self.ready, self.vm_hosts, self.listed_at = None, None, None
            self.host_machines.clear()
            self.devices.clear()
            self._device_queue.clear()
            self.device_filters.clear()
            self._filters_asked.clear()

    @property
    def wanted(self) -> bool:
        return bool(self._wanted)

    def _wants_vm_hosts(self) -> bool:
        return any(self._wanted.values())

    def device_listing(self, constraint: str) -> frozenset[str] | None:
        """The Ready machines MAAS lists for the ``devices=`` filter ``constraint``; None (and a listing made
        due) the first time it is asked for."""
        self._filters_asked[constraint] = time.monotonic()
        if constraint not in self.device_filters:
            self.device_filters[constraint] = None
            self._due = True
        return self.device_filters[constraint]

    def want_devices(self, system_ids: Iterable[str]) -> bool:
        """Queue device reads for these Ready machines (those not read yet); True when any was queued."""
        queued = False
        for sid in system_ids:
            if sid not in self.devices and sid not in self._device_queue:
                self._device_queue[sid] = None
                queued = True
        return queued  # read at the next round (``due_in`` brings it within ``pace``), with no listing

    # --- schedule ----------------------------------------------------------------------------------------
    def _listing_due_in(self, now: float) -> float | None:
        if not self._wanted:
            return None
        if self._due or self.listed_at is None:
            return 0.0
        if self.last_error is not None:
            return max(0.0, self.listed_at + min(self.interval, 5.0) - now)
        return max(0.0, self.listed_at + self.interval - now)

    def due_in(self, now: float) -> float | None:
        """Seconds until the next round (0: now), None while nobody wants one; queued device reads come
        back every ``pace`` seconds."""
        listing = self._listing_due_in(now)
        if listing is None or not self._device_queue:
            return listing
        return min(listing, self.pace)

    # --- folding what the poller learns ------------------------------------------------------------------
    def fold(self, m: maas.Machine) -> None:
        """A machine's state as an answer or a watched poll showed it: Ready joins, anything else leaves."""
        if self.ready is None:
            return
        if m.status == maas.NodeStatus.READY:
            old = self.ready.get(m.system_id)
            self.ready[m.system_id] = m
            changed = old is None or old.status != m.status
        else:
            changed = self.ready.pop(m.system_id, None) is not None
            self.devices.pop(m.system_id, None)
        if changed:
            self._changed()

    def _changed(self) -> None:
        self.version += 1
        self.on_change()

    # --- listing -----------------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """One round: the Ready listing when due, the VM hosts when wanted, then queued device reads."""
        due = self._listing_due_in(time.monotonic())
        if due is None or due > 0:
            if self._device_queue:
                await self._read_devices()
            return
        self._due = False
        try:
            ready, skipped = await self._client.machines.list_status_lenient(maas.NodeStatus.READY)
            self.requests += 1
            filters: dict[str, frozenset[str] | None] = {}
            stale = time.monotonic() - FILTER_TTL * self.interval
            for constraint in [f for f in self.device_filters if self._filters_asked.get(f, 0.0) >= stale]:
                listed, _ = await self._client.machines.list_status_lenient(
                    maas.NodeStatus.READY, devices=constraint
                )
                self.requests += 1
                filters[constraint] = frozenset(m.system_id for m in listed)
            hosts: tuple[maas.VmHost, ...] | None = None
            host_machines: dict[str, maas.Machine] = {}
            if self._wants_vm_hosts():
                hosts = tuple(await self._client.vm_hosts.list())
                self.requests += 1
                sids = [h.host.system_id for h in hosts if h.host and h.host.system_id]
                if sids:
                    host_machines = {m.system_id: m for m in await self._client.machines.list(ids=sids)}
                    self.requests += 1
        except maas_errors.MaasError as exc:
            if self.last_error is None:
                log.warning("MAAS inventory listing failed: %s", type(exc).__name__)
            self.last_error = exc
            self.listed_at = time.monotonic()
            return
        if skipped:
            log.info("inventory: %d Ready machines left out (unreadable answers)", len(skipped))
        new = {m.system_id: m for m in ready}
        changed = (
            self.ready is None
            or self.ready != new  # frozen models compare by value: a changed tag, pool or disk is a change
            or (hosts is not None and hosts != self.vm_hosts)
            or self.last_error is not None
            or filters != self.device_filters
        )
        self.device_filters = filters
        self._filters_asked = {f: t for f, t in self._filters_asked.items() if f in filters}
        self.last_error = None
        self.listed_at = time.monotonic()
        for sid in [s for s in self.devices if s not in new]:
            del self.devices[sid]
        for sid in [s for s in self._device_queue if s not in new]:
            del self._device_queue[sid]
        self.ready = new
        if hosts is not None:
            self.vm_hosts, self.host_machines = hosts, host_machines
        if changed:
            self._changed()
        if self._device_queue:
            await self._read_devices()

    async def _read_devices(self) -> None:
        batch = list(self._device_queue)[: max(1, self.device_reads)]
        read = False
        for sid in batch:
            del self._device_queue[sid]
            if self.ready is None or sid not in self.ready:
                continue
            try:
                found = await self._client.machines.devices(sid)
            except maas_errors.NotFoundError:
                continue
            except maas_errors.MaasError as exc:
                log.warning("reading the devices of a Ready machine failed: %s", type(exc).__name__)
                self._device_queue[sid] = None  # again next round
                break
            finally:
                self.requests += 1
            self.devices[sid] = tuple(found)
            read = True
        if read:
            self._changed()

    @property
    def pending_devices(self) -> int:
        return len(self._device_queue)
