"""The addresses of a ``MaasIPPool`` and which one a new ``IPAddressClaim`` gets (pure functions, no I/O).

A pool names addresses inside one MAAS subnet the way Cluster API's in-cluster IPAM provider does: single
addresses (``10.0.0.10``), ranges (``10.0.0.10-10.0.0.20``) and CIDRs (``10.0.0.64/28``), minus
``excludedAddresses`` of the same shapes. The subnet's network and broadcast addresses (IPv4) and its gateway
are never handed out. The number of addresses a pool may hold is bounded (:data:`MAX_ADDRESSES`): a tenant
controls the spec, so an ``fd00::/64`` must not become a list of 2^64 entries - the size is computed from
the ranges, and only the first free address is looked for, in order.

Which address a claim gets: the lowest one that no ``IPAddress`` of the pool holds (the caller passes those,
from the watch cache, plus what it handed out in this process and the cache has not shown yet).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["MAX_ADDRESSES", "InvalidPoolAddresses", "PoolAddresses", "parse_pool"]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The most addresses one pool may name (after exclusions are *not* subtracted: the spec's own size).
MAX_ADDRESSES = 65536


class InvalidPoolAddresses(ValueError):
    """An entry is not an address, range or CIDR, lies outside the subnet, or the pool is too large; the
    message names the entries."""


@dataclass(frozen=True)
class _Range:
    first: int
    last: int  # inclusive

    @property
    def count(self) -> int:
        return self.last - self.first + 1  # may be 2^64 and more (no len(): it must fit an index)


@dataclass(frozen=True)
class PoolAddresses:
    """The addresses a pool may hand out, as sorted, disjoint integer ranges of one IP version."""

    version: int
    prefix: int
    ranges: tuple[_Range, ...]
    excluded: tuple[_Range, ...]

    @property
    def size(self) -> int:
        """How many addresses the pool names before exclusions (the gateway etc. are already out)."""
        return sum(r.count for r in self.ranges)

    def __iter__(self) -> Iterator[str]:
        for r in self.ranges:
            for value in range(r.first, r.last + 1):
                if not any(x.first <= value <= x.last for x in self.excluded):
                    yield str(ipaddress.ip_address(value))

    def free(self, used: Iterable[str]) -> str | None:
        """The lowest address of the pool not in ``used`` (None: the pool is exhausted)."""
        taken = set(used)
        return next((a for a in self if a not in taken), None)

    def holds(self, address: str) -> bool:
        """Whether ``address`` is one the pool may hand out (an IPAddress outside it is someone else's)."""
        try:
            value = int(ipaddress.ip_address(address))
        except ValueError:
            return False
        inside = any(r.first <= value <= r.last for r in self.ranges)
        return inside and not any(x.first <= value <= x.last for x in self.excluded)

    def count_free(self, used: Iterable[str]) -> int:
        """How many addresses are left (bounded work: a pool names at most :data:`MAX_ADDRESSES`)."""
        taken = set(used)
        return sum(1 for a in self if a not in taken)


def _entry(text: str, subnet: Network) -> _Range:
    """One ``addresses`` entry as an inclusive integer range inside ``subnet``."""
    entry = text.strip()
    if "/" in entry:
        net = ipaddress.ip_network(entry, strict=False)
        if net.version != subnet.version or not net.subnet_of(subnet):  # type: ignore[arg-type]
            raise ValueError("outside the subnet")
        return _Range(int(net.network_address), int(net.broadcast_address))
    if "-" in entry:
        low, high = (ipaddress.ip_address(p.strip()) for p in entry.split("-", 1))
        if int(low) > int(high):
            raise ValueError("the range ends before it starts")
        lo, hi = low, high
    else:
        lo = hi = ipaddress.ip_address(entry)
    if lo.version != subnet.version or lo not in subnet or hi not in subnet:
        raise ValueError("outside the subnet")
    return _Range(int(lo), int(hi))


def _ranges(entries: Iterable[str], subnet: Network, what: str) -> list[_Range]:
    out: list[_Range] = []
    bad: list[str] = []
    for text in entries:
        try:
            out.append(_entry(text, subnet))
        except ValueError as exc:
            bad.append(f"{text!r} ({exc})" if "subnet" in str(exc) or "range" in str(exc) else repr(text))
    if bad:
        raise InvalidPoolAddresses(f"{what}: not an address, range or CIDR of {subnet}: {', '.join(bad)}")
    return out


def _merge(ranges: list[_Range]) -> tuple[_Range, ...]:
    merged: list[_Range] = []
    for r in sorted(ranges, key=lambda r: r.first):
        if merged and r.first <= merged[-1].last + 1:
            merged[-1] = _Range(merged[-1].first, max(merged[-1].last, r.last))
        else:
            merged.append(r)
    return tuple(merged)


def _cut(ranges: tuple[_Range, ...], value: int) -> tuple[_Range, ...]:
    """``ranges`` without ``value``."""
    out: list[_Range] = []
    for r in ranges:
        if not r.first <= value <= r.last:
            out.append(r)
            continue
        if r.first < value:
            out.append(_Range(r.first, value - 1))
        if value < r.last:
            out.append(_Range(value + 1, r.last))
    return tuple(out)


def parse_pool(
    subnet: str,
    addresses: Iterable[str],
    excluded: Iterable[str] = (),
    *,
    gateway: str | None = None,
    prefix: int | None = None,
) -> PoolAddresses:
    """The addresses of a pool in MAAS subnet ``subnet`` (its CIDR). Raises :class:`InvalidPoolAddresses`."""
    try:
        net = ipaddress.ip_network(subnet, strict=False)
    except ValueError as exc:
        raise InvalidPoolAddresses(f"subnet {subnet!r} is not a CIDR") from exc
    ranges = _merge(_ranges(addresses, net, "addresses"))
    if net.version == 4 and net.prefixlen < 31:
        ranges = _cut(_cut(ranges, int(net.network_address)), int(net.broadcast_address))
    if gateway:
        ranges = _cut(ranges, int(ipaddress.ip_address(gateway)))
    size = sum(r.count for r in ranges)
    if size > MAX_ADDRESSES:
        raise InvalidPoolAddresses(f"addresses name {size} addresses; a pool holds at most {MAX_ADDRESSES}")
    if not ranges:
        raise InvalidPoolAddresses(f"addresses name no address of {net} a machine may have")
    if prefix is not None and not 0 <= prefix <= net.max_prefixlen:
        raise InvalidPoolAddresses(f"prefix {prefix} is not a prefix length of an IPv{net.version} network")
    return PoolAddresses(
        net.version,
        net.prefixlen if prefix is None else prefix,
        ranges,
        _merge(_ranges(excluded, net, "excludedAddresses")),
    )
