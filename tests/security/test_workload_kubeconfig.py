"""Issue 10, item 1: a tenant's ``<cluster>-kubeconfig`` Secret must not make the operator run a command or
send a local file anywhere.

The attacker is a namespaced user (``kubectl --as=mallory``) who owns the namespace's Secrets, as every tenant
does. The operator reads the kubeconfig when a MaasMachine is deployed (to put its providerID on the Node), so
the test deploys one MaasMachine and then lets the tenant write a CAPI-shaped kubeconfig Secret (type
``cluster.x-k8s.io/secret``, cluster-name label: anything a tenant may create). Before the fix the operator
loaded it with the ``kubernetes`` package's loader: the exec plugin ran as the operator's child and the
tokenFile was read and sent as a Bearer token to the tenant's server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from operator_harness import Harness
from security_support import Recorder, Tenant, capi_kubeconfig_secret, kubeconfig_yaml

from capmaas.api import conditions as C

pytestmark = pytest.mark.k8s


@pytest.fixture
def operator_env(operator_env: dict[str, str]) -> dict[str, str]:
    operator_env["CAPMAAS_MACHINE__NODE_RETRY"] = "0.5"  # look at the kubeconfig twice a second
    return operator_env


async def deployed_machine(h: Harness) -> None:
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)

    async def ready() -> bool:
        return bool(await h.field("maasmachines", "w0", "status", "ready"))

    await h.wait("w0 Ready", ready, within=90)


async def rejection(h: Harness) -> dict[str, Any]:
    async def rejected() -> bool:
        cond = await h.condition("maasmachines", "w0", C.NODE_PROVIDER_ID_CONDITION)
        return cond is not None and cond["reason"] == C.KUBECONFIG_REJECTED_REASON

    await h.wait("NodeProviderIDSet=False/KubeconfigRejected", rejected, within=30)
    cond = await h.condition("maasmachines", "w0", C.NODE_PROVIDER_ID_CONDITION)
    assert cond is not None
    assert cond["status"] == "False"
    return cond


async def test_an_exec_plugin_kubeconfig_never_runs_its_command(
    harness: Harness, tenant: Tenant, tmp_path: Path
) -> None:
    h = harness
    marker = tmp_path / "exec-plugin-ran"
    script = tmp_path / "plugin.sh"
    # What a tenant would put there: read the operator's environment (the default MAAS API key) and leave.
    script.write_text(f"#!/bin/sh\nenv > {marker}\necho '{{}}'\nexit 1\n")
    script.chmod(0o755)
    kubeconfig = kubeconfig_yaml(
        "https://127.0.0.1:1",
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}},
    )
    await deployed_machine(h)
    await tenant.apply(capi_kubeconfig_secret(h.namespace, "c1", kubeconfig))

    cond = await rejection(h)
    assert "users[0].user.exec" in cond["message"]
    assert f"Secret {h.namespace}/c1-kubeconfig" in cond["message"]
    await asyncio.sleep(2)  # several Node retries: still nothing ran
    assert not marker.exists(), marker.read_text()[:200]
    assert await h.field("maasmachines", "w0", "status", "ready") is True


async def test_a_token_file_kubeconfig_sends_nothing_from_the_operators_disk(
    harness: Harness, tenant: Tenant, tmp_path: Path
) -> None:
    h = harness
    secret_file = tmp_path / "operator-token"
    secret_file.write_text("OPERATOR-SERVICE-ACCOUNT-TOKEN-7f3a")  # stands in for the pod's SA token
    async with Recorder().running() as listener:
        kubeconfig = kubeconfig_yaml(f"http://127.0.0.1:{listener.port}", {"tokenFile": str(secret_file)})
        await deployed_machine(h)
        await tenant.apply(capi_kubeconfig_secret(h.namespace, "c1", kubeconfig))

        cond = await rejection(h)
        assert "users[0].user.tokenFile" in cond["message"]
        await asyncio.sleep(2)
    assert b"OPERATOR-SERVICE-ACCOUNT-TOKEN" not in listener.received
    assert listener.connections == 0


async def test_a_kubeconfig_secret_that_is_not_capis_is_not_trusted(harness: Harness, tenant: Tenant) -> None:
    """An Opaque Secret of the right name (what any tenant tool writes by mistake, or on purpose to point the
    operator at another server) is refused with the field named, and nothing is dialled."""
    h = harness
    async with Recorder().running() as listener:
        kubeconfig = kubeconfig_yaml(f"https://127.0.0.1:{listener.port}", {"token": "t"})
        secret = capi_kubeconfig_secret(h.namespace, "c1", kubeconfig)
        secret["type"] = "Opaque"
        await deployed_machine(h)
        await tenant.apply(secret)
        cond = await rejection(h)
        assert "field type is 'Opaque'" in cond["message"]
        await asyncio.sleep(1)
    assert listener.connections == 0
