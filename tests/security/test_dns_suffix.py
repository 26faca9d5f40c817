"""Issue 21, attack 7: DNS suffix collision. A MaasCluster without ``…/dns-record`` adopted the record named
``dns_name(cluster, uid, domain)``; the suffix was 24 bits, so about 2^24 MaasCluster creates find a UID
whose name is a victim's record, which the attacker then empties and deletes.

A test cannot create 2^24 MaasClusters. It shows the two halves of the fix instead, on the real apiserver
with the chart's RBAC and admission policy and the operator as a process:

1. a new record's name carries a suffix of at least 64 bits (the victim's record here);
2. a MaasCluster without the annotation never adopts an existing record by name, even one named exactly for
   its UID (as the brute force would find): the record is planted under the attacker's own name while its
   MaasCluster waits for its owner, and the attacker gets ``DNSRecordConflict`` and the record survives the
   attacker's deletion. Before the fix it was adopted (``DNSRecordAdopted``) and deleted with the attacker's
   cluster. (Adoption by name under the one-time migration setting ``dns.adopt_records_by_name`` is in
   ``tests/unit/reconcilers/test_cluster_dns.py``.)
"""

from __future__ import annotations

import re

import pytest
from operator_harness import Harness
from security_support import Installed, Tenant
from tenancy_support import condition_as, get_as, labelled, start_operator, tenant_cluster

from capmaas import maas
from capmaas.reconcilers.cluster import dns_name
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, DNS_RECORD
from capmaas_dev import demo

pytestmark = pytest.mark.k8s


def record_named(h: Harness, fqdn: str) -> tuple[int, list[str]] | None:
    name = fqdn.split(".", maxsplit=1)[0]
    for r in h.sim.state.dns_resources.values():
        if r.name == name:
            return r.id, sorted(r.ips)
    return None


async def test_a_new_record_name_carries_64_bits(
    harness: Harness, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    token = start_operator(h, h.namespace, attacker.namespace)
    await h.cluster(maascluster=labelled(demo.maascluster("c1", h.namespace), token))
    victim_fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))
    assert record_named(h, victim_fqdn) is not None
    suffix = victim_fqdn.split(".", maxsplit=1)[0].rsplit("-", 1)[1]
    assert re.fullmatch(r"[0-9a-f]+", suffix)
    assert len(suffix) * 4 >= 64, f"{victim_fqdn}: a {len(suffix) * 4}-bit suffix"
    # The attacker's cluster of the same name gets another name, as long.
    await tenant_cluster(h, attacker, "c1", token)
    theirs = await get_as(attacker, "maasclusters", "c1")
    assert theirs is not None
    host = theirs["spec"]["controlPlaneEndpoint"]["host"]
    assert host != victim_fqdn
    assert len(host.split(".", maxsplit=1)[0]) == len(victim_fqdn.split(".", maxsplit=1)[0])


async def test_a_record_is_never_adopted_by_name(
    harness: Harness, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    token = start_operator(h, h.namespace, attacker.namespace)
    await h.cluster(maascluster=labelled(demo.maascluster("c1", h.namespace), token))
    victim_fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))

    # The attacker's MaasCluster, not yet owned by its Cluster: the operator waits and touches no DNS.
    ns = attacker.namespace
    await attacker.apply(demo.cluster("c9", ns))
    await attacker.apply(labelled(demo.maascluster("c9", ns), token))
    mc = await get_as(attacker, "maasclusters", "c9")
    assert mc is not None
    name = dns_name("c9", mc["metadata"]["uid"], "maas")
    # The victim's record that the brute force found: named exactly for the attacker's UID.
    async with maas.MaasClient(h.url, api_key=h.sim.api_key) as admin:
        planted = await admin.dns_resources.create(name, ["10.99.0.1", "10.99.0.2"])
    before = record_named(h, name)
    assert before == (planted.id, ["10.99.0.1", "10.99.0.2"])

    cluster = await get_as(attacker, "clusters.cluster.x-k8s.io", "c9")
    assert cluster is not None
    await attacker.apply(labelled(demo.maascluster("c9", ns, cluster_uid=cluster["metadata"]["uid"]), token))

    async def decided() -> bool:
        got = await get_as(attacker, "maasclusters", "c9")
        if ANNOTATION_PREFIX + DNS_RECORD in ((got or {}).get("metadata") or {}).get("annotations", {}):
            return True  # adopted: the attack went through
        c = await condition_as(attacker, "maasclusters", "c9", "DNSReady")
        return c is not None and c["reason"] == "DNSRecordConflict"

    await h.wait("the attacker's MaasCluster decided", decided, within=60)
    got = await get_as(attacker, "maasclusters", "c9")
    assert got is not None
    assert ANNOTATION_PREFIX + DNS_RECORD not in (got["metadata"].get("annotations") or {}), "adopted by name"
    c = await condition_as(attacker, "maasclusters", "c9", "DNSReady")
    assert c is not None
    assert name in c["message"]
    assert record_named(h, name) == before

    await attacker.ak("delete", "maasclusters", "c9", "--wait=false")

    async def gone() -> bool:
        return await get_as(attacker, "maasclusters", "c9") is None

    await h.wait("the attacker's MaasCluster gone", gone, within=60)
    assert record_named(h, name) == before, "the victim's record was deleted with the attacker's cluster"
    assert record_named(h, victim_fqdn) is not None
