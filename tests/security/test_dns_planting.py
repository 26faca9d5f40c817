"""Issue 21, attack 6: DNS planting. Any ``<cluster>-<anything>.<domain>`` name was created in MAAS with the
operator's admin key (``cluster.py`` checked only the name's shape), so a tenant could squat names others
will use, in any MAAS domain.

One operator for every namespace, the chart's RBAC and admission policy, the attacker ``kubectl
--as=mallory`` with the default credentials allowed (the issue's precondition). Now capmaas creates only the
record named for the MaasCluster itself: a managed-shaped host that is not exactly its own gets
``DNSNameNotOwn`` and nothing is created; with the admin's per-namespace domains (``dns.namespace_domains``)
a domain not listed for the namespace gets ``DNSDomainNotAllowed``. The victim's record is untouched.
"""

from __future__ import annotations

import json

import pytest
from operator_harness import Harness
from security_support import Installed, Tenant
from tenancy_support import condition_as, labelled, start_operator, tenant_cluster

from capmaas_dev import demo

pytestmark = pytest.mark.k8s


def records(h: Harness) -> dict[str, list[str]]:
    return {r.name: sorted(r.ips) for r in h.sim.state.dns_resources.values()}


async def test_a_tenant_cannot_plant_names_or_use_another_tenants_domain(
    harness: Harness, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    domains = {h.namespace: ["maas"], attacker.namespace: ["attacker.maas"]}
    token = start_operator(
        h, h.namespace, attacker.namespace, env={"CAPMAAS_DNS__NAMESPACE_DOMAINS": json.dumps(domains)}
    )
    await h.cluster(maascluster=labelled(demo.maascluster("c1", h.namespace), token))
    victim_fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))
    before = records(h)
    assert list(before) == [victim_fqdn.split(".", maxsplit=1)[0]]

    # 1. A managed-shaped name that is not the attacker's own: the victim's "next" cluster name.
    await tenant_cluster(
        h, attacker, "c1", token, provision=False, controlPlaneEndpoint={"host": "c1-www.maas", "port": 6443}
    )
    # 2. Its own name, in the victim's domain.
    await tenant_cluster(h, attacker, "c2", token, provision=False)

    async def decided(name: str) -> dict[str, str] | None:
        c = await condition_as(attacker, "maasclusters", name, "DNSReady")
        return c if c is not None and c["reason"] in ("DNSNameNotOwn", "DNSDomainNotAllowed") else None

    async def both() -> bool:
        if set(records(h)) - set(before):
            return True  # planted: the attack went through
        return bool(await decided("c1") and await decided("c2"))

    await h.wait("both attacker clusters decided", both, within=60)
    assert records(h) == before, "a name was planted in MAAS"
    c1 = await decided("c1")
    assert c1 is not None
    assert c1["reason"] == "DNSNameNotOwn"
    assert "c1-www.maas" in c1["message"]
    c2 = await decided("c2")
    assert c2 is not None
    assert c2["reason"] == "DNSDomainNotAllowed"
    assert f"namespace {attacker.namespace}" in c2["message"]

    # Deleting them removes nothing.
    await attacker.ak("delete", "maasclusters", "c1", "c2", "--wait=false")

    async def gone() -> bool:
        r = await attacker.ak("get", "maasclusters", "-o", "name", check=False)
        return r.returncode == 0 and not r.stdout.strip()

    await h.wait("the attacker's MaasClusters gone", gone, within=60)
    assert records(h) == before
    assert await h.field("maasclusters", "c1", "status", "ready") is True
