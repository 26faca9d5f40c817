"""Properties of placement that must hold for any inventory (hypothesis).

* never over capacity after over-commit and reservations, however many placements run back to back;
* every placement respects the pin, zone, resource pool, tags, host state and VM size;
* with enough capacity, a cluster's machines (and each role) stay balanced across zones within one;
* a control-plane VM shares a host with another of its cluster only when no other host fits;
* the result depends on the inputs and the seed only, not on their order.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capmaas.placement import (
    GB,
    ExistingPlacement,
    FilterContext,
    HostCandidate,
    NoFit,
    Placement,
    Reservation,
    ReservationBook,
    Role,
    StoragePool,
    VMRequest,
    _filters,
    _ranking,
    choose_zone,
    filter_hosts,
    place_vm,
    rank_hosts,
    spread_counts,
)

ZONES = ("zone-a", "zone-b", "zone-c", "zone-d")
TAGS = ("lxd", "ssd", "gpu")
RATIOS = (0.5, 1.0, 1.5, 2.0, 3.0)

# Local settings only (a loaded profile would change every other suite's hypothesis settings too); no
# deadline, because the machine is shared and timing is not what these tests are about.
relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# The strategies a drawn host or request is made of, built once: a strategy built inside a composite is a new
# object per draw, and hypothesis validates each new one (most of these tests' CPU went there, not to
# placement). The same strategies, so the same distribution of inventories and requests.
_cores = st.integers(1, 64)
_memory = st.integers(1024, 131072)
_storage_pool_names = st.lists(st.sampled_from(("local", "fast")), min_size=1, max_size=2, unique=True)
_zone = st.sampled_from(ZONES)
_host_pool = st.sampled_from(("default", "gold", None))
_host_tags = st.frozensets(st.sampled_from(TAGS))
_host_ready = st.sampled_from((True, True, True, False))
_maintenance = st.sampled_from((False, False, False, True))
_pool_size = st.integers(1, 2000)
_ratio = st.sampled_from(RATIOS)
_role = st.sampled_from(Role)
_request_cores = st.integers(1, 16)
_request_memory = st.integers(1024, 32768)
_request_disk = st.integers(1, 300)
_request_pool = st.sampled_from((None, None, "local", "fast"))
_request_zone = st.none() | _zone
_request_resource_pool = st.none() | st.none() | st.sampled_from(("default", "gold"))
_request_tags = st.frozensets(st.sampled_from(TAGS), max_size=1)


@st.composite
def hosts_st(draw: st.DrawFn, min_size: int = 0, max_size: int = 12) -> list[HostCandidate]:
    count = draw(st.integers(min_size, max_size))
    out = []
    for i in range(count):
        cores = draw(_cores)
        memory = draw(_memory)
        pools = draw(_storage_pool_names)
        out.append(
            HostCandidate(
                id=i + 1,
                name=f"h{i + 1}",
                zone=draw(_zone),
                pool=draw(_host_pool),
                tags=draw(_host_tags),
                host_ready=draw(_host_ready),
                maintenance=draw(_maintenance),
                cores_total=cores,
                cores_used=draw(st.integers(0, cores * 2)),
                memory_total_mib=memory,
                memory_used_mib=draw(st.integers(0, memory * 2)),
                storage_pools=tuple(
                    StoragePool(
                        name=name,
                        total_bytes=(total := draw(_pool_size) * GB),
                        used_bytes=draw(st.integers(0, total)),
                        default=draw(st.booleans()),
                    )
                    for name in pools
                ),
                cpu_over_commit_ratio=draw(_ratio),
                memory_over_commit_ratio=draw(_ratio),
            )
        )
    return out


def pins_st(hosts: list[HostCandidate]) -> st.SearchStrategy[str | None]:
    """A request's pin: none mostly, else a host's name or id, or a host that does not exist."""
    pins = [h.name for h in hosts] + [str(h.id) for h in hosts] + ["nowhere"]
    return st.none() | st.none() | st.none() | st.sampled_from(pins)


@st.composite
def request_st(
    draw: st.DrawFn, n: int, hosts: list[HostCandidate], pins: st.SearchStrategy[str | None] | None = None
) -> VMRequest:
    """A request; ``pins`` (from :func:`pins_st`) when the caller draws many requests for the same hosts."""
    return VMRequest(
        cluster="c1",
        machine=f"m{n}",
        key=f"uid-{n}",
        role=draw(_role),
        cores=draw(_request_cores),
        memory_mib=draw(_request_memory),
        disk_gb=draw(_request_disk),
        storage_pool=draw(_request_pool),
        zone=draw(_request_zone),
        resource_pool=draw(_request_resource_pool),
        tags=draw(_request_tags),
        pinned_host=draw(pins_st(hosts) if pins is None else pins),
    )


def respects_constraints(p: Placement, req: VMRequest, h: HostCandidate) -> None:
    assert p.host_id == h.id
    if req.pinned_host is not None:
        assert req.pinned_host in (h.name, str(h.id))
    if req.zone is not None:
        assert h.zone == req.zone == p.zone
    if req.resource_pool is not None:
        assert h.pool == req.resource_pool == p.resource_pool
    assert req.tags <= h.tags
    assert h.host_ready
    assert not h.maintenance
    assert req.cores <= h.cores_total
    assert req.memory_mib <= h.memory_total_mib
    if req.storage_pool is not None:
        assert p.storage_pool == req.storage_pool


def assert_within_capacity(hosts: list[HostCandidate], reservations: tuple[Reservation, ...]) -> None:
    by_host: dict[int, list[Reservation]] = {}
    for r in reservations:
        by_host.setdefault(r.host_id, []).append(r)
    for h in hosts:
        held = by_host.get(h.id, [])
        if not held:
            continue
        assert h.cores_used + sum(r.cores for r in held) <= h.cores_total * h.cpu_over_commit_ratio
        assert (
            h.memory_used_mib + sum(r.memory_mib for r in held)
            <= h.memory_total_mib * h.memory_over_commit_ratio
        )
        for pool in h.storage_pools:
            disk = sum(r.disk_gb * GB for r in held if r.storage_pool == pool.name)
            if disk:
                assert pool.used_bytes + disk <= pool.total_bytes


@relaxed
@given(data=st.data(), hosts=hosts_st())
def test_never_over_capacity_and_constraints_always_respected(
    data: st.DataObject, hosts: list[HostCandidate]
) -> None:
    book = ReservationBook()
    by_id = {h.id: h for h in hosts}
    existing: list[ExistingPlacement] = []
    pins = pins_st(hosts)
    for n in range(data.draw(st.integers(1, 25), label="placements")):
        req = data.draw(request_st(n, hosts, pins), label=f"request {n}")
        result = book.place(req, hosts, existing, seed=data.draw(st.integers(0, 3)))
        if isinstance(result, Placement):
            respects_constraints(result, req, by_id[result.host_id])
            if data.draw(st.booleans()):
                existing.append(ExistingPlacement(zone=result.zone, role=req.role, host_id=result.host_id))
        else:
            assert result.reasons or not hosts
            assert result.message
        assert_within_capacity(hosts, book.active())


@relaxed
@given(
    zones=st.integers(1, 4),
    roles=st.lists(st.sampled_from(Role), min_size=1, max_size=12),
    listed=st.lists(st.booleans(), min_size=12, max_size=12),
    extra_hosts=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    seed=st.integers(0, 1000),
)
def test_balanced_across_zones_within_one_when_capacity_suffices(
    zones: int, roles: list[Role], listed: list[bool], extra_hosts: list[int], seed: int
) -> None:
    # Every zone has at least as many roomy hosts as there are machines, so nothing is forced.
    hosts = [
        HostCandidate(
            id=z * 100 + i,
            name=f"h{z}-{i}",
            zone=ZONES[z],
            cores_total=64,
            memory_total_mib=262144,
            storage_pools=(StoragePool(name="local", total_bytes=5000 * GB, default=True),),
        )
        for z in range(zones)
        for i in range(len(roles) + extra_hosts[z])
    ]
    book = ReservationBook()
    existing: list[ExistingPlacement] = []
    for n, role in enumerate(roles):
        req = VMRequest(
            cluster="c1", machine=f"m{n}", key=f"uid-{n}", role=role, cores=4, memory_mib=8192, disk_gb=50
        )
        p = book.place(req, hosts, existing, seed=seed)
        assert isinstance(p, Placement)
        if listed[n]:  # some machines are already listed, others only known from the book
            existing.append(ExistingPlacement(zone=p.zone, role=role, host_id=p.host_id, key=req.key))
    placed = [(r.zone, r.role, r.host_id) for r in book.active()]
    for role_filter in (None, Role.CONTROL_PLANE, Role.WORKER):
        counts = Counter(z for z, r, _ in placed if role_filter in (None, r))
        per_zone = [counts.get(ZONES[z], 0) for z in range(zones)]
        assert max(per_zone) - min(per_zone) <= 1, (role_filter, per_zone)
    cp_hosts = [h for _, r, h in placed if r is Role.CONTROL_PLANE]
    assert len(cp_hosts) == len(set(cp_hosts))


@relaxed
@given(data=st.data(), hosts=hosts_st(min_size=1))
def test_control_planes_share_a_host_only_when_no_other_host_fits(
    data: st.DataObject, hosts: list[HostCandidate]
) -> None:
    book = ReservationBook()
    cp_on: Counter[int] = Counter()
    for n in range(data.draw(st.integers(1, 10), label="placements")):
        role = data.draw(_role)
        req = VMRequest(
            cluster="c1",
            machine=f"m{n}",
            key=f"uid-{n}",
            role=role,
            cores=data.draw(st.integers(1, 8)),
            memory_mib=data.draw(st.integers(1024, 16384)),
            disk_gb=data.draw(st.integers(1, 100)),
        )
        fitting = filter_hosts(req, hosts, book.active()).kept
        p = book.place(req, hosts, seed=n)
        if isinstance(p, NoFit):
            assert not fitting
            continue
        if role is Role.CONTROL_PLANE:
            if cp_on[p.host_id]:
                assert all(cp_on[h.id] for h in fitting), "shared a host while a control-plane-free host fit"
            cp_on[p.host_id] += 1


@relaxed
@given(data=st.data(), hosts=hosts_st(), seed=st.integers(0, 2**32))
def test_deterministic_under_a_seed_and_independent_of_input_order(
    data: st.DataObject, hosts: list[HostCandidate], seed: int
) -> None:
    req = data.draw(request_st(0, hosts))
    existing = [
        ExistingPlacement(zone=data.draw(_zone), role=data.draw(_role), host_id=h)
        for h in data.draw(st.lists(st.integers(1, 12), max_size=6))
    ]
    reservations = [
        Reservation(key=f"r{i}", host_id=h, cores=1, memory_mib=1024, disk_gb=1, cluster="c1", zone="zone-a")
        for i, h in enumerate(data.draw(st.lists(st.integers(1, 12), max_size=4)))
    ]
    first = place_vm(req, hosts, existing, reservations, seed=seed)
    assert place_vm(req, hosts, existing, reservations, seed=seed) == first
    rng = random.Random(seed)
    rng.shuffle(hosts)
    rng.shuffle(existing)
    rng.shuffle(reservations)
    again = place_vm(req, hosts, existing, reservations, seed=seed)
    if isinstance(first, Placement):
        assert isinstance(again, Placement)
        assert (again.host_id, again.storage_pool, again.reason) == (
            first.host_id,
            first.storage_pool,
            first.reason,
        )
        # The staged pick agrees with the full ranking.
        ctx = FilterContext(req, _filters.reserved_by_host(reservations, exclude_key=req.key))
        kept = filter_hosts(req, hosts, reservations).kept
        counts = spread_counts(req, existing, reservations)
        assert rank_hosts(ctx, kept, counts, seed=seed)[0].host.id == first.host_id
    else:
        assert isinstance(again, NoFit)
        assert sorted(r.detail for r in again.reasons) == sorted(r.detail for r in first.reasons)


@relaxed
@given(
    counts=st.dictionaries(st.sampled_from(ZONES), st.integers(0, 9)),
    eligible=st.lists(st.sampled_from(ZONES), min_size=1, unique=True),
    seed=st.integers(0, 100),
    machine=st.text(max_size=5),
)
def test_choose_zone_picks_a_least_loaded_eligible_zone(
    counts: dict[str, int], eligible: list[str], seed: int, machine: str
) -> None:
    zone = choose_zone(counts, eligible, seed=seed, machine=machine)
    assert zone in eligible
    assert counts.get(zone, 0) == min(counts.get(z, 0) for z in eligible)
    assert choose_zone(counts, list(reversed(eligible)), seed=seed, machine=machine) == zone
    assert _ranking.tiebreak(seed, machine, zone) >= 0
