"""ReservationBook: idempotent per key, counted until MAAS's figures include the VM, and place-and-reserve."""

from __future__ import annotations

import pytest
from placement_factories import host, request

from capmaas.placement import NoFit, Placement, Reservation, ReservationBook, Role, place_vm


def a_placement(host_id: int = 1, machine: str = "m1") -> Placement:
    result = place_vm(request(machine=machine), [host(host_id)])
    assert isinstance(result, Placement)
    return result


def test_reserve_is_idempotent_per_key() -> None:
    book = ReservationBook()
    token = book.reserve("uid-1", a_placement())
    assert token == Reservation(
        key="uid-1",
        host_id=1,
        cores=2,
        memory_mib=4096,
        disk_gb=20,
        storage_pool="local",
        cluster="c1",
        zone="zone-a",
        role=Role.WORKER,
    )
    assert book.reserve("uid-1", a_placement()) is token
    assert len(book) == 1
    assert "uid-1" in book
    assert book.get("uid-1") is token
    assert list(book) == [token]


def test_a_new_placement_for_the_same_key_replaces_the_old_one() -> None:
    book = ReservationBook()
    book.reserve("uid-1", a_placement(1))
    moved = book.reserve("uid-1", a_placement(2))
    assert moved.host_id == 2
    assert book.active() == (moved,)


def test_release_is_idempotent() -> None:
    book = ReservationBook()
    token = book.reserve("uid-1", a_placement())
    assert book.release("uid-1") == token
    assert book.release("uid-1") is None
    assert book.get("uid-1") is None
    assert "uid-1" not in book
    assert len(book) == 0


def test_composed_reservations_count_only_against_older_snapshots() -> None:
    book = ReservationBook()
    pending = book.reserve("uid-1", a_placement(1))
    composed = book.reserve("uid-2", a_placement(2))
    book.composed("uid-2", at=10.0)
    book.composed("unknown", at=10.0)
    assert book.active() == (pending, composed)
    assert book.active(snapshot_at=9.0) == (pending, composed), "listing fetched before MAAS knew"
    assert book.active(snapshot_at=10.0) == (pending,), "listing fetched after: MAAS counts it itself"
    assert book.active(exclude_key="uid-1") == (composed,)
    assert book.settle(9.0) == []
    assert book.settle(11.0) == ["uid-2"]
    assert book.active() == (pending,)


def test_place_reserves_and_concurrent_placements_do_not_overcommit() -> None:
    book = ReservationBook()
    hosts = [host(1, cores_total=4), host(2, "zone-b", cores_total=4)]
    results = [book.place(request(machine=f"m{i}", key=f"uid-{i}", cores=2), hosts) for i in range(5)]
    placed = [r for r in results if isinstance(r, Placement)]
    assert len(placed) == 4
    assert sorted(r.host_id for r in placed) == [1, 1, 2, 2]
    last = results[4]
    assert isinstance(last, NoFit)
    assert last.message == (
        "no VM host fits: 1 host in zone-a lacks 2 free cores; 1 host in zone-b lacks 2 free cores"
    )
    assert len(book) == 4


def test_place_retry_does_not_double_reserve_and_no_fit_releases() -> None:
    book = ReservationBook()
    hosts = [host(1, cores_total=4)]
    first = book.place(request(cores=4), hosts)
    again = book.place(request(cores=4), hosts)
    assert isinstance(first, Placement)
    assert again == first, "the retry is not blocked by its own reservation"
    assert len(book) == 1
    bigger = book.place(request(cores=8), hosts)
    assert isinstance(bigger, NoFit)
    assert len(book) == 0, "a machine that waits holds nothing"


def test_place_needs_a_key() -> None:
    with pytest.raises(ValueError, match=r"request\.key"):
        ReservationBook().place(request(key=None), [host(1)])
