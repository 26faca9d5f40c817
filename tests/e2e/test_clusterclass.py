"""ClusterClass end to end: the clusterctl repository's ``maas-default`` ClusterClass on the real CAPI core
manager with its topology controller (the ``ClusterTopology`` gate is on), the capmaas operator and the MAAS
simulator (fixture ``provider_stack``).

CAPI's topology controller does everything a ClusterClass user relies on: it stamps the MaasCluster out of
the MaasClusterTemplate and the MaasMachineTemplates out of the class's templates (with our patches applied),
creates the KubeadmControlPlane and the MachineDeployment, scales the MachineDeployment when the topology
says so, and when a variable changes it makes a *new* MaasMachineTemplate and rolls the machines onto it
(templates are immutable: the admission policy the chart installs is active here, and must let the topology
controller's dry runs through).

Two stand-ins, because no kubeadm controllers run in these tests (only their CRDs): the bootstrap provider's
part (each KubeadmConfig gets a data Secret and ``status.initialization.dataSecretCreated``) and the
control-plane provider's part (the KubeadmControlPlane's replicas become control-plane Machines whose
MaasMachines are cloned from the MaasMachineTemplate it names, as KCP does, and its status reports
initialized and the version). Neither touches a capmaas object's status or MAAS.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
from typing import Any

import pytest
import yaml
from e2e_support import (
    CAPI_API,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL,
    INFRA_API,
    INFRA_GROUP,
    Kubectl,
    ProviderStack,
    apply,
    bootstrap_secret,
    condition,
    get,
    items,
    patch_status,
)

from capmaas_dev import clusterctl_repo, crdgen

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

KCP_API = clusterctl_repo.KCP_API
TOPOLOGY_MD_LABEL = "topology.cluster.x-k8s.io/deployment-name"
VERSION = "v1.33.0"
KUBEADM_CRDS = (
    "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
    "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
    "kubeadmcontrolplanetemplates.controlplane.cluster.x-k8s.io",
)


class KubeadmStandIns:
    """The kubeadm bootstrap and control-plane providers' parts, for one cluster, on a background thread."""

    def __init__(self, kubectl: Kubectl, namespace: str, cluster: str) -> None:
        self.kubectl, self.ns, self.cluster = kubectl, namespace, cluster
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubeadm-stand-ins", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> KubeadmStandIns:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._bootstrap()
                self._control_plane()
            except AssertionError as exc:  # a kubectl call failed: keep going, report at the end
                self.errors.append(str(exc))

    def _selector(self) -> str:
        return f"{CLUSTER_NAME_LABEL}={self.cluster}"

    def _bootstrap(self) -> None:
        for cfg in items(self.kubectl, "kubeadmconfigs", self.ns, self._selector()):
            name = cfg["metadata"]["name"]
            if (cfg.get("status") or {}).get("dataSecretName"):
                continue
            secret = bootstrap_secret(name, self.ns, self.cluster, value=f"#cloud-config\n# {name}\n")
            apply(self.kubectl, secret)
            patch_status(
                self.kubectl,
                "kubeadmconfig",
                name,
                self.ns,
                {"initialization": {"dataSecretCreated": True}, "dataSecretName": name},
            )

    def _control_plane(self) -> None:
        for kcp in items(self.kubectl, "kubeadmcontrolplanes", self.ns, self._selector()):
            if kcp["metadata"].get("deletionTimestamp"):
                continue
            name = kcp["metadata"]["name"]
            spec = kcp["spec"]
            want = int(spec.get("replicas") or 1)
            ref = spec["machineTemplate"]["spec"]["infrastructureRef"]
            template = get(self.kubectl, "maasmachinetemplate", ref["name"], "-n", self.ns)
            if template is None:
                continue
            have = items(self.kubectl, "machines", self.ns, f"{self._selector()},{CONTROL_PLANE_LABEL}")
            for i in range(len(have), want):
                self._add_machine(kcp, f"{name}-{i}", template)
            # KCP reports initialized once kubeadm init ran on the first machine (its infrastructure is
            # provisioned: MAAS deployed it with the bootstrap data); CAPI connects to the workload cluster
            # only then, and only then can it find the machines' Nodes.
            running = [
                m
                for m in have
                if ((m.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned")
                and not m["metadata"].get("deletionTimestamp")
            ]
            if running:
                n = len(running)
                status = {
                    "initialization": {"controlPlaneInitialized": True},
                    "version": spec["version"],
                    "replicas": n,
                    "readyReplicas": n,
                    "availableReplicas": n,
                    "upToDateReplicas": n,
                }
                current = kcp.get("status") or {}
                if any(current.get(k) != v for k, v in status.items()):
                    patch_status(self.kubectl, "kubeadmcontrolplane", name, self.ns, status)

    def _add_machine(self, kcp: dict[str, Any], name: str, template: dict[str, Any]) -> None:
        labels = {CLUSTER_NAME_LABEL: self.cluster, CONTROL_PLANE_LABEL: ""}
        owner = {
            "apiVersion": KCP_API,
            "kind": "KubeadmControlPlane",
            "name": kcp["metadata"]["name"],
            "uid": kcp["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        maasmachine = {  # what KCP's clone of the template looks like (CAPI's GenerateTemplate)
            "apiVersion": INFRA_API,
            "kind": "MaasMachine",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "labels": labels,
                "annotations": {
                    "cluster.x-k8s.io/cloned-from-name": template["metadata"]["name"],
                    "cluster.x-k8s.io/cloned-from-groupkind": f"MaasMachineTemplate.{INFRA_GROUP}",
                },
                "ownerReferences": [owner],
            },
            "spec": copy.deepcopy(template["spec"]["template"]["spec"]),
        }
        machine = {
            "apiVersion": CAPI_API,
            "kind": "Machine",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels, "ownerReferences": [owner]},
            "spec": {
                "clusterName": self.cluster,
                "version": kcp["spec"]["version"],
                "bootstrap": {"dataSecretName": f"{self.cluster}-userdata"},
                "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasMachine", "name": name},
            },
        }
        apply(self.kubectl, maasmachine, machine)


