"""MaasCluster: endpoint DNS follows the control plane (never emptied while it exists); failure domains."""

from __future__ import annotations

from typing import Any

from reconciler_env import Env

from capmaas.api import conditions as C
from capmaas.reconcilers.cluster import DELETE_RECHECK_SECONDS
from capmaas.reconcilers.keys import CLUSTER_FINALIZER as FINALIZER
from capmaas_dev import demo


def dns(env: Env) -> dict[str, list[str]]:
    return {r.name: sorted(r.ips) for r in env.sim.state.dns_resources.values()}


def cp(env: Env, name: str, ip: str, *, state: str = "Deployed", powered: bool = True) -> None:
    body = demo.maasmachine(name, "ns", "c1", control_plane=True)
    body["spec"]["systemID"] = f"sid-{name}"  # a MaasMachine holding no machine has no address to publish
    body["status"] = {
        "machineState": state,
        "machinePowered": powered,
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "ExternalIP", "address": ip}],
    }
    env.kube.add("maasmachines", body)


def cond(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == type_)


async def reconcile(env: Env) -> dict[str, Any]:
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    return env.kube.get("maasclusters", "c1")


async def test_dns_follows_running_control_plane_and_survives_a_power_flap(env: Env) -> None:
    mc = await env.cluster()
    host = mc["spec"]["controlPlaneEndpoint"]["host"]
    assert host.endswith(".maas")
    assert mc["status"]["ready"] is True
    assert mc["status"]["initialization"] == {"provisioned": True}
    assert {d["name"] for d in mc["status"]["failureDomains"]} >= {"az1", "az2", "az3"}
    assert FINALIZER in mc["metadata"]["finalizers"]
    short = host.split(".")[0]
    assert dns(env) == {short: []}

    cp(env, "cp0", "10.0.0.10")
    cp(env, "cp1", "10.0.0.11")
    await reconcile(env)
    assert dns(env) == {short: ["10.0.0.10", "10.0.0.11"]}

    # Both briefly powered off: the record keeps its addresses instead of going empty.
    for n in ("cp0", "cp1"):
        env.kube.get("maasmachines", n)["status"]["machinePowered"] = False
    mc = await reconcile(env)
    assert dns(env) == {short: ["10.0.0.10", "10.0.0.11"]}
    assert mc["status"]["ready"] is True  # never flipped back

    # Control plane gone entirely, then the cluster deleted: the record is removed with it.
    for n in ("cp0", "cp1"):
        del env.kube.objects[("maasmachines", "ns", n)]
    env.kube.get("maasclusters", "c1")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert dns(env) == {}
    assert ("maasclusters", "ns", "c1") not in env.kube.objects


async def test_spec_failure_domains_win_over_discovery(env: Env) -> None:
    env.kube.add("clusters", demo.cluster("c1", "ns"))
    body = demo.maascluster("c1", "ns", cluster_uid=env.kube.get("clusters", "c1")["metadata"]["uid"])
    body["spec"]["failureDomains"] = ["az2"]
    env.kube.add("maasclusters", body)
    mc = await reconcile(env)
    assert mc["status"]["failureDomains"] == [{"name": "az2", "controlPlane": True}]
    c = next(c for c in mc["status"]["conditions"] if c["type"] == C.FAILURE_DOMAINS_DISCOVERED_CONDITION)
    assert c["reason"] == C.FAILURE_DOMAINS_FROM_SPEC_REASON


async def test_waits_for_the_cluster_owner_without_a_finalizer(env: Env) -> None:
    env.kube.add("maasclusters", demo.maascluster("c1", "ns"))
    mc = await reconcile(env)
    assert not mc["metadata"].get("finalizers")
    c = next(c for c in mc["status"]["conditions"] if c["type"] == C.READY_CONDITION)
    assert c["reason"] == C.WAITING_FOR_CLUSTER_OWNER_REASON
    assert env.requests() == 0


