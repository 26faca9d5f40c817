"""The HyperShift NodePool flow end to end: real CAPI core manager, ``capmaas run``, the MAAS simulator.

The test plays HyperShift's parts (no HyperShift runs here), writing exactly what its controllers write
(builders and their provenance in ``hypershift_objects``):

- the hostedcluster controller: a v1beta1 Cluster named after the infra ID and a MaasCluster marked
  ``cluster.x-k8s.io/managed-by`` with HyperShift's endpoint, whose status the platform code marks
  provisioned;
- the NodePool controller: ``<nodepool>-<hash>`` MaasMachineTemplates with the nodePool annotation, a
  ``user-data-<nodepool>-<hash>`` Secret holding an Ignition 3.2 pointer config (keys ``value`` and
  ``disableTemplating`` only), a MachineDeployment (upgrade type Replace) and a MachineSet (InPlace) named
  after their NodePools, a MachineHealthCheck; every pass runs ``cleanupMachineTemplates`` and then
  CreateOrUpdate of the current template; a template change (new name) and a release upgrade (new user-data
  Secret and version, the outdated Secret deleted at once) roll the Replace pool; the InPlace pool's new
  template applies to new Machines only;
- the token-secret controller's rotation: the user-data Secret rewritten in place.

Everything else is real: CAPI creates MachineSets/Machines and clones MaasMachines, capmaas allocates and
deploys them in the simulator, each deployed machine registers a Node in the workload stand-in, capmaas puts
the providerID on it and CAPI takes the Machine to Running.

The HostedControlPlane is a schemaless CRD stand-in whose status the test writes as HyperShift's
control-plane operator does (``initialized``): CAPI needs the Cluster ``ControlPlaneInitialized`` before it
judges Nodes, so without it no Machine becomes Ready/available and a rolling update stalls.

Not exercised (and why): the hosted control plane itself, the ignition server and the machine-approver
(nothing boots the Ignition; the approver's input, ``Machine.status.addresses`` InternalDNS = Node name, is
checked instead), MachineHealthCheck remediation (HyperShift's timeouts are 8 and 20 minutes; remediation is
the MachineDeployment e2e test's subject), and the in-place upgrader (it drives MCD pods on Nodes; only its
MachineSet annotations are written).

Tests run in file order and share one hosted cluster; each records its stages (``[e2e timing]`` lines, and
the conftest's terminal summary).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import hypershift_objects as hs
import pytest
from e2e_support import apply, get, items, patch_status

if TYPE_CHECKING:
    from e2e_support import ProviderStack

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

MS_V1BETA1 = "machinesets.v1beta1.cluster.x-k8s.io"
MD_V1BETA1 = "machinedeployments.v1beta1.cluster.x-k8s.io"
IGNITION_ENDPOINT = "ignition-server-clusters-hc.apps.mgmt.example"  # never contacted
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
CAPMAAS_ANNOTATION_PREFIX = "capmaas.infrastructure.cluster.x-k8s.io/"


@dataclass
class Hosted:
    """One hosted cluster as HyperShift lays it out in the HCP namespace, plus what the tests learn."""

    stack: ProviderStack
    infra_id: str
    replace: hs.NodePool
    inplace: hs.NodePool
    maascluster_after_capi: dict[str, Any] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)  # role -> template name
    desired: dict[str, dict[str, Any]] = field(default_factory=dict)  # nodepool -> its current template
    user_data: dict[str, str] = field(default_factory=dict)  # nodepool name -> Secret name
    ignition: dict[str, bytes] = field(default_factory=dict)  # Secret name -> current Ignition JSON

    @property
    def ns(self) -> str:
        return self.stack.namespace

    def get(self, *args: str) -> Any:
        return get(self.stack.kubectl, *args, "-n", self.ns)


HYPERSHIFT_MANAGER = "--field-manager=hypershift-operator"


def _create(stack: ProviderStack, *objs: dict[str, Any]) -> None:
    """Create as HyperShift's controllers do (a plain Create: no kubectl apply annotation)."""
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
    stack.kubectl("create", HYPERSHIFT_MANAGER, "-f", "-", input=doc)


