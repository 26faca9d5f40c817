"""What the zone spread counts of a cluster's siblings: kept by one entry per change of a sibling (stored,
changed, gone), and counted as a fresh read of the listing would count it."""

from __future__ import annotations

from typing import Any

from capmaas.reconcilers.siblings import Sibling, ZoneTally


def body(name: str, rv: str | None, zone: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"failureDomain": zone}}


def nothing_chosen(uid: str) -> str | None:
    return None


def counts(tally: ZoneTally, leave_out: str = "", chosen: dict[str, str] | None = None) -> dict[str, int]:
    chosen = chosen or {}
    return tally.counts(leave_out=leave_out, chosen=chosen.get, chosen_uids=chosen.keys())


def test_a_sibling_is_read_as_the_view_reads_it() -> None:
    assert Sibling.of(body("a", "1", "z1")) == Sibling("uid-a", "z1")
    assert Sibling.of(body("a", "1", "")) == Sibling("uid-a", None)  # empty is none
    assert Sibling.of({"metadata": None, "spec": None}) == Sibling("", None)  # null sections are empty
    assert Sibling.of({}) == Sibling("", None)


def test_an_unchanged_sibling_counts_once() -> None:
    tally = ZoneTally()
    tally.put("a", body("a", "1", "z1"))
    tally.put("b", body("b", "2", "z2"))
    tally.put("a", body("a", "1", "z1"))  # the same version again (a re-list)
    assert counts(tally) == {"z1": 1, "z2": 1}
    assert len(tally) == 2


def test_a_changed_sibling_moves_to_its_new_zone() -> None:
    tally = ZoneTally()
    tally.put("a", body("a", "1", None))
    assert counts(tally) == {}
    tally.put("a", body("a", "7", "z3"))
    assert counts(tally) == {"z3": 1}
    tally.put("a", body("a", "8", "z1"))
    assert counts(tally) == {"z1": 1}


def test_the_machine_choosing_is_left_out() -> None:
    tally = ZoneTally.of([body("a", "1", "z1"), body("b", "1", "z1"), body("c", "1", None)])
    assert counts(tally, leave_out="uid-a") == {"z1": 1}
    assert counts(tally, leave_out="uid-c", chosen={"uid-c": "z2"}) == {"z1": 2}
    assert counts(tally, leave_out="uid-b", chosen={"uid-c": "z2"}) == {"z1": 1, "z2": 1}


def test_an_unplaced_sibling_counts_where_it_was_chosen() -> None:
    tally = ZoneTally.of([body(n, "1", None) for n in ("a", "b", "c")] + [body("d", "1", "z1")])
    # Whichever of the two sets is walked (fewer choices than unplaced siblings, or more), the same counts.
    assert counts(tally, chosen={"uid-a": "z2"}) == {"z1": 1, "z2": 1}
    many = {"uid-a": "z2", "uid-b": "z2", "uid-x": "z3", "uid-y": "z3", "uid-d": "z3"}
    assert counts(tally, chosen=many) == {"z1": 1, "z2": 2}  # uid-d is placed: its own zone counts
    assert tally.counts(leave_out="", chosen=nothing_chosen, chosen_uids=["uid-a"]) == {"z1": 1}


def test_siblings_sharing_a_uid_count_each_where_it_was_chosen() -> None:
    """Two unplaced siblings under one UID (a copy of an object, before its UID changes) are two machines
    where that UID's zone was chosen, and none when they are the machine choosing."""
    tally = ZoneTally()
    tally.put("a", {"metadata": {"uid": "uid-x"}, "spec": {}})
    tally.put("b", {"metadata": {"uid": "uid-x"}, "spec": {}})
    tally.put("c", body("c", "1", "z1"))
    assert counts(tally, chosen={"uid-x": "z2"}) == {"z1": 1, "z2": 2}
    assert counts(tally, leave_out="uid-x", chosen={"uid-x": "z2"}) == {"z1": 1}


def test_gone_siblings_are_dropped() -> None:
    tally = ZoneTally()
    tally.put("a", body("a", "1", "z1"))
    tally.put("b", body("b", "1", None))
    tally.drop("a")
    tally.drop("b")
    tally.drop("never-there")
    assert counts(tally, chosen={"uid-b": "z1"}) == {}
    assert len(tally) == 0


def test_the_tally_counts_as_a_fresh_read_of_the_listing() -> None:
    """Any sequence of stores and drops ends where a tally of the final listing starts."""
    import random

    rng = random.Random(7)
    tally, listing = ZoneTally(), {}
    for step in range(500):
        name = f"m{rng.randrange(20)}"
        if rng.random() < 0.3:
            tally.drop(name)
            listing.pop(name, None)
        else:
            b = body(name, str(step), rng.choice([None, "z1", "z2", "z3"]))
            tally.put(name, b)
            listing[name] = b
        chosen = {f"uid-m{i}": rng.choice(["z1", "z2"]) for i in range(rng.randrange(20))}
        leave_out = f"uid-m{rng.randrange(20)}"
        assert counts(tally, leave_out, chosen) == counts(ZoneTally.of(listing.values()), leave_out, chosen)
        assert counts(tally, leave_out, chosen) == expected(listing.values(), leave_out, chosen)


def expected(bodies: Any, leave_out: str, chosen: dict[str, str]) -> dict[str, int]:
    """The spread's count as it was written before the tally: a walk over every sibling."""
    out: dict[str, int] = {}
    for b in bodies:
        uid, zone = b["metadata"]["uid"], b["spec"]["failureDomain"]
        z = zone or chosen.get(uid)
        if z and uid != leave_out:
            out[z] = out.get(z, 0) + 1
    return out
