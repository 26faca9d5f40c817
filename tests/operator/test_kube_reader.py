"""``kube_reader`` answers ``Harness.get`` in-process: it must give kubectl's answer for every way the tests
name a kind, and step aside (UNRESOLVED, so kubectl answers) for a name it cannot resolve. The same for the
``kubectl`` fixture's in-process ``get -o json`` (kubectl's text) and ``Harness.apply``'s in-process create
(kubectl apply's object)."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import subprocess
from typing import Any

import pytest
from kube_reader import LAST_APPLIED, UNRESOLVED, KubeReader, ReadError
from operator_harness import Harness

from capmaas_dev import demo
from capmaas_dev.devcluster import KubectlError


async def fork(
    harness: Harness, *args: str, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl itself: the ``kubectl`` fixture answers a ``get -o json`` in-process, and these tests compare
    the reader with the real kubectl."""
    return await asyncio.to_thread(harness.kubectl.fork, *args, check=check, input=input)


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
        r = await fork(harness, "get", kind, name, "-n", harness.namespace, "-o", "json")
        assert got == json.loads(r.stdout), kind
    # Absent: kubectl fails, the reader says None.
    assert reader.get("maasmachines", "absent", harness.namespace) is None
    r = await fork(harness, "get", "maasmachines", "absent", "-n", harness.namespace, check=False)
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
        r = await fork(harness, "get", kind, "-n", harness.namespace, "-o", "json")
        assert reader.items(kind, harness.namespace) == json.loads(r.stdout)["items"], kind
    assert [m["metadata"]["name"] for m in await harness.items("maasmachines")] == ["m1", "m2"]
    assert reader.items("nosuchkinds", harness.namespace) is UNRESOLVED
    # As a user with no rights: kubectl --as is refused, and so is the reader (None, as a failed kubectl).
    r = await fork(harness, "--as=nobody", "get", "maasmachines", "m1", "-n", harness.namespace, check=False)
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
        r = await fork(
            harness, "--as=nobody", "get", "maasmachines", "m1", "-n", harness.namespace, check=False
        )
        return r.returncode == 0

    await harness.wait("the Role bound", granted, within=30)
    r = await fork(harness, "--as=nobody", "get", "maasmachines", "m1", "-n", harness.namespace, "-o", "json")
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
        r = await fork(harness, "get", kind, name, "-n", ns, "-o", "json")
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
        want = json.loads((await fork(harness, *args)).stdout)
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
    r = await fork(harness, "get", "machines", "-n", ns, "-l=a b c", check=False)
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


def odd_config_map(name: str) -> dict[str, Any]:
    """Strings that Go's JSON writes otherwise than Python's by default (HTML characters, non-ASCII, line
    separators, control characters), and one a YAML reader takes for a number."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "x"}, "annotations": {"note": "a<b>&c ü \u2028"}},
        "data": {
            "html": "<&>",
            "empty": "",
            "number": "6906e3",
            "text": "ünï\u2029 tab\tnl\nbs\bff\f\x01\x7f",
        },
    }


async def test_the_kubectl_fixture_prints_what_kubectl_prints(harness: Harness) -> None:
    """The ``kubectl`` fixture's in-process ``get ... -o json`` is kubectl's stdout byte for byte, for every
    form of the arguments it takes; everything else (a missing object, other flags or outputs, a kind the
    reader cannot resolve) is left to kubectl, whose exit status says so."""
    await harness.cluster("c1", provision=False)
    await harness.machine("m1", cp=True)
    await harness.machine("m2", cp=False)
    await harness.apply(odd_config_map("odd"))
    kubectl, ns = harness.kubectl, harness.namespace
    answered = [
        ("get", "maasmachines", "m1", "-n", ns, "-o", "json"),
        ("get", "maasmachine/m1", "-n", ns, "-o", "json"),
        ("get", "-n", ns, "machines.cluster.x-k8s.io", "m2", "-o=json"),
        ("get", "configmap", "odd", f"--namespace={ns}", "--output", "json"),
        ("get", "configmaps", "-n", ns, "-o", "json"),
        ("get", "secrets", "-n", ns, "-o", "json"),
        ("get", "machines", "-n", ns, "-l", "cluster.x-k8s.io/control-plane", "-o", "json"),
        ("get", "machines", "-n", ns, "--selector=cluster.x-k8s.io/control-plane!=", "-o", "json"),
        ("get", "crd", "maasmachines.infrastructure.cluster.x-k8s.io", "-o", "json"),  # cluster-scoped
        ("get", "namespace", ns, "-o", "json"),
        ("get", "configmaps", "-o", "json"),  # no -n: the namespace "default"
    ]
    for args in answered:
        text = await asyncio.to_thread(kubectl.in_process, *args)
        real = await fork(harness, *args)
        assert text is not None, args
        assert text == real.stdout, args
        assert (await asyncio.to_thread(kubectl, *args)).stdout == real.stdout, args
    forked = [
        ("get", "maasmachines", "absent", "-n", ns, "-o", "json"),
        ("get", "nosuchkinds", "x", "-n", ns, "-o", "json"),
        ("get", "maasmachines", "m1", "-n", ns),
        ("get", "maasmachines", "m1", "-n", ns, "-o", "yaml"),
        ("get", "maasmachines,machines", "-n", ns, "-o", "json"),
        ("--as=nobody", "get", "maasmachines", "m1", "-n", ns, "-o", "json"),
        ("get", "maasmachines", "m1", "-n", ns, "-o", "json", "--show-managed-fields"),
    ]
    for args in forked:
        assert await asyncio.to_thread(kubectl.in_process, *args) is None, args
    missing = await asyncio.to_thread(kubectl, *forked[0], check=False)
    assert missing.returncode != 0
    assert 'maasmachines.infrastructure.cluster.x-k8s.io "absent" not found' in missing.stderr


def maasmachine_with_annotation(name: str, namespace: str, annotations: dict[str, str]) -> dict[str, Any]:
    obj = demo.maasmachine(name, namespace, "c1", control_plane=True)
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


def stored(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` as read back, without what differs between two creates of it (uid, times, versions) and with
    its namespace's name (in the last-applied annotation too) made ``NS``."""
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        meta.pop(key, None)
    for entry in meta.get("managedFields", ()):
        entry.pop("time", None)
    return dict(json.loads(json.dumps(obj).replace(json.dumps(namespace)[1:-1], "NS")))


