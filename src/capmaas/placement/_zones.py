"""Zone spread for bare metal: the zone for a machine that has no failure domain.

MAAS allocates bare metal by constraints, not by host, so the only placement decision is the zone. The caller
says which zones can satisfy the machine (e.g. zones with a Ready machine matching the constraints); this
picks the one where the cluster has the fewest machines, the same rule VM placement uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from capmaas.placement._ranking import tiebreak


def choose_zone(
    cluster_zone_counts: Mapping[str, int],
    eligible_zones: Iterable[str],
    *,
    seed: int = 0,
    machine: str = "",
) -> str:
    """The eligible zone with the fewest of the cluster's machines.

    Ties are broken by a hash of (seed, machine, zone): reproducible, independent of the order of
    ``eligible_zones``, and different per ``machine`` so machines created together spread even when the counts
    they were given are equally stale. Raises ``ValueError`` when no zone is eligible.
    """
    zones = sorted(set(eligible_zones))
    if not zones:
        raise ValueError("no eligible zone: no zone can satisfy the machine's constraints")
    return min(zones, key=lambda z: (cluster_zone_counts.get(z, 0), tiebreak(seed, machine, z), z))
