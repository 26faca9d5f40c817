"""``ReservationBook``: resources promised to VMs that MAAS does not count yet.

Between choosing a host and MAAS's ``used`` figures including the new VM there is a window in which a second
placement, working from the same host listing, would see the capacity as free. The book holds each in-flight
VM's resources under its MaasMachine UID:

* ``reserve(key, placement)`` when a host is chosen, before composing. Idempotent per key: a retry of the same
  machine replaces its own reservation instead of adding a second one.
* ``composed(key, at=t)`` when MAAS answers the compose. The VM is now in MAAS's figures for any host listing
  fetched after ``t``, but not in a listing fetched before, so the reservation still counts against older
  snapshots (``active(snapshot_at=...)``) and ``settle(snapshot_at)`` drops it once a newer listing is in
  hand.
* ``release(key)`` when the compose fails or the machine goes away.

Times are whatever monotonic clock the caller uses; the book does no I/O and keeps no clock of its own. It is
a plain data structure for one event loop (kopf runs handlers as tasks on one thread): place and reserve with
no ``await`` in between, as ``place`` does, and no other placement can slip in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from capmaas.placement._models import (
    ExistingPlacement,
    HostCandidate,
    NoFit,
    Placement,
    Reservation,
    VMRequest,
)
from capmaas.placement._place import place_vm


@dataclass(frozen=True, slots=True)
class _Entry:
    reservation: Reservation
    composed_at: float | None = None


class ReservationBook:
    """In-flight reservations by key (the MaasMachine UID); see the module docstring for the protocol."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Reservation]:
        return iter(self.active())

    def get(self, key: str) -> Reservation | None:
        entry = self._entries.get(key)
        return entry.reservation if entry is not None else None

    def reserve(self, key: str, placement: Placement) -> Reservation:
        """Hold ``placement``'s resources under ``key``; the token is the ``Reservation`` itself.

        Reserving the same placement again returns the existing token unchanged (a retried reconcile). A
        different placement under the same key replaces the old one: one machine holds at most one
        reservation.
        """
        wanted = placement.reservation(key)
        entry = self._entries.get(key)
        if entry is not None and entry.reservation == wanted:
            return entry.reservation
        self._entries[key] = _Entry(wanted)
        return wanted

    def composed(self, key: str, *, at: float) -> None:
        """Record that MAAS accepted the compose at time ``at``; an unknown key is ignored."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = _Entry(entry.reservation, composed_at=at)

    def release(self, key: str) -> Reservation | None:
        """Drop ``key``'s reservation (compose failed, or its VM is accounted by MAAS); idempotent."""
        entry = self._entries.pop(key, None)
        return entry.reservation if entry is not None else None

    def active(
        self, *, snapshot_at: float | None = None, exclude_key: str | None = None
    ) -> tuple[Reservation, ...]:
        """Reservations to add to a host listing fetched at ``snapshot_at`` (``None``: count them all).

        A reservation whose compose MAAS accepted at or before ``snapshot_at`` is already in that listing.
        """
        return tuple(
            e.reservation
            for key, e in sorted(self._entries.items())
            if key != exclude_key
            and (snapshot_at is None or e.composed_at is None or e.composed_at > snapshot_at)
        )

    def settle(self, snapshot_at: float) -> list[str]:
        """Drop the reservations a listing fetched at ``snapshot_at`` includes; returns their keys."""
        done = sorted(
            key
            for key, e in self._entries.items()
            if e.composed_at is not None and e.composed_at <= snapshot_at
        )
        for key in done:
            del self._entries[key]
        return done

    def place(
        self,
        request: VMRequest,
        candidates: Sequence[HostCandidate],
        existing: Iterable[ExistingPlacement] = (),
        *,
        snapshot_at: float | None = None,
        seed: int = 0,
    ) -> Placement | NoFit:
        """Place ``request`` against this book's reservations; on success reserve it under its key.

        The request's own earlier reservation is not counted against it, so a retry can land on the same host.
        On ``NoFit`` any earlier reservation of the key is released: the machine is waiting, not holding.
        """
        if request.key is None:
            raise ValueError("ReservationBook.place needs request.key (the MaasMachine UID)")
        result = place_vm(
            request,
            candidates,
            existing,
            self.active(snapshot_at=snapshot_at, exclude_key=request.key),
            seed=seed,
        )
        if isinstance(result, NoFit):
            self.release(request.key)
        else:
            self.reserve(request.key, result)
        return result
