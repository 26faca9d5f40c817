"""vm-hosts/ and pods/: compose, resource accounting, over-commit, decompose, register_vmhost, MAAS 4."""

from __future__ import annotations

import httpx
import pytest
from simtools import ADMIN_KEY, ALICE_KEY, client, lxd_sim

from capmaas_dev.simulator import Inventory, Simulator, Timings

AUTH_METHODS = ("plaintext", "hmac")  # every admin/alice/ladmin test runs with both signatures


async def test_list_and_read_vm_hosts(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    hosts = (await ladmin.get("vm-hosts/")).json()
    assert [h["name"] for h in hosts] == ["lxd-az1", "lxd-az2", "lxd-az3"]
    h = hosts[0]
    assert h["type"] == "lxd"
    assert h["cpu_over_commit_ratio"] == 4.0
    assert h["memory_over_commit_ratio"] == 1.5
    assert h["total"] == {"cores": 32, "memory": 131072, "local_storage": 3_500_000_000_000}
    assert h["used"] == {"cores": 0, "memory": 0, "local_storage": 0}
    assert h["host"] == {"system_id": lsim.state.by_hostname["kvm-a"].system_id, "__incomplete__": True}
    assert [p["name"] for p in h["storage_pools"]] == ["default", "fast"]
    assert h["zone"]["name"] == "az1"
    assert h["pool"]["name"] == "vms"
    assert h["resource_uri"] == "/MAAS/api/2.0/vm-hosts/1/"
    pod = (await ladmin.get("pods/1/")).json()
    assert pod["resource_uri"] == "/MAAS/api/2.0/pods/1/"
    r = await ladmin.get("vm-hosts/99/")
    assert r.status_code == 404
    assert (await ladmin.get("vm-hosts/abc/")).status_code == 404


async def test_compose_commissions_then_ready_and_accounts(
    lsim: Simulator, ladmin: httpx.AsyncClient
) -> None:
    lsim.timings = type(lsim.timings)(commission=3600)
    r = await ladmin.post(
        "vm-hosts/1/",
        params={"op": "compose"},
        data={
            "cores": "4",
            "memory": "8192",
            "storage": "root:20(fast),data:50",
            "hostname": "vm-1",
            "zone": "3",
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"system_id", "resource_uri"}
    sid = body["system_id"]
    m = (await ladmin.get(f"machines/{sid}/")).json()
    assert m["status_name"] == "Commissioning"
    assert m["pod"] == {"id": 1, "name": "lxd-az1", "resource_uri": "/MAAS/api/2.0/pods/1/"}
    assert m["zone"]["id"] == 3
    assert m["pool"]["name"] == "vms"
    assert m["power_type"] == "lxd"
    assert m["virtualmachine_id"] is not None
    assert m["storage"] == 70000.0
    host = (await ladmin.get("vm-hosts/1/")).json()
    assert host["used"] == {"cores": 4, "memory": 8192, "local_storage": 70_000_000_000}
    assert {p["name"]: p["used"] for p in host["storage_pools"]} == {
        "default": 50_000_000_000,
        "fast": 20_000_000_000,
    }
    lsim.state.timers = [(0.0, *t[1:]) for t in lsim.state.timers]
    assert (await ladmin.get(f"machines/{sid}/")).json()["status_name"] == "Ready"
    r = await ladmin.delete(f"machines/{sid}/")
    assert r.status_code == 204
    host = (await ladmin.get("vm-hosts/1/")).json()
    assert host["used"] == {"cores": 0, "memory": 0, "local_storage": 0}
    assert lsim.check_invariants() == []


async def test_compose_defaults_and_skip_commissioning(ladmin: httpx.AsyncClient) -> None:
    r = await ladmin.post("pods/2/", params={"op": "compose"}, data={"skip_commissioning": "true"})
    sid = r.json()["system_id"]
    m = (await ladmin.get(f"machines/{sid}/")).json()
    assert (m["status_name"], m["cpu_count"], m["memory"], m["storage"]) == ("Ready", 1, 2048, 8000.0)
    assert m["hostname"]


async def test_compose_over_commit_is_503(ladmin: httpx.AsyncClient) -> None:
    # lxd-az3: 16 cores x 2.0, 65536 MiB x 1.0
    for _ in range(2):
        r = await ladmin.post(
            "vm-hosts/3/", params={"op": "compose"}, data={"cores": "16", "memory": "16384"}
        )
        assert r.status_code == 200
    r = await ladmin.post("vm-hosts/3/", params={"op": "compose"}, data={"cores": "1", "memory": "1024"})
    assert (r.status_code, r.text) == (
        503,
        "Unable to compose KVM instance in 'lxd-az3'. CPU overcommit ratio is 2.0 and there are -16 "
        "available resources; 1 requested.",
    )
    assert "retry-after" not in r.headers
    r = await ladmin.post("vm-hosts/2/", params={"op": "compose"}, data={"cores": "32", "memory": "131072"})
    assert r.status_code == 200
    r = await ladmin.post("vm-hosts/2/", params={"op": "compose"}, data={"cores": "1", "memory": "65537"})
    assert r.status_code == 503
    assert r.text.endswith(
        "Memory overcommit ratio is 1.5 and there are 0 available resources; 65537 requested."
    )


async def test_compose_storage_shortage_and_unknown_pool_are_503(ladmin: httpx.AsyncClient) -> None:
    r = await ladmin.post("vm-hosts/3/", params={"op": "compose"}, data={"storage": "root:2000"})
    assert (r.status_code, r.text) == (
        503,
        "Unable to compose machine because: Not enough storage space on storage pools: default",
    )
    r = await ladmin.post("vm-hosts/3/", params={"op": "compose"}, data={"storage": "root:10(nvme)"})
    assert r.status_code == 503
    assert "storage pool 'nvme' does not exist" in r.text


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"cores": "33"}, "cores"),
        ({"cores": "0"}, "cores"),
        ({"cores": "x"}, "cores"),
        ({"memory": "512"}, "memory"),
        ({"architecture": "ppc64el/generic"}, "architecture"),
        ({"hostname": "metal-1"}, "hostname"),
        ({"zone": "99"}, "zone"),
        ({"pool": "x"}, "pool"),
        ({"domain": "7"}, "domain"),
        ({"storage": "root:x"}, "storage"),
    ],
)
async def test_compose_validation_errors(ladmin: httpx.AsyncClient, data: dict[str, str], field: str) -> None:
    r = await ladmin.post("vm-hosts/1/", params={"op": "compose"}, data=data)
    assert r.status_code == 400
    assert field in r.json()


