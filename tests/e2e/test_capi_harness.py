"""The harness itself, against the real Cluster API core manager: it starts and is healthy, its webhooks
admit, default and reject objects exactly as in an installed cluster (and only in its own namespace), and its
controllers clone MaasMachines from a MaasMachineTemplate and take a Machine to Running once a Node for it
appears in the workload stand-in.

No capmaas operator runs here: where the infrastructure provider has to act (MaasCluster provisioned, a
MaasMachine provisioned with a providerID) the test plays it by writing those fields by hand, and says so.
The e2e scenarios replace exactly those steps with the real operator and the MAAS simulator.
"""

from __future__ import annotations

import secrets
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
from e2e_support import (
    CLUSTER_NAME_LABEL,
    INFRA_GROUP,
    Kubectl,
    apply,
    bootstrap_secret,
    cluster,
    get,
    items,
    maascluster,
    maasmachinetemplate,
    machinedeployment,
    nudge_machine,
    patch_status,
    wait_for,
)

if TYPE_CHECKING:
    from capmaas_dev.devcluster.capi import CapiManager
    from capmaas_dev.devcluster.workload import WorkloadCluster

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

# Go's net.ParseCIDR error as CAPI's Cluster validating webhook reports it (the CRD schema has no CIDR check).
WEBHOOK_CIDR_ERROR = 'Invalid value: "not-a-cidr": invalid CIDR address: not-a-cidr'


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _provision_maascluster(kubectl: Kubectl, name: str, namespace: str) -> None:
    """PLAYING THE PROVIDER (no capmaas operator in the harness tests): mark the MaasCluster provisioned
    through its status subresource, both contract fields, as capmaas' cluster reconciler does."""
    patch_status(
        kubectl, "maascluster", name, namespace, {"ready": True, "initialization": {"provisioned": True}}
    )


def _delete_cluster(kubectl: Kubectl, name: str, namespace: str) -> None:
    """Delete the Cluster and wait until CAPI has removed it and everything it owns (its finalizer)."""
    kubectl("delete", "cluster", name, "-n", namespace, "--wait=false", "--ignore-not-found")
    wait_for(lambda: get(kubectl, "cluster", name, "-n", namespace) is None, f"Cluster {name} deleted")


def test_manager_starts_and_is_healthy(capi: CapiManager) -> None:
    assert capi.running()
    assert capi.healthy()
    with urllib.request.urlopen(capi.metrics_url, timeout=5) as resp:
        metrics = resp.read().decode()
    # Its controllers registered and run: controller-runtime exports one series per controller.
    for controller in ("cluster", "machine", "machineset", "machinedeployment"):
        assert f'controller="{controller}"' in metrics, controller
    assert "--leader-elect=false" not in capi.tail(0)  # tail(0) is empty: the log exists and is readable
    assert capi.log.is_file()
    assert capi.startup_seconds < 120
    print(f"CAPI manager ready in {capi.startup_seconds:.1f}s")  # timing for the issue notes


def test_cluster_is_accepted_and_reconciled(capi: CapiManager, kubectl: Kubectl) -> None:
    ns = capi.namespace
    assert ns is not None
    name = _name("accepted")
    apply(kubectl, maascluster(name, ns, endpoint_host="192.0.2.10"), cluster(name, ns))
    try:
        # The webhooks admitted it; the Cluster controller now owns the MaasCluster (contract §1.3 "Owner"),
        # puts its finalizer on the Cluster and reports the phase.
        def owned() -> dict[str, Any] | None:
            mc = get(kubectl, "maascluster", name, "-n", ns)
            refs = mc["metadata"].get("ownerReferences", [])
            return mc if any(r["kind"] == "Cluster" and r["name"] == name for r in refs) else None

        wait_for(owned, "the Cluster ownerRef on the MaasCluster")
        c = wait_for(lambda: get(kubectl, "cluster", name, "-n", ns).get("status", {}).get("phase") and get(
            kubectl, "cluster", name, "-n", ns), "Cluster phase")  # fmt: skip
        assert "cluster.cluster.x-k8s.io" in c["metadata"]["finalizers"]
        assert c["status"]["phase"] == "Provisioning"  # waits for the infra provider (none runs here)

        # Playing the provider: once the MaasCluster is provisioned CAPI copies the endpoint and moves on.
        _provision_maascluster(kubectl, name, ns)

        def provisioned() -> dict[str, Any] | None:
            c = get(kubectl, "cluster", name, "-n", ns)
            init = c.get("status", {}).get("initialization", {})
            return c if init.get("infrastructureProvisioned") else None

        c = wait_for(provisioned, "Cluster.status.initialization.infrastructureProvisioned")
        assert c["spec"]["controlPlaneEndpoint"] == {"host": "192.0.2.10", "port": 6443}
    finally:
        _delete_cluster(kubectl, name, ns)
    assert get(kubectl, "maascluster", name, "-n", ns) is None  # CAPI deleted the infra cluster with it


