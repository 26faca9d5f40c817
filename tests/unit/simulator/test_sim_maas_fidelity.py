"""What a real MAAS 3.7.3 region showed that the simulator used to do differently (issues 12, 16, 11): manual
power, deploy refusals, disk-less deploys, AUTO IP timing and release, DNS entries of freed addresses,
mark_broken, never-commissioned machines, and the two write faults (late commit, answer lost after commit)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx
import pytest
from simtools import ADMIN_KEY, OAuth, client

from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings, serve
from capmaas_dev.simulator.faults import WriteFault
from capmaas_dev.simulator.serve import add_arguments, build

SUBNET = {"cidr": "192.0.2.0/24", "name": "testnet1"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def inventory(*machines: dict[str, Any], boot: tuple[str, ...] = ("ubuntu/noble",)) -> Inventory:
    return Inventory(
        {
            "subnets": [SUBNET],
            "boot_resources": [{"name": b} for b in boot],
            "machines": [{"cpu_count": 4, "memory": 8192, **m} for m in machines],
        }
    )


def sim_of(*machines: dict[str, Any], **kw: Any) -> Simulator:
    boot = kw.pop("boot", ("ubuntu/noble",))
    return Simulator(inventory(*machines, boot=boot), api_key=ADMIN_KEY, dynamic_compose=False, **kw)


async def op(c: httpx.AsyncClient, path: str, name: str, **data: str) -> httpx.Response:
    return await c.post(path, params={"op": name}, data=data)


# -- issue 16 (1): manual power ---------------------------------------------------------------------------
async def test_a_manual_machine_keeps_its_power_state_through_deploy_power_on_and_release() -> None:
    sim = sim_of({"hostname": "m1", "system_id": "man001", "power_type": "manual"})
    async with client(sim) as c:
        assert (await c.get("machines/man001/")).json()["power_state"] == "unknown"
        await op(c, "machines/", "allocate")
        r = await op(c, "machines/man001/", "deploy")
        assert (r.json()["status_name"], r.json()["power_state"]) == ("Deploying", "unknown")
        m = (await c.get("machines/man001/")).json()
        assert (m["status_name"], m["power_state"]) == ("Deployed", "unknown")
        assert (await op(c, "machines/man001/", "power_on")).json()["power_state"] == "unknown"
        r = await op(c, "machines/man001/", "power_off")  # no power action sent: JSON null (3.7.3)
        assert (r.status_code, r.json()) == (200, None)
        assert (await c.get("machines/man001/")).json()["power_state"] == "unknown"
        r = await op(c, "machines/man001/", "release")  # no Releasing step: MAAS cannot see it power off
        assert (r.json()["status_name"], r.json()["power_state"], r.json()["owner"]) == (
            "Ready",
            "unknown",
            None,
        )


async def test_a_machine_with_a_power_driver_still_powers_on_and_off() -> None:
    sim = sim_of({"hostname": "m1", "system_id": "ipmi01"}, timings=Timings(release=5), clock=FakeClock())
    async with client(sim) as c:
        await op(c, "machines/", "allocate")
        r = await op(c, "machines/ipmi01/", "deploy")
        assert r.json()["power_state"] == "on"
        r = await op(c, "machines/ipmi01/", "release")
        assert (r.json()["status_name"], r.json()["power_state"]) == ("Releasing", "on")


# -- issue 16 (2) / issue 12 (6): deploy refusals ---------------------------------------------------------
async def test_deploy_of_an_image_the_region_does_not_have_is_a_distro_series_form_error() -> None:
    sim = sim_of({"hostname": "m1", "system_id": "img001"})
    async with client(sim) as c:
        r = await op(c, "machines/img001/", "deploy", distro_series="ubuntu/jammy")
        assert r.status_code == 400
        assert r.json() == {
            "distro_series": [
                "'ubuntu/jammy' is not a valid distro_series.  It should be one of: '', 'ubuntu/noble'."
            ]
        }
        m = (await c.get("machines/img001/")).json()
        assert (m["status_name"], m["owner"]) == (
            "Ready",
            None,
        )  # MAAS's transaction rolled back the allocation


@pytest.mark.parametrize("interfaces", [[{"name": "eth0"}], [{"name": "eth0"}, {"name": "eth1"}]])
async def test_deploy_of_a_machine_without_a_linked_interface_is_refused(interfaces: list[Any]) -> None:
    sim = sim_of({"hostname": "m1", "system_id": "net001", "interfaces": interfaces})
    async with client(sim) as c:
        body = {"network": ["Node must be configured to use a network"]}
        r = await op(c, "machines/net001/", "deploy")
        assert (r.status_code, r.json()) == (400, body)
        assert (await c.get("machines/net001/")).json()["status_name"] == "Ready"
        await op(c, "machines/", "allocate", system_id="net001")
        r = await op(c, "machines/net001/", "deploy")
        assert (r.status_code, r.json()) == (400, body)
        r = await op(c, "machines/net001/", "power_on")  # power_on of an Allocated machine is a deploy too
        assert (r.status_code, r.json()) == (400, body)
        m = (await c.get("machines/net001/")).json()
        assert (m["status_name"], m["osystem"]) == ("Allocated", "")


async def test_a_link_up_only_interface_is_not_on_a_network() -> None:
    sim = sim_of({"hostname": "m1", "system_id": "lnk001"})
    sim.state.machines["lnk001"].interfaces[0].mode = "link_up"  # linked to the subnet, no address mode
    async with client(sim) as c:
        r = await op(c, "machines/lnk001/", "deploy")
        assert (r.status_code, r.json()) == (400, {"network": ["Node must be configured to use a network"]})


async def test_one_linked_interface_of_several_is_enough_and_the_default_interface_is_linked() -> None:
    sim = sim_of(
        {
            "hostname": "m1",
            "system_id": "two001",
            "interfaces": [{"name": "eth0"}, {"name": "eth1", "subnet": "testnet1"}],
        },
        {"hostname": "m2", "system_id": "dflt01"},
    )
    async with client(sim) as c:
        assert (await op(c, "machines/two001/", "deploy")).status_code == 200
        assert (await op(c, "machines/dflt01/", "deploy")).status_code == 200


async def test_a_disk_less_machine_is_deployed_to_memory() -> None:
    sim = sim_of(
        {"hostname": "m1", "system_id": "dsk000", "disks": []}, {"hostname": "m2", "system_id": "dsk001"}
    )
    async with client(sim) as c:
        r = await op(c, "machines/dsk000/", "deploy")
        assert (r.json()["ephemeral_deploy"], r.json()["hwe_kernel"]) == (True, "ga-24.04")
        assert (await op(c, "machines/dsk001/", "deploy")).json()["ephemeral_deploy"] is False
        r = await op(c, "machines/dsk000/", "release")
        r = await op(c, "machines/dsk000/", "deploy", register_vmhost="true")
        assert (r.status_code, r.text) == (400, "A machine can not be a VM host if it is deployed to memory.")


# -- issue 16 (5): AUTO IPs after the deploy's answer, freed on release; DNS keeps a null entry ------------
async def test_the_auto_ip_comes_after_the_deploy_answer_within_the_configured_delay() -> None:
    clock = FakeClock()
    sim = sim_of(
        {"hostname": "m1", "system_id": "ip0001"}, timings=Timings(deploy=60, auto_ip=(1.0, 4.0)), clock=clock
    )
    async with client(sim) as c:
        r = await op(c, "machines/ip0001/", "deploy")
        assert (r.json()["status_name"], r.json()["ip_addresses"]) == ("Deploying", [])
        due = min(t[0] for t in sim.state.timers if t[4] == "auto_ips") - clock.now
        assert 4.0 >= due >= 1.0  # within Timings.auto_ip
        clock.now += due - 0.01
        assert (await c.get("machines/ip0001/")).json()["ip_addresses"] == []
        clock.now += 0.01
        m = (await c.get("machines/ip0001/")).json()
        assert (m["status_name"], m["ip_addresses"]) == ("Deploying", ["192.0.2.1"])


async def test_auto_ip_delays_are_seeded() -> None:
    async def delay(seed: int) -> float:
        clock = FakeClock()
        sim = sim_of(
            {"hostname": "m1", "system_id": "ip0001"}, timings=Timings.realistic(), clock=clock, seed=seed
        )
        async with client(sim) as c:
            await op(c, "machines/ip0001/", "deploy")
        return min(t[0] for t in sim.state.timers if t[4] == "auto_ips") - clock.now

    assert await delay(1) == await delay(1)
    assert await delay(1) != await delay(2)
    with pytest.raises(ValueError, match="auto_ip"):
        Timings(auto_ip=(3.0, 1.0))


async def test_release_frees_auto_ips_and_a_dns_record_keeps_a_null_entry_for_each() -> None:
    sim = sim_of({"hostname": "m1", "system_id": "ip0001"}, {"hostname": "m2", "system_id": "ip0002"})
    async with client(sim) as c:
        await op(c, "machines/ip0001/", "deploy")
        ip = (await c.get("machines/ip0001/")).json()["ip_addresses"][0]
        r = await c.post("dnsresources/", data={"fqdn": "api.maas", "ip_addresses": f"{ip} 192.0.2.200"})
        rid = r.json()["id"]
        await op(c, "machines/ip0001/", "release")
        assert (await c.get("machines/ip0001/")).json()["ip_addresses"] == []
        entries = (await c.get(f"dnsresources/{rid}/")).json()["ip_addresses"]
        assert sorted((e["ip"] is None, e["ip"] or "") for e in entries) == [
            (False, "192.0.2.200"),
            (True, ""),
        ]
        await op(c, "machines/ip0002/", "deploy")  # the freed address is handed out again
        assert (await c.get("machines/ip0002/")).json()["ip_addresses"] == [ip]
        await c.put(f"dnsresources/{rid}/", data={"ip_addresses": "192.0.2.201"})
        entries = (await c.get(f"dnsresources/{rid}/")).json()["ip_addresses"]
        assert [e["ip"] for e in entries] == ["192.0.2.201"]
    assert sim.check_invariants() == []


# -- issue 16 (6): mark_broken ----------------------------------------------------------------------------
@pytest.mark.parametrize(("power_type", "power"), [("ipmi", "off"), ("manual", "unknown")])
async def test_mark_broken_on_an_allocated_machine_clears_the_owner_and_leaves_power_alone(
    power_type: str, power: str
) -> None:
    sim = sim_of({"hostname": "m1", "system_id": "brk001", "power_type": power_type})
    async with client(sim) as c:
        await op(c, "machines/", "allocate", agent_name="a1")
        r = await op(c, "machines/brk001/", "mark_broken", comment="bad disk")
        m = r.json()
        assert (m["status_name"], m["owner"], m["power_state"]) == ("Broken", None, power)
        assert sim.state.machines["brk001"].agent_name == ""


async def test_mark_broken_on_a_powered_machine_powers_it_off_and_keeps_the_owner() -> None:
    clock = FakeClock()
    sim = sim_of({"hostname": "m1", "system_id": "brk002"}, timings=Timings(release=3), clock=clock)
    async with client(sim) as c:
        await op(c, "machines/brk002/", "deploy")
        r = await op(c, "machines/brk002/", "mark_broken", comment="fan")
        assert (r.json()["status_name"], r.json()["owner"], r.json()["power_state"]) == (
            "Broken",
            "admin",
            "on",
        )
        clock.now += 3
        assert (await c.get("machines/brk002/")).json()["power_state"] == "off"


# -- issue 12 (6): never-commissioned machines ------------------------------------------------------------
async def test_release_of_a_machine_whose_commissioning_never_passed_goes_back_to_new() -> None:
    sim = sim_of({"hostname": "m1", "system_id": "new001", "commissioned": False})
    async with client(sim) as c:
        await op(c, "machines/", "allocate")
        assert (await op(c, "machines/new001/", "release")).json()["status_name"] == "New"


# -- issue 11 (3): write faults ---------------------------------------------------------------------------
async def test_late_commit_allocates_after_the_client_gave_up() -> None:
    faults = Faults(
        seed=1, late_commit_rate=1.0, late_commit_delay=0.6, write_fault_ops=frozenset({"allocate"})
    )
    sim = sim_of({"hostname": "m1", "system_id": "late01"}, faults=faults)
    async with (
        serve(sim) as url,
        httpx.AsyncClient(base_url=url + "/api/2.0/", auth=OAuth(ADMIN_KEY), timeout=0.2) as c,
    ):
        t0 = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            await c.post("machines/", params={"op": "allocate"}, data={"agent_name": "uid-1"})
        lookup = await c.get("machines/", params={"agent_name": "uid-1"})  # GETs are never held
        assert lookup.json() == []  # nothing yet: a client that retries now allocates twice
        while not sim.state.by_agent.get("uid-1"):
            assert time.monotonic() - t0 < 5
            await asyncio.sleep(0.05)
        assert time.monotonic() - t0 >= 0.6
        lookup = await c.get("machines/", params={"agent_name": "uid-1"})
        assert [m["system_id"] for m in lookup.json()] == ["late01"]


async def test_drop_after_commit_acts_then_cuts_the_answer() -> None:
    faults = Faults(seed=1, drop_after_commit_rate=1.0)
    sim = sim_of({"hostname": "m1", "system_id": "drop01"}, faults=faults)
    async with serve(sim) as url, httpx.AsyncClient(base_url=url + "/api/2.0/", auth=OAuth(ADMIN_KEY)) as c:
        with pytest.raises(httpx.HTTPError):
            await c.post("machines/", params={"op": "allocate"}, data={"agent_name": "uid-2"})
        assert (await c.get("machines/drop01/")).json()["status_name"] == "Allocated"  # GETs answered
    assert sim.state.machines["drop01"].agent_name == "uid-2"


def test_write_faults_pick_writes_only_and_are_seeded() -> None:
    def plan(seed: int) -> list[WriteFault | None]:
        f = Faults(seed=seed, late_commit_rate=0.3, drop_after_commit_rate=0.3)
        return [f.write_fault("POST", "op=allocate") for _ in range(40)]

    assert plan(3) == plan(3) != plan(4)
    assert {WriteFault.LATE_COMMIT, WriteFault.DROP_AFTER_COMMIT, None} == set(plan(3))
    f = Faults(late_commit_rate=1.0, write_fault_ops=frozenset({"release"}))
    assert f.write_fault("GET", "op=release") is None
    assert f.write_fault("POST", "op=allocate") is None
    assert f.write_fault("POST", "op=release") is WriteFault.LATE_COMMIT
    assert Faults().write_fault("POST", "") is None
    with pytest.raises(ValueError, match="late_commit_rate"):
        Faults(late_commit_rate=1.5)


def test_capmaas_simulate_takes_the_write_faults() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--late-commit-rate",
            "0.5",
            "--late-commit-delay",
            "3",
            "--drop-after-commit-rate",
            "0.1",
            "--drop-rate",
            "0.2",
            "--write-fault-ops",
            "allocate,deploy",
        ]
    )
    f = build(args).faults
    assert (f.late_commit_rate, f.late_commit_delay, f.drop_after_commit_rate, f.drop_rate) == (
        0.5,
        3.0,
        0.1,
        0.2,
    )
    assert f.write_fault_ops == {"allocate", "deploy"}
