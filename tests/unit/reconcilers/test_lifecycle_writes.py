"""A worker machine's lifecycle costs five Kubernetes writes and two Events (docs/scaling.md, "Kubernetes
writes per machine"): the finalizer with the allocation mark before MAAS allocates, the system ID right after,
the deploying status, Ready, and the finalizer's removal. What each write is, is asserted, so a sixth one
shows up here with its content."""

from __future__ import annotations

import dataclasses
from typing import Any

from reconciler_env import Env

from capmaas.api import conditions as C
from capmaas.reconcilers.keys import MACHINE_FINALIZER


class Recording:
    """What the reconciler wrote, in order: ("meta", patch) / ("status", patch)."""

    def __init__(self, env: Env) -> None:
        self.writes: list[tuple[str, dict[str, Any]]] = []
        inner = env.kube.patch

        async def patch(plural: Any, namespace: str, name: str, body: Any, *, status: bool) -> Any:
            self.writes.append(("status" if status else "meta", dict(body)))
            return await inner(plural, namespace, name, body, status=status)

        env.kube.patch = patch  # type: ignore[method-assign]


def ready(b: dict[str, Any]) -> bool:
    return bool(b.get("status", {}).get("ready"))


async def test_a_lifecycle_is_five_writes_and_two_events(env: Env) -> None:
    await env.cluster()
    env.machine("w0")
    rec = Recording(env)
    await env.drive(["w0"], ready)
    env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(10):
        if ("maasmachines", "ns", "w0") not in env.kube.objects:
            break
        await env.step("w0")
        await env.settle()
    assert ("maasmachines", "ns", "w0") not in env.kube.objects

    kinds = [kind for kind, _ in rec.writes]
    assert kinds == ["meta", "meta", "status", "status", "meta"], rec.writes
    first, recorded, deploying, done, gone = (body for _, body in rec.writes)
    assert first["metadata"]["finalizers"] == [MACHINE_FINALIZER]  # before MAAS is asked for anything
    assert "spec" not in first
    assert recorded["spec"]["systemID"]  # durable before the deploy
    conditions = {c["type"]: c for c in deploying["status"]["conditions"]}
    assert conditions[C.MACHINE_PROVISIONED_CONDITION]["reason"] == C.MACHINE_DEPLOYING_REASON
    assert done["status"]["ready"] is True
    assert gone == {"metadata": {"finalizers": [], "resourceVersion": gone["metadata"]["resourceVersion"]}}
    assert [reason for name, _, reason, _ in env.kube.events if name == "w0"] == [
        "MachineDeploying",
        "MachineReleased",
    ]


async def test_a_slow_release_says_releasing(env: Env) -> None:
    """The deletion's status is held only while the release may be confirmed at once: a pass that finds
    MAAS still releasing writes it."""
    await env.cluster()
    env.machine("w0")
    await env.drive(["w0"], ready)
    env.sim.timings = dataclasses.replace(env.sim.timings, release=3600.0)
    env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    rec = Recording(env)
    await env.step("w0")
    assert rec.writes == []  # the release is requested; nothing written yet
    await env.settle()
    await env.step("w0")
    (kind, body), *_ = rec.writes
    assert kind == "status"
    ready_condition = next(c for c in body["status"]["conditions"] if c["type"] == C.READY_CONDITION)
    assert (ready_condition["status"], ready_condition["reason"]) == ("False", C.RELEASING_REASON)
