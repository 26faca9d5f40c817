"""place_vm end to end: the ranking order, the explanation, and the NoFit message."""

from __future__ import annotations

import random

from placement_factories import host, request

from capmaas.placement import (
    ExistingPlacement,
    FilterContext,
    NoFit,
    Placement,
    Reservation,
    Role,
    _ranking,
    filter_hosts,
    place_vm,
    rank_hosts,
    spread_counts,
    summarize,
)

CP = Role.CONTROL_PLANE


def placed(result: Placement | NoFit) -> Placement:
    assert isinstance(result, Placement), result
    return result


def test_places_on_the_only_fitting_host_and_reports_the_skipped_ones() -> None:
    hosts = [host(1, memory_used_mib=65536), host(2, "zone-b", maintenance=True), host(3)]
    p = placed(place_vm(request(), hosts))
    assert (p.host_id, p.host_name, p.zone, p.resource_pool, p.storage_pool) == (
        3,
        "h3",
        "zone-a",
        "default",
        "local",
    )
    assert (p.cores, p.memory_mib, p.disk_gb, p.cluster, p.machine, p.role) == (
        2,
        4096,
        20,
        "c1",
        "m1",
        Role.WORKER,
    )
    assert [r.host_id for r in p.skipped] == [2, 1]
    assert (
        p.skipped_message == "1 host in zone-b is in maintenance; 1 host in zone-a lacks 4096 MiB free memory"
    )
    assert (
        p.reason
        == "host h3 in zone-a: the cluster has 0 worker and 0 total machines in zone-a and 0 on this host"
    )
    assert p


def test_no_fit_aggregates_reasons_per_filter_and_zone() -> None:
    lxd = ["lxd"]
    hosts = [
        host(1, "zone-a", tags=lxd, memory_used_mib=60000),
        host(2, "zone-a", tags=lxd, memory_used_mib=60000),
        host(3, "zone-a", tags=lxd, memory_used_mib=60000),
        host(4, "zone-b", tags=lxd, maintenance=True),
        host(5, "zone-b", tags=lxd, memory_used_mib=60000),
        host(6, "zone-c", tags=lxd, cores_used=16),
        host(7, "zone-c"),
    ]
    result = place_vm(request(memory_mib=8192, tags=lxd), hosts)
    assert isinstance(result, NoFit)
    assert not result
    assert result.message == (
        "no VM host fits: 1 host lacks tag lxd; 1 host in zone-b is in maintenance; "
        "1 host in zone-c lacks 2 free cores; "
        "3 hosts in zone-a lack 8192 MiB free memory; 1 host in zone-b lacks 8192 MiB free memory"
    )
    assert result.by_filter() == {"tags": 1, "maintenance": 1, "cores": 1, "memory": 4}
    assert len(result.reasons) == 7
    assert all(r.detail.startswith(f"{r.host_name}: ") for r in result.reasons)


def test_no_fit_without_candidates_says_so() -> None:
    result = place_vm(request(), [])
    assert isinstance(result, NoFit)
    assert result.message == "no VM hosts to choose from"
    assert result.reasons == ()


def test_summarize_groups_eligibility_reasons_across_zones() -> None:
    hosts = [host(1, "zone-b"), host(2, "zone-c"), host(3, "zone-b", storage_pools=())]
    result = filter_hosts(request(zone="zone-a"), hosts)
    assert summarize(result.rejected) == "3 hosts are not in zone 'zone-a'"
    result = filter_hosts(request(), hosts)
    assert summarize(result.rejected) == "1 host in zone-b has no storage pool"
    assert summarize(()) == ""
    result = filter_hosts(request(pinned_host="h9"), [host(1), host(2, "zone-b")])
    assert summarize(result.rejected) == "2 hosts are not the pinned host 'h9'"


def test_zone_spread_prefers_the_zone_with_fewest_machines_of_the_role_then_in_all() -> None:
    hosts = [host(1, "zone-a"), host(2, "zone-b"), host(3, "zone-c")]
    existing = [
        ExistingPlacement(zone="zone-a", role=CP, host_id=1),
        ExistingPlacement(zone="zone-b", role=Role.WORKER),  # bare metal: no host
        ExistingPlacement(zone="zone-b", role=Role.WORKER),
    ]
    # A control plane goes where there is no control plane yet, and of those where the cluster has fewest.
    assert placed(place_vm(request(role=CP), hosts, existing)).zone == "zone-c"
    # A worker goes where there are fewest workers: zone-a and zone-c have none; zone-a has one machine.
    assert placed(place_vm(request(), hosts, existing)).zone == "zone-c"
    existing.append(ExistingPlacement(zone="zone-c", role=CP, host_id=3))
    existing.append(ExistingPlacement(zone="zone-c", role=Role.WORKER, host_id=3))
    assert placed(place_vm(request(), hosts, existing)).zone == "zone-a"


def test_host_spread_then_best_fit() -> None:
    hosts = [host(1), host(2), host(3, memory_used_mib=32768)]
    existing = [ExistingPlacement(zone="zone-a", host_id=1)]
    # h2 and h3 have none of the cluster's machines; h3 is the tighter fit.
    assert placed(place_vm(request(), hosts, existing)).host_id == 3
    existing.append(ExistingPlacement(zone="zone-a", host_id=3))
    assert placed(place_vm(request(), hosts, existing)).host_id == 2