@pytest.fixture
def clusterclass(provider_stack: ProviderStack, kubeadm_crds: None) -> str:
    """The repository's ClusterClass and its templates in the stack's namespace, reconciled by CAPI, with
    the template-immutability admission policy enforced."""
    stack = provider_stack
    # The contract labels CAPI's kustomization puts on the kubeadm CRDs (the module cache has the bare bases);
    # the ClusterClass controller resolves template apiVersions through them.
    for crd in KUBEADM_CRDS:
        stack.kubectl(
            "label", "crd", crd, "cluster.x-k8s.io/v1beta1=v1beta1", "cluster.x-k8s.io/v1beta2=v1beta2",
            "--overwrite",
        )  # fmt: skip
    stack.kubectl("apply", "-f", "-", input=crdgen.render_policy())
    docs = [d for d in yaml.safe_load_all(clusterctl_repo.clusterclass()) if d]
    for d in docs:
        d["metadata"]["namespace"] = stack.namespace
    apply(stack.kubectl, *docs)

    def reconciled() -> bool:
        cc = get(stack.kubectl, "clusterclass", clusterctl_repo.CLUSTER_CLASS, "-n", stack.namespace) or {}
        c = condition(cc, "VariablesReady")
        return bool(
            (cc.get("status") or {}).get("observedGeneration") == cc["metadata"]["generation"]
            and c
            and c["status"] == "True"
        )

    stack.wait_for(reconciled, "ClusterClass maas-default reconciled (VariablesReady)", timeout=120)
    return clusterctl_repo.CLUSTER_CLASS


def _topology_cluster(name: str, ns: str, *, md_replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": CAPI_API,
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "topology": {
                "classRef": {"name": clusterctl_repo.CLUSTER_CLASS},
                "version": VERSION,
                "controlPlane": {"replicas": 1},
                "workers": {
                    "machineDeployments": [
                        {"class": clusterctl_repo.WORKER_CLASS, "name": "md-0", "replicas": md_replicas}
                    ]
                },
                "variables": [
                    {"name": "dnsDomain", "value": "maas"},
                    {"name": "image", "value": "ubuntu/noble"},
                    {"name": "failureDomains", "value": ["az1", "az2", "az3"]},
                    {"name": "workerMachine", "value": {"minCPU": 2, "minMemory": 4096}},
                ],
            }
        },
    }


def _patch_cluster(stack: ProviderStack, name: str, patch: list[dict[str, Any]]) -> None:
    stack.kubectl("patch", "cluster", name, "-n", stack.namespace, "--type=json", "-p", json.dumps(patch))


def _md(stack: ProviderStack, cluster: str) -> dict[str, Any] | None:
    found = items(
        stack.kubectl,
        "machinedeployments",
        stack.namespace,
        f"{CLUSTER_NAME_LABEL}={cluster},{TOPOLOGY_MD_LABEL}=md-0",
    )
    return found[0] if len(found) == 1 else None


