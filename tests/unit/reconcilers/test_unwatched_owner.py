"""An owner a watch filter keeps out of the cache (a shard's Machine or Cluster without its label): read from
the apiserver instead, the object still goes Ready, one Warning names the owner and the label, and the pass
comes back soon (no watch event will wake it)."""

from __future__ import annotations

from typing import Any

from reconciler_env import Env

from capmaas.api import conditions as C
from capmaas.reconcilers.owners import OWNER_NOT_WATCHED_REASON, UNWATCHED_RECHECK
from capmaas.reconcilers.ports import Unwatched

LABEL = "cluster.x-k8s.io/watch-filter=shard-0"


def ready(b: dict[str, Any]) -> bool:
    return bool((b.get("status") or {}).get("ready"))


def hide(env: Env, plural: str, name: str) -> None:
    """Out of the watch cache, as a watch filter leaves it; the apiserver still has it."""
    body = env.kube.objects.pop((plural, "ns", name))
    env.kube.unwatched[(plural, "ns", name)] = Unwatched(body, LABEL)


def warnings(env: Env) -> list[tuple[str, str]]:
    return [(obj, msg) for obj, type_, reason, msg in env.kube.events if reason == OWNER_NOT_WATCHED_REASON]


async def test_a_machine_outside_the_watch_is_read_directly_and_warned_about_once(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    hide(env, "machines", "w0")
    await env.drive(["w0"], ready)
    got = warnings(env)
    assert len(got) == 1, env.kube.events
    obj, message = got[0]
    assert obj == "w0"
    assert "Machine w0" in message
    assert LABEL in message
    requeue = await env.step("w0")  # Ready, and still nothing would wake it: it comes back by itself
    assert requeue.after is not None
    assert requeue.after <= UNWATCHED_RECHECK
    assert len(warnings(env)) == 1


async def test_an_owner_missing_everywhere_is_still_waited_for(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    del env.kube.objects[("machines", "ns", "w0")]
    requeue = await env.step("w0")
    b = env.kube.get("maasmachines", "w0")
    ready_cond = next(c for c in b["status"]["conditions"] if c["type"] == C.READY_CONDITION)
    assert ready_cond["reason"] == C.WAITING_FOR_MACHINE_OWNER_REASON
    assert env.kube.unwatched_reads == 1
    assert requeue.after is None  # woken by the Machine's watch event when it comes
    assert warnings(env) == []


async def test_a_cluster_outside_the_watch_is_warned_about_on_its_maascluster_only(env: Env) -> None:
    await env.cluster()
    hide(env, "clusters", "c1")
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    env.machine("w0")
    env.machine("w1")
    await env.drive(["w0", "w1"], ready)
    assert [obj for obj, _ in warnings(env)] == ["c1"]
    assert "Cluster c1" in warnings(env)[0][1]
    requeue = await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    assert requeue.after is not None
    assert requeue.after <= UNWATCHED_RECHECK
