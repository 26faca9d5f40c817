"""The value types: validation, conversions, and the pinned public surface."""

from __future__ import annotations

import pytest
from placement_factories import host, request

import capmaas.placement
from capmaas.placement import GB, ExistingPlacement, Reservation, Role, StoragePool, VMRequest


def test_public_surface_is_pinned() -> None:
    assert set(capmaas.placement.__all__) == {
        "FILTERS", "GB", "ExistingPlacement", "Filter", "FilterContext", "FilterResult", "HostCandidate",
        "NoFit", "Placement", "RankedHost", "Rejection", "Reservation", "ReservationBook", "Role",
        "SpreadCounts", "StoragePool", "VMRequest", "choose_zone", "filter_hosts", "place_vm", "rank_hosts",
        "run_filters", "spread_counts", "summarize",
    }  # fmt: skip
    for name in capmaas.placement.__all__:
        assert hasattr(capmaas.placement, name)


def test_strings_and_lists_are_normalised() -> None:
    r = request(role="control-plane", tags=["a", "b", "a"])
    assert r.role is Role.CONTROL_PLANE
    assert r.tags == frozenset({"a", "b"})
    assert r.disk_bytes == 20 * GB
    h = host(1, tags=["x"], storage_pools=[StoragePool(name="p", total_bytes=GB)])
    assert h.tags == frozenset({"x"})
    assert isinstance(h.storage_pools, tuple)
    assert ExistingPlacement(zone="z", role="control-plane").role is Role.CONTROL_PLANE  # type: ignore[arg-type]
    reservation = Reservation(key="k", host_id=1, cores=1, memory_mib=1, role="worker")  # type: ignore[arg-type]
    assert reservation.role is Role.WORKER


def test_capacity_after_over_commit() -> None:
    h = host(1, cores_total=8, memory_total_mib=1000, cpu_over_commit_ratio=2.5, memory_over_commit_ratio=1.5)
    assert h.cores_capacity == 20
    assert h.memory_capacity_mib == 1500


@pytest.mark.parametrize("field", ["cores", "memory_mib", "disk_gb"])
def test_request_sizes_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=rf"VMRequest\.{field} must be >= 1"):
        request(**{field: 0})


def test_negative_figures_are_refused() -> None:
    with pytest.raises(ValueError, match=r"HostCandidate\.cores_used must be >= 0"):
        host(1, cores_used=-1)
    with pytest.raises(ValueError, match=r"StoragePool\.used_bytes must be >= 0"):
        StoragePool(name="p", total_bytes=1, used_bytes=-1)
    with pytest.raises(ValueError, match=r"Reservation\.disk_gb must be >= 0"):
        Reservation(key="k", host_id=1, cores=0, memory_mib=0, disk_gb=-1)


def test_request_defaults() -> None:
    r = VMRequest(cluster="c", machine="m", cores=1, memory_mib=1024, disk_gb=8)
    assert (r.role, r.zone, r.resource_pool, r.storage_pool, r.pinned_host, r.key) == (
        Role.WORKER, None, None, None, None, None,
    )  # fmt: skip
    assert r.tags == frozenset()
