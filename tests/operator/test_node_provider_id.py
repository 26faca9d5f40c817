"""Node providerID on the workload cluster when the Node already carries someone else's: never overwritten.

``capmaas run`` against the real apiserver; a second apiserver plays the workload cluster. The happy path (an
empty providerID is set) is ``test_operator_scenarios.test_node_provider_id_is_set_in_the_workload_cluster``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml
from operator_harness import Harness

from capmaas.api import conditions as C
from capmaas_dev.devcluster.workload import kubeconfig_secret

pytestmark = pytest.mark.k8s

FOREIGN = "aws:///us-east-1a/i-0123456789abcdef0"


@pytest.fixture
def operator_env(operator_env: dict[str, str]) -> dict[str, str]:
    operator_env["CAPMAAS_MACHINE__NODE_RETRY"] = "1"  # look for the Node every second, not every 30
    return operator_env


async def test_a_node_with_another_provider_id_keeps_it_and_gets_a_warning_event(
    harness: Harness, workload_kube: Any
) -> None:
    h = harness
    wk = str(workload_kube.kubeconfig)
    h.operator.start()
    await h.cluster()
    # CAPI's kubeconfig Secret (type cluster.x-k8s.io/secret, cluster-name label): the only kind trusted.
    secret = kubeconfig_secret("c1-kubeconfig", h.namespace, "c1", workload_kube.kubeconfig.read_bytes())
    await h.apply(secret)
    await h.machine("w0", cp=False)

    async def ready() -> bool:
        return bool(await h.field("maasmachines", "w0", "status", "ready"))

    await h.wait("Ready", ready)
    hostname = await h.field("maasmachines", "w0", "status", "hostname")
    ours = await h.field("maasmachines", "w0", "spec", "providerID")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": hostname},
        "spec": {"providerID": FOREIGN},
    }
    await h.k("apply", "-f", "-", "--kubeconfig", wk, input=yaml.safe_dump(node))

    async def conflict_events() -> list[dict[str, Any]]:
        r = await h.k(
            "get", "events", "-n", h.namespace, "-o", "json",
            "--field-selector", "involvedObject.name=w0,reason=NodeProviderIDConflict",
        )  # fmt: skip
        return list(json.loads(r.stdout)["items"])

    async def warned() -> bool:
        return bool(await conflict_events())

    try:
        await h.wait("NodeProviderIDConflict Event", warned, within=60)
        await asyncio.sleep(3)  # several Node retry periods: still untouched, still one Event
        r = await h.k("get", "node", hostname, "-o", "jsonpath={.spec.providerID}", "--kubeconfig", wk)
        assert r.stdout.strip() == FOREIGN
        events = await conflict_events()
        assert len(events) == 1, events
        assert events[0]["type"] == "Warning"
        assert events[0].get("count", 1) == 1, events
        assert FOREIGN in events[0]["message"]
        assert ours in events[0]["message"]
        assert "left unchanged" in events[0]["message"]
        ready_cond = await h.condition("maasmachines", "w0", C.READY_CONDITION)
        assert ready_cond is not None
        assert ready_cond["status"] == "True"
    finally:
        await h.k("delete", "node", hostname, "--kubeconfig", wk, check=False)
