"""Issue 10, item 2 (admission part): the fields that tie a MaasMachine to a MAAS machine are the operator's.

With the chart's admission policy and RBAC applied (``helm template`` of ``deploy/charts/capmaas``), a tenant
(``kubectl --as=mallory``, full rights on the objects of its own namespace) tries what would let it aim the
operator at another tenant's machine: a MaasMachine created with the victim's ``spec.systemID``, a
``spec.providerID`` or one of the operator's annotations (``…/agent-name``) forged or changed. Each is refused
with the field named; the operator's ServiceAccount and ``system:masters`` (what ``clusterctl move`` runs as)
are admitted; both victims' MAAS machines (the harness tenant's, and a second tenant's with a MAAS user of its
own) are untouched. Without the policy every forgery is admitted.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from operator_harness import Harness
from security_support import (
    Installed,
    Tenant,
    wait_policy_active,
)

from capmaas import maas
from capmaas_dev import demo

pytestmark = pytest.mark.k8s

PREFIX = "capmaas.infrastructure.cluster.x-k8s.io/"


def forged(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    mm = demo.maasmachine(name, namespace, "c9", control_plane=False, machine_uid="0" * 8)
    mm["metadata"].pop("ownerReferences", None)
    mm["spec"].update(spec)
    return mm


async def test_a_tenant_cannot_forge_the_fields_that_name_a_maas_machine(
    harness: Harness, kubectl: Any, policy: Installed, attacker: Tenant
) -> None:
    h = harness
    # The victim: a deployed machine of another tenant.
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)

    async def ready() -> bool:
        return bool(await h.field("maasmachines", "w0", "status", "ready"))

    await h.wait("victim Ready", ready, within=90)
    victim = await h.get("maasmachines", "w0")
    assert victim is not None
    sid, pid = victim["spec"]["systemID"], victim["spec"]["providerID"]
    before = h.sim.state.machines[sid]
    owner, status = before.owner, before.status
    # A second victim: another tenant with a MAAS user and a deployed machine of its own (its operator, or
    # its people, deployed it: no object of it lives in a namespace the attacker can read).
    victim2 = h.sim.add_user("victim2")
    async with maas.MaasClient(h.url, api_key=victim2.api_key) as v2:
        m2 = await v2.machines.allocate(agent_name="victim2-machine")
        await v2.machines.deploy(m2.system_id, user_data=demo.CLOUD_CONFIG)
    sid2 = m2.system_id
    before2 = h.sim.state.machines[sid2]
    owner2, status2 = before2.owner, before2.status
    assert owner2 == "victim2"

    # The policy is compiled asynchronously by the apiserver: wait until it refuses the first forgery.
    ns = attacker.namespace
    first = forged(ns, "steal-0", systemID=sid)
    probe = ["apply", "--dry-run=server", "-f", "-"]  # admission runs on dry runs too; nothing is stored
    wait_policy_active(lambda: attacker.k(*probe, input=yaml.safe_dump(first), check=False).returncode != 0)
    denied = attacker.k("apply", "-f", "-", input=yaml.safe_dump(first), check=False)
    assert denied.returncode != 0
    assert "spec.systemID is set by the capmaas operator only" in denied.stderr
    assert "mallory" in denied.stderr

    denied = attacker.k(
        "apply", "-f", "-", input=yaml.safe_dump(forged(ns, "steal-v2", systemID=sid2)), check=False
    )
    assert denied.returncode != 0
    assert "spec.systemID is set by the capmaas operator only" in denied.stderr

    denied = attacker.k(
        "apply", "-f", "-", input=yaml.safe_dump(forged(ns, "steal-1", providerID=pid)), check=False
    )
    assert denied.returncode != 0
    assert "spec.providerID is set by the capmaas operator only" in denied.stderr

    agent = forged(ns, "steal-2")
    agent["metadata"]["annotations"] = {PREFIX + "agent-name": victim["metadata"]["uid"]}
    denied = attacker.k("apply", "-f", "-", input=yaml.safe_dump(agent), check=False)
    assert denied.returncode != 0
    assert f"metadata.annotations[{PREFIX}agent-name]" in denied.stderr

    # A clean MaasMachine is the tenant's right; changing it afterwards to point at the victim is not.
    attacker.k("apply", "-f", "-", input=yaml.safe_dump(forged(ns, "mine")))
    for patch, field in (
        ({"spec": {"systemID": sid}}, "spec.systemID"),
        (
            {"metadata": {"annotations": {PREFIX + "allocating": "1"}}},
            f"metadata.annotations[{PREFIX}allocating]",
        ),
    ):
        r = attacker.k("patch", "maasmachine", "mine", "--type=merge", "-p", json.dumps(patch), check=False)
        assert r.returncode != 0, patch
        assert field in r.stderr
    # Other annotations and labels stay the tenant's business.
    attacker.k("annotate", "maasmachine", "mine", "team=blue")

    # The operator's ServiceAccount and system:masters (clusterctl move) are admitted.
    sa = ["--as", policy.service_account]
    kubectl(*sa, "-n", h.namespace, "annotate", "maasmachine", "w0", f"{PREFIX}probe=1")
    kubectl(*sa, "-n", h.namespace, "annotate", "maasmachine", "w0", f"{PREFIX}probe-")
    kubectl(
        "-n",
        ns,
        "patch",
        "maasmachine",
        "mine",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"systemID": "moved1"}}),
    )

    # A tenant of one namespace cannot reach into another at all (RBAC, before any policy).
    r = attacker.kubectl("--as=mallory", "-n", h.namespace, "get", "maasmachine", "w0", check=False)
    assert r.returncode != 0
    assert "forbidden" in r.stderr.lower()

    after = h.sim.state.machines[sid]
    assert (after.owner, after.status) == (owner, status)
    after2 = h.sim.state.machines[sid2]
    assert (after2.owner, after2.status) == (owner2, status2)
    assert await h.field("maasmachines", "w0", "spec", "systemID") == sid


def test_the_policy_names_the_release_service_account_and_the_configured_subjects(kubectl: Any) -> None:
    from security_support import helm_template

    docs = helm_template(
        "--set",
        "admissionPolicy.privilegedUsers={mover}",
        "--set",
        "admissionPolicy.privilegedGroups={capi-admins}",
        namespace="capmaas-system",
    )
    (policy,) = [
        d for d in docs if d["kind"] == "ValidatingAdmissionPolicy" and "protected" in d["metadata"]["name"]
    ]
    privileged = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "privileged")
    assert '"system:serviceaccount:capmaas-system:sec-capmaas"' in privileged
    assert '"mover"' in privileged
    assert '"capi-admins"' in privileged
    assert "system:masters" not in privileged
    off = helm_template("--set", "admissionPolicy.enabled=false", namespace="capmaas-system")
    assert not [d for d in off if "protected" in d["metadata"]["name"]]


def test_only_privileged_users_adopt_a_deployed_machine(
    crds: None, kubectl: Any, policy: Installed, attacker: Tenant
) -> None:
    """Issue 24 item 3: ``spec.adopt`` takes a Deployed MAAS machine under a MaasMachine without a deploy (and
    a deletion releases it), so it is guarded like ``spec.systemID``: a tenant can neither create a
    MaasMachine with it nor add or change it afterwards; system:masters (a privileged group) can."""
    ns = attacker.namespace
    first = forged(ns, "adopt-0", adopt={"systemID": "abc123"})
    probe = ["apply", "--dry-run=server", "-f", "-"]
    wait_policy_active(lambda: attacker.k(*probe, input=yaml.safe_dump(first), check=False).returncode != 0)
    denied = attacker.k("apply", "-f", "-", input=yaml.safe_dump(first), check=False)
    assert denied.returncode != 0
    assert "spec.adopt is set by privileged users only" in denied.stderr
    assert "mallory" in denied.stderr
    attacker.k("apply", "-f", "-", input=yaml.safe_dump(forged(ns, "plain")))
    r = attacker.k(
        "patch", "maasmachine", "plain", "--type=merge", "-p",
        json.dumps({"spec": {"adopt": {"systemID": "abc123"}}}), check=False,
    )  # fmt: skip
    assert r.returncode != 0
    assert "spec.adopt is set by privileged users only" in r.stderr
    # A privileged subject (system:masters: the test's admin kubeconfig) may.
    kubectl(
        "-n",
        ns,
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(forged(ns, "adopted", adopt={"systemID": "abc123"})),
    )
    got = json.loads(kubectl("-n", ns, "get", "maasmachine", "adopted", "-o", "json").stdout)
    assert got["spec"]["adopt"] == {"systemID": "abc123"}
    # ... and the tenant cannot change it on that object either (nor can anyone: spec.adopt is immutable).
    r = attacker.k(
        "patch", "maasmachine", "adopted", "--type=merge", "-p",
        json.dumps({"spec": {"adopt": {"systemID": "zzz999"}}}), check=False,
    )  # fmt: skip
    assert r.returncode != 0
