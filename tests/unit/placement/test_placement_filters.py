"""Each filter on its own: what it keeps, what it rejects, and the words it uses."""

from __future__ import annotations

import pytest
from placement_factories import host, request

from capmaas.placement import (
    FILTERS,
    GB,
    FilterContext,
    HostCandidate,
    Reservation,
    StoragePool,
    VMRequest,
    filter_hosts,
    run_filters,
)
from capmaas.placement import _filters as f


def verdict(filt: f.Filter, req: VMRequest, h: HostCandidate, *reservations: Reservation) -> str | None:
    """The rejection detail of one filter for one host, or None when the host is kept."""
    ctx = FilterContext(req, f.reserved_by_host(reservations, exclude_key=req.key))
    result = filt(ctx, [h])
    if result.kept:
        assert result.kept == (h,)
        assert result.rejected == ()
        return None
    (rejection,) = result.rejected
    assert rejection.filter == filt.name
    assert rejection.host_id == h.id
    return rejection.detail


def test_pipeline_order_is_eligibility_then_state_then_capacity() -> None:
    assert [x.name for x in FILTERS] == [
        "pinned-host",
        "zone",
        "resource-pool",
        "tags",
        "host-ready",
        "maintenance",
        "vm-size",
        "storage-pool",
        "cores",
        "memory",
        "storage",
    ]


def test_pinned_host_matches_name_or_id() -> None:
    h = host(7)
    assert verdict(f.pinned_host, request(), h) is None
    assert verdict(f.pinned_host, request(pinned_host="h7"), h) is None
    assert verdict(f.pinned_host, request(pinned_host="7"), h) is None
    assert verdict(f.pinned_host, request(pinned_host="h8"), h) == "h7: not the pinned host 'h8'"


def test_zone() -> None:
    assert verdict(f.zone, request(zone="zone-a"), host(1, "zone-a")) is None
    assert verdict(f.zone, request(), host(1, "zone-b")) is None
    assert verdict(f.zone, request(zone="zone-a"), host(1, "zone-b")) == "h1: in zone 'zone-b', not 'zone-a'"


def test_resource_pool() -> None:
    assert verdict(f.resource_pool, request(resource_pool="default"), host(1)) is None
    assert verdict(f.resource_pool, request(), host(1, pool=None)) is None
    assert (
        verdict(f.resource_pool, request(resource_pool="gold"), host(1, pool=None))
        == "h1: in resource pool None, not 'gold'"
    )


def test_tags_must_all_be_present() -> None:
    h = host(1, tags=["lxd", "ssd"])
    assert verdict(f.tags, request(tags=["lxd"]), h) is None
    assert verdict(f.tags, request(tags=["lxd", "ssd"]), h) is None
    assert verdict(f.tags, request(tags=["lxd", "gpu"]), h) == "h1: lacks tag gpu"
    assert verdict(f.tags, request(tags=["nvme", "gpu"]), h) == "h1: lacks tags gpu, nvme"


def test_host_ready_and_maintenance() -> None:
    assert verdict(f.host_ready, request(), host(1)) is None
    assert verdict(f.host_ready, request(), host(1, host_ready=False)) == (
        "h1: its host machine is not deployed or is powered off"
    )
    assert verdict(f.maintenance, request(), host(1)) is None
    assert verdict(f.maintenance, request(), host(1, maintenance=True)) == "h1: tagged for maintenance"


def test_vm_size_ignores_over_commit() -> None:
    # MAAS bounds a compose by the host's real size even when over-commit would leave room.
    big = host(1, cores_total=4, memory_total_mib=8192, cpu_over_commit_ratio=10, memory_over_commit_ratio=10)
    assert verdict(f.vm_size, request(cores=4, memory_mib=8192), big) is None
    assert verdict(f.vm_size, request(cores=5), big) == (
        "h1: has 4 cores and 8192 MiB in all; the VM needs 5 cores and 4096 MiB"
    )
    assert verdict(f.vm_size, request(memory_mib=8193), big) is not None


def test_storage_pool_named_default_or_largest() -> None:
    pools = (
        StoragePool(name="fast", total_bytes=100 * GB),
        StoragePool(name="slow", total_bytes=900 * GB, used_bytes=100 * GB),
    )
    h = host(1, storage_pools=pools)
    assert h.storage_pool(None) is pools[1], "no default flagged: the pool with the most free bytes"
    assert h.storage_pool("fast") is pools[0]
    assert verdict(f.storage_pool, request(storage_pool="fast"), h) is None
    assert verdict(f.storage_pool, request(), h) is None
    assert verdict(f.storage_pool, request(storage_pool="zfs"), h) == (
        "h1: has no storage pool 'zfs' (has: fast, slow)"
    )
    assert verdict(f.storage_pool, request(), host(1, storage_pools=())) == "h1: reports no storage pool"
    assert verdict(f.storage_pool, request(storage_pool="x"), host(1, storage_pools=())) == (
        "h1: has no storage pool 'x' (has: none)"
    )
    flagged = (StoragePool(name="a", total_bytes=GB), StoragePool(name="b", total_bytes=GB, default=True))
    assert host(1, storage_pools=flagged).storage_pool(None) is flagged[1]
    same = (StoragePool(name="y", total_bytes=GB), StoragePool(name="x", total_bytes=GB))
    assert host(1, storage_pools=same).storage_pool(None) is same[1], "equal free space: by name"


