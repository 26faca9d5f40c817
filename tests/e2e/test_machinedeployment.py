"""MachineDeployments and MachineHealthChecks end to end: the real CAPI core manager, the capmaas operator and
the MAAS simulator (fixture ``provider_stack``, see ``conftest``). Nothing here plays a controller: CAPI
creates Machines and clones MaasMachines, capmaas allocates and deploys them in MAAS, and the workload
stand-in registers a Node for each deployed machine (the kubelet's part), on which capmaas sets the
providerID so CAPI can set ``nodeRef`` and call the Machine Running.

Every stage is timed (``[e2e timing]`` lines with ``-s``, and the "e2e stage timings" terminal summary).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from e2e_support import (
    DEPLOYMENT_NAME_LABEL,
    ProviderStack,
    apply,
    get,
    items,
    maasmachinetemplate,
    machinedeployment,
    machinehealthcheck,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _patch_md(stack: ProviderStack, name: str, patch: dict[str, Any]) -> None:
    stack.kubectl(
        "patch", "machinedeployment", name, "-n", stack.namespace, "--type=merge", "-p", json.dumps(patch)
    )


def _provisioned(stack: ProviderStack, cluster: str, md: str, count: int) -> dict[str, dict[str, Any]]:
    """Wait for exactly ``count`` Machines of ``md`` Running with a nodeRef, and check each against its
    MaasMachine, its MAAS machine and its workload Node. Returns MaasMachine name -> facts."""
    selector = f"{DEPLOYMENT_NAME_LABEL}={md}"
    machines = stack.wait_for(
        lambda: stack.running_machines(cluster, selector, count),
        f"{count} Machines of {md} Running with a nodeRef",
        timeout=180,
    )
    mms = {mm["metadata"]["name"]: mm for mm in stack.maasmachines(cluster, selector)}
    assert sorted(mms) == sorted(m["metadata"]["name"] for m in machines)
    states = stack.machine_states()
    facts: dict[str, dict[str, Any]] = {}
    for m in machines:
        name = m["metadata"]["name"]
        mm = mms[name]
        sid = mm["spec"]["systemID"]
        maas = states[sid]
        # The MAAS machine is deployed for this MaasMachine (agent_name = its UID) ...
        assert maas["status_name"] == "Deployed", (name, maas)
        assert maas["agent_name"] == mm["metadata"]["uid"], (name, maas)
        # ... its providerID reached the Machine, and the Node the kubelet (stand-in) registered under the
        # machine's hostname got that providerID from capmaas.
        assert mm["spec"]["providerID"] == f"maas://{maas['zone']}/{sid}"
        assert m["spec"]["providerID"] == mm["spec"]["providerID"]
        assert m["status"]["nodeRef"]["name"] == maas["hostname"] == mm["status"]["hostname"]
        node = stack.workload.node(maas["hostname"])
        assert node is not None
        assert node["spec"]["providerID"] == mm["spec"]["providerID"]
        # capmaas chose the zone (no failureDomain on the Machine) and recorded where MAAS put it.
        assert mm["spec"]["failureDomain"] == mm["status"]["failureDomain"] == maas["zone"]
        assert {"type": "InternalDNS", "address": maas["hostname"]} in mm["status"]["addresses"]
        facts[name] = {"uid": mm["metadata"]["uid"], "system_id": sid, "zone": maas["zone"], "mm": mm}
    return facts


def _md_available(stack: ProviderStack, md: str, n: int) -> None:
    """CAPI counts ``n`` Ready and available replicas of the MachineDeployment (its v1beta2 status)."""

    def status() -> dict[str, Any] | None:
        st = (get(stack.kubectl, "machinedeployment", md, "-n", stack.namespace) or {}).get("status") or {}
        counts = [st.get(k) for k in ("replicas", "readyReplicas", "availableReplicas", "upToDateReplicas")]
        return st if counts == [n] * 4 else None

    try:
        stack.wait_for(
            status, f"MachineDeployment {md}: {n} replicas ready, available, up to date", timeout=120
        )
    except AssertionError as exc:
        got = get(stack.kubectl, "machinedeployment", md, "-n", stack.namespace) or {}
        machines = items(stack.kubectl, "machines", stack.namespace, f"{DEPLOYMENT_NAME_LABEL}={md}")
        conds = [(m["metadata"]["name"], (m.get("status") or {}).get("conditions")) for m in machines[:1]]
        raise AssertionError(f"{exc}\nMD status: {got.get('status')}\nMachine conditions: {conds}") from exc


def _gone(stack: ProviderStack, cluster: str, names: set[str]) -> bool:
    left = {m["metadata"]["name"] for m in stack.machines(cluster)}
    left |= {mm["metadata"]["name"] for mm in stack.maasmachines(cluster)}
    return not (left & names)


def _no_leaks(stack: ProviderStack, what: str) -> None:
    """MAAS and the live MaasMachines agree one to one (allocations settle right after a deletion)."""
    wait_for(lambda: stack.leaks() == [], f"no leak or double allocation {what}", timeout=60)
    assert stack.invariants() == []


def test_machinedeployment_provisions_scales_and_rolls(provider_stack: ProviderStack) -> None:
    stack = provider_stack
    ns = stack.namespace
    cluster = _name("md")
    md = f"{cluster}-workers"
    with stack.stage("Cluster + MaasCluster ready, control-plane Machine Running (ControlPlaneInitialized)"):
        stack.create_cluster(cluster)

    v1 = f"{cluster}-v1"
    apply(stack.kubectl, maasmachinetemplate(v1, ns))
    apply(
        stack.kubectl,
        machinedeployment(md, ns, cluster, v1, replicas=3, bootstrap_secret=f"{cluster}-userdata"),
    )
    with stack.stage("MachineDeployment of 3: 3 Machines Running with nodeRef, MD available"):
        first = _provisioned(stack, cluster, md, 3)
        _md_available(stack, md, 3)
    print(f"zones of the 3 workers: {sorted(f['zone'] for f in first.values())}")
    _no_leaks(stack, "with 3 workers")

    with stack.stage("scale 3 -> 5: 5 Machines Running"):
        _patch_md(stack, md, {"spec": {"replicas": 5}})
        five = _provisioned(stack, cluster, md, 5)
        _md_available(stack, md, 5)
    assert set(first) <= set(five)  # scaling up keeps the machines it had
    _no_leaks(stack, "with 5 workers")

    with stack.stage("scale 5 -> 2: 3 Machines deleted, their MAAS machines released and Ready"):
        _patch_md(stack, md, {"spec": {"replicas": 2}})
        two = _provisioned(stack, cluster, md, 2)
        removed = set(five) - set(two)
        assert len(removed) == 3
        stack.wait_for(lambda: _gone(stack, cluster, removed), "the 3 scaled-down MaasMachines gone")
        released = [five[n]["system_id"] for n in removed]
        stack.wait_for(lambda: stack.ready_in_maas(released), f"{released} Ready in MAAS", timeout=60)
    allocations = stack.allocations()
    assert all(five[n]["uid"] not in allocations for n in removed)
    _no_leaks(stack, "after scaling down")
    for n in removed:  # CAPI deleted the Nodes of the deleted Machines in the workload cluster
        stack.wait_for(
            lambda n=n: stack.workload.node(stack.machine_states()[five[n]["system_id"]]["hostname"]) is None,
            f"Node of {n} deleted",
            timeout=60,
        )

    v2 = f"{cluster}-v2"
    apply(stack.kubectl, maasmachinetemplate(v2, ns, minMemory=8192))
    with stack.stage("roll to a new MaasMachineTemplate: 2 new Machines Running, old ones gone"):
        _patch_md(stack, md, {"spec": {"template": {"spec": {"infrastructureRef": {"name": v2}}}}})

        def rolled() -> dict[str, dict[str, Any]] | None:
            ms = stack.running_machines(cluster, f"{DEPLOYMENT_NAME_LABEL}={md}", 2)
            if ms is None or {m["metadata"]["name"] for m in ms} & set(two):
                return None
            return {m["metadata"]["name"]: m for m in ms} if _gone(stack, cluster, set(two)) else None

        stack.wait_for(rolled, "2 Machines from the new template, the old 2 gone", timeout=240)
        new = _provisioned(stack, cluster, md, 2)
        _md_available(stack, md, 2)
    for f in new.values():
        mm = f["mm"]
        assert mm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == v2
        assert mm["spec"]["minMemory"] == 8192
    allocations = stack.allocations()
    assert all(two[n]["uid"] not in allocations for n in two)  # the replaced machines hold nothing in MAAS
    _no_leaks(stack, "after the rollout")
    assert len(allocations) == len(stack.maasmachines(cluster)) == 3  # 2 workers + the control plane

    with stack.stage("delete the Cluster: every MAAS machine released"):
        stack.delete_cluster(cluster)
        stack.wait_for(lambda: stack.allocations() == {}, "no MAAS machine allocated", timeout=60)
    assert stack.invariants() == []
    assert stack.maasmachines(cluster) == []


def test_machinehealthcheck_remediates_an_unhealthy_node(provider_stack: ProviderStack) -> None:
    stack = provider_stack
    ns = stack.namespace
    cluster = _name("mhc")
    md = f"{cluster}-workers"
    with stack.stage("Cluster (identityRef credentials) + a control-plane Machine Running"):
        stack.create_cluster(cluster, identity=True)
    template = f"{cluster}-v1"
    apply(stack.kubectl, maasmachinetemplate(template, ns))
    apply(
        stack.kubectl,
        machinedeployment(md, ns, cluster, template, replicas=2, bootstrap_secret=f"{cluster}-userdata"),
        machinehealthcheck(md, ns, cluster, md, timeout=5),
    )
    with stack.stage("MachineDeployment of 2 Running, MachineHealthCheck sees 2 healthy"):
        before = _provisioned(stack, cluster, md, 2)

        def healthy() -> bool:
            mhc = get(stack.kubectl, "machinehealthcheck", md, "-n", ns) or {}
            st = mhc.get("status") or {}
            return st.get("expectedMachines") == 2 and st.get("currentHealthy") == 2

        stack.wait_for(healthy, "MachineHealthCheck currentHealthy 2", timeout=120)
    _no_leaks(stack, "before remediation")
    # The MaasCluster's identityRef credentials did the work: MAAS has its user as the owner (the first
    # test's machines belong to the operator's default credentials, the admin user).
    owners = {stack.machine_states()[sid]["owner"] for sids in stack.allocations().values() for sid in sids}
    assert owners == {cluster}

    victim = sorted(before)[0]
    sid, uid = before[victim]["system_id"], before[victim]["uid"]
    hostname = stack.machine_states()[sid]["hostname"]
    with stack.stage("Node NotReady -> MHC remediation: Machine deleted, MAAS machine released"):
        stack.workload.set_ready(hostname, False)  # the kubelet stopped reporting Ready
        stack.wait_for(
            lambda: _gone(stack, cluster, {victim}), f"unhealthy Machine {victim} deleted", timeout=120
        )
        # Released by capmaas: MAAS no longer holds it for the deleted MaasMachine (it may already serve the
        # replacement, under that MaasMachine's UID).
        stack.wait_for(lambda: uid not in stack.allocations(), f"{sid} released", timeout=60)
        state = stack.machine_states()[sid]
        assert state["agent_name"] != uid
    with stack.stage("replacement Machine Running"):
        after = _provisioned(stack, cluster, md, 2)
    assert victim not in after
    assert set(before) - {victim} <= set(after)
    _no_leaks(stack, "after remediation")
    # Who did what, from the Machine's events: CAPI's health check and drain, capmaas' release.
    events = stack.kubectl(
        "get", "events", "-n", ns, f"--field-selector=involvedObject.name={victim}", "-o", "json"
    )
    reasons = {e.get("reason") for e in json.loads(events.stdout)["items"]}
    assert {"MachineMarkedUnhealthy", "MachineReleased"} <= reasons, reasons

    with stack.stage("delete the Cluster: every MAAS machine released"):
        stack.delete_cluster(cluster)
        stack.wait_for(lambda: stack.allocations() == {}, "no MAAS machine allocated", timeout=60)
    assert stack.invariants() == []