def _workers_on(stack: ProviderStack, cluster: str, template: str, n: int) -> list[dict[str, Any]] | None:
    """Exactly ``n`` worker Machines, all Running with a nodeRef, all cloned from ``template``; else None."""
    md = _md(stack, cluster)
    if md is None:
        return None
    machines = stack.running_machines(
        cluster, f"cluster.x-k8s.io/deployment-name={md['metadata']['name']}", n
    )
    if machines is None:
        return None
    mms = {mm["metadata"]["name"]: mm for mm in stack.maasmachines(cluster, "!" + CONTROL_PLANE_LABEL)}
    for m in machines:
        mm = mms.get(m["metadata"]["name"])
        if (
            mm is None
            or mm["metadata"].get("annotations", {}).get("cluster.x-k8s.io/cloned-from-name") != template
        ):
            return None
        if not (mm.get("status") or {}).get("ready"):
            return None
    return machines


def _capacity_counted(template: dict[str, Any]) -> bool:
    """``status.available`` counted in MAAS and a ``status.capacity`` of quantity strings at least the
    template's minimums (the smallest matching Ready server's, or the minimums when none is Ready)."""
    status = template.get("status") or {}
    capacity = status.get("capacity") or {}
    counted = any(
        c.get("type") == "MaasCapacity" and c.get("reason") in ("CountedInMaas", "NoMatchingServers")
        for c in status.get("conditions") or ()
    )
    if not counted or not isinstance(status.get("available"), int):
        return False
    assert all(isinstance(v, str) for v in capacity.values()), capacity
    assert int(capacity["cpu"]) >= 2, capacity
    assert capacity["memory"].endswith("Mi"), capacity
    assert int(capacity["memory"].removesuffix("Mi")) >= 4096, capacity
    return True


def _worker_template(stack: ProviderStack, cluster: str) -> str:
    md = _md(stack, cluster)
    assert md is not None
    return str(md["spec"]["template"]["spec"]["infrastructureRef"]["name"])


def _ready_replicas(stack: ProviderStack, cluster: str, n: int) -> dict[str, Any] | None:
    md = _md(stack, cluster)
    st = (md or {}).get("status") or {}
    counts = [st.get(k) for k in ("replicas", "readyReplicas", "availableReplicas", "upToDateReplicas")]
    return st if counts == [n] * 4 else None


