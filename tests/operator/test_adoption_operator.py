"""Adopting a machine MAAS already shows Deployed (issue 24 item 3), end to end.

``capmaas run`` against the real apiserver, the simulator over loopback HTTP, a second apiserver as the
workload cluster. A machine deployed by hand (allocated with no agent name, deployed, by the MAAS user of the
operator's identity) is named in ``spec.adopt`` of a MaasMachine whose Machine has no bootstrap data: the
simulator records no allocate, no deploy and no power request for it; the MaasMachine is Ready, the workload
Node gets the providerID, the machine carries capmaas's marker. A second MaasMachine naming it, and one naming
a machine that is only Ready, are refused with a condition and an Event. Deleting the adopter releases the
machine with its releaseOptions.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml
from operator_harness import Harness, workload_node

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.reconcilers.adoption import MARKER_PREFIX
from capmaas_dev import demo
from capmaas_dev.devcluster.workload import kubeconfig_secret
from capmaas_dev.simulator.models import NodeStatus

pytestmark = pytest.mark.k8s

WRITES = ("allocate", "deploy", "power_on", "power_off", "release", "mark_broken")


def sent(h: Harness, op: str) -> int:
    return sum(n for (method, _, o), n in h.sim.counters.items() if method == "POST" and o == op)


async def deploy_by_hand(h: Harness) -> str:
    async with maas.MaasClient(h.url, api_key=h.sim.api_key) as c:
        m = await c.machines.allocate(maas.AllocateConstraints(not_pod_type=("lxd",)))
        await c.machines.deploy(m.system_id, user_data=demo.CLOUD_CONFIG)

    async def deployed() -> bool:
        return bool(h.sim.machine(m.system_id)["status_name"] == "Deployed")

    await h.wait("deployed by hand", deployed, within=30)
    return m.system_id


async def adopter(h: Harness, name: str, sid: str, **spec: Any) -> None:
    await h.machine(name, cp=False, bootstrap=False)
    patch = {"spec": {"adopt": {"systemID": sid}, **spec}}
    await h.k("patch", "maasmachine", name, "-n", h.namespace, "--type=merge", "-p", json.dumps(patch))


async def events(h: Harness, name: str, reason: str) -> list[dict[str, Any]]:
    r = await h.k(
        "get", "events", "-n", h.namespace, "-o", "json",
        "--field-selector", f"involvedObject.name={name},reason={reason}",
    )  # fmt: skip
    return list(json.loads(r.stdout)["items"])


async def has_events(h: Harness, name: str, reason: str) -> bool:
    return bool(await events(h, name, reason))


async def test_a_deployed_machine_is_adopted_without_a_deploy_then_released_on_delete(
    harness: Harness, workload_kube: Any
) -> None:
    h = harness
    wk = str(workload_kube.kubeconfig)
    h.operator.start()
    await h.cluster()
    await h.apply(
        kubeconfig_secret("c1-kubeconfig", h.namespace, "c1", workload_kube.kubeconfig.read_bytes())
    )
    sid = await deploy_by_hand(h)
    hostname = h.sim.machine(sid)["hostname"]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": hostname}}
    await h.k("apply", "-f", "-", "--kubeconfig", wk, input=yaml.safe_dump(node))
    ready_sid = h.sim.machines_in(NodeStatus.READY)[0]
    h.sim.reset_counters()
    try:
        await adopter(h, "a0", sid, releaseOptions={"scripts": ["wipe-disks"]})

        async def ready() -> bool:
            return bool(await h.field("maasmachines", "a0", "status", "ready"))

        await h.wait("adopted and Ready", ready, within=60)
        pid = await h.field("maasmachines", "a0", "spec", "providerID")
        assert await h.field("maasmachines", "a0", "spec", "systemID") == sid
        assert pid == f"maas://{h.sim.machine(sid)['zone']['name']}/{sid}"

        async def node_patched() -> bool:
            return await workload_node(workload_kube, hostname, "spec", "providerID") == pid

        await h.wait("Node providerID", node_patched, within=90)
        assert {op: sent(h, op) for op in WRITES} == dict.fromkeys(WRITES, 0)  # nothing deployed or powered
        uid = await h.uid("maasmachines", "a0")
        assert MARKER_PREFIX + uid in h.sim.machine(sid)["workload_annotations"]
        assert await events(h, "a0", "MachineAdopted")

        # Refusals: the same machine again (held by a0), and a machine that is only Ready.
        await adopter(h, "a1", sid)
        await adopter(h, "a2", ready_sid)

        async def refused(name: str, reason: str) -> bool:
            c = await h.condition("maasmachines", name, C.MACHINE_PROVISIONED_CONDITION)
            return c is not None and c.get("reason") == reason

        await h.wait("a1 refused", lambda: refused("a1", C.ADOPTION_HELD_ELSEWHERE_REASON), within=60)
        await h.wait("a2 refused", lambda: refused("a2", C.ADOPTION_NOT_DEPLOYED_REASON), within=60)
        # The Events are written after the conditions (a moment later on a loaded box): waited for, then
        # asserted as before.
        for name, reason in (
            ("a1", C.ADOPTION_HELD_ELSEWHERE_REASON),
            ("a2", C.ADOPTION_NOT_DEPLOYED_REASON),
        ):
            await h.wait(f"{name}'s {reason} Event", lambda n=name, r=reason: has_events(h, n, r), within=30)
        assert await events(h, "a1", C.ADOPTION_HELD_ELSEWHERE_REASON)
        assert await events(h, "a2", C.ADOPTION_NOT_DEPLOYED_REASON)
        await asyncio.sleep(2)  # several passes: still refused, nothing sent
        assert {op: sent(h, op) for op in WRITES} == dict.fromkeys(WRITES, 0)
        assert await h.field("maasmachines", "a1", "spec", "systemID") is None
        assert h.sim.machine(ready_sid)["status_name"] == "Ready"
        assert "Traceback" not in h.operator.tail(400)  # refusals are conditions, not exceptions

        # Deleting the refused ones releases nothing; deleting a0 releases the machine (wipe-disks ran).
        await h.k("delete", "maasmachine", "a1", "a2", "-n", h.namespace, "--wait=false")

        async def gone(*names: str) -> bool:
            return all([await h.get("maasmachines", n) is None for n in names])

        await h.wait("refused adopters deleted", lambda: gone("a1", "a2"), within=60)
        assert sent(h, "release") == 0
        assert h.sim.machine(sid)["status_name"] == "Deployed"
        await h.k("delete", "maasmachine", "a0", "-n", h.namespace, "--wait=false")
        await h.wait("a0 deleted", lambda: gone("a0"), within=60)
        assert sent(h, "release") == 1
        assert h.sim.machine(sid)["status_name"] in ("Disk erasing", "Ready")
        assert not h.sim.machine(sid)["workload_annotations"]
        assert h.sim.machine(sid)["owner"] is None or h.sim.machine(sid)["status_name"] == "Disk erasing"
    finally:
        await h.k("delete", "node", hostname, "--kubeconfig", wk, check=False)
