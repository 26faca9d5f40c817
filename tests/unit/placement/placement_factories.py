"""Small builders for placement tests: a host or request with sensible defaults, overridden per test."""

from __future__ import annotations

from typing import Any

from capmaas.placement import GB, HostCandidate, StoragePool, VMRequest


def host(id: int, zone: str = "zone-a", **overrides: Any) -> HostCandidate:
    values: dict[str, Any] = {
        "id": id,
        "name": f"h{id}",
        "zone": zone,
        "pool": "default",
        "cores_total": 16,
        "memory_total_mib": 65536,
        "storage_pools": (StoragePool(name="local", total_bytes=1000 * GB, default=True),),
    }
    values.update(overrides)
    return HostCandidate(**values)


def request(**overrides: Any) -> VMRequest:
    values: dict[str, Any] = {
        "cluster": "c1",
        "machine": "m1",
        "key": "uid-m1",
        "cores": 2,
        "memory_mib": 4096,
        "disk_gb": 20,
    }
    values.update(overrides)
    return VMRequest(**values)