def test_cluster_from_the_clusterclass_scales_rolls_and_deletes(
    provider_stack: ProviderStack, clusterclass: str
) -> None:
    stack = provider_stack
    ns = stack.namespace
    name = f"cc-{secrets.token_hex(3)}"
    stack.track_cluster(name)
    apply(stack.kubectl, bootstrap_secret(f"{name}-userdata", ns, name))
    stack.workload.publish_kubeconfig(stack.kubeconfig, ns, name)

    with KubeadmStandIns(stack.kubectl, ns, name) as standins:
        with stack.stage("ClusterClass Cluster: MaasCluster from the MaasClusterTemplate, ready"):
            apply(stack.kubectl, _topology_cluster(name, ns, md_replicas=2))

            def maascluster() -> dict[str, Any] | None:
                cluster = get(stack.kubectl, "cluster", name, "-n", ns) or {}
                ref = (cluster.get("spec") or {}).get("infrastructureRef") or {}
                mc = get(stack.kubectl, "maascluster", ref["name"], "-n", ns) if ref.get("name") else None
                return mc if mc and (mc.get("status") or {}).get("ready") else None

            mc = stack.wait_for(maascluster, f"the MaasCluster of {name} ready", timeout=90)
            assert mc["spec"]["dnsDomain"] == "maas"
            assert mc["spec"]["failureDomains"] == ["az1", "az2", "az3"]
            assert mc["metadata"]["labels"]["topology.cluster.x-k8s.io/owned"] == ""
            assert mc["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == clusterclass

        with stack.stage("control-plane Machine Running, Cluster ControlPlaneInitialized"):
            stack.wait_for(
                lambda: stack.running_machines(name, CONTROL_PLANE_LABEL, 1),
                "1 control-plane Machine Running",
            )

            def initialized() -> bool:
                c = condition(get(stack.kubectl, "cluster", name, "-n", ns), "ControlPlaneInitialized")
                return bool(c and c["status"] == "True")

            stack.wait_for(initialized, f"Cluster {name} ControlPlaneInitialized")
            [cp_mm] = stack.maasmachines(name, CONTROL_PLANE_LABEL)
            assert (cp_mm["status"] or {}).get("ready") is True

        with stack.stage("MachineDeployment md-0: 2 workers Ready from the class's MaasMachineTemplate"):
            stack.wait_for(lambda: _md(stack, name), "the topology's MachineDeployment md-0")
            v1 = _worker_template(stack, name)
            stack.wait_for(lambda: _workers_on(stack, name, v1, 2), "2 workers Running on the first template")
            stack.wait_for(lambda: _ready_replicas(stack, name, 2), "MachineDeployment: 2 replicas ready")
            tpl = get(stack.kubectl, "maasmachinetemplate", v1, "-n", ns)
            assert tpl["spec"]["template"]["spec"] == {
                "image": "ubuntu/noble",
                "minCPU": 2,
                "minMemory": 4096,
                "provisioningMode": "bare-metal",
            }
            # The operator published the template's capacity (autoscaler scale-from-zero), counted in MAAS:
            # the topology's template carries the Cluster's name, so its Ready servers are counted.
            stack.wait_for(
                lambda: _capacity_counted(get(stack.kubectl, "maasmachinetemplate", v1, "-n", ns)),
                f"status.capacity and status.available on {v1}",
            )

        with stack.stage("scale the MachineDeployment topology 2 -> 3"):
            _patch_cluster(
                stack,
                name,
                [
                    {
                        "op": "replace",
                        "path": "/spec/topology/workers/machineDeployments/0/replicas",
                        "value": 3,
                    }
                ],
            )
            stack.wait_for(lambda: _workers_on(stack, name, v1, 3), "3 workers Running", timeout=120)
            stack.wait_for(lambda: _ready_replicas(stack, name, 3), "MachineDeployment: 3 replicas ready")

        with stack.stage("change the workerMachine variable: new MaasMachineTemplate, rolling update"):
            old_uids = {m["metadata"]["uid"] for m in stack.maasmachines(name, "!" + CONTROL_PLANE_LABEL)}
            variables = get(stack.kubectl, "cluster", name, "-n", ns)["spec"]["topology"]["variables"]
            index = [v["name"] for v in variables].index("workerMachine")
            _patch_cluster(
                stack,
                name,
                [
                    {
                        "op": "replace",
                        "path": f"/spec/topology/variables/{index}/value",
                        "value": {"minCPU": 2, "minMemory": 2048},
                    }
                ],
            )

            def rotated() -> str | None:
                now = _worker_template(stack, name)
                return now if now != v1 else None

            v2 = stack.wait_for(rotated, "the topology's new worker template")
            assert (
                get(stack.kubectl, "maasmachinetemplate", v2, "-n", ns)["spec"]["template"]["spec"][
                    "minMemory"
                ]
                == 2048
            )
            workers = stack.wait_for(
                lambda: _workers_on(stack, name, v2, 3), "3 workers rolled onto the new template", timeout=240
            )
            stack.wait_for(
                lambda: _ready_replicas(stack, name, 3), "MachineDeployment: 3 replicas up to date"
            )
            new_uids = {m["metadata"]["uid"] for m in stack.maasmachines(name, "!" + CONTROL_PLANE_LABEL)}
            assert not (new_uids & old_uids), "every worker was replaced"
            assert len(workers) == 3
            assert stack.leaks() == []
            # The old template is immutable: a user edit is still refused (the policy is on).
            refused = stack.kubectl(
                "patch", "maasmachinetemplate", v2, "-n", ns, "--type=merge",
                "-p", '{"spec":{"template":{"spec":{"minCPU":4}}}}', check=False,
            )  # fmt: skip
            assert refused.returncode != 0
            assert "spec.template.spec is immutable" in refused.stderr

        standins.stop()
        assert standins.errors == [], standins.errors[:3]

    with stack.stage("delete the Cluster: every MAAS machine released"):
        system_ids = [mm["spec"]["systemID"] for mm in stack.maasmachines(name)]
        assert len(system_ids) == 4
        stack.delete_cluster(name, timeout=180)
        stack.wait_for(lambda: stack.ready_in_maas(system_ids), "the cluster's MAAS machines Ready again")
        stack.wait_for(lambda: stack.leaks() == [], "no leak after delete", timeout=60)
        assert stack.maasmachines(name) == []
    for secret in items(stack.kubectl, "secrets", ns, f"{CLUSTER_NAME_LABEL}={name}"):
        stack.kubectl("delete", "secret", secret["metadata"]["name"], "-n", ns, "--ignore-not-found")
