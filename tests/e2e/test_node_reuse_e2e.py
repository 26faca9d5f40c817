"""Node reuse on a rollout (issue 24 item 2) end to end: the real CAPI core manager rolls MachineDeployments
to new MaasMachineTemplates, capmaas releases and allocates in the MAAS simulator, the workload stand-in plays
the kubelets.

Both MachineDeployments roll with ``maxSurge: 0`` (delete an old Machine, then create its replacement), the
order node reuse needs. Their first templates ask for big servers and ``releaseOptions.erase``; the new ones
ask for small servers, so a fresh allocation would take cheaper servers than the old ones (MAAS hands out
the cheapest match): getting the same servers back is reuse, not chance.
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
    maasmachinetemplate,
    machinedeployment,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.k8s]

RECORD = "capmaas.infrastructure.cluster.x-k8s.io/reusable-machines"
#: The first 3 MaasMachines of a ``nodeReuse`` template find no released server recorded and wait
#: ``CAPMAAS_MACHINE__REUSE_WAIT`` (60 s by default) before they take fresh ones: 20 s here, which still takes
#: that path. In a rollout with ``maxSurge: 0`` the old MaasMachine's release is recorded before its finalizer
#: goes, so a new one waits at most for the operator's watch to bring the MaasCluster (seconds; 20 s leaves
#: room for a loaded CI box); the wait ending first would allocate a fresh server and fail the test, not pass
#: it.
E2E_OPERATOR_ENV = {"CAPMAAS_MACHINE__REUSE_WAIT": "20"}


def _template(name: str, ns: str, *, min_cpu: int, node_reuse: bool, erase: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {"releaseOptions": {"erase": True}} if erase else {}
    t = maasmachinetemplate(name, ns, minCPU=min_cpu, **extra)
    t["spec"]["nodeReuse"] = node_reuse
    return t


def _deployment(name: str, ns: str, cluster: str, template: str) -> dict[str, Any]:
    md = machinedeployment(name, ns, cluster, template, replicas=3, bootstrap_secret=f"{cluster}-userdata")
    md["spec"]["rollout"] = {
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    }
    return md


def _system_ids(stack: ProviderStack, cluster: str, md: str, template: str) -> set[str] | None:
    """The system IDs of ``md``'s 3 Machines once all run and all come from ``template`` (else None)."""
    selector = f"{DEPLOYMENT_NAME_LABEL}={md}"
    if stack.running_machines(cluster, selector, 3) is None:
        return None
    mms = stack.maasmachines(cluster, selector)
    if len(mms) != 3 or any(
        mm["metadata"]["annotations"].get("cluster.x-k8s.io/cloned-from-name") != template for mm in mms
    ):
        return None
    sids = {(mm.get("spec") or {}).get("systemID") for mm in mms}
    return {s for s in sids if s} if None not in sids and len(sids) == 3 else None


def _roll(stack: ProviderStack, cluster: str, md: str, template: str) -> set[str]:
    patch = {"spec": {"template": {"spec": {"infrastructureRef": {"name": template}}}}}
    stack.kubectl(
        "patch", "machinedeployment", md, "-n", stack.namespace, "--type=merge", "-p", json.dumps(patch)
    )
    return stack.wait_for(
        lambda: _system_ids(stack, cluster, md, template), f"{md} rolled to {template}", timeout=300
    )


def _released(stack: ProviderStack, sids: set[str]) -> dict[str, list[bool]]:
    """For each of ``sids``: whether each release MAAS acted on erased the disks."""
    log: list[tuple[str, bool]] = stack.sim.call(lambda sim: list(sim.release_log))
    return {s: [erased for sid, erased in log if sid == s] for s in sids}


def test_a_rollout_with_node_reuse_gets_the_same_servers_back(provider_stack: ProviderStack) -> None:
    stack = provider_stack
    ns = stack.namespace
    cluster = f"reuse-{secrets.token_hex(3)}"
    with stack.stage("Cluster + control-plane Machine Running"):
        stack.create_cluster(cluster)
    kept, plain = f"{cluster}-kept", f"{cluster}-plain"
    apply(
        stack.kubectl,
        _template(f"{kept}-v1", ns, min_cpu=8, node_reuse=True, erase=True),
        _template(f"{plain}-v1", ns, min_cpu=32, node_reuse=False, erase=True),
        _deployment(kept, ns, cluster, f"{kept}-v1"),
        _deployment(plain, ns, cluster, f"{plain}-v1"),
    )
    with stack.stage("two MachineDeployments of 3 Running"):
        kept_before = stack.wait_for(
            lambda: _system_ids(stack, cluster, kept, f"{kept}-v1"), f"{kept} Running", timeout=180
        )
        plain_before = stack.wait_for(
            lambda: _system_ids(stack, cluster, plain, f"{plain}-v1"), f"{plain} Running", timeout=180
        )

    apply(stack.kubectl, _template(f"{kept}-v2", ns, min_cpu=2, node_reuse=True, erase=False))
    with stack.stage("nodeReuse: rolled to a new template, the same 3 servers"):
        kept_after = _roll(stack, cluster, kept, f"{kept}-v2")
    assert kept_after == kept_before
    assert _released(stack, kept_before) == {s: [False] for s in kept_before}  # no erase sent
    mc = stack.kubectl("get", "maascluster", cluster, "-n", ns, "-o", "json")
    assert json.loads(mc.stdout)["metadata"].get("annotations", {}).get(RECORD) is None  # all consumed

    apply(stack.kubectl, _template(f"{plain}-v2", ns, min_cpu=2, node_reuse=False, erase=False))
    with stack.stage("without nodeReuse: rolled to a new template, new servers"):
        plain_after = _roll(stack, cluster, plain, f"{plain}-v2")
    assert not plain_after & plain_before
    assert _released(stack, plain_before) == {s: [True] for s in plain_before}  # releaseOptions.erase

    wait_for(lambda: stack.leaks() == [], "no leak or double allocation after the rollouts", timeout=60)
    with stack.stage("delete the Cluster: every MAAS machine released"):
        stack.delete_cluster(cluster)
        stack.wait_for(lambda: stack.allocations() == {}, "no MAAS machine allocated", timeout=60)
    assert stack.invariants() == []
