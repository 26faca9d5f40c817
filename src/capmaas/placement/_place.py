"""``place_vm``: candidates -> filters -> ranking -> pick, or the reasons nothing fits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from capmaas.placement import _filters, _ranking, _reasons
from capmaas.placement._models import (
    ExistingPlacement,
    HostCandidate,
    NoFit,
    Placement,
    Reservation,
    Role,
    VMRequest,
)


def filter_hosts(
    request: VMRequest,
    candidates: Sequence[HostCandidate],
    reservations: Iterable[Reservation] = (),
) -> _filters.FilterResult:
    """Run the filter pipeline alone: which hosts could take ``request`` and why the others cannot."""
    ctx = _filters.FilterContext(request, _filters.reserved_by_host(reservations, exclude_key=request.key))
    return _filters.run_filters(ctx, candidates)


def _explain(request: VMRequest, best: _ranking.RankedHost) -> str:
    host = best.host
    role = "control-plane" if request.role is Role.CONTROL_PLANE else "worker"
    text = (
        f"host {host.name} in {host.zone}: the cluster has {best.zone_role} {role} and {best.zone_all} total "
        f"machines in {host.zone} and {best.host_all} on this host"
    )
    if best.control_plane_on_host:
        text += (
            f"; it shares the host with {best.control_plane_on_host} control-plane machine(s) of the cluster "
            "because no other host fits"
        )
    return text


def place_vm(
    request: VMRequest,
    candidates: Sequence[HostCandidate],
    existing: Iterable[ExistingPlacement] = (),
    reservations: Iterable[Reservation] = (),
    *,
    seed: int = 0,
) -> Placement | NoFit:
    """Choose the VM host for ``request``.

    ``existing`` are the cluster's machines that already have a place; ``reservations`` are all in-flight VMs
    on any host (from a ``ReservationBook``), whose resources MAAS does not count yet. The result depends only
    on the arguments and ``seed``, not on the order of the sequences.
    """
    held = tuple(reservations)
    ctx = _filters.FilterContext(request, _filters.reserved_by_host(held, exclude_key=request.key))
    result = _filters.run_filters(ctx, candidates)
    if not result.kept:
        return NoFit(
            reasons=result.rejected, message=_reasons.no_fit_message(result.rejected, len(candidates))
        )
    counts = _ranking.spread_counts(request, existing, held)
    best = _ranking.best_host(ctx, result.kept, counts, seed=seed)
    host = best.host
    pool = host.storage_pool(request.storage_pool)
    assert pool is not None, "the storage-pool filter kept only hosts with the pool"
    return Placement(
        host_id=host.id,
        host_name=host.name,
        zone=host.zone,
        resource_pool=host.pool,
        storage_pool=pool.name,
        cores=request.cores,
        memory_mib=request.memory_mib,
        disk_gb=request.disk_gb,
        cluster=request.cluster,
        machine=request.machine,
        role=request.role,
        reason=_explain(request, best),
        skipped=result.rejected,
        skipped_message=_reasons.summarize(result.rejected),
    )
