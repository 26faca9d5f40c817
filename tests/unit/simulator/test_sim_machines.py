"""machines/ and machines/{system_id}/: list filters, allocate, deploy, release and the other ops."""

from __future__ import annotations

import base64

import httpx
import pytest
from simtools import ALICE_KEY, client, multipart

from capmaas_dev.simulator import NodeStatus, Simulator

AUTH_METHODS = ("plaintext", "hmac")  # every admin/alice/ladmin test runs with both signatures


def sid_of(sim: Simulator, hostname: str) -> str:
    return sim.state.by_hostname[hostname].system_id


async def allocate(c: httpx.AsyncClient, **data: str | list[str]) -> httpx.Response:
    return await c.post("machines/", params={"op": "allocate"}, data=data)


# -- list ---------------------------------------------------------------------------------------------------
async def test_list_sorted_by_id_with_machine_fields(admin: httpx.AsyncClient) -> None:
    r = await admin.get("machines/")
    assert r.status_code == 200
    body = r.json()
    assert [m["hostname"] for m in body][:3] == ["cp-1", "cp-2", "cp-3"]
    m = body[0]
    assert m["status"] == 4
    assert m["status_name"] == "Ready"
    assert m["power_state"] == "off"
    assert m["fqdn"] == "cp-1.maas"
    assert m["ip_addresses"] == ["10.10.0.11"]
    assert m["zone"] == {
        "id": 2,
        "name": "az1",
        "description": "Rack A",
        "resource_uri": "/MAAS/api/2.0/zones/az1/",
    }
    assert m["pool"]["resource_uri"].startswith("/MAAS/api/2.0/resourcepool/")
    assert m["storage"] == 240000.0
    assert m["memory"] == 8192
    assert m["tag_names"] == ["control-plane", "ssd"]
    assert m["pod"] is None
    assert m["virtualmachine_id"] is None
    assert m["interface_set"][0]["links"][0]["ip_address"] == "10.10.0.11"
    assert m["resource_uri"] == f"/MAAS/api/2.0/machines/{m['system_id']}/"
    assert r.headers["content-type"] == "application/json"
    assert len(r.headers["x-maas-api-hash"]) == 40


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"zone": "az3"}, ["cp-3", "worker-3", "gpu-1"]),
        ({"pool": "control-plane"}, ["cp-1", "cp-2", "cp-3"]),
        ({"tags": ["ssd", "gpu"]}, ["gpu-1"]),
        ({"not_tags": "ssd", "zone": "az2"}, ["big-2", "arm-1"]),
        ({"hostname": ["big-1", "big-2"]}, ["big-1", "big-2"]),
        ({"cpu_count": "32"}, ["big-1", "big-2"]),
        ({"mem": "65536"}, ["big-1", "big-2", "gpu-1"]),
        ({"arch": "arm64"}, ["arm-1"]),
        ({"status": "=ready", "domain": "lab.example"}, ["lab-1"]),
        ({"simple_status": "ready", "not_in_zone": ["az1", "az2"]}, ["cp-3", "worker-3", "gpu-1"]),
        ({"not_in_pool": "workers", "power_state": "off", "owner": ""}, []),
        ({"mac_address": "52:54:00:00:00:01"}, ["cp-1"]),
        ({"status": "deployed"}, []),
        ({"pod": "none", "not_pod": "x", "pod_type": "lxd", "not_pod_type": "virsh"}, []),
    ],
)
async def test_list_filters(admin: httpx.AsyncClient, params: dict[str, object], expected: list[str]) -> None:
    r = await admin.get("machines/", params=params)  # type: ignore[arg-type]
    assert r.status_code == 200, r.text
    assert [m["hostname"] for m in r.json()] == expected