async def test_apply_creates_what_kubectl_apply_creates(harness: Harness) -> None:
    """``KubeReader.create_as_applied`` (``Harness.apply``'s create of an object not there yet) leaves the
    very object kubectl's client-side apply does: same fields, same last-applied annotation, same managed
    fields. Then a second ``kubectl apply`` changes both alike (the annotation drives its patch),
    ``Harness.apply`` of an existing object goes through kubectl, and a refused or unknown field fails as
    kubectl fails."""
    reader = KubeReader(harness.kube.kubeconfig)
    ns = harness.namespace
    other = f"{ns[:50]}-kubectl"
    assert reader.send("POST", "/api/v1/namespaces", {"metadata": {"name": other}}) == 201
    objs = [
        demo.cluster("c1", ns),
        demo.maascluster("c1", ns),
        demo.bootstrap_secret("m1-bootstrap", ns, "c1"),
        demo.machine("m1", ns, "c1", control_plane=True, bootstrap="m1-bootstrap"),
        # No owner reference: the garbage collector deletes a dependent whose owner's UID does not exist
        # (here a Machine of another UID), at a time of its own, under the comparisons below. The value a
        # YAML reader would take for a number (6906e3) rides in an annotation instead.
        maasmachine_with_annotation("m1", ns, {"example.com/uid-like": "6906e3ab-0000-0000-0000-0000"}),
        odd_config_map("odd"),  # no namespace in it: -n's
        {  # cluster-scoped: -n does not apply
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{ns}-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        },
    ]
    lines: list[str] = []
    for obj in objs:
        line = await asyncio.to_thread(reader.create_as_applied, copy.deepcopy(obj), ns)
        assert line is not None, obj["kind"]
        lines.append(line)
    theirs = [json.loads(json.dumps(o).replace(json.dumps(ns)[1:-1], other)) for o in objs]
    r = await fork(harness, "apply", "-n", other, "-f", "-", input="\n".join(json.dumps(o) for o in theirs))
    assert "".join(lines) == r.stdout.replace(other, ns)  # what kubectl prints for them

    async def both(kind: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        got = []
        for n in (ns, other):
            r = await fork(harness, "get", kind, name, "-n", n, "-o", "json", "--show-managed-fields")
            got.append(json.loads(r.stdout))
        return stored(got[0], ns), stored(got[1], other)

    kinds = {"Cluster": "clusters.cluster.x-k8s.io", "Machine": "machines.cluster.x-k8s.io"}
    for obj in objs:
        name = obj["metadata"]["name"]
        if obj["kind"] == "ClusterRole":
            mine = json.loads(
                (
                    await fork(harness, "get", "clusterrole", name, "-o", "json", "--show-managed-fields")
                ).stdout
            )
            theirs_name = name.replace(ns, other)
            real = json.loads(
                (
                    await fork(
                        harness, "get", "clusterrole", theirs_name, "-o", "json", "--show-managed-fields"
                    )
                ).stdout
            )
            assert stored(mine, ns) == stored(real, other)
            continue
        mine, real = await both(kinds.get(obj["kind"], obj["kind"].lower()), name)
        assert mine == real, obj["kind"]
        assert LAST_APPLIED in mine["metadata"]["annotations"], obj["kind"]
    # Exists now: create_as_applied steps aside; Harness.apply goes to kubectl, which patches it (a key
    # removed from the manifest is removed from the object, as the last-applied annotation says).
    changed = odd_config_map("odd")
    del changed["data"]["html"]
    changed["data"]["added"] = "1"
    assert await asyncio.to_thread(reader.create_as_applied, copy.deepcopy(changed), ns) is None
    await harness.apply(changed)
    await fork(harness, "apply", "-n", other, "-f", "-", input=json.dumps(changed))
    mine, real = await both("configmap", "odd")
    assert mine == real
    assert "html" not in mine["data"]
    assert mine["data"]["added"] == "1"
    # As a user with no rights (kubectl --as): refused, so left to kubectl, and nothing made.
    assert (
        await asyncio.to_thread(reader.create_as_applied, odd_config_map("nobodys"), ns, user="nobody")
        is None
    )
    assert reader.read("configmap", ns, "nobodys") is None
    # Refused: kubectl's error, not a silent False.
    bad = demo.maasmachine("bad", ns, "c1", control_plane=False, machine_uid="x")
    bad["spec"]["minCPU"] = 0
    with pytest.raises(KubectlError, match=r"spec\.minCPU in body should be greater than or equal to 1"):
        await harness.apply(bad)
    unknown = odd_config_map("unknown")
    unknown["spec"] = {"bogus": True}
    with pytest.raises(KubectlError, match='unknown field "spec"'):
        await harness.apply(unknown)
    assert reader.read("configmap", ns, "unknown") is None
