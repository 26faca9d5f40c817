"""Issue 21, attack 8, on the real apiserver: one tenant's objects cannot hold another tenant's requests.

The attacker (``kubectl --as=mallory``) creates a fleet of MaasMachines in its namespace; the operator's
work for such a fleet is a stream of status writes (priority 0: what a user watching a roll-out reads). The
victim, in another namespace, needs one Secret read and one metadata patch (priority 1) for its one machine.
The operator's real Kubernetes client (:class:`~capmaas.operator.kubehttp.KubeHttp`, 16 connections, the
admin identity as the operator's ServiceAccount would be) sends both to the real kube-apiserver.

The bound is a count of the attacker's writes done while the victim waited, never a time: under load
everything is slower, the order is not. Before the fix (strict priority, first come first served inside it)
the victim's two requests were served only after the attacker's whole stream (the test's ``remaining`` was 0
and the victim had waited for ~1,850 writes); namespaces now take turns inside a priority, priorities age and
one namespace holds at most 14 of the 16 connections.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from security_support import Tenant

from capmaas.operator.kubehttp import KubeHttp

pytestmark = pytest.mark.k8s

API = "infrastructure.cluster.x-k8s.io/v1beta1"
FLEET = 48  # the attacker's MaasMachines, each written by one of the stream's writers
EACH = 40  # status writes per attacker machine


def maasmachine(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "MaasMachine",
        "metadata": {"name": name},
        "spec": {"image": "ubuntu/jammy", "minCPU": 2, "minMemory": 4096},
    }


@pytest.fixture
def victim(kubectl: Any, namespace: str) -> Iterator[str]:
    """The other tenant's namespace: one MaasMachine and its identity Secret."""
    ns = f"{namespace[:50]}-v"
    kubectl("create", "namespace", ns)
    kubectl("create", "-n", ns, "-f", "-", input=json.dumps(maasmachine("m0")))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "identity"},
        "data": {"MAAS_ENDPOINT": base64.b64encode(b"http://127.0.0.1:1/MAAS").decode()},
    }
    kubectl("create", "-n", ns, "-f", "-", input=json.dumps(secret))
    yield ns
    kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


async def test_a_tenants_fleet_does_not_hold_another_tenants_requests(
    kube: Any, crds: None, tenant: Tenant, victim: str
) -> None:
    fleet = {"apiVersion": "v1", "kind": "List", "items": [maasmachine(f"m{i}") for i in range(FLEET)]}
    await tenant.ak("create", "-f", "-", input=json.dumps(fleet))

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kube.kubeconfig), client_configuration=cfg)
    http = KubeHttp(cfg, connections=16)
    done = 0
    established = asyncio.Event()  # the stream fills every connection and the queue

    async def attacker_machine(i: int) -> None:
        nonlocal done
        for n in range(EACH):
            status = {"status": {"machineState": f"Deploying {n}"}}
            await http.merge_patch(API, "maasmachines", tenant.namespace, f"m{i}", status, status=True)
            done += 1
            if done >= 64:
                established.set()

    stream = [asyncio.create_task(attacker_machine(i)) for i in range(FLEET)]
    try:
        await established.wait()
        start = done

        async def victim_secret() -> int:
            got = await http.get_secret(victim, "identity")
            assert got["metadata"]["name"] == "identity"
            return done - start

        async def victim_patch() -> int:
            note = {"metadata": {"annotations": {"example.com/touched": "yes"}}}
            await http.merge_patch(API, "maasmachines", victim, "m0", note, status=False)
            return done - start

        waited = await asyncio.gather(victim_secret(), victim_patch())
        remaining = FLEET * EACH - done
    finally:
        results = await asyncio.gather(*stream, return_exceptions=True)
        await http.aclose()
    assert not [r for r in results if isinstance(r, BaseException)], results
    print(f"the victim waited for {waited} of the attacker's writes ({remaining} left)")
    assert remaining > 0, "the attacker's stream ended before the victim was served: the test proves nothing"
    assert max(waited) <= 32, f"the victim waited for {waited} of the attacker's writes ({remaining} left)"
