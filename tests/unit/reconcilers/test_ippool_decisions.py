"""The IPAM provider's decisions as pure functions: which claims are ours, paused, which pool is usable, what
the IPAddress looks like, and what MAAS's subnets and ranges say about a pool."""

from __future__ import annotations

from typing import Any

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.ip_pools import parse_pool
from capmaas.api.v1beta1 import MaasIPPoolSpec
from capmaas.reconcilers import ippool

INFRA = "infrastructure.cluster.x-k8s.io"
REF = {"apiGroup": INFRA, "kind": "MaasIPPool", "name": "p1"}


def claim(name: str = "c-0", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {}},
        "spec": {"poolRef": REF, **spec},
    }


def pool(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{INFRA}/v1beta1",
        "kind": "MaasIPPool",
        "metadata": {"name": "p1", "namespace": "ns", "uid": "uid-p1", "generation": 2},
        "spec": {"subnet": "10.0.0.0/24", "addresses": ["10.0.0.10-10.0.0.12"]},
        "status": status,
    }


def ready_status(**extra: Any) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "x"}
    return {"observedGeneration": 2, "prefix": 24, "gateway": "10.0.0.1", "conditions": [cond], **extra}


def test_only_claims_of_a_maasippool_are_ours() -> None:
    assert ippool.claim_pool(claim()) == "p1"
    other_kind = {**REF, "kind": "InClusterIPPool"}
    other_group = {**REF, "apiGroup": "ipam.cluster.x-k8s.io"}
    for ref in (other_kind, other_group, {**REF, "name": ""}, None):
        assert ippool.names_pool(ref) is None, ref