async def test_list_by_id_and_agent_name(sim: Simulator, admin: httpx.AsyncClient) -> None:
    ids = [sid_of(sim, "big-2"), sid_of(sim, "cp-1"), "nope"]
    r = await admin.get("machines/", params={"id": ids})
    assert [m["hostname"] for m in r.json()] == ["cp-1", "big-2"]
    await allocate(admin, agent_name="agent-1", tags="gpu")
    r = await admin.get("machines/", params={"agent_name": "agent-1"})
    assert [m["hostname"] for m in r.json()] == ["gpu-1"]
    assert sim.machines_by_agent("agent-1")[0]["hostname"] == "gpu-1"


@pytest.mark.parametrize(
    ("params", "body"),
    [
        ({"colour": "red"}, {"colour": ["No such constraint."]}),
        ({"zone": "x"}, {"zone": ["No such zone(s): x."]}),
        ({"pool": "x"}, {"pool": ["No such pool(s): x."]}),
        ({"tags": "x"}, {"tags": ["No such tag(s): 'x'."]}),
        (
            {"status": "sleeping"},
            {"status": ["Select a valid choice. sleeping is not one of the available choices."]},
        ),
        (
            {"simple_status": "x"},
            {"simple_status": ["Select a valid choice. x is not one of the available choices."]},
        ),
        ({"cpu_count": "many"}, {"cpu_count": ["Invalid CPU count: number required."]}),
        ({"mem": "lots"}, {"mem": ["Invalid memory: number of MiB required."]}),
        ({"arch": "sparc"}, {"arch": ["Architecture not recognised."]}),
        ({"not_in_zone": "x"}, {"not_in_zone": ["No such zone(s): x."]}),
    ],
)
async def test_list_filter_errors(admin: httpx.AsyncClient, params: dict[str, str], body: object) -> None:
    r = await admin.get("machines/", params=params)
    assert r.status_code == 400
    assert r.json() == body


async def test_get_unknown_machine_is_404(admin: httpx.AsyncClient) -> None:
    r = await admin.get("machines/nosuch/")
    assert (r.status_code, r.text) == (404, "No Machine matches the given query.")


async def test_non_admin_sees_only_unowned_or_own(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    mine = (await allocate(alice, tags="gpu")).json()["system_id"]
    theirs = (await allocate(admin, zone="az1", cpu_count="32")).json()["system_id"]
    listed = {m["system_id"] for m in (await alice.get("machines/")).json()}
    assert mine in listed
    assert theirs not in listed
    assert len(listed) == 11
    r = await alice.get(f"machines/{theirs}/")
    assert (r.status_code, r.text) == (403, "")
    assert (await alice.post(f"machines/{theirs}/", params={"op": "deploy"})).status_code == 403
    r = await alice.get("machines/", params={"op": "list_allocated"})
    assert [m["system_id"] for m in r.json()] == [mine]
    r = await alice.get("machines/", params={"op": "list_allocated", "id": theirs})
    assert r.json() == []


# -- allocate -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "hostname"),
    [
        ({}, "small-1"),
        ({"cpu_count": "4"}, "cp-1"),
        ({"cpu_count": ["4", "30"]}, "cp-1"),
        ({"tags": "ssd"}, "cp-1"),
        ({"tags": "gpu"}, "gpu-1"),
        ({"zone": "az2", "cpu_count": "8"}, "worker-2"),
        ({"not_in_zone": "az1", "tags": "ssd"}, "cp-2"),
        ({"not_tags": "ssd", "mem": "8000"}, "lab-1"),
        ({"pool": "workers"}, "small-1"),
        ({"not_in_pool": "workers"}, "cp-1"),
        ({"arch": "arm64"}, "arm-1"),
        ({"arch": "arm64/generic"}, "arm-1"),
        ({"storage": "root:1000(ssd)"}, "big-1"),
        ({"storage": "10,1500"}, "worker-1"),
        ({"name": "gpu-1.maas"}, "gpu-1"),
        ({"cpu_speed": "1000", "subnets": "lab", "interfaces": "eth0:subnet=10.10.0.0/24"}, "small-1"),
        ({"not_subnets": "nope", "fabrics": "fabric-0"}, "small-1"),
    ],
)
async def test_allocate_picks_cheapest_match(
    admin: httpx.AsyncClient, data: dict[str, str], hostname: str
) -> None:
    r = await allocate(admin, **data)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["hostname"] == hostname
    assert body["status_name"] == "Allocated"
    assert body["owner"] == "admin"
    assert "constraints_by_type" in body


