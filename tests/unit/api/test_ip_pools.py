"""MaasIPPool addresses (issue 23 item 1): parsing, bounds and which address a claim gets."""

from __future__ import annotations

import pytest

from capmaas.api.ip_pools import MAX_ADDRESSES, InvalidPoolAddresses, parse_pool


def test_addresses_ranges_and_cidrs_minus_exclusions_in_order() -> None:
    pool = parse_pool(
        "10.0.0.0/24",
        ["10.0.0.20-10.0.0.22", "10.0.0.10", "10.0.0.64/30"],
        ["10.0.0.21", "10.0.0.65"],
        gateway="10.0.0.1",
    )
    assert list(pool) == ["10.0.0.10", "10.0.0.20", "10.0.0.22", "10.0.0.64", "10.0.0.66", "10.0.0.67"]
    assert pool.prefix == 24
    assert pool.free([]) == "10.0.0.10"
    assert pool.free(["10.0.0.10", "10.0.0.20"]) == "10.0.0.22"
    assert pool.free(list(pool)) is None  # exhausted
    assert pool.count_free(["10.0.0.10", "192.0.2.1"]) == 5
    assert pool.holds("10.0.0.66")
    assert not pool.holds("10.0.0.21")  # excluded
    assert not pool.holds("10.0.0.11")


def test_the_network_broadcast_and_gateway_are_never_handed_out() -> None:
    pool = parse_pool("10.0.0.0/29", ["10.0.0.0/29"], gateway="10.0.0.1")
    assert list(pool) == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]


def test_ipv6_is_bounded_by_size_not_enumerated() -> None:
    with pytest.raises(InvalidPoolAddresses, match=f"at most {MAX_ADDRESSES}"):
        parse_pool("fd00::/64", ["fd00::/64"])  # 2^64 addresses: refused without listing them
    pool = parse_pool("fd00::/64", ["fd00::10-fd00::12"])
    assert list(pool) == ["fd00::10", "fd00::11", "fd00::12"]
    assert pool.prefix == 64


def test_entries_outside_the_subnet_or_not_addresses_are_named() -> None:
    with pytest.raises(InvalidPoolAddresses, match=r"'10\.1\.0\.5' \(outside the subnet\).*'banana'"):
        parse_pool("10.0.0.0/24", ["10.0.0.5", "10.1.0.5", "banana"])
    with pytest.raises(InvalidPoolAddresses, match="ends before it starts"):
        parse_pool("10.0.0.0/24", ["10.0.0.9-10.0.0.5"])
    with pytest.raises(InvalidPoolAddresses, match="no address"):
        parse_pool("10.0.0.0/24", ["10.0.0.1"], gateway="10.0.0.1")
    with pytest.raises(InvalidPoolAddresses, match="prefix 33"):
        parse_pool("10.0.0.0/24", ["10.0.0.5"], prefix=33)
