"""Inputs and outputs of placement: small frozen value types, independent of the MAAS client models.

Placement sits below the reconcilers and must not import ``capmaas.maas``; the operator translates the
client's ``VmHost``/``Machine`` models into these types. Keeping them separate also keeps placement testable
with plain literals and lets property tests build thousands of hosts cheaply (frozen ``slots`` dataclasses,
not pydantic).

Units follow MAAS: cores are counts, memory is MiB, storage-pool sizes are bytes (as in ``storage_pools[]`` of
the VM-host JSON) and VM disks are GB of 10**9 bytes (as in the compose ``storage`` parameter
``root:20(pool)``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

GB = 1000**3
"""Bytes per GB in a compose ``storage`` size: MAAS multiplies the requested size by 1000**3."""


class Role(enum.StrEnum):
    """A machine's role in its cluster; control-plane VMs get host anti-affinity."""

    CONTROL_PLANE = "control-plane"
    WORKER = "worker"


def _tags(value: Iterable[str]) -> frozenset[str]:
    return value if isinstance(value, frozenset) else frozenset(value)


def _non_negative(owner: object, **values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{type(owner).__name__}.{name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StoragePool:
    """One storage pool of a VM host, as MAAS reports it (``total``/``used`` in bytes).

    ``default`` marks the host's default pool, which MAAS uses for a disk that names no pool.
    """

    name: str
    total_bytes: int
    used_bytes: int = 0
    default: bool = False

    def __post_init__(self) -> None:
        _non_negative(self, total_bytes=self.total_bytes, used_bytes=self.used_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCandidate:
    """A MAAS VM host (pod) as placement sees it.

    ``cores_used``/``memory_used_mib`` are MAAS's ``used`` figures, which count only VMs MAAS already knows
    about; VMs being composed right now are added from reservations. ``host_ready`` is true when the host's
    own machine is Deployed and not reported powered off (the operator decides what to say for a host with
    no MAAS machine behind it). ``maintenance`` is true when the host is tagged for maintenance or
    no-schedule. Over-commit ratios are MAAS's: a VM fits when ``used + reserved + requested <= total *
    ratio`` (MAAS's own ``check_over_commit_ratios``).
    """

    id: int
    name: str
    zone: str
    pool: str | None = None
    tags: frozenset[str] = field(default_factory=frozenset)
    host_ready: bool = True
    maintenance: bool = False
    cores_total: int
    cores_used: int = 0
    memory_total_mib: int
    memory_used_mib: int = 0
    storage_pools: tuple[StoragePool, ...] = ()
    cpu_over_commit_ratio: float = 1.0
    memory_over_commit_ratio: float = 1.0
    _default_pool: StoragePool | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", _tags(self.tags))
        object.__setattr__(self, "storage_pools", tuple(self.storage_pools))
        object.__setattr__(self, "_default_pool", self._find_default_pool())
        _non_negative(
            self,
            cores_total=self.cores_total,
            cores_used=self.cores_used,
            memory_total_mib=self.memory_total_mib,
            memory_used_mib=self.memory_used_mib,
            cpu_over_commit_ratio=self.cpu_over_commit_ratio,
            memory_over_commit_ratio=self.memory_over_commit_ratio,
        )

    @property
    def cores_capacity(self) -> float:
        """Cores MAAS lets VMs use in total on this host, after over-commit."""
        return self.cores_total * self.cpu_over_commit_ratio

    @property
    def memory_capacity_mib(self) -> float:
        """Memory (MiB) MAAS lets VMs use in total on this host, after over-commit."""
        return self.memory_total_mib * self.memory_over_commit_ratio

    def storage_pool(self, name: str | None) -> StoragePool | None:
        """The pool a disk asking for ``name`` lands in; ``None`` means the host's default pool.

        MAAS puts an untagged disk in the default pool. A host that flags none gets its largest free pool
        (then by name), so the answer is stable and the operator can name the pool explicitly in the compose.
        """
        if name is not None:
            return next((p for p in self.storage_pools if p.name == name), None)
        return self._default_pool

    def _find_default_pool(self) -> StoragePool | None:
        default = next((p for p in self.storage_pools if p.default), None)
        if default is not None or not self.storage_pools:
            return default
        return min(self.storage_pools, key=lambda p: (p.used_bytes - p.total_bytes, p.name))


@dataclass(frozen=True, slots=True, kw_only=True)
class VMRequest:
    """One VM to place: the MaasMachine's size and constraints.

    ``key`` is the MaasMachine UID; a reservation or existing placement with the same key is this machine's
    own earlier attempt and is ignored, so a retry does not compete with itself. ``zone`` is the failure
    domain, ``resource_pool`` the MAAS pool, ``tags`` must all be on the host, ``pinned_host``
    (``lxdConfig.vmHost``) matches a host's name or id.
    """

    cluster: str
    machine: str
    role: Role = Role.WORKER
    cores: int
    memory_mib: int
    disk_gb: int
    storage_pool: str | None = None
    zone: str | None = None
    resource_pool: str | None = None
    tags: frozenset[str] = field(default_factory=frozenset)
    pinned_host: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", _tags(self.tags))
        object.__setattr__(self, "role", Role(self.role))
        for name in ("cores", "memory_mib", "disk_gb"):
            if getattr(self, name) < 1:
                raise ValueError(f"VMRequest.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def disk_bytes(self) -> int:
        """The disk size in bytes, as MAAS and LXD account it in the storage pool."""
        return self.disk_gb * GB


@dataclass(frozen=True, slots=True, kw_only=True)
class ExistingPlacement:
    """A machine of the same cluster that already has a place: its zone, role and (for a VM) its host.

    Bare-metal machines have ``host_id=None`` and still count for zone spread.
    """

    zone: str
    role: Role = Role.WORKER
    host_id: int | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    """Resources promised to a VM whose compose MAAS has not reported yet.

    They are added to the host's ``used`` figures so that concurrent placements cannot overcommit it, and the
    cluster/zone/role make the in-flight VM count for spread before it shows up among existing placements.
    """

    key: str
    host_id: int
    cores: int
    memory_mib: int
    disk_gb: int = 0
    storage_pool: str | None = None
    cluster: str | None = None
    zone: str | None = None
    role: Role = Role.WORKER

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", Role(self.role))
        _non_negative(self, cores=self.cores, memory_mib=self.memory_mib, disk_gb=self.disk_gb)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection:
    """Why one host was dropped, by which filter.

    ``summary`` is the part shared by hosts rejected for the same reason, used to aggregate ("lack{s} 8192 MiB
    free memory"; ``{s}``, ``{is}`` and ``{has}`` agree with the host count); ``detail`` is this host's
    figures.
    """

    filter: str
    host_id: int
    host_name: str
    zone: str
    summary: str
    detail: str
    per_zone: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """The chosen host and what to compose there.

    ``storage_pool`` is always the concrete pool name, so the compose can say ``root:<disk_gb>(<pool>)`` and
    MAAS cannot pick a different pool than the one placement accounted for. ``reason`` explains the choice and
    ``skipped`` lists the hosts that did not fit (``skipped_message`` aggregates them for a condition).
    """

    host_id: int
    host_name: str
    zone: str
    resource_pool: str | None
    storage_pool: str
    cores: int
    memory_mib: int
    disk_gb: int
    cluster: str
    machine: str
    role: Role
    reason: str
    skipped: tuple[Rejection, ...] = ()
    skipped_message: str = ""

    def reservation(self, key: str) -> Reservation:
        """The reservation that holds this placement's resources until MAAS reports the compose."""
        return Reservation(
            key=key,
            host_id=self.host_id,
            cores=self.cores,
            memory_mib=self.memory_mib,
            disk_gb=self.disk_gb,
            storage_pool=self.storage_pool,
            cluster=self.cluster,
            zone=self.zone,
            role=self.role,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NoFit:
    """No host fits. ``reasons`` has one entry per rejected host; ``message`` aggregates them for people."""

    reasons: tuple[Rejection, ...]
    message: str

    def __bool__(self) -> bool:
        """False, so ``if result:`` reads as "placed"."""
        return False

    def by_filter(self) -> dict[str, int]:
        """How many hosts each filter rejected, in pipeline order (for metrics and tests)."""
        counts: dict[str, int] = {}
        for rejection in self.reasons:
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return counts