def _update(stack: ProviderStack, obj: dict[str, Any]) -> None:
    """A full Update, as HyperShift's CreateOrUpdate sends it."""
    stack.kubectl("replace", HYPERSHIFT_MANAGER, "-f", "-", input=json.dumps(obj))


def _patch(stack: ProviderStack, resource: str, name: str, patch: dict[str, Any]) -> None:
    """A merge patch, as controller-runtime's CreateOrPatch sends HyperShift's MachineDeployment/Set edits."""
    args = ["-n", stack.namespace, HYPERSHIFT_MANAGER, "--type=merge", "-p", json.dumps(patch)]
    stack.kubectl("patch", resource, name, *args)


def _user_data(np: hs.NodePool, token: str) -> tuple[dict[str, Any], bytes]:
    config_hash = hs.hash_simple(f"{np.key}/{np.release_version}")
    ign = hs.ignition_config(
        token=token,
        endpoint=IGNITION_ENDPOINT,
        ca_pem=CA_PEM,
        nodepool_key=np.key,
        target_config_version_hash=config_hash,
    )
    return hs.user_data_secret(np, config_hash, ign), ign


@pytest.fixture(scope="module")
def hosted(provider_stack: ProviderStack) -> Hosted:
    """The HyperShift Cluster + externally managed MaasCluster, provisioned by "HyperShift"."""
    stack = provider_stack
    infra_id = f"hs-{secrets.token_hex(3)}"
    suffix = infra_id[3:]

    def pool(name: str, replicas: int) -> hs.NodePool:
        return hs.NodePool(
            name=f"{name}-{suffix}",
            namespace="clusters",
            cluster_name=f"hc-{suffix}",
            infra_id=infra_id,
            hcp_namespace=stack.namespace,
            replicas=replicas,
        )

    h = Hosted(stack, infra_id, replace=pool("replace", 2), inplace=pool("inplace", 1))
    stack.clusters.append(infra_id)  # the fixture's teardown deletes it if a test did not
    endpoint = f"api.{infra_id}.hypershift.example"
    with stack.stage("hosted cluster: Cluster + HostedControlPlane + managed MaasCluster, provisioned"):
        crd = hs.hosted_control_plane_crd()
        apply(stack.kubectl, crd)
        stack.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s"
        )
        _create(stack, hs.hosted_control_plane(h.replace), hs.maas_cluster(h.replace, endpoint))
        _create(stack, hs.capi_cluster(h.replace))
        stack.workload.publish_kubeconfig(stack.kubeconfig, h.ns, infra_id)  # <infraID>-kubeconfig

        def owned() -> dict[str, Any] | None:
            mc = h.get("maascluster", infra_id)
            refs = (mc or {}).get("metadata", {}).get("ownerReferences") or []
            return mc if any(r["kind"] == "Cluster" for r in refs) else None

        stack.wait_for(owned, "CAPI's Cluster ownerRef on the MaasCluster", timeout=60)
        # PLAYING HYPERSHIFT: its platform code marks the infra CR provisioned, the control-plane operator
        # reports the hosted API server up.
        patch_status(stack.kubectl, "maascluster", infra_id, h.ns, hs.provisioned_status())
        patch_status(
            stack.kubectl,
            "hostedcontrolplane",
            h.replace.cluster_name,
            h.ns,
            hs.hosted_control_plane_status(h.replace, endpoint),
        )

        def initialized() -> bool:
            c = h.get("cluster", infra_id) or {}
            init = (c.get("status") or {}).get("initialization") or {}
            return bool(init.get("infrastructureProvisioned") and init.get("controlPlaneInitialized"))

        stack.wait_for(initialized, "Cluster infrastructureProvisioned + controlPlaneInitialized", timeout=60)
    c = h.get("cluster", infra_id)
    assert c["spec"]["controlPlaneEndpoint"] == {"host": endpoint, "port": 443}
    time.sleep(2)  # let CAPI's Cluster controller settle its writes to the MaasCluster before the snapshot
    h.maascluster_after_capi = h.get("maascluster", infra_id, "--show-managed-fields")
    return h


