"""A stock MAAS client, python-libmaas (unchanged, from PyPI), drives the simulator over loopback.

libmaas discovers the API from ``describe/``, signs with OAuth PLAINTEXT, sends every POST as a multipart body
of base64 parts (an empty one for no parameters), and reads answers into its own object model: each step
below fails if the simulator answers anything libmaas cannot take.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from maas.client import bones, connect
from maas.client.enum import NodeStatus
from maas.client.utils.creds import Credentials

from capmaas_dev.simulator import LXD_INVENTORY, Inventory, Simulator, serve

ADMIN_KEY = "adminconsumer00000:admintoken00000000:adminsecret000000000000000000000"
LXD = LXD_INVENTORY
WAIT = 0.05  # libmaas's poll interval in deploy(wait=True)/release(wait=True)


@pytest.fixture
async def maas() -> AsyncIterator[tuple[Simulator, str]]:
    sim = Simulator(Inventory.from_yaml(LXD), api_key=ADMIN_KEY)
    async with serve(sim, port=0) as url:
        yield sim, url + "/"


async def test_connect_whoami_and_reads(maas: tuple[Simulator, str]) -> None:
    sim, url = maas
    client: Any = await connect(url, apikey=ADMIN_KEY)
    me = await client.users.whoami()
    assert (me.username, me.is_admin) == ("admin", True)
    machines = await client.machines.list()
    assert sorted(m.hostname for m in machines) == sorted(m.hostname for m in sim.state.machines.values())
    kvm_a = await client.machines.get(sim.state.by_hostname["kvm-a"].system_id)
    assert (kvm_a.hostname, kvm_a.status, kvm_a.zone.name, kvm_a.pool.name) == (
        "kvm-a",
        NodeStatus.DEPLOYED,
        "az1",
        "default",
    )
    assert [i.name for i in kvm_a.interfaces] == ["eth0"]
    assert [d.name for d in kvm_a.block_devices] == ["nvme0n1"]
    assert kvm_a.boot_disk.size == sim.state.by_hostname["kvm-a"].disks[0].size
    assert sorted(z.name for z in await client.zones.list()) == ["az1", "az2", "az3", "default"]
    assert sorted(p.name for p in await client.resource_pools.list()) == ["default", "vms"]
    tags = await client.tags.list()
    assert sorted(t.name for t in tags) == ["lxd", "ssd", "vmhost"]
    created = await client.tags.create("libmaas", comment="made by libmaas")
    assert (await client.tags.get("libmaas")).comment == created.comment == "made by libmaas"


async def test_allocate_deploy_release(maas: tuple[Simulator, str]) -> None:
    sim, url = maas
    client: Any = await connect(url, apikey=ADMIN_KEY)
    plain = await client.machines.allocate()  # an empty multipart body
    assert plain.status == NodeStatus.ALLOCATED
    picked = await client.machines.allocate(zone="az2", cpus=4, memory=4096, not_pod_type="lxd")
    assert (picked.zone.name, picked.status) == ("az2", NodeStatus.ALLOCATED)
    deployed = await plain.deploy(distro_series="jammy", wait=True, wait_interval=WAIT)
    assert (deployed.status, deployed.distro_series) == (NodeStatus.DEPLOYED, "jammy")
    released = await deployed.release(wait=True, wait_interval=WAIT)
    assert released.status == NodeStatus.READY
    assert sim.machine(released.system_id)["owner"] is None
    await picked.release(wait=True, wait_interval=WAIT)
    assert sim.check_invariants() == []


async def test_allocate_that_nothing_matches_is_libmaas_machine_not_found(
    maas: tuple[Simulator, str],
) -> None:
    """409 from allocate is what libmaas turns into MachineNotFound (no machine has 1,000 cores and no VM host
    can compose one; MAAS 3.7 tries to compose before giving up)."""
    from maas.client.viscera.machines import MachineNotFound

    sim, url = maas
    client: Any = await connect(url, apikey=ADMIN_KEY)
    with pytest.raises(MachineNotFound):
        await client.machines.allocate(cpus=1000)
    composed = await client.machines.allocate(hostname="nosuch")  # MAAS composes a VM for an unmatched name
    assert sim.state.machines[composed.system_id].pod_id is not None
    assert sim.check_invariants() == []


async def test_vm_hosts_list_and_compose(maas: tuple[Simulator, str]) -> None:
    sim, url = maas
    client: Any = await connect(url, apikey=ADMIN_KEY)
    pods = await client.pods.list()
    assert [p.name for p in pods] == ["lxd-az1", "lxd-az2", "lxd-az3"]
    pod = await client.pods.get(pods[0].id)
    assert (pod.total["cores"], pod.used["cores"], pod.zone.name) == (32, 0, "az1")
    composed = await pod.compose(cores=2, memory=2048, hostname="libmaas-vm", storage="root:20(fast)")
    vm = await client.machines.get(composed["system_id"])
    assert vm.hostname == "libmaas-vm"
    assert sim.state.machines[vm.system_id].pod_id == pod.id
    assert (await client.pods.get(pod.id)).used["cores"] == 2
    assert sim.check_invariants() == []


async def test_dns_resources_through_libmaas_bones(maas: tuple[Simulator, str]) -> None:
    """libmaas 0.6.8's object layer has no DNS resources; its ``bones`` layer (handlers bound from
    ``describe/``) drives them."""
    _, url = maas
    session: Any = await bones.SessionAPI.fromURL(url + "api/2.0/", credentials=Credentials.parse(ADMIN_KEY))
    created = await session.DNSResources.create(fqdn="api.maas", ip_addresses="10.20.0.200")
    assert [a["ip"] for a in created["ip_addresses"]] == ["10.20.0.200"]
    assert [r["fqdn"] for r in await session.DNSResources.read()] == ["api.maas"]
    assert (await session.DNSResource.read(id=created["id"]))["fqdn"] == "api.maas"
    every = await session.DNSResources.read(all="true")
    assert any(r["id"] == -1 for r in every)
    record = await session.DNSResourceRecords.create(fqdn="www.maas", rrtype="CNAME", rrdata="api")
    assert record["rrtype"] == "CNAME"
    await session.DNSResource.delete(id=created["id"])
    assert [r["fqdn"] for r in await session.DNSResources.read()] == ["www.maas"]
