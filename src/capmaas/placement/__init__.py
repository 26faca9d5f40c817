"""Pure VM-host and zone placement: candidates -> filters -> ranking -> pick, with no I/O.

The operator builds ``HostCandidate``s from MAAS's VM-host listing, ``ExistingPlacement``s from the cluster's
MaasMachines and a ``VMRequest`` from the MaasMachine spec, then calls ``place_vm`` (or
``ReservationBook.place``, which also holds the resources until MAAS reports the compose). Nothing here
imports the MAAS client, the CRD models, Kubernetes or kopf, so every decision can be replayed from plain
values.

Public names are re-exported here only; inside the package, modules import modules.
"""

from __future__ import annotations

from capmaas.placement._filters import FILTERS, Filter, FilterContext, FilterResult, run_filters
from capmaas.placement._models import (
    GB,
    ExistingPlacement,
    HostCandidate,
    NoFit,
    Placement,
    Rejection,
    Reservation,
    Role,
    StoragePool,
    VMRequest,
)
from capmaas.placement._place import filter_hosts, place_vm
from capmaas.placement._ranking import RankedHost, SpreadCounts, rank_hosts, spread_counts
from capmaas.placement._reasons import summarize
from capmaas.placement._reservations import ReservationBook
from capmaas.placement._zones import choose_zone

__all__ = [
    "FILTERS",
    "GB",
    "ExistingPlacement",
    "Filter",
    "FilterContext",
    "FilterResult",
    "HostCandidate",
    "NoFit",
    "Placement",
    "RankedHost",
    "Rejection",
    "Reservation",
    "ReservationBook",
    "Role",
    "SpreadCounts",
    "StoragePool",
    "VMRequest",
    "choose_zone",
    "filter_hosts",
    "place_vm",
    "rank_hosts",
    "run_filters",
    "spread_counts",
    "summarize",
]
