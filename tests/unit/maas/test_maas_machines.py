"""Every machine operation sends exactly MAAS's wire format and reads MAAS's answer into typed models."""

from __future__ import annotations

import base64

import pytest
from maas_fakes import VM_HOST, FakeMaas, form_of, machine, ok, query_of, text

from capmaas.maas import (
    AllocateConstraints,
    MaasClient,
    NodeStatus,
    PowerState,
    ResponseParseError,
)


async def test_list_sends_each_filter_with_repeated_keys(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "machines/", None, ok([machine(), machine(system_id="def456", hostname="node-2")]))
    result = await client.machines.list(
        ids=["abc123", "def456"],
        agent_name="uid-1",
        hostnames=["node-1"],
        zone="z1",
        pool="p1",
        status=[NodeStatus.DEPLOYED, NodeStatus.FAILED_DEPLOYMENT],
        tags=["gpu", "ssd"],
    )
    assert [m.system_id for m in result] == ["abc123", "def456"]
    assert fake.last.method == "GET"
    assert query_of(fake.last) == [
        ("id", "abc123"),
        ("id", "def456"),
        ("hostname", "node-1"),
        ("agent_name", "uid-1"),
        ("zone", "z1"),
        ("pool", "p1"),
        ("status", "deployed"),
        ("status", "failed_deployment"),
        ("tags", "gpu"),
        ("tags", "ssd"),
    ]
    assert fake.last.content == b""


async def test_list_without_filters_sends_no_query(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "machines/", None, ok([]))
    assert await client.machines.list(status=NodeStatus.READY) == []
    assert query_of(fake.last) == [("status", "ready")]
    await client.machines.list()
    assert query_of(fake.last) == []


async def test_get_parses_the_machine(client: MaasClient, fake: FakeMaas) -> None:
    fake.route(
        "GET",
        "machines/abc123/",
        None,
        ok(machine(status=6, power_state="on", pod={"id": 3, "name": "kvm-1"}, virtualmachine_id=9)),
    )
    m = await client.machines.get("abc123")
    assert m.status is NodeStatus.DEPLOYED
    assert m.status.name == "DEPLOYED"
    assert m.power_state is PowerState.ON
    assert m.zone.name == "default"
    assert m.pool is not None
    assert m.pool.id == 0
    assert m.tag_names == ("gpu", "ssd")
    assert m.interface_set[0].links[0].subnet is not None
    assert m.interface_set[0].links[0].subnet.cidr == "10.0.0.0/24"
    assert m.pod is not None
    assert m.pod.name == "kvm-1"
    assert m.virtualmachine_id == 9
    assert m.memory == 8192


async def test_get_quotes_the_system_id_into_one_path_segment(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "machines/a%2Fb/", None, ok(machine()))
    await client.machines.get("a/b")
    assert fake.last.url.raw_path == b"/MAAS/api/2.0/machines/a%2Fb/"


async def test_allocate_sends_constraints_as_form_with_op_in_query(
    client: MaasClient, fake: FakeMaas
) -> None:
    fake.route("POST", "machines/", "allocate", ok(machine(status=10, owner="admin")))
    m = await client.machines.allocate(
        AllocateConstraints(
            cpu_count=4,
            mem=8192,
            tags=["gpu", "ssd"],
            not_tags=["broken"],
            zone="z1",
            not_in_zone=["z2", "z3"],
            not_pod_type=["lxd"],
            pool="p1",
            arch="amd64",
            storage="root:100(ssd)",
            interfaces="eth0:space=mgmt",
            system_id="abc123",
            name="node-1",
        ),
        agent_name="uid-1",
        comment="capmaas",
        dry_run=True,
    )
    assert m.status is NodeStatus.ALLOCATED
    assert query_of(fake.last) == [("op", "allocate")]
    assert fake.last.headers["content-type"] == "application/x-www-form-urlencoded"
    assert form_of(fake.last) == [
        ("name", "node-1"),
        ("system_id", "abc123"),
        ("arch", "amd64"),
        ("cpu_count", "4"),
        ("mem", "8192"),
        ("zone", "z1"),
        ("pool", "p1"),
        ("storage", "root:100(ssd)"),
        ("interfaces", "eth0:space=mgmt"),
        ("tags", "gpu"),
        ("tags", "ssd"),
        ("not_tags", "broken"),
        ("not_in_zone", "z2"),
        ("not_in_zone", "z3"),
        ("not_pod_type", "lxd"),
        ("agent_name", "uid-1"),
        ("comment", "capmaas"),
        ("dry_run", "true"),
    ]


