"""Inputs of LXD placement: the shared VM-host listing per endpoint, host candidates, existing placements.

Why a shared listing: the Go provider lists every VM host (and every machine) for every VM it places. Here one
``GET vm-hosts/`` (plus one ``machines`` list for host machines the poller does not already follow) serves
every placement of the same endpoint for ``max_age`` seconds, and concurrent reconciles wait for the fetch in
flight instead of starting their own. Reusing a listing is safe because the endpoint's
:class:`~capmaas.placement.ReservationBook` adds every VM composed after the listing was fetched
(``fetched_at`` is taken *before* the request is sent, so a compose MAAS answered earlier is certainly
included, and one it answered later is certainly counted as a reservation).

Everything here is soft memory: lost on restart, rebuilt from MAAS and the MaasMachines' spec/status.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from capmaas import maas, placement
from capmaas.api.related import CapiMachine, MaasMachineView, ObjectMeta
from capmaas.api.v1beta1 import LXDConfig, LXDStorage, MaasMachineSpec
from capmaas.reconcilers.keys import (
    ANNOTATION_PREFIX,
    CONTROL_PLANE_LABEL,
    HOST_ID_ANNOTATION,
    ZONE_FROM_MAAS,
    ZONE_FROM_OPERATOR,
    ZONE_SOURCE,
)
from capmaas.reconcilers.ports import VmHostPort
from capmaas.reconcilers.tenancy import SHARED_VM_HOST_TAG, host_usable, namespace_tag

#: Tags that take a VM host out of placement (the Go provider's maintenance/no-schedule convention).
MAINTENANCE_TAGS = frozenset({"maintenance", "noschedule", "no-schedule", "capmaas-maintenance"})
#: MAAS's own default when a compose names no storage: ``root:8(local)``.
DEFAULT_DISK_GB = 8


def is_maintenance(tags: Iterable[str]) -> bool:
    return any(t in MAINTENANCE_TAGS or t.startswith("maintenance-") for t in tags)


def vm_hostname(name: str, uid: str) -> str:
    """The VM's MAAS hostname: readable, unique and the same on every retry (the crash-recovery key).

    ``<name>-<8 hex of sha256(uid)>``, reduced to a DNS label: a recreated MaasMachine of the same name gets
    a different hostname, a retried reconcile of the same object always the same one.
    """
    digest = hashlib.sha256(uid.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-") or "vm"
    return f"{base}-{digest}"


@dataclass(frozen=True)
class Listing:
    """One VM-host listing: the hosts, their placement view, and when it was fetched (monotonic)."""

    fetched_at: float
    hosts: Mapping[int, maas.VmHost]
    candidates: tuple[placement.HostCandidate, ...]
    ignored: tuple[str, ...] = ()  # hosts left out before placement, with why (e.g. "lxd-x is virsh")

    def host_named(self, name_or_id: str) -> maas.VmHost | None:
        for h in self.hosts.values():
            if name_or_id in (h.name, str(h.id)):
                return h
        return None


def candidate(host: maas.VmHost, machine: maas.Machine | None) -> placement.HostCandidate:
    """A VM host as placement sees it; ``machine`` is the host's own MAAS machine, if MAAS knows one.

    A host with no MAAS machine behind it (an LXD server added by address) is taken as ready: MAAS composes on
    it all the same. A known machine must be Deployed and not reported ``off``: ``unknown`` (a
    ``manual``-power host, whose power MAAS never queries) and ``error`` (a failed power query) say nothing
    about the host, the same rule as for a Deployed machine's Ready.
    """
    pools = list(host.storage_pools)
    flagged = any(p.default for p in pools)
    storage = tuple(
        placement.StoragePool(
            name=p.name,
            total_bytes=max(p.total, 0),
            used_bytes=max(p.used, 0),
            default=p.default or (not flagged and host.default_storage_pool in (p.name, str(p.id))),
        )
        for p in pools
    )
    ready = machine is None or (
        machine.status == maas.NodeStatus.DEPLOYED and machine.power_state != maas.PowerState.OFF
    )
    return placement.HostCandidate(
        id=host.id,
        name=host.name,
        zone=host.zone.name if host.zone else "default",
        pool=host.pool.name if host.pool else None,
        tags=frozenset(host.tags),
        host_ready=ready,
        maintenance=is_maintenance(host.tags),
        cores_total=max(host.total.cores, 0),
        cores_used=max(host.used.cores, 0),
        memory_total_mib=max(host.total.memory, 0),
        memory_used_mib=max(host.used.memory, 0),
        storage_pools=storage,
        cpu_over_commit_ratio=max(host.cpu_over_commit_ratio, 0.0),
        memory_over_commit_ratio=max(host.memory_over_commit_ratio, 0.0),
    )


async def fetch_listing(port: VmHostPort, clock: Callable[[], float]) -> Listing:
    """List VM hosts and the state of their machines; only composable LXD hosts become candidates."""
    fetched_at = clock()
    hosts = list(await port.list_vm_hosts())
    machines = await port.host_machines([h.host.system_id for h in hosts if h.host and h.host.system_id])
    ignored: list[str] = []
    cands: list[placement.HostCandidate] = []
    for h in hosts:
        if h.type and h.type != "lxd":
            ignored.append(f"{h.name} is a {h.type} host")
            continue
        if h.capabilities and "composable" not in h.capabilities:
            ignored.append(f"{h.name} cannot compose")
            continue
        sid = h.host.system_id if h.host else None
        cands.append(candidate(h, machines.get(sid) if sid else None))
    return Listing(fetched_at, {h.id: h for h in hosts}, tuple(cands), tuple(ignored))


def tenant_candidates(listing: Listing, namespace: str) -> tuple[placement.HostCandidate, ...]:
    """The listing's candidates ``namespace`` may place on: tagged for it or shared. The listing
    itself stays shared by every namespace of the endpoint; only the view is per namespace."""
    return tuple(c for c in listing.candidates if host_usable(c.tags, namespace))


def foreign_pin(listing: Listing, pin: str | None, namespace: str) -> maas.VmHost | None:
    """The host ``lxdConfig.vmHost`` names when it exists but is not ``namespace``'s to use; else None."""
    host = listing.host_named(pin) if pin else None
    return host if host is not None and not host_usable(host.tags, namespace) else None


