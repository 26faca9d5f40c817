"""A MaasIPPool checked against MAAS: its subnet, its dynamic and reserved ranges (pure: the caller reads
MAAS)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.ip_pools import PoolAddresses
from capmaas.api.v1beta1 import MaasIPPoolSpec
from capmaas.reconcilers.ippool.objects import SHOWN


@dataclass(frozen=True)
class MaasFacts:
    """What a check of the pool against MAAS found (through one identity, at one generation)."""

    identity: str
    generation: int
    at: float
    problem: tuple[str, str] | None  # (reason, message): Ready=False
    gateway: str | None
    prefix: int
    warning: str  # addresses outside MAAS reserved ranges ("" none)


def _span(first: int, last: int) -> str:
    a, b = ipaddress.ip_address(first), ipaddress.ip_address(last)
    return str(a) if first == last else f"{a}-{b}"


def in_ranges(pool: PoolAddresses, start: str, end: str) -> list[str]:
    """The pool's addresses inside MAAS range ``start``-``end``, as spans (empty: none)."""
    lo, hi = int(ipaddress.ip_address(start)), int(ipaddress.ip_address(end))
    out = []
    for r in pool.ranges:
        first, last = max(r.first, lo), min(r.last, hi)
        if first > last:
            continue
        run: int | None = None
        for value in range(first, last + 2):
            usable = value <= last and pool.holds(str(ipaddress.ip_address(value)))
            if usable and run is None:
                run = value
            elif not usable and run is not None:
                out.append(_span(run, value - 1))
                run = None
    return out


def outside_reserved(pool: PoolAddresses, reserved: Sequence[tuple[str, str]]) -> int:
    """How many pool addresses lie in no MAAS reserved range."""
    spans = [(int(ipaddress.ip_address(s)), int(ipaddress.ip_address(e))) for s, e in reserved]
    return sum(1 for a in pool if not any(lo <= int(ipaddress.ip_address(a)) <= hi for lo, hi in spans))


def _inside(address: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(address) in network
    except ValueError:
        return False


def check_against_maas(
    spec: MaasIPPoolSpec,
    pool: PoolAddresses,
    subnets: Sequence[maas.Subnet],
    ranges: Sequence[maas.IpRange],
) -> tuple[tuple[str, str] | None, maas.Subnet | None, str]:
    """(problem, the MAAS subnet, warning) of ``pool`` against MAAS's subnets and IP ranges."""
    want = ipaddress.ip_network(spec.subnet, strict=False)
    subnet = None
    for s in subnets:
        try:
            if ipaddress.ip_network(s.cidr, strict=False) == want:
                subnet = s
                break
        except ValueError:
            continue
    if subnet is None:
        return (
            (C.SUBNET_NOT_FOUND_REASON, f"MAAS has no subnet {want} (visible to these credentials)"),
            None,
            "",
        )
    mine = [r for r in ranges if _inside(r.start_ip, want)]
    clashes = []
    for r in mine:
        if r.type == "dynamic":
            for span in in_ranges(pool, r.start_ip, r.end_ip):
                clashes.append(f"{span} (dynamic range {r.start_ip} - {r.end_ip})")
    if clashes:
        shown = ", ".join(clashes[:SHOWN]) + (
            f" and {len(clashes) - SHOWN} more" if len(clashes) > SHOWN else ""
        )
        return (
            (
                C.ADDRESS_IN_DYNAMIC_RANGE_REASON,
                f"addresses inside a MAAS dynamic range, which MAAS hands out by DHCP and where it refuses "
                f"to pin an address to a machine: {shown}; exclude them (spec.excludedAddresses) or shrink "
                "the range in MAAS",
            ),
            subnet,
            "",
        )
    reserved = [(r.start_ip, r.end_ip) for r in mine if r.type == "reserved"]
    loose = outside_reserved(pool, reserved)
    warning = ""
    if loose:
        warning = (
            f"{loose} of {pool.size} addresses are in no MAAS reserved range of {want}: MAAS may give them "
            "to other machines' automatic (AUTO) addresses; add a MAAS reserved range that covers the pool"
        )
    return None, subnet, warning
