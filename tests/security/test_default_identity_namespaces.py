"""Issue 10, item 3: the operator's default MAAS credentials (a MAAS admin's key, for LXD and DNS) are for
the namespaces its admin allowed, not for whoever can create a MaasCluster.

Two victim tenants may use them: one by name (``maas.default_identity_namespaces``), one by a label on its
namespace (``maas.default_identity_namespace_selector``: the operator reads the Namespace from the real
apiserver). The attacker (``kubectl --as=mallory``, rights on its own namespace only) creates a Cluster, a
MaasCluster without ``spec.identityRef`` and a MaasMachine, and marks its Cluster's infrastructure
provisioned itself: the MaasCluster and the MaasMachine are refused with ``DefaultIdentityNotAllowed`` naming
the namespace and the operator setting, and nothing is allocated in MAAS. The attacker cannot label its own
namespace into the selector either (a Namespace is cluster-scoped). Before the fix the attacker's MaasCluster
connected with the operator's key like anyone's.

The operator watches every namespace here (the tenants have one each), limited by a watch filter to this
test's objects (the apiserver is shared by the session).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from operator_harness import Harness
from security_support import Tenant, grant_tenant

from capmaas.api import conditions as C
from capmaas_dev import demo

pytestmark = pytest.mark.k8s

#: A label value: a letter first, so no YAML reader takes it for a number (``6906e3`` is a float to kubectl's
#: YAML parser, a string to PyYAML, which therefore did not quote it).
TOKEN = f"s{secrets.token_hex(3)}"
SUITE = {"capmaas.test/suite": TOKEN}
TRUSTED = ("capmaas.test/default-maas", f"allowed-{TOKEN}")


@pytest.fixture
def operator_env(operator_env: dict[str, str]) -> dict[str, str]:
    # The harness allows its own namespace by name (victim 1); victim 2 is allowed by its label.
    operator_env["CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACE_SELECTOR"] = "=".join(TRUSTED)
    return operator_env


def _namespace(kubectl: Any, prefix: str, labels: dict[str, str]) -> Iterator[str]:
    name = f"{prefix}-{secrets.token_hex(3)}"
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    try:
        yield name
    finally:
        kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def victim2(kubectl: Any) -> Iterator[str]:
    yield from _namespace(kubectl, "victim2", dict([TRUSTED]))


@pytest.fixture
def attacker(kubectl: Any) -> Iterator[Tenant]:
    for name in _namespace(kubectl, "attacker", {}):
        yield grant_tenant(kubectl, "mallory", name)


def labelled(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {}).update(SUITE)
    return obj


def apply(run: Any, ns: str, *objs: dict[str, Any]) -> None:
    run("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(list(objs)))


def uid(run: Any, ns: str, kind: str, name: str) -> str:
    return str(json.loads(run("get", kind, name, "-n", ns, "-o", "json").stdout)["metadata"]["uid"])


def make_cluster(run: Any, ns: str, name: str) -> None:
    """Cluster + MaasCluster owned by it (no identityRef: the operator's default credentials)."""
    apply(run, ns, demo.cluster(name, ns))
    mc = labelled(demo.maascluster(name, ns))
    mc["metadata"]["ownerReferences"] = [
        demo.owner("Cluster", name, uid(run, ns, "clusters.cluster.x-k8s.io", name))
    ]
    apply(run, ns, mc)


def condition(run: Any, ns: str, plural: str, name: str, type_: str) -> dict[str, Any] | None:
    got = run("get", plural, name, "-n", ns, "-o", "json", check=False)
    if got.returncode != 0:
        return None
    for c in json.loads(got.stdout).get("status", {}).get("conditions") or ():
        if c["type"] == type_:
            return dict(c)
    return None


async def test_only_allowed_namespaces_use_the_default_credentials(
    harness: Harness, kubectl: Any, victim2: str, attacker: Tenant
) -> None:
    h = harness
    h.operator.cluster_wide = True
    h.operator.extra_args = ["--watch-filter", f"capmaas.test/suite={TOKEN}"]
    h.operator.start()

    def admin(*args: str, input: str | None = None, check: bool = True) -> Any:
        return kubectl(*args, input=input, check=check)

    def connected(ns: str, status: str, reason: str | None = None) -> Any:
        async def check() -> bool:
            c = condition(admin, ns, "maasclusters", "c1", C.MAAS_CONNECTED_CONDITION)
            return c is not None and c["status"] == status and (reason is None or c["reason"] == reason)

        return check

    # The victims: one allowed by name, one by its namespace's label.
    make_cluster(admin, h.namespace, "c1")
    make_cluster(admin, victim2, "c1")
    await h.wait("victim 1 connected", connected(h.namespace, "True"), within=90)
    await h.wait("victim 2 connected (namespace selector)", connected(victim2, "True"), within=90)

    # The attacker: everything in its own namespace, as a namespaced user.
    ns = attacker.namespace
    make_cluster(attacker.k, ns, "c1")
    await h.wait("attacker refused", connected(ns, "False", C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON), within=90)
    refused = condition(admin, ns, "maasclusters", "c1", C.MAAS_CONNECTED_CONDITION)
    assert refused is not None
    assert f"namespace {ns} may not use the operator's default MAAS credentials" in refused["message"]
    assert "CAPMAAS_MAAS__DEFAULT_IDENTITY_NAMESPACES" in refused["message"]
    assert h.sim.api_key not in refused["message"]

    # A MaasMachine of the attacker, its Cluster marked provisioned by the attacker itself: refused too.
    status = {"status": {"initialization": {"infrastructureProvisioned": True}}}
    attacker.k(
        "patch", "clusters.cluster.x-k8s.io", "c1", "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    apply(attacker.k, ns, demo.bootstrap_secret("w0-bootstrap", ns, "c1"))
    apply(attacker.k, ns, demo.machine("w0", ns, "c1", control_plane=False, bootstrap="w0-bootstrap"))
    muid = uid(attacker.k, ns, "machines.cluster.x-k8s.io", "w0")
    apply(attacker.k, ns, labelled(demo.maasmachine("w0", ns, "c1", control_plane=False, machine_uid=muid)))

    async def machine_refused() -> bool:
        c = condition(admin, ns, "maasmachines", "w0", C.READY_CONDITION)
        return c is not None and c["reason"] == C.DEFAULT_IDENTITY_NOT_ALLOWED_REASON

    await h.wait("attacker's MaasMachine refused", machine_refused, within=60)
    assert h.sim.machines_by_agent(uid(admin, ns, "maasmachines", "w0")) == []
    assert not [m for m in h.sim.state.machines.values() if m.owner is not None]  # nothing allocated at all

    # Labelling its namespace into the selector is not the tenant's to do.
    r = attacker.kubectl("--as=mallory", "label", "namespace", ns, "=".join(TRUSTED), check=False)
    assert r.returncode != 0
    assert "forbidden" in r.stderr.lower()
    # The victims stay connected.
    assert await connected(h.namespace, "True")()
    assert await connected(victim2, "True")()