async def test_allocate_constraints_by_type_and_dry_run(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await allocate(admin, storage="root:10,data:1000", interfaces="eth0:space=undefined", dry_run="true")
    body = r.json()
    m = sim.state.by_hostname["worker-1"]
    assert body["hostname"] == "worker-1"
    assert body["status_name"] == "Ready"
    assert body["constraints_by_type"] == {
        "storage": {"root": [m.disks[0].id], "data": [m.disks[1].id]},
        "interfaces": {"eth0": [m.interfaces[0].id]},
    }
    assert m.status is NodeStatus.READY


async def test_allocate_system_id(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sid = sid_of(sim, "big-2")
    assert (await allocate(admin, system_id=sid)).json()["system_id"] == sid
    r = await allocate(admin, system_id=sid)
    assert (r.status_code, r.text) == (409, f"No machine with system ID {sid} available.")
    assert "retry-after" not in r.headers


async def test_allocate_no_match_texts(admin: httpx.AsyncClient) -> None:
    r = await allocate(admin, name="h1")
    assert (r.status_code, r.text) == (
        409,
        "No available machine matches constraints: [('name', ['h1'])] (resolved to \"name=h1\")",
    )
    assert "retry-after" not in r.headers
    r = await allocate(admin, cpu_count="20", tags=["gpu", "ssd"], agent_name="a")
    assert r.text == (
        "No available machine matches constraints: [('cpu_count', ['20']), ('tags', ['gpu', 'ssd']), "
        "('agent_name', ['a'])] (resolved to \"cpu_count=20.0 tags=gpu,ssd\")"
    )
    for _ in range(12):
        assert (await allocate(admin)).status_code == 200
    r = await allocate(admin, agent_name="x")
    assert (r.status_code, r.text) == (409, "No machine available.")


@pytest.mark.parametrize(
    ("data", "body"),
    [
        ({"size": "big"}, {"size": ["No such constraint."]}),
        ({"zone": "nowhere"}, {"zone": ["No such zone(s): nowhere."]}),
        ({"pool": "nowhere"}, {"pool": ["No such pool(s): nowhere."]}),
        ({"storage": "root:big"}, {"storage": ['Malformed storage constraint, "root:big".']}),
        ({"storage": "root:1.2.3"}, {"storage": ['Malformed storage constraint, "root:1.2.3".']}),
        (
            {"interfaces": "eth0:nonsense"},
            {"interfaces": ["Malformed key/value pair in constraint: 'nonsense'"]},  # constraints.py:113
        ),
        ({"cpu_speed": "fast"}, {"cpu_speed": ["Invalid CPU speed: number required."]}),
    ],
)
async def test_allocate_bad_constraints_are_400(
    admin: httpx.AsyncClient, data: dict[str, str], body: object
) -> None:
    r = await allocate(admin, **data)
    assert r.status_code == 400
    assert r.json() == body


async def test_allocate_bad_boolean_is_400(admin: httpx.AsyncClient) -> None:
    r = await allocate(admin, dry_run="maybe")
    assert (r.status_code, r.text) == (400, "Invalid dry_run: Value should be 'true' or 'false'")


async def test_allocate_from_multipart_base64_body(sim: Simulator, admin: httpx.AsyncClient) -> None:
    body, ctype = multipart([("tags", "ssd"), ("zone", "az3"), ("agent_name", "mp")])
    r = await admin.post(
        "machines/", params={"op": "allocate"}, content=body, headers={"content-type": ctype}
    )
    assert r.status_code == 200, r.text
    assert r.json()["hostname"] == "cp-3"
    assert sim.state.by_hostname["cp-3"].agent_name == "mp"


async def test_allocate_params_in_query_string(admin: httpx.AsyncClient) -> None:
    r = await admin.post("machines/", params={"op": "allocate", "tags": "gpu"})
    assert r.json()["hostname"] == "gpu-1"


# -- deploy -------------------------------------------------------------------------------------------------
async def test_deploy_from_ready_allocates_then_deploys(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sid = sid_of(sim, "worker-1")
    user_data = base64.b64encode(b"#cloud-config\n").decode()
    r = await admin.post(
        f"machines/{sid}/",
        params={"op": "deploy"},
        data={
            "distro_series": "ubuntu/22.04",
            "user_data": user_data,
            "agent_name": "dep",
            "hwe_kernel": "ga-22.04",
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status_name"] == "Deploying"
    assert body["owner"] == "admin"
    assert body["power_state"] == "on"
    assert (body["osystem"], body["distro_series"], body["hwe_kernel"]) == ("ubuntu", "jammy", "ga-22.04")
    assert sim.state.machines[sid].user_data == b"#cloud-config\n"
    r = await admin.get(f"machines/{sid}/")
    assert r.json()["status_name"] == "Deployed"
    r = await admin.post(f"machines/{sid}/", params={"op": "deploy"})
    assert (r.status_code, r.text) == (409, "Can't deploy a machine that is in the 'Deployed' state")


async def test_deploy_with_multipart_base64_user_data(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sid = sid_of(sim, "cp-1")
    encoded = base64.b64encode(b"#!/bin/sh\necho hi\n").decode()
    body, ctype = multipart([("user_data", encoded), ("distro_series", "noble")])
    r = await admin.post(
        f"machines/{sid}/", params={"op": "deploy"}, content=body, headers={"content-type": ctype}
    )
    assert r.status_code == 200, r.text
    assert r.json()["distro_series"] == "noble"
    assert sim.state.machines[sid].user_data == b"#!/bin/sh\necho hi\n"


@pytest.mark.parametrize(
    ("data", "status", "text"),
    [
        (
            {"install_rackd": "true"},
            400,
            "Deploying a machine as a rackd has been disabled and it's not supported anymore.",
        ),
        (
            {"register_vmhost": "true", "ephemeral_deploy": "true"},
            400,
            "A machine can not be a VM host if it is deployed to memory.",
        ),
    ],
)
async def test_deploy_rejections(
    sim: Simulator, admin: httpx.AsyncClient, data: dict[str, str], status: int, text: str
) -> None:
    r = await admin.post(f"machines/{sid_of(sim, 'cp-1')}/", params={"op": "deploy"}, data=data)
    assert (r.status_code, r.text) == (status, text)


async def test_deploy_invalid_distro_series(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await admin.post(
        f"machines/{sid_of(sim, 'cp-1')}/", params={"op": "deploy"}, data={"distro_series": "xenial"}
    )
    assert r.status_code == 400
    message = r.json()["distro_series"][0]
    assert message.startswith(
        "'xenial' is not a valid distro_series.  It should be one of: '', 'ubuntu/jammy'"
    )
    assert sim.state.by_hostname["cp-1"].status is NodeStatus.READY


async def test_non_admin_cannot_deploy_vm_hosts(sim: Simulator, alice: httpx.AsyncClient) -> None:
    r = await alice.post(
        f"machines/{sid_of(sim, 'cp-1')}/", params={"op": "deploy"}, data={"install_kvm": "true"}
    )
    assert (r.status_code, r.text) == (403, "Only administratros can deploy VM hosts")


async def test_deploy_of_ready_machine_owned_by_someone_else_is_409(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    m = sim.state.by_hostname["cp-1"]
    m.owner = "alice"  # "somehow" (MAAS's word) owned while Ready
    r = await admin.post(f"machines/{m.system_id}/", params={"op": "deploy"})
    assert (r.status_code, r.text) == (409, "Can't allocate a machine belonging to another user.")
    m.owner = None


async def test_failed_deployment_cannot_be_redeployed(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sim.faults.deploy_failure_rate = 1.0
    sid = sid_of(sim, "cp-2")
    await admin.post(f"machines/{sid}/", params={"op": "deploy"})
    body = (await admin.get(f"machines/{sid}/")).json()
    assert body["status_name"] == "Failed deployment"
    assert body["error_description"]
    r = await admin.post(f"machines/{sid}/", params={"op": "deploy"})
    assert (r.status_code, r.text) == (409, "Can't deploy a machine that is in the 'Failed deployment' state")


# -- release ------------------------------------------------------------------------------------------------
async def test_release_cycle_clears_owner_agent_and_annotations(
    sim: Simulator, admin: httpx.AsyncClient
) -> None:
    sid = (await allocate(admin, tags="gpu", agent_name="ag")).json()["system_id"]
    r = await admin.post(
        f"machines/{sid}/", params={"op": "set_workload_annotations"}, data={"a": "1", "b": "2"}
    )
    assert r.json()["workload_annotations"] == {"a": "1", "b": "2"} == r.json()["owner_data"]
    r = await admin.post(f"machines/{sid}/", params={"op": "set_owner_data"}, data={"a": ""})
    assert r.json()["workload_annotations"] == {"b": "2"}
    await admin.post(f"machines/{sid}/", params={"op": "deploy"})
    assert (await admin.get(f"machines/{sid}/")).json()["status_name"] == "Deployed"
    r = await admin.post(f"machines/{sid}/", params={"op": "release"}, data={"comment": "done"})
    assert r.json()["status_name"] == "Releasing"
    body = (await admin.get(f"machines/{sid}/")).json()
    assert body["status_name"] == "Ready"
    assert body["owner"] is None
    assert body["power_state"] == "off"
    assert body["workload_annotations"] == {}
    assert body["osystem"] == ""
    assert sim.machines_by_agent("ag") == []
    r = await admin.post(f"machines/{sid}/", params={"op": "release"})
    assert (r.status_code, r.json()["status_name"]) == (200, "Ready")


async def test_release_of_powered_off_allocated_machine_finalizes_at_once(admin: httpx.AsyncClient) -> None:
    sid = (await allocate(admin)).json()["system_id"]
    r = await admin.post(f"machines/{sid}/", params={"op": "release"})
    assert r.json()["status_name"] == "Ready"


async def test_release_while_releasing_is_a_no_op(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sim.timings = type(sim.timings)(deploy=3600, release=3600)
    sid = (await allocate(admin)).json()["system_id"]
    await admin.post(f"machines/{sid}/", params={"op": "power_on"})
    assert (await admin.get(f"machines/{sid}/")).json()["status_name"] == "Deploying"
    sim.tick()
    assert (await admin.post(f"machines/{sid}/", params={"op": "release"})).json()[
        "status_name"
    ] == "Releasing"
    r = await admin.post(f"machines/{sid}/", params={"op": "release"})
    assert (r.status_code, r.json()["status_name"]) == (200, "Releasing")


async def test_release_with_erase_goes_through_disk_erasing(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sim.timings = type(sim.timings)(erase=3600)
    sid = (await allocate(admin)).json()["system_id"]
    r = await admin.post(
        f"machines/{sid}/", params={"op": "release"}, data={"erase": "true", "quick_erase": "true"}
    )
    assert r.json()["status_name"] == "Disk erasing"
    assert r.json()["power_state"] == "on"
    r = await admin.post(f"machines/{sid}/", params={"op": "abort"})
    assert r.json()["status_name"] == "Failed disk erasing"
    r = await admin.post(f"machines/{sid}/", params={"op": "release"}, data={"secure_erase": "1"})
    assert r.json()["status_name"] == "Disk erasing"
    sim.state.timers.clear()
    sim.state.schedule(sim.state.machines[sid], 0, "erased")
    assert (await admin.get(f"machines/{sid}/")).json()["status_name"] == "Ready"


async def test_release_in_illegal_state_is_409(sim: Simulator, admin: httpx.AsyncClient) -> None:
    m = sim.state.by_hostname["cp-1"]
    sim.state.set_status(m, NodeStatus.COMMISSIONING)
    r = await admin.post(f"machines/{m.system_id}/", params={"op": "release"})
    assert (r.status_code, r.text) == (
        409,
        "Machine cannot be released in its current state ('Commissioning').",
    )


async def test_bulk_release(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    a = (await allocate(admin, tags="gpu")).json()["system_id"]
    ready = sid_of(sim, "big-2")
    r = await admin.post("machines/", params={"op": "release"}, data={"machines": [a, ready]})
    assert (r.status_code, r.json()) == (200, [a])
    r = await admin.post("machines/", params={"op": "release"}, data={"machines": ["zz1", "zz2"]})
    assert (r.status_code, r.text) == (400, "Unknown machine(s): zz1, zz2.")
    b = (await allocate(admin, tags="gpu")).json()["system_id"]
    r = await alice.post("machines/", params={"op": "release"}, data={"machines": [b]})
    assert (r.status_code, r.text) == (
        403,
        f"You don't have the required permission to release the following machine(s): {b}.",
    )
    sim.state.set_status(sim.state.machines[ready], NodeStatus.COMMISSIONING)
    r = await admin.post("machines/", params={"op": "release"}, data={"machines": [b, ready]})
    assert (r.status_code, r.text) == (
        409,
        f"Machine(s) cannot be released in their current state: {ready} ('Commissioning').",
    )


# -- power, annotations, broken/fixed, abort -----------------------------------------------------------------
async def test_power_operations(sim: Simulator, admin: httpx.AsyncClient) -> None:
    ready = sid_of(sim, "cp-3")
    r = await admin.post(f"machines/{ready}/", params={"op": "power_on"})
    assert (r.status_code, r.text) == (409, "Can't start node: it hasn't been allocated.")
    sid = (await allocate(admin)).json()["system_id"]
    r = await admin.post(f"machines/{sid}/", params={"op": "power_on"}, data={"user_data": "aGk="})
    assert r.json()["status_name"] == "Deploying"
    assert (await admin.get(f"machines/{sid}/", params={"op": "query_power_state"})).json() == {"state": "on"}
    r = await admin.post(f"machines/{sid}/", params={"op": "power_on"})
    assert r.json()["power_state"] == "on"
    r = await admin.post(f"machines/{sid}/", params={"op": "power_off"}, data={"stop_mode": "soft"})
    assert r.json()["power_state"] == "off"
    # MAAS 3.7.3 does not validate stop_mode (only the IPMI driver reads it; anything but soft is hard).
    r = await admin.post(f"machines/{sid}/", params={"op": "power_off"}, data={"stop_mode": "gentle"})
    assert (r.status_code, r.json()["power_state"]) == (200, "off")


async def test_annotations_need_ownership(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await admin.post(
        f"machines/{sid_of(sim, 'cp-1')}/", params={"op": "set_workload_annotations"}, data={"a": "b"}
    )
    assert (r.status_code, r.text) == (409, "Cannot set workload annotation: it hasn't been acquired.")


async def test_mark_broken_and_fixed(
    sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient
) -> None:
    ready = sid_of(sim, "cp-1")
    r = await admin.post(f"machines/{ready}/", params={"op": "mark_broken"})
    assert (r.status_code, r.text) == (403, "")
    sid = (await allocate(admin, tags="gpu")).json()["system_id"]
    await admin.post(f"machines/{sid}/", params={"op": "deploy"})
    await admin.get("version/")
    r = await admin.post(f"machines/{sid}/", params={"op": "mark_broken"}, data={"comment": "fan failed"})
    assert r.json()["status_name"] == "Broken"
    assert r.json()["error_description"] == "fan failed"
    r = await alice.post(f"machines/{sid}/", params={"op": "mark_fixed"})
    assert r.status_code == 403
    r = await admin.post(f"machines/{sid}/", params={"op": "mark_fixed"})
    assert r.json()["status_name"] == "Deployed"
    r = await admin.post(f"machines/{sid}/", params={"op": "mark_fixed"})
    assert (r.status_code, r.text) == (409, "Can't mark a non-broken node as 'Ready'.")
    sid2 = (await allocate(admin)).json()["system_id"]
    await admin.post(f"machines/{sid2}/", params={"op": "mark_broken"}, data={"error_description": "x"})
    r = await admin.post(f"machines/{sid2}/", params={"op": "mark_fixed"})
    assert r.json()["status_name"] == "Ready"
    assert r.json()["owner"] is None


async def test_abort(sim: Simulator, admin: httpx.AsyncClient) -> None:
    sim.timings = type(sim.timings)(deploy=3600, commission=3600)
    sid = (await allocate(admin)).json()["system_id"]
    r = await admin.post(f"machines/{sid}/", params={"op": "abort"})
    assert (r.status_code, r.text) == (
        409,
        f"Cannot abort in current state: node {sid} is in state Allocated.",
    )
    await admin.post(f"machines/{sid}/", params={"op": "deploy"})
    r = await admin.post(f"machines/{sid}/", params={"op": "abort"})
    assert r.json()["status_name"] == "Allocated"
    assert r.json()["power_state"] == "off"
    m = sim.state.by_hostname["big-2"]
    sim.commission(m)
    r = await admin.post(f"machines/{m.system_id}/", params={"op": "abort"})
    assert r.json()["status_name"] == "New"
    m3 = sim.state.by_hostname["cp-3"]
    sim.state.set_status(m3, NodeStatus.TESTING)
    r = await admin.post(f"machines/{m3.system_id}/", params={"op": "abort"})
    assert r.json()["status_name"] == "Ready"


# -- update / delete ----------------------------------------------------------------------------------------
async def test_update_machine(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    sid = sid_of(sim, "small-1")
    r = await admin.put(
        f"machines/{sid}/",
        data={
            "hostname": "tiny",
            "zone": "az2",
            "pool": "control-plane",
            "cpu_count": "64",
            "description": "d",
        },
    )
    body = r.json()
    assert (body["hostname"], body["zone"]["name"], body["pool"]["name"], body["cpu_count"]) == (
        "tiny",
        "az2",
        "control-plane",
        64,
    )
    assert (await allocate(admin)).json()["hostname"] == "cp-1"  # cost index follows the resize
    r = await admin.put(f"machines/{sid}/", data={"hostname": "cp-2", "zone": "nowhere", "memory": "x"})
    assert r.status_code == 400
    assert set(r.json()) == {"hostname", "zone", "memory"}
    assert (await alice.put(f"machines/{sid}/", data={"description": "x"})).status_code == 403


async def test_delete_machine(sim: Simulator, admin: httpx.AsyncClient, alice: httpx.AsyncClient) -> None:
    sid = sid_of(sim, "small-1")
    assert (await alice.delete(f"machines/{sid}/")).status_code == 403
    r = await admin.delete(f"machines/{sid}/")
    assert (r.status_code, r.content) == (204, b"")
    assert (await admin.delete(f"machines/{sid}/")).status_code == 404


async def test_locked_machine_cannot_be_edited_by_non_admin(sim: Simulator, alice: httpx.AsyncClient) -> None:
    m = sim.state.by_hostname["cp-1"]
    m.locked = True
    assert (await alice.post(f"machines/{m.system_id}/", params={"op": "deploy"})).status_code == 403


async def test_unknown_op_and_method(sim: Simulator, admin: httpx.AsyncClient) -> None:
    r = await admin.post("machines/", params={"op": "frobnicate"})
    assert (r.status_code, r.text) == (400, "Unrecognised signature: method=POST op=frobnicate")
    r = await admin.put("machines/")
    assert r.status_code == 405
    assert "GET" in r.headers["allow"]
    r = await admin.post(f"machines/{sid_of(sim, 'cp-1')}/op-release/")
    assert r.status_code == 200


async def test_non_admin_client_release_of_own_machine(sim: Simulator) -> None:
    async with client(sim, ALICE_KEY) as c:
        sid = (await allocate(c, agent_name="al")).json()["system_id"]
        r = await c.post(f"machines/{sid}/", params={"op": "release"})
        assert r.json()["status_name"] == "Ready"