def not_ours_message(namespace: str) -> str:
    """Why a host is left out for ``namespace``: the tags that would let it in."""
    return f"tagged neither {namespace_tag(namespace)} nor {SHARED_VM_HOST_TAG}"


@dataclass
class EndpointState:
    """Per MAAS endpoint: the reservation book and the shared listing."""

    book: placement.ReservationBook = field(default_factory=placement.ReservationBook)
    listing: Listing | None = None
    fetching: asyncio.Future[Listing] | None = None
    fetches: int = 0


class LxdPlacer:
    """Books and listings by endpoint, plus in-memory retry counts (no Kubernetes write per retry)."""

    def __init__(self, *, max_age: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.clock = clock
        self._endpoints: dict[str, EndpointState] = {}
        self.waits: dict[str, int] = {}  # MaasMachine UID -> consecutive NoFit passes
        #: (identity fingerprint, MaasMachine UID, system ID) seen held by us through that identity.
        self.allocated: set[tuple[str, str, str]] = set()

    def state(self, endpoint: str) -> EndpointState:
        return self._endpoints.setdefault(endpoint.rstrip("/"), EndpointState())

    def book(self, endpoint: str) -> placement.ReservationBook:
        return self.state(endpoint).book

    def forget(self, uid: str, endpoint: str | None = None) -> None:
        """A MaasMachine deleted (at ``endpoint``; None: wherever, it had no MAAS session): drop what it
        reserved and its retry count."""
        states = self._endpoints.values() if endpoint is None else (self.state(endpoint),)
        for st in states:
            st.book.release(uid)
        self.waits.pop(uid, None)

    def release(self, endpoint: str, uid: str) -> None:
        """Drop ``uid``'s reservation at ``endpoint`` (its VM was given back)."""
        self.book(endpoint).release(uid)

    def composed(self, endpoint: str, uid: str) -> None:
        """``uid``'s VM exists in MAAS now: its reservation is settled by the next listing."""
        self.book(endpoint).composed(uid, at=self.clock())

    def no_fit(self, uid: str) -> int:
        """One more pass in which nothing fitted ``uid``; how many in a row (for the backoff)."""
        self.waits[uid] = n = self.waits.get(uid, 0) + 1
        return n

    def placed(self, uid: str) -> None:
        """``uid`` was placed: its run of passes without a fit is over."""
        self.waits.pop(uid, None)

    def allocated_to(self, identity: str, uid: str, sid: str) -> None:
        """MAAS showed VM ``sid`` allocated to ``uid`` through ``identity``."""
        self.allocated.add((identity, uid, sid))

    def is_allocated_to(self, identity: str, uid: str, sid: str) -> bool:
        return (identity, uid, sid) in self.allocated

    def not_allocated(self, identity: str, uid: str, sid: str) -> None:
        """VM ``sid`` is deleted: nothing to remember of it."""
        self.allocated.discard((identity, uid, sid))

    def invalidate(self, endpoint: str) -> None:
        """Forget the listing (a compose was refused, a host vanished): the next placement fetches anew."""
        self.state(endpoint).listing = None

    async def listing(self, endpoint: str, port: VmHostPort, *, fresh: bool = False) -> Listing:
        """A listing no older than ``max_age`` (``fresh``: one fetched after this call), shared in flight."""
        st = self.state(endpoint)
        called = self.clock()
        cached = st.listing
        if cached is not None and not fresh and called - cached.fetched_at <= self.max_age:
            return cached
        pending = st.fetching
        if pending is not None and not pending.done():
            got = await asyncio.shield(pending)
            if not fresh or got.fetched_at >= called:
                return got
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Listing] = loop.create_future()
        st.fetching = fut
        try:
            result = await fetch_listing(port, self.clock)
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            if st.fetching is fut:
                st.fetching = None
        fut.set_result(result)
        st.fetches += 1
        if st.listing is None or result.fetched_at >= st.listing.fetched_at:
            st.listing = result
        st.book.settle(result.fetched_at)
        return result