async def test_allocate_without_constraints_sends_an_empty_form(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("POST", "machines/", "allocate", ok(machine(status=10)))
    await client.machines.allocate()
    assert form_of(fake.last) == []


async def test_deploy_base64_encodes_user_data_and_sends_only_set_options(
    client: MaasClient, fake: FakeMaas
) -> None:
    fake.route("POST", "machines/abc123/", "deploy", ok(machine(status=9)))
    user_data = b"#cloud-config\nruncmd: [echo hi]\n\x00\xff"
    m = await client.machines.deploy(
        "abc123",
        user_data=user_data,
        distro_series="ubuntu/jammy",
        hwe_kernel="hwe-22.04",
        ephemeral_deploy=True,
        install_kvm=True,
        register_vmhost=True,
        enable_hw_sync=True,
        comment="go",
    )
    assert m.status is NodeStatus.DEPLOYING
    assert query_of(fake.last) == [("op", "deploy")]
    form = dict(form_of(fake.last))
    assert base64.b64decode(form.pop("user_data")) == user_data
    assert form == {
        "distro_series": "ubuntu/jammy",
        "hwe_kernel": "hwe-22.04",
        "comment": "go",
        "ephemeral_deploy": "true",
        "install_kvm": "true",
        "register_vmhost": "true",
        "enable_hw_sync": "true",
    }


async def test_deploy_defaults_send_nothing(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("POST", "machines/abc123/", "deploy", ok(machine(status=9)))
    await client.machines.deploy("abc123")
    assert form_of(fake.last) == []


async def test_deploy_refuses_text_user_data(client: MaasClient, fake: FakeMaas) -> None:
    with pytest.raises(TypeError, match="bytes"):
        await client.machines.deploy("abc123", user_data="#cloud-config")  # type: ignore[arg-type]
    assert fake.requests == []


async def test_release_sends_flags(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("POST", "machines/abc123/", "release", ok(machine(status=14)))
    m = await client.machines.release(
        "abc123", erase=True, secure_erase=True, quick_erase=True, force=True, comment="bye"
    )
    assert m.status is NodeStatus.DISK_ERASING
    assert form_of(fake.last) == [
        ("erase", "true"),
        ("secure_erase", "true"),
        ("quick_erase", "true"),
        ("force", "true"),
        ("comment", "bye"),
    ]
    await client.machines.release("abc123")
    assert form_of(fake.last) == []


async def test_release_many_repeats_machines_and_returns_released_ids(
    client: MaasClient, fake: FakeMaas
) -> None:
    fake.route("POST", "machines/", "release", ok(["a1", "b2"]))
    released = await client.machines.release_many(["a1", "b2", "c3"], erase=True)
    assert released == ["a1", "b2"]
    assert form_of(fake.last) == [
        ("machines", "a1"),
        ("machines", "b2"),
        ("machines", "c3"),
        ("erase", "true"),
    ]


async def test_release_many_rejects_a_non_list_answer(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("POST", "machines/", "release", ok({"oops": 1}))
    with pytest.raises(ResponseParseError, match="list of system ids"):
        await client.machines.release_many(["a1"])


async def test_power_on_and_off(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("POST", "machines/abc123/", "power_on", ok(machine(power_state="on")))
    fake.route("POST", "machines/abc123/", "power_off", ok(machine(power_state="off")), ok(None))
    on = await client.machines.power_on("abc123", user_data=b"x", comment="c")
    assert on.power_state is PowerState.ON
    assert form_of(fake.last) == [("user_data", "eA=="), ("comment", "c")]
    off = await client.machines.power_off("abc123", stop_mode="soft", comment="c")
    assert off is not None
    assert off.power_state is PowerState.OFF
    assert form_of(fake.last) == [("stop_mode", "soft"), ("comment", "c")]
    assert await client.machines.power_off("abc123") is None


async def test_query_power_state(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "machines/abc123/", "query_power_state", ok({"state": "on"}), ok({"state": "weird"}))
    assert await client.machines.query_power_state("abc123") is PowerState.ON
    assert fake.last.method == "GET"
    assert query_of(fake.last) == [("op", "query_power_state")]
    # A state newer than our enum reads as unknown rather than failing the reconcile.
    assert await client.machines.query_power_state("abc123") is PowerState.UNKNOWN


async def test_query_power_state_rejects_other_shapes(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "machines/abc123/", "query_power_state", ok(["on"]))
    with pytest.raises(ResponseParseError, match="state"):
        await client.machines.query_power_state("abc123")


async def test_set_workload_annotations(client: MaasClient, fake: FakeMaas) -> None:
    fake.route(
        "POST",
        "machines/abc123/",
        "set_workload_annotations",
        ok(machine(workload_annotations={"cluster": "c1"}, owner_data={"cluster": "c1"})),
    )
    m = await client.machines.set_workload_annotations("abc123", {"cluster": "c1", "old": ""})
    assert m.workload_annotations == {"cluster": "c1"}
    assert m.owner_data == {"cluster": "c1"}
    assert form_of(fake.last) == [("cluster", "c1"), ("old", "")]


@pytest.mark.parametrize("op", ["mark_broken", "mark_fixed", "abort"])
async def test_simple_ops_send_comment(client: MaasClient, fake: FakeMaas, op: str) -> None:
    fake.route("POST", "machines/abc123/", op, ok(machine(status=8)))
    m = await getattr(client.machines, op)("abc123", comment="why")
    assert m.status is NodeStatus.BROKEN
    assert form_of(fake.last) == [("comment", "why")]


async def test_delete(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("DELETE", "machines/abc123/", None, text(204))
    await client.machines.delete("abc123")
    assert query_of(fake.last) == []
    await client.machines.delete("abc123", force=True)
    assert query_of(fake.last) == [("force", "1")]


async def test_vm_host_list_get_parse_resources(client: MaasClient, fake: FakeMaas) -> None:
    fake.route("GET", "vm-hosts/", None, ok([VM_HOST]))
    fake.route("GET", "vm-hosts/3/", None, ok(VM_HOST))
    [host] = await client.vm_hosts.list()
    assert host.available.cores == 28
    assert host.total.memory == 65536
    assert host.cpu_over_commit_ratio == 2.0
    assert host.storage_pools[0].default is True
    assert host.host is not None
    assert host.host.system_id == "host01"
    assert (await client.vm_hosts.get(3)).name == "kvm-1"


async def test_vm_host_compose_update_delete(client: MaasClient, fake: FakeMaas) -> None:
    from capmaas.maas import ComposeRequest

    fake.route("POST", "vm-hosts/3/", "compose", ok({"system_id": "vm1", "resource_uri": "/m/vm1/"}))
    fake.route("PUT", "vm-hosts/3/", None, ok(VM_HOST))
    fake.route("DELETE", "vm-hosts/3/", None, text(204))
    composed = await client.vm_hosts.compose(
        3,
        ComposeRequest(
            cores=2,
            memory=4096,
            storage="root:20(default)",
            interfaces="eth0:subnet=10.0.0.0/24",
            hostname="vm-a",
            zone=1,
            pool=0,
            domain=0,
            architecture="amd64/generic",
            skip_commissioning=True,
        ),
    )
    assert composed.system_id == "vm1"
    assert form_of(fake.last) == [
        ("hostname", "vm-a"),
        ("cores", "2"),
        ("memory", "4096"),
        ("storage", "root:20(default)"),
        ("interfaces", "eth0:subnet=10.0.0.0/24"),
        ("zone", "1"),
        ("pool", "0"),
        ("domain", "0"),
        ("architecture", "amd64/generic"),
        ("skip_commissioning", "true"),
    ]
    await client.vm_hosts.compose(3)
    assert form_of(fake.last) == []
    await client.vm_hosts.update(3, name="kvm-x", tags=["a", "b"], cpu_over_commit_ratio=2.5, enabled=False)
    assert fake.last.method == "PUT"
    assert form_of(fake.last) == [
        ("name", "kvm-x"),
        ("tags", "a"),
        ("tags", "b"),
        ("cpu_over_commit_ratio", "2.5"),
        ("enabled", "false"),
    ]
    await client.vm_hosts.delete(3)
    assert query_of(fake.last) == []
    await client.vm_hosts.delete(3, decompose=True)
    assert query_of(fake.last) == [("decompose", "true")]
