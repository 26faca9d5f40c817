"""Property tests: random operation sequences keep the state machine legal and the invariants true; concurrent
allocates never hand out the same machine and always honour the constraints."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simtools import ALICE_KEY, client, lxd_sim, sample_sim

from capmaas_dev.simulator import Inventory, NodeStatus, Simulator
from capmaas_dev.simulator.models import TRANSITIONS

OPS = [
    "allocate",
    "deploy",
    "release",
    "erase",
    "power_on",
    "power_off",
    "mark_broken",
    "mark_fixed",
    "abort",
    "annotate",
    "tick",
    "compose",
    "delete",
]
EXPECTED = {200, 204, 400, 403, 404, 409, 503}


def record_transitions(sim: Simulator, seen: list[tuple[NodeStatus, NodeStatus]]) -> None:
    original = sim.state.set_status

    def spy(m: Any, new: NodeStatus, *, check: bool = True) -> None:
        old = m.status
        original(m, new, check=check)
        if old is not new:
            seen.append((old, new))

    sim.state.set_status = spy  # type: ignore[method-assign]


async def run_ops(ops: list[tuple[str, int, bool]]) -> None:
    sim = lxd_sim()
    sim.add_user("alice", api_key=ALICE_KEY)
    seen: list[tuple[NodeStatus, NodeStatus]] = []
    record_transitions(sim, seen)
    agents = itertools.count()  # a client that reuses agent_names would (rightly) trip the invariant
    async with client(sim) as admin, client(sim, ALICE_KEY) as alice:
        for op, index, as_alice in ops:
            c: httpx.AsyncClient = alice if as_alice else admin
            sids = sorted(sim.state.machines)
            sid = sids[index % len(sids)] if sids else "none"
            path = f"machines/{sid}/"
            if op == "allocate":
                r = await c.post(
                    "machines/", params={"op": "allocate"}, data={"agent_name": f"a{next(agents)}"}
                )
            elif op == "erase":
                r = await c.post(path, params={"op": "release"}, data={"erase": "true"})
            elif op == "annotate":
                r = await c.post(path, params={"op": "set_workload_annotations"}, data={"k": str(index)})
            elif op == "tick":
                sim.tick()
                continue
            elif op == "compose":
                r = await c.post(
                    f"vm-hosts/{index % 3 + 1}/",
                    params={"op": "compose"},
                    data={"cores": str(index % 40 + 1)},
                )
            elif op == "delete":
                r = await c.delete(path)
            else:
                r = await c.post(path, params={"op": op})
            assert r.status_code in EXPECTED, (op, r.status_code, r.text)
            assert sim.check_invariants() == [], (op, sim.check_invariants())
    for old, new in seen:
        assert new in TRANSITIONS[old], f"illegal {old.name} -> {new.name}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50), st.booleans()), max_size=30))
def test_random_operation_sequences_keep_state_legal(ops: list[tuple[str, int, bool]]) -> None:
    asyncio.run(run_ops(ops))


CONSTRAINTS = st.fixed_dictionaries(
    {},
    optional={
        "cpu_count": st.sampled_from(["2", "4", "8", "16"]),
        "mem": st.sampled_from(["4096", "16384", "65536"]),
        "tags": st.lists(st.sampled_from(["ssd", "gpu", "nvme", "10g"]), max_size=2, unique=True),
        "zone": st.sampled_from(["az1", "az2", "az3"]),
        "pool": st.sampled_from(["default", "compute"]),
        "not_in_zone": st.sampled_from(["az1", "az2"]),
        "not_tags": st.sampled_from(["hdd", "storage"]),
    },
)


async def allocate_concurrently(n: int, constraints: dict[str, Any]) -> None:
    sim = Simulator(Inventory.generate(machines=60, zones=3, seed=2))
    async with client(sim, sim.api_key) as c:
        responses = await asyncio.gather(
            *(
                c.post(
                    "machines/", params={"op": "allocate"}, data={**constraints, "agent_name": f"agent-{i}"}
                )
                for i in range(n)
            )
        )
    won = [r.json() for r in responses if r.status_code == 200]
    assert all(r.status_code in (200, 409) for r in responses)
    ids = [m["system_id"] for m in won]
    assert len(ids) == len(set(ids)), "a machine was allocated twice"
    for m in won:
        if "cpu_count" in constraints:
            assert m["cpu_count"] >= int(constraints["cpu_count"])
        if "mem" in constraints:
            assert m["memory"] >= int(constraints["mem"])
        assert set(constraints.get("tags", [])) <= set(m["tag_names"])
        assert constraints.get("not_tags", "-") not in m["tag_names"]
        if "zone" in constraints:
            assert m["zone"]["name"] == constraints["zone"]
        if "not_in_zone" in constraints:
            assert m["zone"]["name"] != constraints["not_in_zone"]
        if "pool" in constraints:
            assert m["pool"]["name"] == constraints["pool"]
    losers = [r for r in responses if r.status_code == 409]
    matching_ready = [
        m for m in sim.state.by_status[NodeStatus.READY].values() if _matches(sim, m, constraints)
    ]
    assert not (losers and matching_ready), "a request lost while a matching machine stayed Ready"
    assert sim.check_invariants() == []


def _matches(sim: Simulator, m: Any, c: dict[str, Any]) -> bool:
    zone, pool = sim.state.zones[m.zone_id].name, sim.state.pools[m.pool_id].name
    return (
        c.get("zone", zone) == zone
        and c.get("not_in_zone") != zone
        and c.get("pool", pool) == pool
        and m.cpu_count >= int(c.get("cpu_count", 0))
        and m.memory >= int(c.get("mem", 0))
        and set(c.get("tags", [])) <= m.tags
        and c.get("not_tags", "-") not in m.tags
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), CONSTRAINTS)
def test_concurrent_allocates_never_share_a_machine(n: int, constraints: dict[str, Any]) -> None:
    asyncio.run(allocate_concurrently(n, constraints))


async def test_cost_ordering_smallest_fit_first_ties_by_id() -> None:
    sim = sample_sim()
    order = []
    async with client(sim) as c:
        while True:
            r = await c.post("machines/", params={"op": "allocate"})
            if r.status_code == 409:
                break
            order.append(r.json())
    costs = [(m["cpu_count"] + m["memory"] / 1024, sim.state.machines[m["system_id"]].id) for m in order]
    assert costs == sorted(costs)
    assert len(order) == 12
