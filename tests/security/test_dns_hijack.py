"""Issue 10, item 4: a tenant must not take over another cluster's control-plane DNS record.

One operator for every namespace, as on a shared management cluster (the watch filter keeps it to this
test's objects). The victim's cluster ``c1`` has a deployed control-plane machine, so its MAAS record
``c1-<suffix>.maas`` lists that machine's address. The attacker (``kubectl --as=mallory``, a tenant of its
own namespace, with the chart's RBAC and admission policy installed) creates a Cluster of the same name whose
MaasCluster points ``spec.controlPlaneEndpoint.host`` at the victim's record, then deletes it. Before the fix
the operator matched the name's shape, emptied the victim's record (the attacker has no control plane) and
deleted it with the attacker's cluster. Now the record is the victim's because the victim's MaasCluster
created it (its id is in an annotation only the operator may write), and the name is not the attacker's own
(issue 21: the attacker gets ``DNSNameNotOwn`` before MAAS is asked; it was ``DNSRecordConflict``, from the
record's id, before names were checked) and the record is untouched.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
import yaml
from operator_harness import Harness
from security_support import (
    Installed,
    Tenant,
    wait_policy_active,
)

from capmaas.api import conditions as C
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, DNS_RECORD
from capmaas_dev import demo

pytestmark = pytest.mark.k8s

FILTER_KEY = "capmaas-test-dns"


def labelled(obj: dict[str, Any], token: str) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})[FILTER_KEY] = token
    return obj


def record_of(h: Harness, fqdn: str) -> tuple[int, list[str]] | None:
    name = fqdn.split(".", maxsplit=1)[0]
    for r in h.sim.state.dns_resources.values():
        if r.name == name:
            return r.id, sorted(r.ips)
    return None


async def test_a_same_named_cluster_in_another_namespace_cannot_take_the_dns_record(
    harness: Harness, kubectl: Any, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    token = f"s{secrets.token_hex(4)}"  # a letter first: no YAML parser reads it as a number (1234e567)
    h.operator.namespace = ""  # every namespace
    h.operator.extra_args += ["--watch-filter", f"{FILTER_KEY}={token}"]
    h.operator.start()

    # The victim: cluster c1 with one deployed control-plane machine.
    await h.cluster(maascluster=labelled(demo.maascluster("c1", h.namespace), token))
    await h.apply(demo.bootstrap_secret("cp0-bootstrap", h.namespace, "c1"))
    await h.apply(demo.machine("cp0", h.namespace, "c1", control_plane=True, bootstrap="cp0-bootstrap"))
    muid = await h.uid("machines.cluster.x-k8s.io", "cp0")
    await h.apply(
        labelled(demo.maasmachine("cp0", h.namespace, "c1", control_plane=True, machine_uid=muid), token)
    )
    fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))

    async def listed() -> bool:
        rec = record_of(h, fqdn)
        return rec is not None and bool(rec[1])

    await h.wait("the victim's record lists its control plane", listed, within=90)
    before = record_of(h, fqdn)
    assert before is not None
    victim = await h.get("maasclusters", "c1")
    assert victim is not None
    assert victim["metadata"]["annotations"][ANNOTATION_PREFIX + DNS_RECORD] == f"{before[0]}/{fqdn}"
    assert victim["status"]["network"]["dnsRecordID"] == before[0]

    # The attacker: its own MAAS credentials (an identity Secret), a Cluster of the same name, the victim's
    # record as its endpoint.
    ns = attacker.namespace
    identity = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "maas", "namespace": ns},
        "stringData": {"MAAS_ENDPOINT": h.url, "MAAS_API_KEY": h.sim.api_key},
    }
    await attacker.apply(identity, demo.cluster("c1", ns))
    cuid = json.loads((await attacker.ak("get", "clusters.cluster.x-k8s.io", "c1", "-o", "json")).stdout)
    mc = labelled(
        demo.maascluster("c1", ns, identity="maas", endpoint_host=fqdn, cluster_uid=cuid["metadata"]["uid"]),
        token,
    )

    # Claiming the record outright is refused by the admission policy (the annotation is the operator's).
    forged = json.loads(json.dumps(mc))
    forged["metadata"]["annotations"] = {ANNOTATION_PREFIX + DNS_RECORD: f"{before[0]}/{fqdn}"}
    probe = ["apply", "--dry-run=server", "-f", "-"]
    wait_policy_active(lambda: attacker.k(*probe, input=yaml.safe_dump(forged), check=False).returncode != 0)
    denied = await attacker.ak("apply", "-f", "-", input=yaml.safe_dump(forged), check=False)
    assert denied.returncode != 0
    assert f"metadata.annotations[{ANNOTATION_PREFIX}{DNS_RECORD}]" in denied.stderr

    await attacker.apply(mc)

    async def conflict() -> dict[str, Any] | None:
        got = await attacker.read("maasclusters", "c1")  # in-process as the attacker: no kubectl per poll
        assert got is not None, "kubectl --as=mallory get maasclusters c1 would fail"
        for c in got.get("status", {}).get("conditions") or ():
            if c["type"] == C.DNS_READY_CONDITION and c["reason"] == C.DNS_NAME_NOT_OWN_REASON:
                return dict(c)
        return None

    async def refused() -> bool:
        return await conflict() is not None

    await h.wait("the attacker's DNSReady=False/DNSNameNotOwn", refused, within=60)
    cond = await conflict()
    assert cond is not None
    assert cond["status"] == "False"
    assert fqdn in cond["message"]
    assert record_of(h, fqdn) == before

    # Deleting the attacker's cluster deletes nothing of the victim's.
    await attacker.ak("delete", "maasclusters", "c1", "--wait=false")

    async def gone() -> bool:
        return await attacker.read("maasclusters", "c1") is None  # kubectl --as=mallory get would fail

    await h.wait("the attacker's MaasCluster gone", gone, within=60)
    assert record_of(h, fqdn) == before
    assert await h.field("maasclusters", "c1", "status", "ready") is True