def test_invalid_cluster_is_rejected_by_the_webhook(
    capi: CapiManager, kubectl: Kubectl, namespace: str
) -> None:
    ns = capi.namespace
    assert ns is not None
    spec = {"clusterNetwork": {"pods": {"cidrBlocks": ["not-a-cidr"]}}}
    # Outside the manager's namespace (its webhooks are scoped to it) the apiserver's schema admits the
    # object: so the rejection below is CAPI's webhook, and the harness leaves other namespaces alone.
    elsewhere = cluster(_name("bad"), namespace, **spec)
    kubectl("create", "-f", "-", input=_json(elsewhere))
    kubectl("delete", "cluster", elsewhere["metadata"]["name"], "-n", namespace, "--wait=false")

    out = kubectl("create", "-f", "-", input=_json(cluster(_name("bad"), ns, **spec)), check=False)
    assert out.returncode != 0
    assert "spec.clusterNetwork.pods.cidrBlocks[0]" in out.stderr, out.stderr
    assert WEBHOOK_CIDR_ERROR in out.stderr, out.stderr


def test_machinedeployment_is_defaulted_and_clones_maasmachines(capi: CapiManager, kubectl: Kubectl) -> None:
    ns = capi.namespace
    assert ns is not None
    name = _name("md")
    template = f"{name}-workers-v1"
    apply(
        kubectl,
        maascluster(name, ns, endpoint_host="192.0.2.11"),
        cluster(name, ns),
        maasmachinetemplate(template, ns, tags=["e2e"]),
        bootstrap_secret(f"{name}-userdata", ns, name),
    )
    md = machinedeployment(
        f"{name}-md", ns, name, template, replicas=2, bootstrap_secret=f"{name}-userdata", version="1.33.0"
    )
    try:
        apply(kubectl, md)
        got = get(kubectl, "machinedeployment", f"{name}-md", "-n", ns)
        # CAPI's mutating webhook defaulted it (none of these were in the manifest).
        assert got["spec"]["template"]["spec"]["version"] == "v1.33.0"
        assert got["metadata"]["labels"][CLUSTER_NAME_LABEL] == name
        assert got["spec"]["selector"]["matchLabels"] == {
            CLUSTER_NAME_LABEL: name,
            "cluster.x-k8s.io/deployment-name": f"{name}-md",
        }
        assert got["spec"]["rollout"]["strategy"]["type"] == "RollingUpdate"

        _provision_maascluster(kubectl, name, ns)  # playing the provider, see the helper
        started = time.monotonic()
        sets = wait_for(
            lambda: items(kubectl, "machinesets", ns, f"{CLUSTER_NAME_LABEL}={name}"), "a MachineSet"
        )
        assert [r["name"] for r in sets[0]["metadata"]["ownerReferences"]] == [f"{name}-md"]
        machines = wait_for(
            lambda: len(m := items(kubectl, "machines", ns, f"{CLUSTER_NAME_LABEL}={name}")) == 2 and m,
            "2 Machines",
        )
        clones = wait_for(
            lambda: len(m := items(kubectl, "maasmachines", ns, f"{CLUSTER_NAME_LABEL}={name}")) == 2 and m,
            "2 MaasMachines cloned from the template",
        )
        print(f"MachineSet, 2 Machines, 2 MaasMachines in {time.monotonic() - started:.1f}s")
        assert sorted(c["metadata"]["name"] for c in clones) == sorted(
            m["metadata"]["name"] for m in machines
        )
        for mm in clones:
            meta = mm["metadata"]
            assert meta["annotations"]["cluster.x-k8s.io/cloned-from-name"] == template
            assert (
                meta["annotations"]["cluster.x-k8s.io/cloned-from-groupkind"]
                == f"MaasMachineTemplate.{INFRA_GROUP}"
            )
            assert meta["labels"]["capmaas.e2e/from-template"] == template  # spec.template.metadata
            assert meta["labels"]["cluster.x-k8s.io/deployment-name"] == f"{name}-md"  # from the Machine
            # The template's spec (provisioningMode is the CRD's schema default, applied on create).
            assert mm["spec"] == {
                "image": "ubuntu/noble",
                "minCPU": 2,
                "minMemory": 4096,
                "tags": ["e2e"],
                "provisioningMode": "bare-metal",
            }
            assert mm["apiVersion"] == f"{INFRA_GROUP}/v1beta1"  # from the CRD's contract label

        def machine_owned(mm: dict[str, Any]) -> bool:
            cur = get(kubectl, "maasmachine", mm["metadata"]["name"], "-n", ns)
            refs = cur["metadata"].get("ownerReferences", [])
            return [(r["kind"], r.get("controller")) for r in refs] == [("Machine", True)]

        # The MachineSet owns a fresh clone; the Machine controller then takes over (contract §1.5).
        for mm in clones:
            wait_for(lambda mm=mm: machine_owned(mm), f"Machine ownership of {mm['metadata']['name']}")
        tmpl = get(kubectl, "maasmachinetemplate", template, "-n", ns)
        assert any(r["kind"] == "Cluster" for r in tmpl["metadata"].get("ownerReferences", []))

        # Without a provider the Machines wait for the infrastructure; bootstrap is ready (dataSecretName).
        # The Machine controller sets the phase on its first reconcile, which may come after the ownership
        # above: read the Machines once every one has a phase (the reads are in-process now, faster than the
        # kubectl forks that used to leave the controller that time).
        def phased() -> list[dict[str, Any]] | None:
            found = items(kubectl, "machines", ns, f"{CLUSTER_NAME_LABEL}={name}")
            return found if found and all((m.get("status") or {}).get("phase") for m in found) else None

        for m in wait_for(phased, "a phase on every Machine"):
            assert m["spec"]["bootstrap"]["dataSecretName"] == f"{name}-userdata"
            assert m["status"].get("phase") in {"Pending", "Provisioning"}
    finally:
        _delete_cluster(kubectl, name, ns)
    assert items(kubectl, "maasmachines", ns, f"{CLUSTER_NAME_LABEL}={name}") == []


