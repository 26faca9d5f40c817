"""The real MAAS client against the simulator: the whole machine lifecycle and each error class.

The simulator is an independent oracle written from MAAS's sources (it shares no code with the client), so
these tests check that the client speaks MAAS's wire format, not just that it agrees with itself. Most run
in-process through ``httpx.ASGITransport``; one goes over a real loopback socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from capmaas.maas import (
    AllocateConstraints,
    BadRequestError,
    ComposeRequest,
    ConflictError,
    ForbiddenError,
    GoneError,
    MaasClient,
    Machine,
    NodeStatus,
    NoMachineAvailableError,
    NotFoundError,
    PowerState,
    ServiceUnavailableError,
    UnauthorizedError,
)
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings, serve

ADMIN_KEY = "SkTvsyHhzkREvvdtNk:Ywn5FvXVupVPvNUhrN:cm3Q2f5naXYPYsrPDPfQy9Q9cUFaEgbM"
URL = "http://maas.invalid:5240/MAAS"


def _client(sim: Simulator, api_key: str = ADMIN_KEY, **kwargs: object) -> MaasClient:
    return MaasClient(URL, api_key=api_key, transport=httpx.ASGITransport(app=sim.app), **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    simulator = Simulator(
        Inventory.generate(machines=8, zones=2, vmhosts=1, seed=3), timings=Timings.fast(), api_key=ADMIN_KEY
    )
    async with simulator:
        yield simulator
    assert simulator.check_invariants() == []


@pytest.fixture
async def maas(sim: Simulator) -> AsyncIterator[MaasClient]:
    async with _client(sim) as client:
        yield client


async def _wait_for(maas: MaasClient, system_id: str, done: Callable[[Machine], bool]) -> Machine:
    for _ in range(250):
        machine = await maas.machines.get(system_id)
        if done(machine):
            return machine
        await asyncio.sleep(0.02)
    raise AssertionError(f"{system_id} never reached the expected state; last {machine.status_name}")


async def _lifecycle(maas: MaasClient) -> None:
    allocated = await maas.machines.allocate(
        AllocateConstraints(cpu_count=1, mem=1024), agent_name="uid-1", comment="capmaas test"
    )
    assert allocated.status is NodeStatus.ALLOCATED
    assert allocated.owner == "admin"
    sid = allocated.system_id
    assert [m.system_id for m in await maas.machines.list(agent_name="uid-1")] == [sid]

    annotated = await maas.machines.set_workload_annotations(sid, {"cluster": "c1"})
    assert annotated.workload_annotations == {"cluster": "c1"}

    deploying = await maas.machines.deploy(
        sid, user_data=b"#cloud-config\nhostname: x\n", distro_series="ubuntu/jammy"
    )
    assert deploying.status is NodeStatus.DEPLOYING
    deployed = await _wait_for(maas, sid, lambda m: m.status is NodeStatus.DEPLOYED)
    assert deployed.power_state is PowerState.ON
    assert (deployed.osystem, deployed.distro_series) == ("ubuntu", "jammy")
    assert deployed.ip_addresses
    assert sid in {m.system_id for m in await maas.machines.list(status=NodeStatus.DEPLOYED)}

    await maas.machines.release(sid, comment="done")
    ready = await _wait_for(maas, sid, lambda m: m.status is NodeStatus.READY)
    assert ready.owner is None
    assert ready.workload_annotations == {}
    assert await maas.machines.list(agent_name="uid-1") == []


async def test_allocate_deploy_release_in_process(maas: MaasClient) -> None:
    version = await maas.version()
    assert version.version.startswith("3.7")
    assert (await maas.whoami()).is_superuser
    await _lifecycle(maas)


async def test_allocate_deploy_release_over_loopback(sim: Simulator) -> None:
    async with serve(sim, host="127.0.0.1", port=0) as url:
        assert url.startswith("http://127.0.0.1:")
        async with MaasClient(url + "/api/2.0/", api_key=ADMIN_KEY) as maas:
            await _lifecycle(maas)


async def test_error_answers_map_to_their_classes(sim: Simulator, maas: MaasClient) -> None:
    with pytest.raises(NoMachineAvailableError):
        await maas.machines.allocate(AllocateConstraints(cpu_count=100_000))
    with pytest.raises(NotFoundError):
        await maas.machines.get("nosuch")
    with pytest.raises(BadRequestError) as bad:
        await maas.machines.list(zone="no-such-zone")
    assert "zone" in bad.value.field_errors

    machine = await maas.machines.allocate()
    await maas.machines.deploy(machine.system_id)
    with pytest.raises(ConflictError) as conflict:
        await maas.machines.deploy(machine.system_id)
    assert not isinstance(conflict.value, NoMachineAvailableError)
    assert "Can't deploy a machine" in conflict.value.body
    await maas.machines.release(machine.system_id)


async def test_unknown_key_is_unauthorized(sim: Simulator) -> None:
    async with _client(sim, api_key="UnknownConsumerKey:Ywn5FvXVupVPvNUhrN:secretsecretsecret") as maas:
        with pytest.raises(UnauthorizedError) as info:
            await maas.whoami()
    assert "Invalid API key" in info.value.body


async def test_non_admin_cannot_compose(sim: Simulator) -> None:
    user = sim.add_user("alice")
    async with _client(sim, api_key=user.api_key) as maas:
        assert (await maas.whoami()).is_superuser is False
        [host] = await maas.vm_hosts.list()
        with pytest.raises(ForbiddenError):
            await maas.vm_hosts.compose(host.id, ComposeRequest(cores=1, memory=1024))


async def test_maas4_answers_gone_for_vm_hosts() -> None:
    sim = Simulator(Inventory.generate(machines=2, zones=1, vmhosts=1), api_key=ADMIN_KEY, maas4=True)
    async with _client(sim) as maas:
        with pytest.raises(GoneError):
            await maas.vm_hosts.list()


async def test_unavailable_region_is_retried_then_reported_with_retry_after() -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    sim = Simulator(
        Inventory.generate(machines=2, zones=1),
        api_key=ADMIN_KEY,
        faults=Faults(seed=1, unavailable_rate=1.0, retry_after=3),
    )
    async with _client(sim, max_retries=2, sleep=sleep) as maas:
        with pytest.raises(ServiceUnavailableError) as info:
            await maas.machines.list()
    assert info.value.retry_after == 3.0
    assert sleeps == [3.0, 3.0]


async def test_compose_then_delete_a_vm(sim: Simulator, maas: MaasClient) -> None:
    [host] = await maas.vm_hosts.list()
    composed = await maas.vm_hosts.compose(
        host.id, ComposeRequest(cores=2, memory=2048, storage="root:10", hostname="vm-a")
    )
    vm = await _wait_for(maas, composed.system_id, lambda m: m.status is NodeStatus.READY)
    assert vm.pod is not None
    assert vm.pod.id == host.id
    assert (await maas.vm_hosts.get(host.id)).used.cores == host.used.cores + 2
    with pytest.raises(BadRequestError) as too_big:
        await maas.vm_hosts.compose(host.id, ComposeRequest(cores=host.total.cores + 1))
    assert "cores" in too_big.value.field_errors
    # Memory over-commit: the largest VM fits once, not twice (ratio < 2), and the refusal is a 503.
    assert host.memory_over_commit_ratio < 2
    big = await maas.vm_hosts.compose(host.id, ComposeRequest(memory=host.total.memory))
    with pytest.raises(ServiceUnavailableError) as over:
        await maas.vm_hosts.compose(host.id, ComposeRequest(memory=host.total.memory))
    assert over.value.retry_after is None  # over-commit is lasting, so it was not retried
    for system_id in (composed.system_id, big.system_id):
        await maas.machines.delete(system_id)
    for _ in range(100):
        if (await maas.vm_hosts.get(host.id)).used == host.used:
            break
        await asyncio.sleep(0.02)
    assert (await maas.vm_hosts.get(host.id)).used == host.used


async def test_bulk_release_power_and_broken(maas: MaasClient) -> None:
    a = await maas.machines.allocate(agent_name="bulk")
    b = await maas.machines.allocate(agent_name="bulk")
    assert sorted(await maas.machines.release_many([a.system_id, b.system_id])) == sorted(
        [a.system_id, b.system_id]
    )
    c = await maas.machines.allocate()
    assert await maas.machines.query_power_state(c.system_id) in set(PowerState)
    broken = await maas.machines.mark_broken(c.system_id, comment="disk")
    assert broken.status is NodeStatus.BROKEN
    fixed = await maas.machines.mark_fixed(c.system_id)
    assert fixed.status is NodeStatus.READY


async def test_catalogue_reads_and_admin_writes(maas: MaasClient) -> None:
    zones = await maas.zones.list()
    assert "default" in {z.name for z in zones}
    assert await maas.pools.list()
    assert await maas.subnets.list()
    assert await maas.boot_resources.list()
    [domain] = [d for d in await maas.domains.list() if d.is_default]

    await maas.tags.create("capmaas-test", comment="from the client test")
    machine = (await maas.machines.list())[0]
    result = await maas.tags.update_nodes("capmaas-test", add=[machine.system_id])
    assert (result.added, result.removed) == (1, 0)
    assert "capmaas-test" in (await maas.machines.get(machine.system_id)).tag_names

    record = await maas.dns_resources.create(f"api-c1.{domain.name}", ["10.0.0.200"])
    assert record.ips == ("10.0.0.200",)
    updated = await maas.dns_resources.update(record.id, ["10.0.0.201", "10.0.0.202"])
    assert set(updated.ips) == {"10.0.0.201", "10.0.0.202"}
    await maas.dns_resources.delete(record.id)
    with pytest.raises(NotFoundError):
        await maas.dns_resources.delete(record.id)
