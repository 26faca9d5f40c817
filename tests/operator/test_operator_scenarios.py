"""The operator against the real apiserver, one CAPI situation per test (the test plays CAPI core)."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from operator_harness import Harness, workload_node

from capmaas.api import conditions as C
from capmaas_dev import demo
from capmaas_dev.devcluster.workload import kubeconfig_secret
from capmaas_dev.simulator import Faults, Timings

pytestmark = pytest.mark.k8s


async def ready(h: Harness, name: str) -> bool:
    return bool(await h.field("maasmachines", name, "status", "ready"))


def reason_is(h: Harness, plural: str, name: str, type_: str, reason: str) -> Any:
    async def check() -> bool:
        c = await h.condition(plural, name, type_)
        return c is not None and c["reason"] == reason

    return check


async def test_paused_cluster_is_left_alone_until_unpaused(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.k(
        "patch",
        "clusters.cluster.x-k8s.io",
        "c1",
        "-n",
        h.namespace,
        "--type=merge",
        "-p",
        '{"spec":{"paused":true}}',
    )
    await h.machine("w0", cp=False)
    await h.wait("Paused condition", reason_is(h, "maasmachines", "w0", C.PAUSED_CONDITION, C.PAUSED_REASON))
    mm = await h.get("maasmachines", "w0")
    assert mm is not None
    assert "systemID" not in mm["spec"]
    assert h.sim.machines_by_agent(mm["metadata"]["uid"]) == []
    await h.k(
        "patch",
        "clusters.cluster.x-k8s.io",
        "c1",
        "-n",
        h.namespace,
        "--type=merge",
        "-p",
        '{"spec":{"paused":false}}',
    )
    await h.wait("Ready after unpause", lambda: ready(h, "w0"))


async def test_externally_managed_maascluster_is_not_touched(harness: Harness) -> None:
    h = harness
    h.operator.start()
    mc = demo.maascluster("c1", h.namespace, annotations={"cluster.x-k8s.io/managed-by": "hypershift"})
    await h.cluster(maascluster=mc, provision=False)
    await h.machine("w0", cp=False, bootstrap=False)  # something else to do, proving the operator is running
    await h.wait(
        "the operator to be working",
        reason_is(h, "maasmachines", "w0", C.READY_CONDITION, C.WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON),
    )
    got = await h.get("maasclusters", "c1")
    assert got is not None
    assert not got["metadata"].get("finalizers")
    assert not got.get("status")
    assert "controlPlaneEndpoint" not in got["spec"]


async def test_custom_endpoint_skips_dns(harness: Harness) -> None:
    h = harness
    h.operator.start()
    mc = demo.maascluster("c1", h.namespace, endpoint_host="api.example.test")
    await h.cluster(maascluster=mc)
    c = await h.condition("maasclusters", "c1", C.DNS_READY_CONDITION)
    assert c is not None
    assert c["reason"] == C.CUSTOM_ENDPOINT_REASON
    assert h.sim.state.dns_resources == {}
    assert await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint") == {
        "host": "api.example.test",
        "port": 6443,
    }


async def test_delete_for_move_leaves_the_maas_machine_alone(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("Ready", lambda: ready(h, "w0"))
    sid = await h.field("maasmachines", "w0", "spec", "systemID")
    # clusterctl move pauses the Cluster before it deletes anything (only then is the annotation honoured).
    await h.k("patch", "clusters", "c1", "-n", h.namespace, "--type=merge", "-p", '{"spec":{"paused":true}}')
    await h.k(
        "annotate", "maasmachines", "w0", "-n", h.namespace, "clusterctl.cluster.x-k8s.io/delete-for-move="
    )
    await h.k("delete", "maasmachines", "w0", "-n", h.namespace, "--wait=false")

    async def gone() -> bool:
        return await h.get("maasmachines", "w0") is None

    await h.wait("deleted", gone)
    assert h.sim.machine(sid)["status_name"] == "Deployed"


async def test_waits_for_bootstrap_data_then_deploys_when_the_machine_gets_it(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False, bootstrap=False)
    await h.wait(
        "WaitingForBootstrapData",
        reason_is(h, "maasmachines", "w0", C.READY_CONDITION, C.WAITING_FOR_BOOTSTRAP_DATA_REASON),
    )
    assert await h.field("maasmachines", "w0", "spec", "systemID") is None
    await h.apply(demo.bootstrap_secret("w0-bootstrap", h.namespace, "c1"))
    patch = {"spec": {"bootstrap": {"dataSecretName": "w0-bootstrap", "configRef": None}}}
    await h.k(
        "patch", "machines.cluster.x-k8s.io", "w0", "-n", h.namespace, "--type=merge", "-p", json.dumps(patch)
    )
    await h.wait("Ready", lambda: ready(h, "w0"))


async def test_identity_secret_missing_then_bad_then_good(harness: Harness) -> None:
    h = harness
    h.operator.env.pop("CAPMAAS_MAAS__API_KEY")
    h.operator.env.pop("CAPMAAS_MAAS__ENDPOINT")
    h.operator.start()
    mc = demo.maascluster("c1", h.namespace, identity="maas-creds")
    await h.cluster(maascluster=mc, provision=False)
    await h.wait(
        "IdentitySecretNotFound",
        reason_is(h, "maasclusters", "c1", C.MAAS_CONNECTED_CONDITION, C.IDENTITY_SECRET_NOT_FOUND_REASON),
    )
    bad_key = "aaaa:bbbb:cccccccccccccccc"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "maas-creds", "namespace": h.namespace},
        "stringData": {"MAAS_ENDPOINT": h.url, "MAAS_API_KEY": bad_key},
    }
    await h.apply(secret)
    await h.wait(
        "InvalidCredentials",
        reason_is(h, "maasclusters", "c1", C.MAAS_CONNECTED_CONDITION, C.INVALID_CREDENTIALS_REASON),
        within=90,
    )
    secret["stringData"] = {"endpoint": h.url, "api-key": h.sim.api_key}  # the legacy key names
    await h.k("delete", "secret", "maas-creds", "-n", h.namespace)
    await h.apply(secret)

    async def mc_ready() -> bool:
        return bool(await h.field("maasclusters", "c1", "status", "ready"))

    await h.wait("MaasCluster ready with the rotated Secret", mc_ready, within=90)
    everything = (await h.k("get", "maasclusters,events", "-n", h.namespace, "-o", "yaml")).stdout
    for key in (bad_key, h.sim.api_key):
        assert key not in everything
        assert key.split(":")[2] not in h.operator.log.read_text()


async def test_no_matching_machine_names_the_constraints(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("big", cp=False, min_cpu=4000)
    await h.wait(
        "NoMachineAvailable",
        reason_is(h, "maasmachines", "big", C.READY_CONDITION, C.NO_MACHINE_AVAILABLE_REASON),
    )
    c = await h.condition("maasmachines", "big", C.READY_CONDITION)
    assert c is not None
    assert "cpu_count=4000" in c["message"]


class FailFirstDeploy(Faults):
    def __init__(self) -> None:
        super().__init__()
        self.failed = 0

    def deploy_fails(self) -> bool:
        self.failed += 1
        return self.failed == 1


async def test_failed_deployment_is_retried_on_another_machine(harness: Harness) -> None:
    h = harness
    h.sim.faults = FailFirstDeploy()
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("Ready", lambda: ready(h, "w0"), within=60)
    mm = await h.get("maasmachines", "w0")
    assert mm is not None
    assert mm["status"]["attempts"] == 2
    reasons = (
        await h.k("get", "events", "-n", h.namespace, "-o", "jsonpath={.items[*].reason}")
    ).stdout.split()
    assert C.DEPLOYMENT_FAILED_REASON in reasons
    owned = h.sim.machines_by_agent(mm["metadata"]["uid"])
    assert [m["system_id"] for m in owned] == [mm["spec"]["systemID"]]
    assert h.sim.check_invariants() == []


async def test_deploy_timeout_replaces_the_machine_then_gives_up(harness: Harness) -> None:
    h = harness
    h.sim.timings = Timings(deploy=3600.0, release=0.3)
    h.operator.env.update(CAPMAAS_MACHINE__DEPLOY_TIMEOUT="2", CAPMAAS_MACHINE__MAX_DEPLOY_ATTEMPTS="2")
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait(
        "RetriesExhausted",
        reason_is(h, "maasmachines", "w0", C.READY_CONDITION, C.RETRIES_EXHAUSTED_REASON),
        within=60,
    )
    mm = await h.get("maasmachines", "w0")
    assert mm is not None
    assert h.sim.machines_by_agent(mm["metadata"]["uid"]) == []  # nothing leaked
    reasons = (
        await h.k("get", "events", "-n", h.namespace, "-o", "jsonpath={.items[*].reason}")
    ).stdout.split()
    assert C.DEPLOYMENT_TIMED_OUT_REASON in reasons


async def test_powered_off_machine_is_powered_on(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("Ready", lambda: ready(h, "w0"))
    sid = await h.field("maasmachines", "w0", "spec", "systemID")
    h.sim.state.machines[sid].power_state = "off"  # the BMC reports it off (e.g. someone pulled the plug)
    h.sim.state.machines[sid].cached_json = None

    async def powered_on_by_us() -> bool:
        return any(op == "power_on" for (_, _, op) in h.sim.counters)

    await h.wait("a power_on request", powered_on_by_us, within=30)
    assert await h.field("maasmachines", "w0", "status", "ready") is True  # never flipped back
    await h.wait(
        "powered on again",
        reason_is(h, "maasmachines", "w0", C.MACHINE_PROVISIONED_CONDITION, C.PROVISIONED_REASON),
        within=30,
    )
    reasons = (
        await h.k("get", "events", "-n", h.namespace, "-o", "jsonpath={.items[*].reason}")
    ).stdout.split()
    assert C.MACHINE_POWERED_OFF_REASON in reasons
    assert h.sim.machine(sid)["power_state"] == "on"


async def test_operator_restart_mid_provisioning_allocates_once(harness: Harness) -> None:
    h = harness
    h.sim.timings = Timings(deploy=4.0, release=0.3)
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)

    async def allocated() -> bool:
        return bool(await h.field("maasmachines", "w0", "spec", "systemID"))

    await h.wait("allocated", allocated)
    assert h.operator.proc is not None
    h.operator.proc.send_signal(signal.SIGKILL)
    h.operator.stop(kill=True)
    h.operator.start()
    await h.wait("Ready after restart", lambda: ready(h, "w0"))
    allocations = sum(n for (method, _, op), n in h.sim.counters.items() if op == "allocate")
    assert allocations == 1
    uid = await h.uid("maasmachines", "w0")
    assert len(h.sim.machines_by_agent(uid)) == 1


async def test_node_provider_id_is_set_in_the_workload_cluster(harness: Harness, workload_kube: Any) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    kubeconfig = workload_kube.kubeconfig.read_bytes()
    # CAPI's kubeconfig Secret (type cluster.x-k8s.io/secret, cluster-name label): the only kind trusted.
    secret = kubeconfig_secret("c1-kubeconfig", h.namespace, "c1", kubeconfig)
    await h.apply(secret)
    await h.machine("w0", cp=False)
    await h.wait("Ready", lambda: ready(h, "w0"))
    hostname = await h.field("maasmachines", "w0", "status", "hostname")
    pid = await h.field("maasmachines", "w0", "spec", "providerID")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": hostname}}
    await h.k("apply", "-f", "-", "--kubeconfig", str(workload_kube.kubeconfig), input=yaml.safe_dump(node))

    got: dict[str, Any] = {}

    async def patched() -> bool:
        got.update(await workload_node(workload_kube, hostname))
        return bool(got.get("spec", {}).get("providerID") == pid)

    try:
        await h.wait("Node providerID", patched, within=90)
        # The topology labels came in the same patch as the providerID.
        m = h.sim.machine(await h.field("maasmachines", "w0", "spec", "systemID"))
        labels = got["metadata"].get("labels") or {}
        assert labels.get("topology.kubernetes.io/zone") == m["zone"]["name"], labels
        assert labels.get("topology.kubernetes.io/region") == urlsplit(h.url).hostname, labels  # MAAS's host
        assert labels.get("capmaas.infrastructure.cluster.x-k8s.io/machine-type") == "baremetal", labels
    finally:
        await h.k("delete", "node", hostname, "--kubeconfig", str(workload_kube.kubeconfig), check=False)


async def test_watch_filter_and_namespace_are_honoured(harness: Harness) -> None:
    h = harness
    h.operator.extra_args = ["--watch-filter", "capmaas.test/shard=a"]
    h.operator.start()
    mc = demo.maascluster("c1", h.namespace)
    mc["metadata"]["labels"] = {"capmaas.test/shard": "a"}
    await h.cluster(maascluster=mc)
    await h.machine("w0", cp=False)  # no shard label: another instance's
    await h.machine("w1", cp=False)
    await h.k("label", "maasmachines", "w1", "-n", h.namespace, "capmaas.test/shard=a")
    await h.wait("the labelled machine Ready", lambda: ready(h, "w1"))
    other = await h.get("maasmachines", "w0")
    assert other is not None
    assert not other.get("status")
    assert not other["metadata"].get("finalizers")
    assert h.sim.machines_by_agent(other["metadata"]["uid"]) == []
    # A MaasCluster in another namespace is outside --namespace: never touched.
    elsewhere = f"{h.namespace}-x"
    await h.k("create", "namespace", elsewhere)
    try:
        await h.k(
            "apply", "-n", elsewhere, "-f", "-", input=yaml.safe_dump(demo.maascluster("c2", elsewhere))
        )
        await asyncio.sleep(3)
        got = json.loads((await h.k("get", "maasclusters", "c2", "-n", elsewhere, "-o", "json")).stdout)
        assert not got.get("status")
        assert not got["metadata"].get("finalizers")
    finally:
        await h.k("delete", "namespace", elsewhere, "--wait=false", check=False)