def test_machine_reaches_running_with_a_workload_node(
    capi: CapiManager, kubectl: Kubectl, kube: Any, workload: WorkloadCluster
) -> None:
    """The workload stand-in: a ``<cluster>-kubeconfig`` Secret and a Ready Node with the Machine's providerID
    give the Machine a nodeRef and phase Running, exactly as a kubelet on a deployed machine would."""
    ns = capi.namespace
    assert ns is not None
    name = _name("run")
    template = f"{name}-v1"
    hostname = f"{name}-host"
    provider_id = f"maas://zone-a/{secrets.token_hex(3)}"
    apply(
        kubectl,
        maascluster(name, ns, endpoint_host="192.0.2.12"),
        cluster(name, ns),
        maasmachinetemplate(template, ns),
        bootstrap_secret(f"{name}-userdata", ns, name),
    )
    try:
        assert workload.publish_kubeconfig(kube.kubeconfig, ns, name) == f"{name}-kubeconfig"
        secret = get(kubectl, "secret", f"{name}-kubeconfig", "-n", ns)
        assert secret["type"] == "cluster.x-k8s.io/secret"
        assert secret["metadata"]["labels"] == {CLUSTER_NAME_LABEL: name}
        _provision_maascluster(kubectl, name, ns)
        apply(
            kubectl,
            machinedeployment(
                f"{name}-md", ns, name, template, replicas=1, bootstrap_secret=f"{name}-userdata"
            ),
        )
        mm = wait_for(
            lambda: items(kubectl, "maasmachines", ns, f"{CLUSTER_NAME_LABEL}={name}"), "a MaasMachine"
        )[0]
        mm_name = mm["metadata"]["name"]

        # PLAYING THE PROVIDER: what capmaas writes once MAAS has deployed the machine.
        kubectl(
            "patch",
            "maasmachine",
            mm_name,
            "-n",
            ns,
            "--type=merge",
            "-p",
            _json({"spec": {"providerID": provider_id}}),
        )
        patch_status(
            kubectl,
            "maasmachine",
            mm_name,
            ns,
            {
                "ready": True,
                "initialization": {"provisioned": True},
                "addresses": [
                    {"type": "Hostname", "address": hostname},
                    {"type": "InternalDNS", "address": hostname},
                ],
            },
        )
        # What the deployed machine's kubelet would do (here with the providerID already on it; in the
        # e2e scenarios capmaas writes it onto a Node registered without one).
        started = time.monotonic()
        workload.register_node(
            hostname, addresses=[("Hostname", hostname), ("InternalIP", "10.0.0.21")], provider_id=provider_id
        )

        nudged = [time.monotonic()]

        def running() -> dict[str, Any] | None:
            m = get(kubectl, "machine", mm_name, "-n", ns)
            if m.get("status", {}).get("phase") == "Running":
                return m
            if time.monotonic() - nudged[0] >= 1.0:  # no control plane: CAPI watches no Node (nudge_machine)
                nudge_machine(kubectl, mm_name, ns)
                nudged[0] = time.monotonic()
            return None

        machine = wait_for(running, "the Machine Running", timeout=120)
        print(f"Machine Running {time.monotonic() - started:.1f}s after the Node registered")
        assert machine["status"]["nodeRef"]["name"] == hostname
        assert machine["spec"]["providerID"] == provider_id
        assert {"type": "InternalDNS", "address": hostname} in machine["status"]["addresses"]
        node = workload.node(hostname)
        assert node is not None
        # CAPI reached into the workload cluster: it annotates the Node with its Machine.
        wait_for(
            lambda: (
                (workload.node(hostname) or {})
                .get("metadata", {})
                .get("annotations", {})
                .get("cluster.x-k8s.io/machine")
                == mm_name
            ),
            "CAPI's cluster.x-k8s.io/machine annotation on the Node",
        )
    finally:
        _delete_cluster(kubectl, name, ns)
        workload.remove_node(hostname)


def _json(obj: dict[str, Any]) -> str:
    import json

    return json.dumps(obj)