def _assert_left_alone(h: Hosted) -> dict[str, Any]:
    """Nothing of capmaas on the MaasCluster: no finalizer, no annotation, status as HyperShift wrote it,
    and (the strong check) not a single write since CAPI and HyperShift were done with it."""
    mc: dict[str, Any] = h.get("maascluster", h.infra_id, "--show-managed-fields")
    before = h.maascluster_after_capi
    meta = mc["metadata"]
    assert not meta.get("finalizers"), meta.get("finalizers")
    assert not [a for a in meta.get("annotations") or {} if a.startswith(CAPMAAS_ANNOTATION_PREFIX)]
    assert mc["spec"] == before["spec"]
    assert mc["status"] == hs.provisioned_status(), mc["status"]  # no conditions, failure domains, network

    def managers(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
        fields = obj["metadata"].get("managedFields") or []
        return sorted({(f["manager"], f["operation"], f.get("subresource", "")) for f in fields})

    assert managers(mc) == managers(before)
    assert meta["resourceVersion"] == before["metadata"]["resourceVersion"], (
        f"the MaasCluster was written after HyperShift/CAPI were done; managers now: {managers(mc)}"
    )
    return mc


def test_externally_managed_maascluster_is_left_alone(hosted: Hosted) -> None:
    """The operator has seen it (it reconciles MaasClusters of the namespace) and did nothing."""
    hosted.stack.check_operator()
    time.sleep(3)  # a few operator polling rounds
    mc = _assert_left_alone(hosted)
    managers = sorted({f["manager"] for f in mc["metadata"]["managedFields"]})
    print(f"MaasCluster field managers (HyperShift's part played by kubectl, CAPI): {managers}")


def _pool_selector(np: hs.NodePool) -> str:
    return f"{np.resources_name}={np.resources_name}"


def _sim_user_data(h: Hosted, system_id: str) -> bytes | None:
    data: bytes | None = h.stack.sim.call(lambda sim: sim.state.machines[system_id].user_data)
    return data


def _check_provisioned_pool(
    h: Hosted, np: hs.NodePool, machines: list[dict[str, Any]], template: str
) -> None:
    """Per Machine: the clone carries the NodePool annotation and came from ``template``; MAAS deployed it
    with the NodePool's Ignition; InternalDNS = Node name on the MaasMachine and on the Machine (the
    machine-approver reads Machines); the Node has the Machine's providerID."""
    secret = h.user_data[np.name]
    for m in machines:
        name = m["metadata"]["name"]
        mm = h.get("maasmachine", name)
        meta = mm["metadata"]
        assert meta["annotations"][hs.NODEPOOL_ANNOTATION] == np.key  # NodePool → Machine → MaasMachine
        assert meta["annotations"]["cluster.x-k8s.io/cloned-from-name"] == template
        assert meta["labels"][np.resources_name] == np.resources_name
        assert m["spec"]["bootstrap"]["dataSecretName"] == secret
        sid = mm["spec"]["systemID"]
        got = _sim_user_data(h, sid)
        assert got == h.ignition[secret], f"{sid} deployed with {got!r:.120}"
        assert json.loads(got)["ignition"]["version"] == "3.2.0"
        node_name = m["status"]["nodeRef"]["name"]
        assert {"type": "InternalDNS", "address": node_name} in mm["status"]["addresses"]
        assert {"type": "InternalDNS", "address": node_name} in m["status"]["addresses"]
        node = h.stack.workload.node(node_name)
        assert node is not None
        assert node["spec"]["providerID"] == m["spec"]["providerID"] == mm["spec"]["providerID"]
    events = items(h.stack.kubectl, "events", h.ns)
    deploying = [
        e["message"]
        for e in events
        if e.get("reason") == "MachineDeploying"
        and e["involvedObject"]["name"] in {m["metadata"]["name"] for m in machines}
    ]
    assert deploying
    assert all("with ignition user data" in msg for msg in deploying), deploying


def test_replace_nodepool_provisions_with_ignition(hosted: Hosted) -> None:
    h, stack, np = hosted, hosted.stack, hosted.replace
    template = hs.machine_template(np, hs.machine_template_spec())
    secret, ign = _user_data(np, token=secrets.token_hex(16))
    h.templates["replace-v1"] = template["metadata"]["name"]
    h.desired[np.name] = template
    h.user_data[np.name] = secret["metadata"]["name"]
    h.ignition[secret["metadata"]["name"]] = ign
    assert set(secret["data"]) == {"value", "disableTemplating"}
    assert template["metadata"]["name"] == f"{np.name}-{hs.hash_simple(hs.go_json(template['spec']))}"
    with stack.stage("Replace NodePool: 2 Machines Running (MachineDeployment, Ignition user data)"):
        _create(stack, template, secret)
        _create(stack, hs.machine_deployment(np, template["metadata"]["name"], h.user_data[np.name]))
        _create(stack, hs.machine_health_check(np))
        machines = stack.wait_for(
            lambda: stack.running_machines(h.infra_id, _pool_selector(np), np.replicas),
            f"{np.replicas} Machines of NodePool {np.name} Running",
            timeout=180,
        )
        _wait_pool(h, np, lambda: _md_complete(h, np), "MachineDeploymentComplete", timeout=60)
    md = h.get(MD_V1BETA1, np.name)
    assert md["metadata"]["annotations"][hs.NODEPOOL_ANNOTATION] == np.key
    # Written at v1beta1 as HyperShift does, stored at v1beta2 through CAPI's conversion webhook.
    md2 = h.get("machinedeployments.v1beta2.cluster.x-k8s.io", np.name)
    assert md2["spec"]["rollout"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert md2["spec"]["template"]["spec"]["infrastructureRef"] == {
        "apiGroup": hs.INFRA_GROUP,
        "kind": "MaasMachineTemplate",
        "name": template["metadata"]["name"],
    }
    _hypershift_template_pass(h, template)
    # CAPI copies the MachineDeployment's annotations to its MachineSets: that is how HyperShift's template
    # cleanup finds the MachineSets of a Replace NodePool.
    sets = items(stack.kubectl, MS_V1BETA1, h.ns, f"cluster.x-k8s.io/deployment-name={np.name}")
    assert [s["metadata"]["annotations"].get(hs.NODEPOOL_ANNOTATION) for s in sets] == [np.key]
    assert hs.templates_to_delete(np, sets, _templates(h)) == []
    _check_provisioned_pool(h, np, machines, template["metadata"]["name"])

    # The MachineHealthCheck HyperShift writes (v1beta1) is admitted, converted and selects the pool.
    def mhc_targets() -> list[str] | None:
        mhc = h.get("machinehealthchecks.cluster.x-k8s.io", np.name) or {}
        targets = sorted((mhc.get("status") or {}).get("targets") or [])
        return targets if len(targets) == np.replicas else None

    targets = stack.wait_for(mhc_targets, "MachineHealthCheck targets", timeout=60)
    assert targets == sorted(m["metadata"]["name"] for m in machines)
    mhc = h.get("machinehealthchecks.cluster.x-k8s.io", np.name)
    assert mhc["spec"]["checks"]["nodeStartupTimeoutSeconds"] == 1200
    assert stack.leaks() == []


def _why(h: Hosted, np: hs.NodePool) -> str:
    """The Machines of a pool with their phase and the conditions that gate availability (for failures)."""
    out = []
    for m in h.stack.machines(h.infra_id, _pool_selector(np)):
        conds = {c["type"]: c for c in (m.get("status") or {}).get("conditions") or []}
        parts = [f"{t}={conds[t]['status']}:{conds[t].get('message', '')[:80]!r}" for t in conds]
        out.append(f"{m['metadata']['name']} {m.get('status', {}).get('phase')} " + " ".join(parts))
    return "\n".join(out)


def _wait_pool(h: Hosted, np: hs.NodePool, check: Any, what: str, timeout: float) -> Any:
    try:
        return h.stack.wait_for(check, what, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_why(h, np)}") from None


def _md_complete(h: Hosted, np: hs.NodePool) -> dict[str, Any] | None:
    """HyperShift's ``MachineDeploymentComplete`` on the v1beta1 view it reads: updated = replicas =
    available = desired, observedGeneration current. This is when it records the NodePool's new template."""
    md = h.get(MD_V1BETA1, np.name)
    st = md.get("status") or {}
    want = md["spec"]["replicas"]
    counts = (st.get("updatedReplicas"), st.get("replicas"), st.get("availableReplicas"))
    done = counts == (want, want, want) and st.get("observedGeneration", 0) >= md["metadata"]["generation"]
    return md if done else None


def _ms_available(h: Hosted, np: hs.NodePool, n: int) -> dict[str, Any] | None:
    """What HyperShift copies to ``NodePool.status.replicas`` for an InPlace pool."""
    ms = h.get(MS_V1BETA1, np.name)
    return ms if (ms.get("status") or {}).get("availableReplicas") == n else None


def _hypershift_template_pass(h: Hosted, desired: dict[str, Any]) -> None:
    """HyperShift's ``CreateOrUpdate`` of an existing template on every NodePool pass: GET, set the desired
    spec (which lacks the fields our CRD defaults) and the annotation, full UPDATE. The CEL immutability rule
    on ``spec.template.spec`` must accept it and the spec must not change (defaulting fills the same values
    in); only the first pass writes at all (its field manager enters managedFields), later ones are no-ops."""
    name = desired["metadata"]["name"]
    versions = []
    for _ in range(2):
        current = h.get("maasmachinetemplate", name, "--show-managed-fields")
        updated = json.loads(json.dumps(current))
        updated["spec"] = desired["spec"]
        annotation = desired["metadata"]["annotations"][hs.NODEPOOL_ANNOTATION]
        updated["metadata"]["annotations"][hs.NODEPOOL_ANNOTATION] = annotation
        _update(h.stack, updated)
        after = h.get("maasmachinetemplate", name, "--show-managed-fields")
        assert after["spec"] == current["spec"]
        versions.append((current["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"]))
    assert versions[1][0] == versions[1][1], json.dumps([versions, after["metadata"].get("managedFields")])


def _templates(h: Hosted) -> list[dict[str, Any]]:
    return items(h.stack.kubectl, "maasmachinetemplates", h.ns)


def _hypershift_pass(h: Hosted, np: hs.NodePool) -> list[str]:
    """The template part of one NodePool reconcile (``capi.go`` ``Reconcile``): ``cleanupMachineTemplates``
    (each deleted template must be gone at once: no finalizer or anything else of ours holds it), then
    CreateOrUpdate of the NodePool's current template. Note the order: while CAPI has not yet made the
    MachineSet for a new template, the cleanup deletes that template too and the same pass recreates it.
    Returns the names deleted."""
    sets = items(h.stack.kubectl, MS_V1BETA1, h.ns)
    doomed = hs.templates_to_delete(np, sets, _templates(h))
    for name in doomed:
        t = h.get("maasmachinetemplate", name)
        assert not t["metadata"].get("finalizers"), t["metadata"]["finalizers"]
        assert {r["kind"] for r in t["metadata"].get("ownerReferences") or []} <= {"Cluster"}
        h.stack.kubectl("delete", "maasmachinetemplate", name, "-n", h.ns, "--wait=false")
        assert h.get("maasmachinetemplate", name) is None, f"template {name} still there after delete"
    desired = h.desired[np.name]
    if h.get("maasmachinetemplate", desired["metadata"]["name"]) is None:
        _create(h.stack, desired)
    return doomed


def _roll(h: Hosted, np: hs.NodePool, md_patch: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """HyperShift points the MachineDeployment somewhere new and keeps reconciling (template cleanup on every
    pass) until CAPI has replaced every Machine: new Machines Running, MachineDeploymentComplete, the old
    MaasMachines gone and their MAAS machines released. Returns the new Machines and the templates the
    cleanup deleted (each checked gone at once)."""
    stack = h.stack
    old = {mm["metadata"]["name"]: mm for mm in stack.maasmachines(h.infra_id, _pool_selector(np))}
    deleted: list[str] = []
    _patch(stack, MD_V1BETA1, np.name, md_patch)

    def rolled() -> list[dict[str, Any]] | None:
        deleted.extend(_hypershift_pass(h, np))
        ms = stack.running_machines(h.infra_id, _pool_selector(np), np.replicas)
        live = {mm["metadata"]["name"] for mm in stack.maasmachines(h.infra_id)}
        return ms if ms and not set(old) & ({m["metadata"]["name"] for m in ms} | live) else None

    machines: list[dict[str, Any]] = _wait_pool(h, np, rolled, "the rollout", timeout=180)
    _wait_pool(h, np, lambda: _md_complete(h, np), "MachineDeploymentComplete", timeout=60)
    # Released: no MAAS machine is held for an old MaasMachine any more (one may already be deployed again
    # for a new one: the simulator hands out the cheapest Ready machine).
    old_uids = {mm["metadata"]["uid"] for mm in old.values()}

    def released() -> bool:
        states = stack.sim.machine_states()
        return not [mm for mm in old.values() if states[mm["spec"]["systemID"]]["agent_name"] in old_uids]

    stack.wait_for(released, "old MAAS machines released", timeout=60)
    return machines, deleted


def test_replace_nodepool_rolls_to_a_new_template(hosted: Hosted) -> None:
    h, stack, np = hosted, hosted.stack, hosted.replace
    old_template = h.templates["replace-v1"]
    new = hs.machine_template(np, hs.machine_template_spec(min_memory=2048))
    new_name = new["metadata"]["name"]
    assert new_name != old_template
    h.templates["replace-v2"] = new_name
    h.desired[np.name] = new
    with stack.stage("Replace NodePool: roll 2 Machines to <nodepool>-<newhash>"):
        # HyperShift's pass: create the new template, then point the MachineDeployment at it.
        _create(stack, new)
        patch = {"spec": {"template": {"spec": {"infrastructureRef": {"name": new_name}}}}}
        machines, deleted = _roll(h, np, patch)
        # The old template goes once CAPI has deleted the old MachineSet (the last to reference it).

        def old_template_deleted() -> bool:
            deleted.extend(_hypershift_pass(h, np))
            return old_template in deleted

        stack.wait_for(old_template_deleted, "HyperShift's pass to delete the old template", timeout=30)
    assert deleted.count(old_template) == 1  # and gone at once (checked in the pass)
    flaps = deleted.count(new_name)
    print(f"HyperShift's cleanup deleted the target template {flaps}x before CAPI's MachineSet referenced it")
    assert set(deleted) <= {old_template, new_name}
    assert h.get("maasmachinetemplate", new_name) is not None
    _check_provisioned_pool(h, np, machines, new_name)
    assert stack.leaks() == []
    assert stack.invariants() == []


def test_replace_nodepool_release_upgrade_rolls_with_new_user_data(hosted: Hosted) -> None:
    """A release upgrade: a new ``user-data-<nodepool>-<hash>`` Secret and version on the MachineDeployment,
    the outdated Secret deleted at once (HyperShift keeps old user data only on AWS and KubeVirt)."""
    h, stack = hosted, hosted.stack
    np = h.replace = dataclasses.replace(h.replace, release_version="4.19.1")
    old_secret = h.user_data[np.name]
    secret, ign = _user_data(np, token=secrets.token_hex(16))
    new_secret = secret["metadata"]["name"]
    assert new_secret != old_secret
    h.user_data[np.name] = new_secret
    h.ignition[new_secret] = ign
    with stack.stage("Replace NodePool: release upgrade, roll 2 Machines (maxSurge 2) to new user data"):
        _create(stack, secret)
        # The NodePool also asks for maxSurge 2 (spec.management.replace.rollingUpdate), which HyperShift
        # writes to the strategy in the same pass: both Machines are replaced at once.
        patch = {
            "spec": {
                "strategy": {"rollingUpdate": {"maxSurge": 2}},
                "template": {"spec": {"version": "v1.33.2", "bootstrap": {"dataSecretName": new_secret}}},
            }
        }
        stack.kubectl("delete", "secret", old_secret, "-n", h.ns)  # token.go cleanupOutdated
        machines, deleted = _roll(h, np, patch)
    assert deleted == []
    assert {m["spec"]["version"] for m in machines} == {"v1.33.2"}
    _check_provisioned_pool(h, np, machines, h.templates["replace-v2"])
    assert stack.leaks() == []


def test_inplace_nodepool_new_template_applies_to_new_machines_only(hosted: Hosted) -> None:
    h, stack, np = hosted, hosted.stack, hosted.inplace
    t1 = hs.machine_template(np, hs.machine_template_spec())
    h.desired[np.name] = t1
    secret, ign = _user_data(np, token=secrets.token_hex(16))
    secret_name = secret["metadata"]["name"]
    h.user_data[np.name] = secret_name
    h.ignition[secret_name] = ign
    config_version = hs.hash_simple(f"{np.key}/{np.release_version}/config")
    with stack.stage("InPlace NodePool: 1 Machine Running (MachineSet)"):
        _create(stack, t1, secret)
        _create(stack, hs.machine_set(np, t1["metadata"]["name"], secret_name, config_version))
        (first,) = stack.wait_for(
            lambda: stack.running_machines(h.infra_id, _pool_selector(np), 1),
            f"the Machine of NodePool {np.name} Running",
            timeout=120,
        )
        _wait_pool(h, np, lambda: _ms_available(h, np, 1), "MachineSet availableReplicas 1", timeout=60)
    _check_provisioned_pool(h, np, [first], t1["metadata"]["name"])
    first_mm = h.get("maasmachine", first["metadata"]["name"])

    with stack.stage("InPlace NodePool: new template, old one deleted at once, machine kept"):
        t2 = hs.machine_template(np, hs.machine_template_spec(min_cpu=1))
        _create(stack, t2)
        patch = {"spec": {"template": {"spec": {"infrastructureRef": {"name": t2["metadata"]["name"]}}}}}
        _patch(stack, MS_V1BETA1, np.name, patch)
        # The MachineSet no longer references t1: HyperShift's next pass deletes it, while t1's clone runs.
        h.desired[np.name] = t2
        assert _hypershift_pass(h, np) == [t1["metadata"]["name"]]
        time.sleep(5)  # MachineSets do not roll: give CAPI (and capmaas) time to prove it
        now = h.get("maasmachine", first["metadata"]["name"])
        assert now["metadata"]["uid"] == first_mm["metadata"]["uid"]
        assert now["spec"]["systemID"] == first_mm["spec"]["systemID"]
        assert now["status"]["ready"] is True
        assert [m["metadata"]["name"] for m in stack.machines(h.infra_id, _pool_selector(np))] == [
            first["metadata"]["name"]
        ]

    # Token rotation rewrites the (mutable) user-data Secret in place; a scale-up gets the new template and
    # the rewritten Ignition, the running machine keeps what it was deployed with.
    rotated, rotated_ign = _user_data(np, token=secrets.token_hex(16))
    assert rotated["metadata"]["name"] == secret_name
    assert rotated_ign != ign
    with stack.stage("InPlace NodePool: rotated user data, scale 1 -> 2"):
        _update(stack, rotated)  # HyperShift's Update of the mutable Secret
        h.ignition[secret_name] = rotated_ign
        _patch(stack, MS_V1BETA1, np.name, {"spec": {"replicas": 2}})
        machines = stack.wait_for(
            lambda: stack.running_machines(h.infra_id, _pool_selector(np), 2),
            f"2 Machines of NodePool {np.name} Running",
            timeout=120,
        )
        _wait_pool(h, np, lambda: _ms_available(h, np, 2), "MachineSet availableReplicas 2", timeout=60)
    (second,) = [m for m in machines if m["metadata"]["name"] != first["metadata"]["name"]]
    _check_provisioned_pool(h, np, [second], t2["metadata"]["name"])
    assert _sim_user_data(h, first_mm["spec"]["systemID"]) == ign
    assert stack.leaks() == []


def test_managed_maascluster_untouched_after_provisioning(hosted: Hosted) -> None:
    """Five machines provisioned, rolled and released in its cluster: still not one write to it."""
    _assert_left_alone(hosted)


def test_hosted_cluster_deletion_releases_everything(hosted: Hosted) -> None:
    h, stack = hosted, hosted.stack
    sids = [mm["spec"]["systemID"] for mm in stack.maasmachines(h.infra_id)]
    assert len(sids) == h.replace.replicas + 2
    with stack.stage("delete the hosted cluster (Cluster → MD/MS → Machines → MAAS releases)"):
        stack.delete_cluster(h.infra_id, timeout=120)
        stack.wait_for(lambda: stack.ready_in_maas(sids), "every MAAS machine released", timeout=60)
    assert h.get("maascluster", h.infra_id) is None
    assert stack.maasmachines(h.infra_id) == []
    assert stack.leaks() == []