def role_of(meta: ObjectMeta) -> placement.Role:
    return placement.Role.CONTROL_PLANE if CONTROL_PLANE_LABEL in meta.labels else placement.Role.WORKER


def existing_placements(
    siblings: Sequence[MaasMachineView], own_uid: str, listing: Listing, annotation_prefix: str
) -> list[placement.ExistingPlacement]:
    """The cluster's other machines that have a place: zone from spec/status, VM host from our annotation
    (or ``status.lxdHost`` by name). Machines with no system ID yet are in-flight: the book counts them."""
    out: list[placement.ExistingPlacement] = []
    for b in siblings:
        uid = b.metadata.uid
        if uid == own_uid or not b.spec.system_id:
            continue
        zone = b.zone
        if not zone:
            continue
        host_id: int | None = None
        raw = b.metadata.annotations.get(annotation_prefix + HOST_ID_ANNOTATION)
        if raw and raw.isdigit():
            host_id = int(raw)
        elif b.status.lxd_host:
            host = listing.host_named(b.status.lxd_host)
            host_id = host.id if host else None
        out.append(placement.ExistingPlacement(zone=zone, role=role_of(b.metadata), host_id=host_id, key=uid))
    return out


def user_zone(meta: ObjectMeta, spec: MaasMachineSpec, machine: CapiMachine | None) -> str | None:
    """The zone the user or CAPI asked for: the MaasMachine's ``spec.failureDomain``, else the owner
    Machine's - unless the first compose recorded (``…/zone-source``) that neither was given: the placement
    chose the zone, and what both hold now is only the zone that VM got (our ``_record``, CAPI's copy), which
    a replacement may leave by the placement rule."""
    if meta.annotations.get(ANNOTATION_PREFIX + ZONE_SOURCE) in (ZONE_FROM_OPERATOR, ZONE_FROM_MAAS):
        return None
    return spec.failure_domain or (machine.spec.failure_domain if machine else None) or None


def vm_request(
    meta: ObjectMeta, spec: MaasMachineSpec, machine: CapiMachine | None, cluster_key: str
) -> placement.VMRequest:
    """The VM to place, from the canonical MaasMachine spec (cores = minCPU, memory = minMemory, disk from
    lxdConfig or minDiskSize) and the zone the user or CAPI gave (:func:`user_zone`), if any."""
    lxd = spec.lxd_config or LXDConfig()
    storage = lxd.storage or LXDStorage()
    disk = storage.size_gb or spec.min_disk_size or DEFAULT_DISK_GB
    return placement.VMRequest(
        cluster=cluster_key,
        machine=meta.name,
        role=role_of(meta),
        cores=spec.min_cpu,
        memory_mib=spec.min_memory,
        disk_gb=disk,
        storage_pool=storage.pool or None,
        zone=user_zone(meta, spec, machine),
        resource_pool=spec.resource_pool or None,
        tags=frozenset(spec.tags or ()),
        pinned_host=lxd.vm_host or None,
        key=meta.uid,
    )
