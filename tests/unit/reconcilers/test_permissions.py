"""A MAAS user without the permission an operation needs (HTTP 403) is told apart from a bad key (401).

Found by the clusterctl move e2e test: a MaasCluster whose identity was a non-admin MAAS user left its LXD
control plane waiting with "rejected the API key", although the key was fine and only VM hosts (admin-only in
MAAS) were out of its reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from reconciler_env import Env, make_env
from test_lxd_lifecycle import add_lxd, lxd_sim

from capmaas.api import conditions as C
from capmaas_dev import demo


@pytest.fixture
async def lenv() -> AsyncIterator[Env]:
    e = make_env(lxd_sim())
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)


def _as_user(env: Env, *, admin: bool) -> None:
    user = env.sim.add_user("tenant", admin=admin)
    creds = dataclasses.replace(env.creds, api_key=user.api_key)
    env.machines.default_credentials = creds
    env.clusters.default_credentials = creds


async def _cluster(env: Env, **kw: Any) -> dict[str, Any]:
    env.kube.add("clusters", demo.cluster("c1", "ns"))
    c = env.kube.get("clusters", "c1")
    env.kube.add("maasclusters", demo.maascluster("c1", "ns", cluster_uid=c["metadata"]["uid"], **kw))
    with contextlib.suppress(Exception):
        await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    c["status"] = {"initialization": {"infrastructureProvisioned": True}}
    return env.kube.get("maasclusters", "c1")


def _ready(body: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == "Ready")


def _says_permission(message: str, env: Env) -> None:
    assert "HTTP 403" in message, message
    assert "admin" in message, message
    assert "rejected the API key" not in message, message
    assert env.sim.api_key not in message


async def test_lxd_machine_of_a_non_admin_user_says_the_user_lacks_permission(lenv: Env) -> None:
    env = lenv
    _as_user(env, admin=False)
    mc = await _cluster(env, endpoint_host="192.0.2.10")  # a given endpoint: no DNS record to manage
    assert mc["status"]["ready"]
    add_lxd(env, "cp0", cp=True)
    with contextlib.suppress(Exception):
        await env.step("cp0")
    ready = _ready(env.kube.get("maasmachines", "cp0"))
    assert (ready["status"], ready["reason"]) == ("False", C.INVALID_CREDENTIALS_REASON)
    _says_permission(ready["message"], env)


async def test_managed_dns_of_a_non_admin_user_says_the_user_lacks_permission(lenv: Env) -> None:
    env = lenv
    _as_user(env, admin=False)
    mc = await _cluster(env)
    dns = next(c for c in mc["status"]["conditions"] if c["type"] == C.DNS_READY_CONDITION)
    assert dns["status"] == "False"
    _says_permission(dns["message"], env)


async def test_a_wrong_key_still_says_so(lenv: Env) -> None:
    env = lenv
    bad = dataclasses.replace(env.creds, api_key="a:b:c")
    env.clusters.default_credentials = bad
    mc = await _cluster(env, endpoint_host="192.0.2.10")
    connected = next(c for c in mc["status"]["conditions"] if c["type"] == C.MAAS_CONNECTED_CONDITION)
    assert connected["status"] == "False"
    assert "HTTP 403" not in connected["message"]