def test_control_plane_anti_affinity_beats_zone_spread() -> None:
    # zone-a has fewer machines, but its only host already runs a control plane of this cluster.
    hosts = [host(1, "zone-a"), host(2, "zone-b"), host(3, "zone-b")]
    existing = [
        ExistingPlacement(zone="zone-a", role=CP, host_id=1),
        ExistingPlacement(zone="zone-b", role=CP, host_id=2),
        ExistingPlacement(zone="zone-b", role=Role.WORKER, host_id=2),
    ]
    p = placed(place_vm(request(role=CP), hosts, existing))
    assert p.host_id == 3
    # Workers have no anti-affinity: zone spread sends one to zone-a even though a control plane is there.
    assert placed(place_vm(request(), hosts, existing)).host_id == 1


def test_control_plane_shares_a_host_only_when_nothing_else_fits_and_says_so() -> None:
    hosts = [host(1), host(2, memory_used_mib=65536)]
    existing = [ExistingPlacement(zone="zone-a", role=CP, host_id=1)]
    p = placed(place_vm(request(role=CP), hosts, existing))
    assert p.host_id == 1
    assert p.reason.endswith(
        "; it shares the host with 1 control-plane machine(s) of the cluster because no other host fits"
    )


def test_reservations_of_the_cluster_count_for_spread_but_not_twice() -> None:
    hosts = [host(1, "zone-a"), host(2, "zone-b")]
    in_flight = Reservation(
        key="uid-x", host_id=1, cores=2, memory_mib=4096, cluster="c1", zone="zone-a", role=CP
    )
    assert placed(place_vm(request(role=CP), hosts, (), [in_flight])).host_id == 2
    # Once the machine is listed as existing it is not counted again from its reservation.
    req = request(machine="m2", key="uid-m2")
    listed = ExistingPlacement(zone="zone-a", role=CP, host_id=1, key="uid-x")
    counts = spread_counts(req, [listed], [in_flight])
    assert counts.zone_all == {"zone-a": 1}
    # Other clusters' reservations and pool-less/zone-less ones take capacity but do not steer spread.
    foreign = Reservation(key="uid-y", host_id=2, cores=2, memory_mib=4096, cluster="other", zone="zone-b")
    zoneless = Reservation(key="uid-z", host_id=2, cores=2, memory_mib=4096, cluster="c1")
    counts = spread_counts(req, [], [foreign, zoneless])
    assert counts.zone_all == {}
    # The request's own earlier attempt counts neither as existing nor as reserved.
    own_existing = ExistingPlacement(zone="zone-a", role=CP, host_id=1, key="uid-m2")
    own_reserved = Reservation(key="uid-m2", host_id=1, cores=2, memory_mib=4096, cluster="c1", zone="zone-a")
    counts = spread_counts(req, [own_existing], [own_reserved])
    assert counts.zone_all == {}
    assert counts.host_all == {}


def test_seed_breaks_ties_reproducibly_and_independently_of_input_order() -> None:
    hosts = [host(i, f"zone-{i % 3}") for i in range(12)]
    picks = {placed(place_vm(request(), hosts, seed=seed)).host_id for seed in range(40)}
    assert len(picks) > 3, "different seeds explore different equally good hosts"
    for seed in range(10):
        first = place_vm(request(), hosts, seed=seed)
        shuffled = hosts[:]
        random.Random(seed).shuffle(shuffled)
        assert place_vm(request(), shuffled, seed=seed) == first
    by_machine = {placed(place_vm(request(machine=f"m{i}"), hosts)).host_id for i in range(40)}
    assert len(by_machine) > 3, "machines placed from the same snapshot do not all pick the same host"


def test_rank_hosts_orders_every_fitting_host_and_best_host_agrees() -> None:
    hosts = [
        host(1, "zone-a"),
        host(2, "zone-b", memory_used_mib=16384),
        host(3, "zone-b"),
        host(4, "zone-c"),
    ]
    req = request(role=CP)
    existing = [ExistingPlacement(zone="zone-a", role=CP, host_id=1), ExistingPlacement(zone="zone-c")]
    ctx = FilterContext(req)
    counts = spread_counts(req, existing)
    ranked = rank_hosts(ctx, hosts, counts, seed=3)
    assert [r.host.id for r in ranked] == [2, 3, 4, 1]
    assert [r.key[:4] for r in ranked] == [(0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 1, 0), (1, 1, 1, 1)]
    assert ranked[0].leftover < ranked[1].leftover
    assert _ranking.best_host(ctx, hosts, counts, seed=3) == ranked[0]


def test_tiebreak_is_stable() -> None:
    assert _ranking.tiebreak(0, "c", "m", 1) == _ranking.tiebreak(0, "c", "m", 1)
    assert _ranking.tiebreak(0, "c", "m", 1) != _ranking.tiebreak(1, "c", "m", 1)
    assert _ranking.tiebreak(0, "c", "m", 1) == 11695877046422567273
