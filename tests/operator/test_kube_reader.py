"""``kube_reader`` answers ``Harness.get`` in-process: it must give kubectl's answer for every way the tests
name a kind, and step aside (UNRESOLVED, so kubectl answers) for a name it cannot resolve."""

from __future__ import annotations

import json

from kube_reader import UNRESOLVED, KubeReader
from operator_harness import Harness

FORMS = {
    "maasclusters": "c1",
    "maascluster": "c1",
    "MaasCluster": "c1",
    "maasclusters.infrastructure.cluster.x-k8s.io": "c1",
    "maasclusters.v1beta1.infrastructure.cluster.x-k8s.io": "c1",
    "cluster": "c1",
    "clusters.cluster.x-k8s.io": "c1",
    "machines.cluster.x-k8s.io": "m1",
    "maasmachines": "m1",
    "maasmachine": "m1",
    "secret": "m1-bootstrap",
    "namespaces": "default",  # cluster-scoped: -n is ignored
}


async def test_the_reader_answers_as_kubectl_does(harness: Harness) -> None:
    await harness.cluster("c1", provision=False)
    await harness.machine("m1", cp=True)
    reader = KubeReader(harness.kube.kubeconfig)
    for kind, name in FORMS.items():
        got = reader.get(kind, name, harness.namespace)
        r = await harness.k("get", kind, name, "-n", harness.namespace, "-o", "json")
        assert got == json.loads(r.stdout), kind
    # Absent: kubectl fails, the reader says None.
    assert reader.get("maasmachines", "absent", harness.namespace) is None
    r = await harness.k("get", "maasmachines", "absent", "-n", harness.namespace, check=False)
    assert r.returncode != 0
    # A name no resource has: kubectl is asked (and fails).
    assert reader.get("nosuchkinds", "x", harness.namespace) is UNRESOLVED
    assert await harness.get("nosuchkinds", "x") is None
    assert (await harness.get("maasmachine", "m1") or {}).get("metadata", {}).get("name") == "m1"
