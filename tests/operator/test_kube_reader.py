"""``kube_reader`` answers ``Harness.get`` in-process: it must give kubectl's answer for every way the tests
name a kind, and step aside (UNRESOLVED, so kubectl answers) for a name it cannot resolve."""

from __future__ import annotations

import json
import socket

import pytest
from kube_reader import UNRESOLVED, KubeReader, ReadError
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


async def test_the_reader_lists_and_impersonates_as_kubectl_does(harness: Harness) -> None:
    await harness.cluster("c1", provision=False)
    await harness.machine("m1", cp=True)
    await harness.machine("m2", cp=False)
    reader = KubeReader(harness.kube.kubeconfig)
    for kind in ("maasmachines", "machines.cluster.x-k8s.io", "secrets", "leases.coordination.k8s.io"):
        r = await harness.k("get", kind, "-n", harness.namespace, "-o", "json")
        assert reader.items(kind, harness.namespace) == json.loads(r.stdout)["items"], kind
    assert [m["metadata"]["name"] for m in await harness.items("maasmachines")] == ["m1", "m2"]
    assert reader.items("nosuchkinds", harness.namespace) is UNRESOLVED
    # As a user with no rights: kubectl --as is refused, and so is the reader (None, as a failed kubectl).
    r = await harness.k("--as=nobody", "get", "maasmachines", "m1", "-n", harness.namespace, check=False)
    assert r.returncode != 0
    assert reader.get("maasmachines", "m1", harness.namespace, user="nobody") is None
    assert reader.items("maasmachines", harness.namespace, user="nobody") is None
    # Granted a read of MaasMachines in the namespace: both answer, the same.
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reader", "namespace": harness.namespace},
        "rules": [
            {"apiGroups": ["infrastructure.cluster.x-k8s.io"], "resources": ["*"], "verbs": ["get", "list"]}
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader", "namespace": harness.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}],
    }
    await harness.apply(role, binding)

    async def granted() -> bool:  # RBAC's caches take the binding a moment after the write
        r = await harness.k("--as=nobody", "get", "maasmachines", "m1", "-n", harness.namespace, check=False)
        return r.returncode == 0

    await harness.wait("the Role bound", granted, within=30)
    r = await harness.k("--as=nobody", "get", "maasmachines", "m1", "-n", harness.namespace, "-o", "json")
    assert reader.get("maasmachines", "m1", harness.namespace, user="nobody") == json.loads(r.stdout)
    assert reader.get("machines.cluster.x-k8s.io", "m1", harness.namespace, user="nobody") is None


async def test_the_strict_read_answers_as_kubectl_does(harness: Harness) -> None:
    """``KubeReader.read`` (the e2e waits' ``get``): kubectl's JSON for an object and for a list, with a label
    selector; None only for a missing object; a read kubectl fails on raises."""
    await harness.cluster("c1", provision=False)
    await harness.machine("m1", cp=True)
    await harness.machine("m2", cp=False)
    reader = KubeReader(harness.kube.kubeconfig)
    ns = harness.namespace
    for kind, name in FORMS.items():
        r = await harness.k("get", kind, name, "-n", ns, "-o", "json")
        assert reader.read(kind, ns, name) == json.loads(r.stdout), kind
    lists = (
        ("maasmachines", ""),
        ("machines.cluster.x-k8s.io", ""),
        ("secrets", ""),
        ("machines", "cluster.x-k8s.io/control-plane"),
        ("machines", "cluster.x-k8s.io/control-plane!="),
        ("maasmachines", "no-such-label=x"),
    )
    for kind, selector in lists:
        args = ["get", kind, "-n", ns, *([f"-l={selector}"] if selector else []), "-o", "json"]
        want = json.loads((await harness.k(*args)).stdout)
        got = reader.read(kind, ns, selector=selector)
        assert isinstance(got, dict), kind
        assert got["items"] == want["items"], (kind, selector)
        assert (got["kind"], got["apiVersion"]) == (want["kind"], want["apiVersion"])
    control_planes = reader.read("machines", ns, selector="cluster.x-k8s.io/control-plane")
    assert isinstance(control_planes, dict)
    assert [m["metadata"]["name"] for m in control_planes["items"]] == ["m1"]
    assert reader.read("maasmachines", ns, "absent") is None
    assert reader.read("nosuchkinds", ns, "x") is UNRESOLVED
    # A selector the apiserver refuses: kubectl fails, the read raises (it is not "not found").
    r = await harness.k("get", "machines", "-n", ns, "-l=a b c", check=False)
    assert r.returncode != 0
    with pytest.raises(ReadError, match="400"):
        reader.read("machines", ns, selector="a b c")


async def test_reads_share_one_connection_per_thread_and_outlive_its_close(harness: Harness) -> None:
    """Keep-alive: the reads of one thread go over one TLS connection (a handshake per poll was a share of
    the apiserver's CPU); when the connection is gone (closed under it, as an apiserver may close an idle
    one), the next read opens another and answers as before."""
    await harness.cluster("c1", provision=False)
    reader = KubeReader(harness.kube.kubeconfig)
    first = reader.get("maasclusters", "c1", harness.namespace)
    conn = reader._local.conn
    assert conn is not None
    for _ in range(20):
        assert reader.get("maasclusters", "c1", harness.namespace) == first
    assert reader._local.conn is conn  # the same connection all along
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)  # the connection dies under the reader
    assert reader.get("maasclusters", "c1", harness.namespace) == first
    assert reader._local.conn is not conn
    assert reader.get("maasclusters", "absent", harness.namespace) is None  # errors keep their meaning
