"""A control-plane VIP held in MAAS (issue 23 item 2), against the simulator through the real gateway.

The VIP is reserved with ``ipaddresses/?op=reserve`` and the MaasCluster's own DNS name as its hostname, so
MAAS makes the DNS record pointing at it in the same call: the record (this MaasCluster's 64-bit name, marked
pending before the call) is what proves after a crash that the reservation is this cluster's."""

from __future__ import annotations

from typing import Any

import pytest
from reconciler_env import Env
from test_cluster_dns import add_cluster, cond, delete, reconcile, records, running_cp

from capmaas.api import conditions as C
from capmaas.maas import MaasClient
from capmaas.reconcilers.cluster import dns_name
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, CUSTOM_DNS_ANNOTATION, DNS_PENDING, VIP
from capmaas_dev import demo

VIP_ANNOTATION = ANNOTATION_PREFIX + VIP
ADDRESS = "10.0.200.1"  # in the generated inventory's 10.0.0.0/16, used by no machine


async def client(env: Env) -> MaasClient:
    """The operator's own pooled client (its MAAS user: the default credentials)."""
    return (await env.connections.connect(env.creds)).client


async def reserved(env: Env) -> list[str]:
    """The addresses the operator's MAAS user holds reserved."""
    return sorted(r.ip for r in await (await client(env)).ip_addresses.list())


async def test_the_vip_is_reserved_and_the_record_points_at_it_not_at_the_machines(env: Env) -> None:
    mc = await add_cluster(env, controlPlaneVIP={"address": ADDRESS})
    fqdn = mc["spec"]["controlPlaneEndpoint"]["host"]
    assert records(env) == {fqdn.split(".")[0]: [ADDRESS]}
    assert await reserved(env) == [ADDRESS]
    assert mc["metadata"]["annotations"][VIP_ANNOTATION] == ADDRESS
    assert mc["status"]["network"]["vip"] == ADDRESS
    c = cond(mc, C.DNS_READY_CONDITION)
    assert (c["status"], c["reason"]) == ("True", C.VIP_READY_REASON)
    assert "VIPReserved" in env.kube.reasons()
    running_cp(env, "cp0", "10.0.9.1")
    running_cp(env, "cp1", "10.0.9.2")
    await reconcile(env)
    assert records(env) == {fqdn.split(".")[0]: [ADDRESS]}  # the machines' addresses never go in
    assert await reserved(env) == [ADDRESS]  # reserved once, not again on every pass


async def test_maas_picks_the_address_when_only_a_subnet_is_given(env: Env) -> None:
    mc = await add_cluster(env, controlPlaneVIP={"subnet": "10.0.0.0/16"})
    (address,) = await reserved(env)
    assert address.startswith("10.0.")
    assert mc["metadata"]["annotations"][VIP_ANNOTATION] == address
    assert records(env) == {mc["spec"]["controlPlaneEndpoint"]["host"].split(".")[0]: [address]}


async def test_an_address_maas_refuses_shows_in_maas_words_and_nothing_is_reserved(env: Env) -> None:
    await (await client(env)).ip_addresses.reserve(ip=ADDRESS)  # someone (here: the same user) holds it
    env.kube.add("clusters", demo.cluster("c1", "ns"))
    body = demo.maascluster("c1", "ns", cluster_uid=env.kube.get("clusters", "c1")["metadata"]["uid"])
    body["spec"]["controlPlaneVIP"] = {"address": ADDRESS}
    env.kube.add("maasclusters", body)
    with pytest.raises(TransientError) as raised:  # kopf retries it; its condition is what users read
        await reconcile(env)
    assert raised.value.reason == C.VIP_UNAVAILABLE_REASON
    mc = env.kube.get("maasclusters", "c1")
    c = cond(mc, C.DNS_READY_CONDITION)
    assert (c["status"], c["reason"]) == ("False", C.VIP_UNAVAILABLE_REASON)
    assert f"The IP address {ADDRESS} is already in use." in c["message"]
    assert records(env) == {}
    assert VIP_ANNOTATION not in (mc["metadata"].get("annotations") or {})
    assert not mc.get("status", {}).get("ready")


async def test_a_crash_after_the_reservation_adopts_it_and_never_reserves_twice(env: Env) -> None:
    """The operator reserved (MAAS made the record) and died before writing the record id and the address:
    the pending name finds the record, and its one address is the VIP."""
    env.kube.add("clusters", demo.cluster("c1", "ns"))
    body = demo.maascluster("c1", "ns", cluster_uid=env.kube.get("clusters", "c1")["metadata"]["uid"])
    body["metadata"]["uid"] = "uid-ns-c1"
    body["spec"]["controlPlaneVIP"] = {"subnet": "10.0.0.0/16"}
    fqdn = dns_name("c1", "uid-ns-c1", body["spec"]["dnsDomain"])
    body["metadata"].setdefault("annotations", {})[ANNOTATION_PREFIX + DNS_PENDING] = fqdn
    env.kube.add("maasclusters", body)
    got = await (await client(env)).ip_addresses.reserve(
        subnet="10.0.0.0/16", hostname=fqdn
    )  # before the crash
    mc = await reconcile(env)
    assert await reserved(env) == [got.ip]
    assert mc["metadata"]["annotations"][VIP_ANNOTATION] == got.ip
    assert records(env) == {fqdn.split(".")[0]: [got.ip]}
    assert cond(mc, C.DNS_READY_CONDITION)["reason"] == C.VIP_READY_REASON


async def test_the_vip_is_released_with_the_cluster(env: Env) -> None:
    await add_cluster(env, controlPlaneVIP={"address": ADDRESS})
    assert await reserved(env) == [ADDRESS]
    await delete(env, "c1", "ns")
    assert ("maasclusters", "ns", "c1") not in env.kube.objects
    assert records(env) == {}
    assert await reserved(env) == []
    assert "VIPReleased" in env.kube.reasons()
    # The address is free again: anyone may reserve it.
    assert (await (await client(env)).ip_addresses.reserve(ip=ADDRESS)).ip == ADDRESS


async def test_a_vip_with_an_endpoint_of_the_users_own_is_refused_and_nothing_is_reserved(env: Env) -> None:
    spec: dict[str, Any] = {
        "controlPlaneVIP": {"address": ADDRESS},
        "controlPlaneEndpoint": {"host": "api.example.com", "port": 6443},
    }
    mc = await add_cluster(env, **spec)
    c = cond(mc, C.DNS_READY_CONDITION)
    assert (c["status"], c["reason"]) == ("False", C.VIP_NEEDS_DNS_RECORD_REASON)
    assert "api.example.com" in c["message"]
    assert await reserved(env) == []
    assert records(env) == {}
    assert CUSTOM_DNS_ANNOTATION not in (mc["metadata"].get("annotations") or {})