async def test_deleting_with_machines_left_looks_again_without_being_woken(env: Env) -> None:
    # The wake-up for "a MaasMachine went away" finds the MaasCluster through the Cluster; once the Cluster is
    # gone first, nothing wakes the MaasCluster, so it must re-check on its own (not wait for the resync).
    await env.cluster()
    env.kube.add("maasmachines", demo.maasmachine("w0", "ns", "c1", control_plane=False))
    del env.kube.objects[("clusters", "ns", "c1")]
    env.kube.get("maasclusters", "c1")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    result = await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert result.after == DELETE_RECHECK_SECONDS
    mc = env.kube.get("maasclusters", "c1")
    c = next(c for c in mc["status"]["conditions"] if c["type"] == C.READY_CONDITION)
    assert (c["reason"], c["message"]) == (C.DELETING_REASON, "waiting for 1 MaasMachines to go")
    assert FINALIZER in mc["metadata"]["finalizers"]
    del env.kube.objects[("maasmachines", "ns", "w0")]
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert ("maasclusters", "ns", "c1") not in env.kube.objects


async def test_an_empty_cache_at_start_up_does_not_end_the_deletion(env: Env) -> None:
    """At start-up kopf may run the MaasCluster's handler before the MaasMachines' own watch filled the cache:
    the MaasMachines still need this MaasCluster (their credentials) to release their servers, so its
    finalizer stays while the apiserver lists any."""
    await env.cluster()
    env.kube.add("maasmachines", demo.maasmachine("w0", "ns", "c1", control_plane=False))
    env.kube.unlisted.add("w0")  # the apiserver has it, the cache not yet
    env.kube.get("maasclusters", "c1")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    result = await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert result.after == DELETE_RECHECK_SECONDS
    mc = env.kube.get("maasclusters", "c1")
    assert FINALIZER in mc["metadata"]["finalizers"]
    c = next(c for c in mc["status"]["conditions"] if c["type"] == C.READY_CONDITION)
    assert (c["reason"], c["message"]) == (
        C.DELETING_REASON,
        "waiting for the MaasMachines the apiserver lists to go",
    )
    assert env.kube.lists == 1
    env.kube.unlisted.clear()
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert env.kube.lists == 1  # the cache names it: no LIST
    del env.kube.objects[("maasmachines", "ns", "w0")]
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert ("maasclusters", "ns", "c1") not in env.kube.objects
    assert env.kube.lists == 2


async def test_endpoint_is_in_spec_before_status_says_provisioned(env: Env) -> None:
    """CAPI copies ``spec.controlPlaneEndpoint`` once the MaasCluster reports provisioned: every status write
    that says ready must find the endpoint already stored (spec is written before status in a pass)."""
    seen: list[tuple[bool, str | None]] = []
    real_patch = env.kube.patch

    async def recording_patch(plural: Any, namespace: str, name: str, body: Any, *, status: bool) -> Any:
        if plural == "maasclusters" and status and body["status"].get("ready"):
            stored = env.kube.get("maasclusters", name, namespace)
            seen.append((True, stored.get("spec", {}).get("controlPlaneEndpoint", {}).get("host")))
        return await real_patch(plural, namespace, name, body, status=status)

    env.kube.patch = recording_patch  # type: ignore[method-assign]
    mc = await env.cluster()
    assert mc["status"]["ready"] is True
    assert len(seen) == 1
    assert seen[0][1] == mc["spec"]["controlPlaneEndpoint"]["host"]


async def test_settings_applied_names_the_go_fields_maas_cannot_apply(env: Env) -> None:
    mc = await env.cluster()
    assert cond(mc, C.SETTINGS_APPLIED_CONDITION)["status"] == "True"
    spec = env.kube.get("maasclusters", "c1")["spec"]
    spec["lxdConfig"] = {"storageBackend": "zfs", "storageSize": "50G", "networkBridge": "br0"}
    mc = await reconcile(env)
    c = cond(mc, C.SETTINGS_APPLIED_CONDITION)
    assert (c["status"], c["reason"]) == ("False", C.NO_MAAS_EQUIVALENT_REASON)
    for name in ("storageBackend", "storageSize", "networkBridge"):
        assert f"spec.lxdConfig.{name}" in c["message"]
    assert "nicParent" not in c["message"]  # named as written, not in its canonical spelling
    assert mc["status"]["ready"] is True  # informational: the cluster still works
    del env.kube.get("maasclusters", "c1")["spec"]["lxdConfig"]
    mc = await reconcile(env)
    assert cond(mc, C.SETTINGS_APPLIED_CONDITION)["status"] == "True"