def test_cores_after_over_commit_and_reservations() -> None:
    h = host(1, cores_total=8, cores_used=10, cpu_over_commit_ratio=1.5)  # capacity 12, 2 free
    assert verdict(f.cores, request(cores=2), h) is None
    assert verdict(f.cores, request(cores=3), h) == (
        "h1: 2 cores free (8 x over-commit 1.5 - 10 used - 0 reserved); needs 3"
    )
    held = Reservation(key="other", host_id=1, cores=1, memory_mib=0)
    assert verdict(f.cores, request(cores=2), h, held) == (
        "h1: 1 cores free (8 x over-commit 1.5 - 10 used - 1 reserved); needs 2"
    )
    own = Reservation(key="uid-m1", host_id=1, cores=2, memory_mib=0)
    assert verdict(f.cores, request(cores=2), h, own) is None, "a retry does not compete with itself"
    elsewhere = Reservation(key="other", host_id=2, cores=8, memory_mib=0)
    assert verdict(f.cores, request(cores=2), h, elsewhere) is None


def test_fractional_capacity_is_never_rounded_up() -> None:
    h = host(1, cores_total=3, cores_used=0, cpu_over_commit_ratio=1.333)  # 3.999 cores
    assert verdict(f.cores, request(cores=4), h) == (
        "h1: 3.99 cores free (3 x over-commit 1.333 - 0 used - 0 reserved); needs 4"
    )
    h = host(1, cores_total=4, cores_used=0, cpu_over_commit_ratio=0.9)  # 3.6 cores
    assert verdict(f.cores, request(cores=4), h) == (
        "h1: 3.6 cores free (4 x over-commit 0.9 - 0 used - 0 reserved); needs 4"
    )
    h = host(1, cores_total=1000, cores_used=0, cpu_over_commit_ratio=0.003001)  # 3.001 cores
    assert verdict(f.cores, request(cores=4), h) == (
        "h1: 3 cores free (1000 x over-commit 0.003001 - 0 used - 0 reserved); needs 4"
    )


def test_memory_after_over_commit_and_reservations() -> None:
    h = host(1, memory_total_mib=16384, memory_used_mib=16384, memory_over_commit_ratio=2.0)
    assert verdict(f.memory, request(memory_mib=16384), h) is None
    held = Reservation(key="other", host_id=1, cores=0, memory_mib=12288)
    assert verdict(f.memory, request(memory_mib=8192), h, held) == (
        "h1: 4096 MiB memory free (16384 MiB x over-commit 2 - 16384 used - 12288 reserved); needs 8192"
    )
    full = host(1, memory_total_mib=8192, memory_used_mib=9000)
    assert verdict(f.memory, request(memory_mib=1024), full) == (
        "h1: 0 MiB memory free (8192 MiB x over-commit 1 - 9000 used - 0 reserved); needs 1024"
    )


def test_storage_counts_reservations_in_the_same_pool_only() -> None:
    pools = (
        StoragePool(name="local", total_bytes=100 * GB, used_bytes=50 * GB, default=True),
        StoragePool(name="other", total_bytes=100 * GB),
    )
    h = host(1, storage_pools=pools)
    assert verdict(f.storage, request(disk_gb=50), h) is None
    in_other = Reservation(key="a", host_id=1, cores=0, memory_mib=0, disk_gb=60, storage_pool="other")
    assert verdict(f.storage, request(disk_gb=50), h, in_other) is None
    in_local = Reservation(key="b", host_id=1, cores=0, memory_mib=0, disk_gb=10, storage_pool="local")
    assert verdict(f.storage, request(disk_gb=50), h, in_local) == (
        "h1: 40 GB free in storage pool 'local' (100 GB - 50 used - 10 reserved); needs 50"
    )
    # A reservation without a pool lands in the default pool, as MAAS would put it.
    unnamed = Reservation(key="c", host_id=1, cores=0, memory_mib=0, disk_gb=10)
    assert verdict(f.storage, request(disk_gb=50), h, unnamed) is not None
    assert verdict(f.storage, request(disk_gb=60, storage_pool="other"), h, unnamed) is None
    bare = host(2, storage_pools=())
    ctx = FilterContext(
        request(), f.reserved_by_host([Reservation(key="d", host_id=2, cores=0, memory_mib=0)])
    )
    assert ctx.reserved_disk_bytes(bare, "local") == 0


def test_run_filters_rejects_each_host_once_by_its_first_failing_filter() -> None:
    hosts = [
        host(1, "zone-b"),
        host(2, maintenance=True, memory_used_mib=65536),
        host(3, memory_used_mib=65536),
        host(4),
    ]
    result = filter_hosts(request(zone="zone-a"), hosts)
    assert [h.id for h in result.kept] == [4]
    assert [(r.filter, r.host_id) for r in result.rejected] == [
        ("zone", 1),
        ("maintenance", 2),
        ("memory", 3),
    ]
    # Filters are composable on their own, and a single filter equals run_filters with just that filter.
    ctx = FilterContext(request(zone="zone-a"))
    assert f.zone(ctx, hosts) == run_filters(ctx, hosts, (f.zone,))


def test_filter_hosts_with_no_candidates() -> None:
    result = filter_hosts(request(), [])
    assert result.kept == ()
    assert result.rejected == ()


@pytest.mark.parametrize("flt", FILTERS, ids=lambda x: x.name)
def test_every_filter_keeps_a_plain_host_for_a_plain_request(flt: f.Filter) -> None:
    assert verdict(flt, request(), host(1)) is None
