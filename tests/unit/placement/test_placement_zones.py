"""choose_zone: bare-metal zone spread."""

from __future__ import annotations

from collections import Counter

import pytest

from capmaas.placement import choose_zone


def test_picks_the_eligible_zone_with_fewest_machines() -> None:
    counts = {"zone-a": 0, "zone-b": 2, "zone-c": 1}
    assert choose_zone(counts, ["zone-b", "zone-c"]) == "zone-c"
    assert choose_zone(counts, ["zone-a", "zone-b", "zone-c"]) == "zone-a"
    assert choose_zone({}, ["zone-x"]) == "zone-x"
    assert choose_zone({"zone-a": 3}, ["zone-a", "zone-new"]) == "zone-new", (
        "a zone without machines counts 0"
    )


def test_ties_are_deterministic_and_spread_by_machine() -> None:
    zones = ["zone-a", "zone-b", "zone-c"]
    assert choose_zone({}, zones, seed=5, machine="m") == choose_zone(
        {}, reversed(zones), seed=5, machine="m"
    )
    picks = Counter(choose_zone({}, zones, machine=f"m{i}") for i in range(60))
    assert set(picks) == set(zones)


def test_no_eligible_zone_is_an_error() -> None:
    with pytest.raises(ValueError, match="no eligible zone"):
        choose_zone({"zone-a": 0}, [])
