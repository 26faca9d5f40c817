"""Fencing in the write path (issue 11 item 2), against the real simulator and a port that checks
``resourceVersion`` preconditions as the apiserver does.

A second writer acting on an older copy of a MaasMachine (a replica that lost the Lease and does not know it
yet, or a watch cache behind the apiserver) must get 409 when it writes the ``…/allocating`` mark, and send
nothing to MAAS: without the precondition its merge patch goes through, it allocates a second machine under
the same agent name and overwrites ``spec.systemID``, so the first machine is recorded nowhere."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from reconciler_env import Env

from capmaas.reconcilers.errors import ConflictError
from capmaas.reconcilers.keys import ALLOCATING, ANNOTATION_PREFIX, REPLACING
from capmaas.reconcilers.machine import MachineReconciler
from capmaas.reconcilers.scope import MachineScope


def allocates(env: Env) -> int:
    return sum(n for (method, _, op), n in env.sim.counters.items() if method == "POST" and op == "allocate")


def ready(b: dict[str, Any]) -> bool:
    return bool(b.get("status", {}).get("ready"))


async def test_a_stale_copy_gets_409_on_the_allocating_mark_and_allocates_nothing(env: Env) -> None:
    await env.cluster()
    env.machine("m0")
    stale = copy.deepcopy(env.kube.get("maasmachines", "m0"))  # what a second replica still holds
    await env.step("m0")  # the current writer: mark, allocate, spec.systemID
    mm = env.kube.get("maasmachines", "m0")
    uid, sid = mm["metadata"]["uid"], mm["spec"]["systemID"]
    assert [m["system_id"] for m in env.sim.machines_by_agent(uid)] == [sid]
    rv, before = mm["metadata"]["resourceVersion"], allocates(env)

    replica = MachineReconciler(env.kube, env.connections, default_credentials=env.creds)
    refused: ConflictError | None = None
    try:
        await replica.reconcile(stale)
    except ConflictError as exc:
        refused = exc

    assert allocates(env) == before  # nothing sent to MAAS
    assert [m["system_id"] for m in env.sim.machines_by_agent(uid)] == [sid]
    mm = env.kube.get("maasmachines", "m0")
    assert mm["spec"]["systemID"] == sid
    assert mm["metadata"]["resourceVersion"] == rv  # and nothing of the stale pass written (status neither)
    assert refused is not None
    assert env.kube.conflicts == 1
    # The current copy goes on as before.
    await env.drive(["m0"], ready)
    assert env.sim.check_invariants() == []


async def test_every_guarded_annotation_write_carries_the_read_version(env: Env) -> None:
    """The precondition goes with any write that sets or clears a crash-window annotation (here
    ``…/replacing``), and only with those: an unguarded write from the same old copy still merges."""
    await env.cluster()
    env.machine("m0")
    old = copy.deepcopy(env.kube.get("maasmachines", "m0"))
    await env.step("m0")
    scope = MachineScope(env.kube, "maasmachines", old)
    scope.set_annotation("failures", "1")  # not a crash window: merges into the current object
    await scope.flush()
    assert (
        env.kube.get("maasmachines", "m0")["metadata"]["annotations"][ANNOTATION_PREFIX + "failures"] == "1"
    )
    scope = MachineScope(env.kube, "maasmachines", old)
    scope.set_annotation(REPLACING, "abc123")
    with pytest.raises(ConflictError):
        await scope.flush()
    assert ANNOTATION_PREFIX + REPLACING not in env.kube.get("maasmachines", "m0")["metadata"]["annotations"]
    fresh = MachineScope(env.kube, "maasmachines", env.kube.get("maasmachines", "m0"))
    fresh.set_annotation(ALLOCATING, None)  # clearing is guarded too; from the current copy it succeeds
    fresh.set_annotation(REPLACING, "abc123")
    await fresh.flush()
    assert env.kube.get("maasmachines", "m0")["metadata"]["annotations"][ANNOTATION_PREFIX + REPLACING]
