"""The filters of VM placement: each one a named step that keeps or rejects hosts, saying why.

Filters run in the order of ``FILTERS``; a host is rejected by the first filter it fails, so the reasons read
from "never eligible" (pin, zone, pool, tags) through "not usable now" (host state, maintenance) to "full"
(cores, memory, storage). Unlike the Go provider's silent filters, every rejection carries a shared summary
for aggregation and a per-host detail with the figures that decided it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from capmaas.placement._models import GB, HostCandidate, Rejection, Reservation, VMRequest


@dataclass(slots=True)
class Reserved:
    """What in-flight reservations hold on one host; disk bytes per pool name (``None``: the default pool)."""

    cores: int = 0
    memory_mib: int = 0
    disk_bytes: dict[str | None, int] = field(default_factory=dict)


def reserved_by_host(
    reservations: Iterable[Reservation], *, exclude_key: str | None = None
) -> dict[int, Reserved]:
    """Sum reservations per host, leaving out ``exclude_key`` (the request's own earlier reservation)."""
    totals: dict[int, Reserved] = {}
    for r in reservations:
        if exclude_key is not None and r.key == exclude_key:
            continue
        acc = totals.setdefault(r.host_id, Reserved())
        acc.cores += r.cores
        acc.memory_mib += r.memory_mib
        acc.disk_bytes[r.storage_pool] = acc.disk_bytes.get(r.storage_pool, 0) + r.disk_gb * GB
    return totals


_NOTHING = Reserved()


@dataclass(frozen=True, slots=True)
class FilterContext:
    """What every filter may look at besides the host: the request and the reservations per host."""

    request: VMRequest
    reserved: Mapping[int, Reserved] = field(default_factory=dict)

    def reserved_on(self, host: HostCandidate) -> Reserved:
        return self.reserved.get(host.id, _NOTHING)

    def reserved_disk_bytes(self, host: HostCandidate, pool_name: str) -> int:
        """Disk reserved in ``pool_name``, plus pool-less reservations when it is the default pool."""
        held = self.reserved_on(host).disk_bytes
        total = held.get(pool_name, 0)
        if None in held:
            default = host.storage_pool(None)
            if default is not None and default.name == pool_name:
                total += held[None]
        return total


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The outcome of one filter: the hosts it kept (in input order) and one rejection per dropped host."""

    kept: tuple[HostCandidate, ...]
    rejected: tuple[Rejection, ...]


Check = Callable[[FilterContext, HostCandidate], tuple[str, str] | None]
"""A per-host test: ``None`` to keep the host, or ``(summary, detail)`` to reject it."""


@dataclass(frozen=True, slots=True)
class Filter:
    """A named filter. ``per_zone`` filters aggregate their reasons per zone ("3 hosts in zone-a lack
    ...").
    """

    name: str
    check: Check
    per_zone: bool = False

    def __call__(self, ctx: FilterContext, hosts: Sequence[HostCandidate]) -> FilterResult:
        return run_filters(ctx, hosts, (self,))

    def reject(self, host: HostCandidate, verdict: tuple[str, str]) -> Rejection:
        summary, detail = verdict
        return Rejection(
            filter=self.name,
            host_id=host.id,
            host_name=host.name,
            zone=host.zone,
            summary=summary,
            detail=f"{host.name}: {detail}",
            per_zone=self.per_zone,
        )


def _num(value: float) -> str:
    """A figure for people: integers without a fraction, others to two decimals (never rounded up to fit)."""
    if value == int(value):
        return str(int(value))
    return f"{int(value * 100) / 100:.2f}".rstrip("0").rstrip(".")


def _pinned_host(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    pin = ctx.request.pinned_host
    if pin is None or pin in (host.name, str(host.id)):
        return None
    return f"{{is}} not the pinned host {pin!r}", f"not the pinned host {pin!r}"


def _placed_in(what: str, wanted: str | None, actual: str | None) -> tuple[str, str] | None:
    """Zone and resource pool: a wanted one (if any) must be the host's."""
    if wanted is None or actual == wanted:
        return None
    return f"{{is}} not in {what} {wanted!r}", f"in {what} {actual!r}, not {wanted!r}"


def _zone(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    return _placed_in("zone", ctx.request.zone, host.zone)


def _resource_pool(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    return _placed_in("resource pool", ctx.request.resource_pool, host.pool)


def _tags(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    if ctx.request.tags <= host.tags:
        return None
    missing = sorted(ctx.request.tags - host.tags)
    names = ", ".join(missing)
    noun = "tag" if len(missing) == 1 else "tags"
    return f"lack{{s}} {noun} {names}", f"lacks {noun} {names}"


def _host_ready(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    if host.host_ready:
        return None
    return "{is} not deployed or powered off", "its host machine is not deployed or is powered off"


def _maintenance(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    if not host.maintenance:
        return None
    return "{is} in maintenance", "tagged for maintenance"


def _vm_size(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    # MAAS bounds a compose by the host's physical size (pod hints) whatever the over-commit ratio; a VM
    # larger than the host gets a 400, so such a host is never a candidate, even when empty.
    req = ctx.request
    if req.cores <= host.cores_total and req.memory_mib <= host.memory_total_mib:
        return None
    return (
        f"{{is}} smaller than the VM ({req.cores} cores, {req.memory_mib} MiB)",
        f"has {host.cores_total} cores and {host.memory_total_mib} MiB in all; "
        f"the VM needs {req.cores} cores and {req.memory_mib} MiB",
    )


def _storage_pool(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    name = ctx.request.storage_pool
    if host.storage_pool(name) is not None:
        return None
    if name is None:
        return "{has} no storage pool", "reports no storage pool"
    known = ", ".join(sorted(p.name for p in host.storage_pools)) or "none"
    return f"{{has}} no storage pool {name!r}", f"has no storage pool {name!r} (has: {known})"


def _over_committed(
    what: str, unit: str, *, need: int, total: int, ratio: float, capacity: float, used: int, reserved: int
) -> tuple[str, str] | None:
    """Cores and memory: what the over-committed capacity leaves after use and reservations must hold it."""
    free = capacity - used - reserved
    if need <= free:
        return None
    return (
        f"lack{{s}} {need}{unit} free {what}",
        f"{_num(max(free, 0))}{unit} {what} free ({total}{unit} x over-commit {ratio:g} - {used} used - "
        f"{reserved} reserved); needs {need}",
    )


def _cores(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    return _over_committed(
        "cores", "", need=ctx.request.cores, total=host.cores_total, ratio=host.cpu_over_commit_ratio,
        capacity=host.cores_capacity, used=host.cores_used, reserved=ctx.reserved_on(host).cores,
    )  # fmt: skip


def _memory(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    return _over_committed(
        "memory", " MiB", need=ctx.request.memory_mib, total=host.memory_total_mib,
        ratio=host.memory_over_commit_ratio, capacity=host.memory_capacity_mib, used=host.memory_used_mib,
        reserved=ctx.reserved_on(host).memory_mib,
    )  # fmt: skip


def _storage(ctx: FilterContext, host: HostCandidate) -> tuple[str, str] | None:
    # LXD storage is not over-committed by MAAS: the pool must really have the bytes.
    pool = host.storage_pool(ctx.request.storage_pool)
    assert pool is not None, "the storage-pool filter runs first"
    need = ctx.request.disk_bytes
    reserved = ctx.reserved_disk_bytes(host, pool.name)
    free = pool.total_bytes - pool.used_bytes - reserved
    if need <= free:
        return None
    return (
        f"lack{{s}} {ctx.request.disk_gb} GB free storage in pool {pool.name!r}",
        f"{_num(max(free, 0) / GB)} GB free in storage pool {pool.name!r} ({_num(pool.total_bytes / GB)} GB"
        f" - {_num(pool.used_bytes / GB)} used - {_num(reserved / GB)} reserved); "
        f"needs {ctx.request.disk_gb}",
    )


pinned_host = Filter("pinned-host", _pinned_host)
zone = Filter("zone", _zone)
resource_pool = Filter("resource-pool", _resource_pool)
tags = Filter("tags", _tags)
host_ready = Filter("host-ready", _host_ready, per_zone=True)
maintenance = Filter("maintenance", _maintenance, per_zone=True)
vm_size = Filter("vm-size", _vm_size, per_zone=True)
storage_pool = Filter("storage-pool", _storage_pool, per_zone=True)
cores = Filter("cores", _cores, per_zone=True)
memory = Filter("memory", _memory, per_zone=True)
storage = Filter("storage", _storage, per_zone=True)

FILTERS: tuple[Filter, ...] = (
    pinned_host,
    zone,
    resource_pool,
    tags,
    host_ready,
    maintenance,
    vm_size,
    storage_pool,
    cores,
    memory,
    storage,
)
"""The pipeline, in order: eligibility, then host state, then capacity."""


def run_filters(
    ctx: FilterContext,
    hosts: Sequence[HostCandidate],
    filters: Sequence[Filter] = FILTERS,
) -> FilterResult:
    """Run ``filters`` in order; each sees only the hosts the previous ones kept.

    Rejections come out grouped by filter, in pipeline order, then in host order. The loop runs host by host
    (stopping at the first failing filter), which is the same result as filter by filter but cheaper.
    """
    kept: list[HostCandidate] = []
    rejected: list[list[Rejection]] = [[] for _ in filters]
    for host in hosts:
        for i, step in enumerate(filters):
            verdict = step.check(ctx, host)
            if verdict is not None:
                rejected[i].append(step.reject(host, verdict))
                break
        else:
            kept.append(host)
    return FilterResult(tuple(kept), tuple(r for group in rejected for r in group))
