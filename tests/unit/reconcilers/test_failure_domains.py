"""Failure domains discovered from MAAS (issue 16): only zones that hold a machine. A real region always has
a ``default`` zone, often empty; offered to CAPI, it would get control-plane Machines that wait for ever
(a zone on the Machine is kept on every allocation)."""

from __future__ import annotations

from typing import Any

from reconciler_env import Env, make_env

from capmaas.api import conditions as C
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


def cond(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == type_)


async def test_an_empty_zone_is_not_offered_and_the_condition_says_so(env: Env) -> None:
    assert "default" in {z.name for z in env.sim.state.zones.values()}
    mc = await env.cluster()
    assert [d["name"] for d in mc["status"]["failureDomains"]] == ["az1", "az2", "az3"]
    c = cond(mc, C.FAILURE_DOMAINS_DISCOVERED_CONDITION)
    assert (c["status"], c["reason"]) == ("True", C.FAILURE_DOMAINS_FROM_MAAS_REASON)
    assert c["message"] == "az1, az2, az3 (left out, no machine: default)"


async def test_a_maas_without_machines_offers_no_failure_domain() -> None:
    env = make_env(
        Simulator(Inventory.generate(machines=0, zones=2), timings=Timings.fast(), faults=Faults())
    )
    try:
        mc = await env.cluster()
        assert "failureDomains" not in mc["status"]
        c = cond(mc, C.FAILURE_DOMAINS_DISCOVERED_CONDITION)
        assert c["message"] == "no MAAS zone holds a machine yet (left out, no machine: az1, az2, default)"
        assert mc["status"]["ready"] is True  # machines may still be allocated where MAAS likes
    finally:
        await env.connections.aclose()
