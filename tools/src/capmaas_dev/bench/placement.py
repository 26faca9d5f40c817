"""Time per placement and the balance it achieves: ``python -m capmaas_dev.bench.placement``.

It builds a seeded inventory of VM hosts across zones (a tenth of them full, in maintenance or not powered,
so the filters have work to do), then places a cluster's machines one after another through a
``ReservationBook``, the way the operator does, and prints microseconds per placement and how the machines
spread. It prints figures only; tests run it small and assert nothing about time.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Sequence

from capmaas.placement._models import (
    GB,
    ExistingPlacement,
    HostCandidate,
    Placement,
    Role,
    StoragePool,
    VMRequest,
)
from capmaas.placement._reservations import ReservationBook


def inventory(hosts: int, *, zones: int = 3, seed: int = 0) -> list[HostCandidate]:
    """A reproducible set of VM hosts, some unusable, with varied sizes and load."""
    rng = random.Random(seed)
    out = []
    for i in range(hosts):
        cores = rng.choice((16, 32, 64))
        memory = cores * 4096
        broken = rng.random() < 0.1
        out.append(
            HostCandidate(
                id=i + 1,
                name=f"vmhost-{i + 1:04d}",
                zone=f"zone-{i % zones + 1}",
                pool="default",
                tags=frozenset({"lxd"} | ({"ssd"} if rng.random() < 0.5 else set())),
                host_ready=not (broken and i % 2),
                maintenance=broken and not i % 2,
                cores_total=cores,
                cores_used=rng.randrange(cores // 2),
                memory_total_mib=memory,
                memory_used_mib=rng.randrange(memory // 2),
                storage_pools=(
                    StoragePool(
                        name="default",
                        total_bytes=2000 * GB,
                        used_bytes=rng.randrange(1000) * GB,
                        default=True,
                    ),
                ),
                cpu_over_commit_ratio=rng.choice((1.0, 2.0)),
            )
        )
    return out


def run(hosts: int, placements: int, *, seed: int = 0) -> tuple[float, Counter[str], int]:
    """Place ``placements`` VMs of one cluster; returns (seconds per placement, VMs per zone, hosts used)."""
    candidates = inventory(hosts, seed=seed)
    book = ReservationBook()
    existing: list[ExistingPlacement] = []
    started = time.perf_counter()
    for n in range(placements):
        role = Role.CONTROL_PLANE if n < 3 else Role.WORKER
        request = VMRequest(
            cluster="bench",
            machine=f"bench-{n}",
            key=f"uid-{n}",
            role=role,
            cores=2,
            memory_mib=4096,
            disk_gb=20,
            tags=frozenset({"lxd"}),
        )
        result = book.place(request, candidates, existing, seed=seed)
        if isinstance(result, Placement):
            existing.append(
                ExistingPlacement(zone=result.zone, role=role, host_id=result.host_id, key=request.key)
            )
    elapsed = (time.perf_counter() - started) / placements
    return elapsed, Counter(e.zone for e in existing), len({e.host_id for e in existing})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hosts", type=int, nargs="+", default=[100, 1000], help="inventory sizes to time")
    parser.add_argument("--placements", type=int, default=60, help="VMs placed per inventory")
    parser.add_argument("--seed", type=int, default=0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capmaas_dev.bench.placement", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    for hosts in args.hosts:
        per, zones, used = run(hosts, args.placements, seed=args.seed)
        spread = ", ".join(f"{z}={c}" for z, c in sorted(zones.items()))
        print(
            f"{hosts:>6} hosts: {per * 1e6:9.1f} us per placement; "
            f"{sum(zones.values())} VMs on {used} hosts; per zone: {spread}"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