async def test_compose_pinned_cores_and_interfaces(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    r = await ladmin.post(
        "vm-hosts/1/", params={"op": "compose"}, data={"pinned_cores": "0,1,2", "interfaces": "eth0:space=x"}
    )
    sid = r.json()["system_id"]
    assert lsim.state.machines[sid].cpu_count == 3
    lsim.state.vm_hosts[2].host_system_id = None
    r = await ladmin.post("vm-hosts/2/", params={"op": "compose"}, data={"interfaces": "eth0:space=x"})
    assert (r.status_code, r.text) == (400, "Pod must be on a known host if interfaces are specified.")


async def test_compose_requires_admin(lsim: Simulator) -> None:
    lsim.add_user("alice", api_key=ALICE_KEY)
    async with client(lsim, ALICE_KEY) as alice:
        r = await alice.post("vm-hosts/1/", params={"op": "compose"})
        assert (r.status_code, r.text) == (403, "This method is reserved for admin users.")
        assert (await alice.get("vm-hosts/")).status_code == 200


async def test_update_vm_host(ladmin: httpx.AsyncClient) -> None:
    r = await ladmin.put(
        "vm-hosts/1/",
        data={
            "cpu_over_commit_ratio": "8",
            "memory_over_commit_ratio": "2.5",
            "zone": "az2",
            "pool": "default",
            "default_macvlan_mode": "bridge",
            "default_storage_pool": "fast",
            "name": "renamed",
            "tags": "a,b",
        },
    )
    body = r.json()
    assert body["cpu_over_commit_ratio"] == 8.0
    assert body["memory_over_commit_ratio"] == 2.5
    assert (body["zone"]["name"], body["pool"]["name"], body["name"], body["tags"]) == (
        "az2",
        "default",
        "renamed",
        ["a", "b"],
    )
    assert body["default_macvlan_mode"] == "bridge"
    assert [p["default"] for p in body["storage_pools"]] == [False, True]
    r = await ladmin.put(
        "vm-hosts/1/",
        data={
            "cpu_over_commit_ratio": "11",
            "memory_over_commit_ratio": "x",
            "zone": "nowhere",
            "pool": "nowhere",
            "default_macvlan_mode": "weird",
            "default_storage_pool": "none",
        },
    )
    assert r.status_code == 400
    assert set(r.json()) == {
        "cpu_over_commit_ratio",
        "memory_over_commit_ratio",
        "zone",
        "pool",
        "default_macvlan_mode",
        "default_storage_pool",
    }
    r = await ladmin.put("vm-hosts/1/", data={"cpu_over_commit_ratio": "-1"})
    assert r.json() == {"cpu_over_commit_ratio": ["Ensure this value is greater than or equal to 0."]}


async def test_vm_host_ops(ladmin: httpx.AsyncClient) -> None:
    assert (await ladmin.post("vm-hosts/1/", params={"op": "refresh"})).json()["name"] == "lxd-az1"
    assert (await ladmin.get("vm-hosts/1/", params={"op": "parameters"})).json() == {
        "power_address": "https://lxd-az1:8443",
        "project": "default",
    }
    r = await ladmin.post("vm-hosts/1/", params={"op": "add_tag"}, data={"tag": "gold"})
    assert r.json()["tags"] == [
        "lxd",
        "capmaas-shared",
        "gold",
    ]  # tools/src/capmaas_dev/simulator/inventories/lxd.yaml's, + gold
    r = await ladmin.post("vm-hosts/1/", params={"op": "remove_tag"}, data={"tag": "lxd"})
    assert r.json()["tags"] == ["capmaas-shared", "gold"]
    r = await ladmin.post("vm-hosts/1/", params={"op": "add_tag"}, data={"tag": "a,b"})
    assert (r.status_code, r.text) == (400, 'Tag may not contain a ",".')
    assert (await ladmin.post("vm-hosts/1/", params={"op": "add_tag"})).status_code == 400


async def test_create_vm_host(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    r = await ladmin.post(
        "vm-hosts/", data={"type": "lxd", "power_address": "https://10.20.0.23:8443", "tags": "x"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "metal-3"
    assert body["total"]["cores"] == 16
    assert body["host"]["system_id"] == lsim.state.by_hostname["metal-3"].system_id
    r = await ladmin.post(
        "vm-hosts/", data={"type": "virsh", "power_address": "qemu+ssh://x/system", "name": "v"}
    )
    assert r.json()["total"]["cores"] == 16
    assert r.json()["host"]["system_id"] is None
    r = await ladmin.post("vm-hosts/", data={"type": "virsh", "power_address": "y", "name": "v"})
    assert r.json() == {"name": ["Pod with this Name already exists."]}
    assert (await ladmin.post("vm-hosts/", data={"type": "vmware", "power_address": "y"})).status_code == 400
    assert (await ladmin.post("vm-hosts/", data={"type": "lxd"})).status_code == 400


async def test_delete_vm_host_with_and_without_decompose(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    a = (await ladmin.post("vm-hosts/1/", params={"op": "compose"})).json()["system_id"]
    b = (await ladmin.post("vm-hosts/2/", params={"op": "compose"})).json()["system_id"]
    assert (await ladmin.delete("vm-hosts/1/", params={"decompose": "true"})).status_code == 204
    assert (await ladmin.get(f"machines/{a}/")).status_code == 404
    kvm_b = lsim.state.vm_hosts[2].host_system_id
    assert (await ladmin.delete("pods/2/")).status_code == 204
    # 3.7 Pod.async_delete deletes the VMs' machines without decompose too; the host machine stays Deployed.
    assert (await ladmin.get(f"machines/{b}/")).status_code == 404
    assert (await ladmin.get(f"machines/{kvm_b}/")).json()["status_name"] == "Deployed"
    assert lsim.check_invariants() == []


async def test_machine_hosting_a_vm_host_cannot_be_deleted_or_released_without_force(
    lsim: Simulator, ladmin: httpx.AsyncClient
) -> None:
    kvm = lsim.state.by_hostname["kvm-c"].system_id
    r = await ladmin.delete(f"machines/{kvm}/")
    assert (r.status_code, r.text) == (400, "The following VM hosts must be removed first: lxd-az3")
    r = await ladmin.post(f"machines/{kvm}/", params={"op": "release"})
    assert r.status_code == 400
    vm = (await ladmin.post("vm-hosts/3/", params={"op": "compose"})).json()["system_id"]
    r = await ladmin.post(f"machines/{kvm}/", params={"op": "release"}, data={"force": "true"})
    assert r.status_code == 200
    assert (await ladmin.get("vm-hosts/3/")).status_code == 404
    assert (await ladmin.get(f"machines/{vm}/")).status_code == 404
    kvm_b = lsim.state.by_hostname["kvm-b"].system_id
    assert (await ladmin.delete(f"machines/{kvm_b}/", params={"force": "1"})).status_code == 204


async def test_allocate_composes_a_dynamic_vm_when_nothing_matches(
    lsim: Simulator, ladmin: httpx.AsyncClient
) -> None:
    r = await ladmin.post(
        "machines/", params={"op": "allocate"}, data={"cpu_count": "24", "zone": "az2", "tags": "lxd"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pod"]["name"] == "lxd-az2"
    assert body["cpu_count"] == 24
    assert body["status_name"] == "Allocated"
    sid = body["system_id"]
    r = await ladmin.post(f"machines/{sid}/", params={"op": "release"})
    assert r.status_code == 200
    assert (await ladmin.get(f"machines/{sid}/")).status_code == 404  # dynamic: deleted on release
    assert (await ladmin.get("vm-hosts/2/")).json()["used"]["cores"] == 0
    r = await ladmin.post(
        "machines/", params={"op": "allocate"}, data={"storage": "root:100(fast)", "mem": "4096"}
    )
    assert r.json()["pod"]["name"] == "lxd-az1"
    r = await ladmin.post(
        "machines/", params={"op": "allocate"}, data={"storage": "root:100(nope)", "cpu_count": "40"}
    )
    assert r.status_code == 409
    r = await ladmin.post("machines/", params={"op": "allocate"}, data={"cpu_count": "200"})
    assert r.status_code == 409
    r = await ladmin.post("machines/", params={"op": "allocate"}, data={"cpu_count": "20", "pool": "default"})
    assert r.status_code == 409  # only metal in the default pool, none big enough
    assert lsim.check_invariants() == []


async def test_pod_constraints_match_the_bmc_and_filter_the_dynamic_compose(
    lsim: Simulator, ladmin: httpx.AsyncClient
) -> None:
    lsim.timings = type(lsim.timings)(commission=0)
    vm = (await ladmin.post("vm-hosts/1/", params={"op": "compose"}, data={"cores": "1"})).json()["system_id"]
    lsim.tick()
    assert (await ladmin.get(f"machines/{vm}/")).json()["status_name"] == "Ready"

    async def hostnames(**params: str) -> list[str]:
        r = await ladmin.get("machines/", params={"status": "ready", **params})
        return sorted(m["hostname"] for m in r.json())

    vm_name = (await ladmin.get(f"machines/{vm}/")).json()["hostname"]
    metal = ["metal-1", "metal-2", "metal-3"]
    assert await hostnames(not_pod_type="lxd") == metal  # bare metal's BMC is not a pod: kept
    assert await hostnames(pod_type="ipmi") == metal  # its BMC's power type
    assert await hostnames(pod_type="lxd") == [vm_name]
    assert await hostnames(pod="lxd-az1") == [vm_name]
    assert await hostnames(not_pod="lxd-az1") == metal
    # The 1-core VM is the cheapest Ready machine, but not for a bare-metal allocate.
    r = await ladmin.post("machines/", params={"op": "allocate"}, data={"not_pod_type": "lxd"})
    assert r.json()["hostname"] == "metal-1"
    r = await ladmin.post("machines/", params={"op": "allocate"})
    assert r.json()["system_id"] == vm
    # Nothing matches: the dynamic compose leaves out hosts the pod constraints exclude.
    for data in (
        {"cpu_count": "24", "not_pod_type": "lxd"},
        {"cpu_count": "24", "pod_type": "virsh"},
        {"cpu_count": "24", "not_pod": "lxd-az1", "zone": "az1"},
        {"cpu_count": "24", "pod": "lxd-az1", "zone": "az2"},
        {"cpu_count": "24", "not_tags": "lxd"},
    ):
        r = await ladmin.post("machines/", params={"op": "allocate"}, data=data)
        assert r.status_code == 409, (data, r.text)
    r = await ladmin.post("machines/", params={"op": "allocate"}, data={"cpu_count": "24", "pod": "lxd-az2"})
    assert r.json()["pod"]["name"] == "lxd-az2"
    assert lsim.check_invariants() == []


async def test_dynamic_compose_can_be_switched_off() -> None:
    sim = lxd_sim(dynamic_compose=False)
    async with client(sim) as c:
        r = await c.post("machines/", params={"op": "allocate"}, data={"cpu_count": "24"})
        assert r.status_code == 409


async def test_register_vmhost_turns_machine_into_vm_host(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    sid = lsim.state.by_hostname["metal-2"].system_id
    r = await ladmin.post(f"machines/{sid}/", params={"op": "deploy"}, data={"register_vmhost": "true"})
    assert r.status_code == 200
    assert (await ladmin.get(f"machines/{sid}/")).json()["status_name"] == "Deployed"
    hosts = (await ladmin.get("vm-hosts/")).json()
    new = [h for h in hosts if h["host"]["system_id"] == sid]
    assert len(new) == 1
    assert new[0]["type"] == "lxd"
    assert new[0]["total"]["cores"] == 8
    sid3 = lsim.state.by_hostname["metal-3"].system_id
    await ladmin.post(f"machines/{sid3}/", params={"op": "deploy"}, data={"install_kvm": "true"})
    await ladmin.get("version/")
    assert any(h["type"] == "virsh" for h in (await ladmin.get("vm-hosts/")).json())


async def test_maas4_mode() -> None:
    sim = lxd_sim(maas4=True)
    async with client(sim) as c:
        for path in ("vm-hosts/", "pods/1/", "vm-hosts/1/?op=compose"):
            r = await c.get(path)
            assert (r.status_code, r.text) == (410, "VM host (KVM) support has been removed from MAAS.")
        sid = sim.state.by_hostname["metal-1"].system_id
        r = await c.post(f"machines/{sid}/", params={"op": "deploy"}, data={"register_vmhost": "true"})
        assert (r.status_code, r.text) == (
            400,
            "Support for register_vmhost allocation parameter has been removed.",
        )
        r = await c.post("machines/", params={"op": "allocate"}, data={"install_kvm": "1"})
        assert r.text == "Support for install_kvm allocation parameter has been removed."
        m = (await c.get(f"machines/{sid}/")).json()
        assert "pod" not in m
        assert "virtualmachine_id" not in m
        assert (await c.get("version/")).json()["version"] == "4.0.0"
        r = await c.post("machines/", params={"op": "allocate"}, data={"cpu_count": "24"})
        assert r.status_code == 409  # no on-the-fly compose in 4.0


async def test_composed_vm_sits_on_the_host_network_and_gets_an_address_when_deploying(
    lsim: Simulator, ladmin: httpx.AsyncClient
) -> None:
    vm = (await ladmin.post("vm-hosts/1/", params={"op": "compose"})).json()["system_id"]
    m = (await ladmin.get(f"machines/{vm}/")).json()
    assert m["status_name"] == "Ready"
    assert m["ip_addresses"] == []
    link = m["interface_set"][0]["links"][0]
    assert (link["mode"], link["subnet"]["cidr"]) == ("auto", "10.20.0.0/24")  # kvm-a's network
    r = await ladmin.post(f"machines/{vm}/", params={"op": "deploy"})
    assert r.json()["ip_addresses"] == []  # MAAS claims AUTO IPs after the deploy's commit
    m = (await ladmin.get(f"machines/{vm}/")).json()  # the first free one: .1 is the gateway
    assert (m["status_name"], m["ip_addresses"]) == ("Deployed", ["10.20.0.2"])
    assert m["interface_set"][0]["links"][0]["mode"] == "auto"
    other = (await ladmin.post("vm-hosts/2/", params={"op": "compose"})).json()["system_id"]
    await ladmin.post(f"machines/{other}/", params={"op": "deploy"})
    assert (await ladmin.get(f"machines/{other}/")).json()["ip_addresses"] == ["10.20.0.3"]
    await ladmin.post(f"machines/{vm}/", params={"op": "release"})
    assert (await ladmin.get(f"machines/{vm}/")).json()["ip_addresses"] == []
    assert "10.20.0.2" not in lsim.state.used_ips
    assert lsim.check_invariants() == []


async def test_compose_with_a_static_ip_and_its_refusals(lsim: Simulator, ladmin: httpx.AsyncClient) -> None:
    async def compose(interfaces: str) -> httpx.Response:
        return await ladmin.post("vm-hosts/1/", params={"op": "compose"}, data={"interfaces": interfaces})

    r = await compose("eth0:subnet_cidr=10.20.0.0/24,ip=10.20.0.50")
    m = (await ladmin.get(f"machines/{r.json()['system_id']}/")).json()
    assert m["ip_addresses"] == ["10.20.0.50"]
    assert m["interface_set"][0]["links"][0]["mode"] == "static"
    r = await compose("ip=10.20.0.51")  # no label, the subnet found from the address
    assert (await ladmin.get(f"machines/{r.json()['system_id']}/")).json()["ip_addresses"] == ["10.20.0.51"]
    for interfaces, message in (
        ("eth0:ip=10.20.0.50", "IP address 10.20.0.50 is already in use."),
        ("eth0:subnet_cidr=10.20.0.0/24,ip=10.99.0.5", "IP address 10.99.0.5 is not in subnet 10.20.0.0/24."),
        ("eth0:subnet=nope", "No subnet matches 'eth0:subnet=nope'."),
        ("eth0:ip=10.99.0.5", "No subnet matches 'eth0:ip=10.99.0.5'."),
        ("eth0:ip=bogus", "'bogus' is not a valid IP address."),
    ):
        r = await compose(interfaces)
        assert (r.status_code, r.json()) == (400, {"interfaces": [message]}), interfaces
    r = await compose("eth0:space=default")  # nothing about the address: the host's network
    assert r.status_code == 200
    assert lsim.check_invariants() == []


def three_network_sim() -> Simulator:
    """An LXD host on two of three networks: pxe (eth0), api (eth1, space ``apis``), store (VLAN 60)."""
    return Simulator(
        Inventory(
            {
                "subnets": [
                    {"cidr": "10.40.0.0/24", "name": "pxe", "gateway_ip": "10.40.0.1"},
                    {"cidr": "10.50.0.0/24", "name": "api", "space": "apis", "vid": 50},
                    {"cidr": "10.60.0.0/24", "name": "store", "vid": 60},
                ],
                "boot_resources": [{"name": "ubuntu/jammy"}],
                "machines": [
                    {"hostname": "kvm0", "status": "deployed", "owner": "admin", "cpu_count": 32,
                     "memory": 65536, "disks": [{"name": "sda", "size": "1T"}],
                     "interfaces": [{"name": "eth0", "subnet": "pxe", "ip": "10.40.0.200"},
                                    {"name": "eth1", "subnet": "api", "ip": "10.50.0.200"}]}
                ],
                "vm_hosts": [{"name": "lxd0", "host": "kvm0",
                              "storage_pools": [{"name": "default", "size": "500G", "default": True}]}],
            }
        ),
        api_key=ADMIN_KEY,
        timings=Timings.fast(),
    )  # fmt: skip


async def test_compose_makes_one_nic_per_interfaces_label() -> None:
    """ComposeMachineForm: each label of the map is a VM NIC, in order, on its subnet; ``ip=`` is static, the
    others are AUTO links that get their addresses when the deployment starts."""
    sim = three_network_sim()
    async with client(sim) as c:
        r = await c.post(
            "vm-hosts/1/",
            params={"op": "compose"},
            data={
                "interfaces": "eth0:subnet=10.40.0.0/24;eth1:space=apis,ip=10.50.0.77;2:vid=60;"
                "data:name=eth1;averyveryverylonglabel:name=eth0,subnet=pxe",
                "skip_commissioning": "true",
            },
        )
        assert r.status_code == 200, r.text
        vm = r.json()["system_id"]
        m = (await c.get(f"machines/{vm}/")).json()
        links = [(i["name"], i["links"][0]) for i in m["interface_set"]]
        nics = [(name, k["mode"], k["subnet"]["cidr"], k.get("ip_address")) for name, k in links]
        long_name = nics[4][0]
        assert nics == [
            ("eth0", "auto", "10.40.0.0/24", None),
            ("eth1", "static", "10.50.0.0/24", "10.50.0.77"),
            ("eth2", "auto", "10.60.0.0/24", None),  # a numeric label is eth<n>
            ("data", "auto", "10.50.0.0/24", None),  # name=: the host interface's network
            (long_name, "auto", "10.40.0.0/24", None),
        ]
        assert long_name.startswith("eth-")
        assert long_name.endswith("-label")
        assert len(long_name) == 15  # IFNAMSIZ
        assert len({i["mac_address"] for i in m["interface_set"]}) == 5
        assert m["ip_addresses"] == ["10.50.0.77"]
        await c.post(f"machines/{vm}/", params={"op": "deploy"})
        m = (await c.get(f"machines/{vm}/")).json()
        assert sorted(m["ip_addresses"]) == ["10.40.0.2", "10.40.0.3", "10.50.0.1", "10.50.0.77", "10.60.0.1"]
        await c.post(f"machines/{vm}/", params={"op": "release"})
        assert (await c.get(f"machines/{vm}/")).json()["ip_addresses"] == ["10.50.0.77"]
        assert sim.check_invariants() == []


@pytest.mark.parametrize(
    ("interfaces", "messages"),
    [
        (
            "eth0:subnet=pxe;eth1",
            [
                "Malformed constraint: 'eth1' (required format: "
                "'<label>:<key>=<value>[,<key2>=<value2>[,...]]')"
            ],
        ),
        ("eth0:subnet=pxe;eth0:subnet=api", ["Constraint label defined more than once: 'eth0'"]),
        (
            "-x:subnet=pxe",
            [
                "Invalid label name: '-x' (Must begin with an alphanumeric character, and include only "
                "alphanumeric characters, dashes, and underscores.)"
            ],
        ),
        ("eth0:subnet=pxe,space", ["Malformed key/value pair in constraint: 'space'"]),
        (
            "eth0:subnet=pxe;eth1:subnet=nope;eth2:subnet=api,ip=10.40.0.9;eth3:vid=99",
            [
                "No subnet matches 'eth1:subnet=nope'.",
                "IP address 10.40.0.9 is not in subnet 10.50.0.0/24.",
                "No subnet matches 'eth3:vid=99'.",
            ],
        ),
        ("eth0:ip=10.50.0.5;eth1:ip=10.50.0.5", ["IP address 10.50.0.5 is already in use."]),
        ("eth0:subnet=pxe;eth1:ip=10.50.0.200", ["IP address 10.50.0.200 is already in use."]),
    ],
)
async def test_compose_refuses_bad_interfaces_labels(interfaces: str, messages: list[str]) -> None:
    sim = three_network_sim()
    async with client(sim) as c:
        r = await c.post("vm-hosts/1/", params={"op": "compose"}, data={"interfaces": interfaces})
        assert (r.status_code, r.json()) == (400, {"interfaces": messages})
    assert len(sim.state.machines) == 1  # nothing composed
    assert sim.state.vm_hosts[1].vms == {}
