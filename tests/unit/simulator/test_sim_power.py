"""Power control as MAAS 3.7.3 does it (``api/nodes.py`` ``power_on``/``power_off``, ``Node._start``/
``_stop``, ``get_effective_power_info``; the manual power driver): what remediation's power cycle uses."""

from __future__ import annotations

from typing import Any

from simtools import ADMIN_KEY, client

from capmaas_dev.simulator import Inventory, Simulator, Timings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sim_of(*machines: dict[str, Any], clock: Clock | None = None, boot: float = 0.0) -> Simulator:
    inventory = Inventory(
        {
            "subnets": [{"cidr": "192.0.2.0/24", "name": "testnet1"}],
            "boot_resources": [{"name": "ubuntu/noble"}],
            "machines": [{"cpu_count": 4, "memory": 8192, **m} for m in machines],
        }
    )
    return Simulator(
        inventory,
        api_key=ADMIN_KEY,
        dynamic_compose=False,
        timings=Timings(boot=boot),
        **({"clock": clock} if clock else {}),
    )


async def deployed(sim: Simulator, sid: str) -> None:
    async with client(sim) as c:
        await c.post("machines/", params={"op": "allocate"}, data={"system_id": sid})
        r = await c.post(f"machines/{sid}/", params={"op": "deploy"})
        assert r.status_code == 200, r.text
    sim.tick()
    assert sim.machine(sid)["status_name"] == "Deployed"


async def test_power_off_of_a_deployed_machine_keeps_it_deployed_and_owned() -> None:
    sim = sim_of({"hostname": "a", "system_id": "ipmi01"})
    await deployed(sim, "ipmi01")
    async with client(sim) as c:
        r = await c.post("machines/ipmi01/", params={"op": "power_off"})
    m = r.json()
    assert (r.status_code, m["status_name"], m["power_state"], m["owner"]) == (
        200,
        "Deployed",
        "off",
        "admin",
    )
    assert sim.power_log == [("ipmi01", "off")]


async def test_a_manual_machine_answers_power_off_with_null_and_no_action_is_sent() -> None:
    sim = sim_of({"hostname": "m", "system_id": "man001", "power_type": "manual"})
    await deployed(sim, "man001")
    async with client(sim) as c:
        off = await c.post("machines/man001/", params={"op": "power_off"})
        on = await c.post("machines/man001/", params={"op": "power_on"})
        state = (await c.get("machines/man001/", params={"op": "query_power_state"})).json()
    assert (off.status_code, off.text) == (200, "null")
    assert (on.status_code, on.json()["status_name"], on.json()["power_state"]) == (
        200,
        "Deployed",
        "unknown",
    )
    assert state == {"state": "unknown"}
    assert sim.power_log == []


async def test_power_off_needs_no_owner_but_power_on_does() -> None:
    sim = sim_of({"hostname": "r", "system_id": "rdy001"})
    async with client(sim) as c:
        off = await c.post("machines/rdy001/", params={"op": "power_off"})
        on = await c.post("machines/rdy001/", params={"op": "power_on"})
    assert (off.status_code, off.json()["status_name"]) == (200, "Ready")
    assert (on.status_code, on.text) == (409, "Can't start node: it hasn't been allocated.")


async def test_power_on_of_an_allocated_machine_deploys_it() -> None:
    sim = sim_of({"hostname": "a", "system_id": "alc001"})
    async with client(sim) as c:
        await c.post("machines/", params={"op": "allocate"})
        r = await c.post("machines/alc001/", params={"op": "power_on"})
    assert r.json()["status_name"] == "Deploying"
    assert sim.power_log == []  # a deployment, not a power workflow of the API's


async def test_a_power_cycle_boots_the_os_once_after_the_boot_time() -> None:
    clock = Clock()
    booted: list[str] = []
    sim = sim_of({"hostname": "a", "system_id": "cyc001"}, clock=clock, boot=120.0)
    sim.on_powered_on = lambda m: booted.append(m["system_id"])
    await deployed(sim, "cyc001")
    async with client(sim) as c:
        await c.post("machines/cyc001/", params={"op": "power_on"})  # already on: nothing reboots
        clock.now += 200
        sim.tick()
        assert booted == []
        await c.post("machines/cyc001/", params={"op": "power_off"})
        await c.post("machines/cyc001/", params={"op": "power_on"})
        clock.now += 60
        sim.tick()
        assert booted == []  # still booting
        await c.post("machines/cyc001/", params={"op": "power_off"})  # cycled again mid-boot
        await c.post("machines/cyc001/", params={"op": "power_on"})
        clock.now += 61
        sim.tick()
        assert booted == []  # the first boot's timer is moot
        clock.now += 60
        sim.tick()
    assert booted == ["cyc001"]
    assert sim.power_log == [("cyc001", s) for s in ("on", "off", "on", "off", "on")]