def test_the_cluster_is_spec_cluster_name_else_the_deprecated_label() -> None:
    c = claim(clusterName="a")
    c["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = "b"
    assert ippool.claim_cluster(c) == "a"
    del c["spec"]["clusterName"]
    assert ippool.claim_cluster(c) == "b"
    c["metadata"]["labels"] = {}
    assert ippool.claim_cluster(c) is None


def test_paused_by_annotation_or_cluster_spec() -> None:
    assert not ippool.paused(None)
    assert not ippool.paused(claim())
    annotated = claim()
    annotated["metadata"]["annotations"] = {"cluster.x-k8s.io/paused": ""}
    assert ippool.paused(annotated)
    assert ippool.paused({"metadata": {}, "spec": {"paused": True}})
    assert not ippool.paused({"metadata": {}, "spec": {"paused": False}})


def test_a_pool_serves_claims_only_when_ready_at_its_generation() -> None:
    assert ippool.pool_ready(None) == (False, "does not exist")
    assert ippool.pool_ready(pool(**ready_status())) == (True, "")
    ok, why = ippool.pool_ready(pool(**ready_status(observedGeneration=1)))
    assert not ok
    assert "not checked yet" in why
    refused = ready_status()
    refused["conditions"][0].update(status="False", message="MAAS has no subnet")
    assert ippool.pool_ready(pool(**refused)) == (False, "is not Ready: MAAS has no subnet")


def test_used_addresses_are_those_of_ipaddresses_naming_the_pool() -> None:
    mine = {"spec": {"poolRef": REF, "address": "10.0.0.10"}}
    other = {"spec": {"poolRef": {**REF, "name": "p2"}, "address": "10.0.0.11"}}
    foreign = {"spec": {"poolRef": {**REF, "kind": "InClusterIPPool"}, "address": "10.0.0.12"}}
    assert ippool.used_addresses([mine, other, foreign], "p1") == {"10.0.0.10"}


def test_the_ipaddress_follows_the_contract() -> None:
    c = claim(clusterName="c1")
    body = ippool.address_body(c, pool(**ready_status()), "10.0.0.10")
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"]) == ("c-0", "ns")
    assert meta["finalizers"] == ["ipam.cluster.x-k8s.io/ProtectAddress"]
    assert meta["labels"] == {"cluster.x-k8s.io/cluster-name": "c1"}
    claim_ref, pool_ref = meta["ownerReferences"]
    assert claim_ref == {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2",
        "kind": "IPAddressClaim",
        "name": "c-0",
        "uid": "uid-c-0",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert (pool_ref["kind"], pool_ref["uid"], pool_ref["controller"], pool_ref["blockOwnerDeletion"]) == (
        "MaasIPPool",
        "uid-p1",
        False,
        True,
    )
    assert body["spec"] == {
        "claimRef": {"name": "c-0"},
        "poolRef": REF,
        "address": "10.0.0.10",
        "prefix": 24,
        "gateway": "10.0.0.1",
    }
    assert ippool.belongs_to(body, c)
    assert not ippool.belongs_to(body, claim("c-1"))
    moved = claim(poolRef={**REF, "name": "p2"})
    assert not ippool.belongs_to(body, moved)


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    first = ippool.with_condition(None, "Ready", False, "PoolExhausted", "full", generation=1)
    again = ippool.with_condition(first, "Ready", False, "PoolNotReady", "gone", generation=1)
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert again[0]["reason"] == "PoolNotReady"
    other = [{"type": "Other", "status": "True"}, *again]
    flipped = ippool.with_condition(other, "Ready", True, "AddressAllocated", "", generation=2)
    assert [c["type"] for c in flipped] == ["Other", "Ready"]
    assert flipped[1]["observedGeneration"] == 2


def subnet(cidr: str = "10.0.0.0/24", gateway: str | None = "10.0.0.1") -> maas.Subnet:
    return maas.Subnet(id=1, name="lan", cidr=cidr, gateway_ip=gateway)


def iprange(kind: str, start: str, end: str) -> maas.IpRange:
    return maas.IpRange(id=1, type=kind, start_ip=start, end_ip=end)


def check(addresses: list[str], ranges: list[maas.IpRange], **spec: Any) -> tuple[Any, Any, str]:
    s = MaasIPPoolSpec.from_body({"subnet": "10.0.0.0/24", "addresses": addresses, **spec})
    parsed = parse_pool(s.subnet, s.addresses, s.excluded_addresses or ())
    return ippool.check_against_maas(s, parsed, [subnet()], ranges)


def test_a_pool_in_a_subnet_maas_does_not_have_is_refused() -> None:
    s = MaasIPPoolSpec.from_body({"subnet": "10.9.0.0/24", "addresses": ["10.9.0.5"]})
    parsed = parse_pool(s.subnet, s.addresses)
    problem, found, _ = ippool.check_against_maas(s, parsed, [subnet()], [])
    assert problem is not None
    assert problem[0] == C.SUBNET_NOT_FOUND_REASON
    assert found is None


def test_addresses_inside_a_dynamic_range_are_refused_and_named() -> None:
    dynamic = iprange("dynamic", "10.0.0.100", "10.0.0.150")
    problem, _, _ = check(["10.0.0.90-10.0.0.110"], [dynamic], excludedAddresses=["10.0.0.105"])
    assert problem is not None
    reason, message = problem
    assert reason == C.ADDRESS_IN_DYNAMIC_RANGE_REASON
    shown = "10.0.0.100-10.0.0.104 (dynamic range 10.0.0.100 - 10.0.0.150), 10.0.0.106-10.0.0.110 (dynamic"
    assert shown in message
    problem, _, _ = check(["10.0.0.90-10.0.0.99"], [dynamic])
    assert problem is None
    # An excluded address is never handed out: excluding every clash makes the pool usable.
    problem, _, _ = check(["10.0.0.99-10.0.0.100"], [dynamic], excludedAddresses=["10.0.0.100"])
    assert problem is None


def test_addresses_outside_maas_reserved_ranges_are_warned_about() -> None:
    reserved = iprange("reserved", "10.0.0.10", "10.0.0.19")
    problem, _, warning = check(["10.0.0.15-10.0.0.24"], [reserved])
    assert problem is None
    assert warning.startswith("5 of 10 addresses are in no MAAS reserved range of 10.0.0.0/24")
    _, _, warning = check(["10.0.0.10-10.0.0.19"], [reserved])
    assert warning == ""
    other_subnet = iprange("reserved", "10.1.0.0", "10.1.0.255")
    _, _, warning = check(["10.0.0.10"], [other_subnet])
    assert warning.startswith("1 of 1 addresses")


def test_the_exhausted_message_names_pool_and_size() -> None:
    assert ippool.exhausted_message("p1", 3) == "pool p1: all 3 addresses are in use"
