"""The orphan report (issue 21, item 5) against the simulator: what capmaas's MAAS user holds and no live
object names is counted (machines, the VM hosts on them, control-plane DNS records) after two passes, and
nothing else is; nothing is ever released."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest

from capmaas import maas
from capmaas.operator.kube import Store
from capmaas.operator.orphans import OrphanReport
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, DNS_RECORD
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings


class _Session:
    def __init__(self, client: maas.MaasClient, endpoint: str) -> None:
        self.client = client
        self.endpoint = endpoint


def body(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec}


@pytest.fixture
async def sim_client() -> AsyncIterator[tuple[Simulator, maas.MaasClient]]:
    sim = Simulator(Inventory.generate(machines=8, zones=1, seed=5), timings=Timings.fast(), faults=Faults())
    async with maas.MaasClient(
        "http://maas.test/MAAS", api_key=sim.api_key, transport=httpx.ASGITransport(app=sim.app)
    ) as c:
        yield sim, c


async def test_counts_what_no_live_object_names_after_two_passes_and_releases_nothing(
    sim_client: tuple[Simulator, maas.MaasClient],
) -> None:
    sim, c = sim_client
    store = Store()
    counts: list[dict[str, int]] = []
    warnings: list[str] = []
    session = _Session(c, "http://maas.test/MAAS")
    report = OrphanReport(
        store,
        lambda: [session],
        report=lambda n: counts.append(dict(n)),
        warn=warnings.append,
    )
    orphan = await c.machines.allocate(agent_name="uid-gone")  # its MaasMachine's finalizer was stripped
    live = await c.machines.allocate(agent_name="uid-live")
    store.put("maasmachines", body("live", systemID=live.system_id))
    in_flight = await c.machines.allocate(agent_name="uid-allocating")  # the answer not written yet
    store.put("maasmachines", body("allocating"))
    moved = await c.machines.allocate(agent_name="uid-moved")
    handed = body("moved", systemID=moved.system_id)
    report.handed_on(handed)  # deleted for clusterctl move: the target carries it on
    other_user = sim.add_user("someone")
    async with maas.MaasClient(
        "http://maas.test/MAAS", api_key=other_user.api_key, transport=httpx.ASGITransport(app=sim.app)
    ) as theirs:
        not_ours = await theirs.machines.allocate(agent_name="their-agent")  # another MAAS user's
    host = sim.register_vm_host(sim.state.machines[orphan.system_id])  # registerVMHost on the orphan
    gone_record = await c.dns_resources.create("gone-0a1b2c.maas", ["10.0.0.9"])
    kept_record = await c.dns_resources.create("c1-3d4e5f.maas", ["10.0.0.8"])
    await c.dns_resources.create("www.maas", ["10.0.0.7"])  # not a name capmaas gives
    mc = body("c1", controlPlaneEndpoint={"host": "c1-3d4e5f.maas", "port": 6443})
    mc["metadata"]["annotations"] = {ANNOTATION_PREFIX + DNS_RECORD: f"{kept_record.id}/c1-3d4e5f.maas"}
    store.put("maasclusters", mc)

    await report.check()
    assert counts[-1] == {"machine": 0, "vm_host": 0, "dns_record": 0}  # the grace pass
    assert warnings == []
    await report.check()
    assert counts[-1] == {"machine": 1, "vm_host": 1, "dns_record": 1}
    text = "\n".join(warnings)
    dns, vm_host, machine = sorted(warnings)  # MAAS DNS record, MAAS VM host, MAAS machine
    assert machine.startswith(f"MAAS machine {orphan.system_id} ")
    assert vm_host.startswith(f"MAAS VM host {host.id} ({host.name} on machine {orphan.system_id})")
    assert dns.startswith(f"MAAS DNS record {gone_record.id} (gone-0a1b2c.maas)")
    for not_reported in (live, in_flight, moved, not_ours):
        assert not_reported.system_id not in text
    await report.check()
    assert len(warnings) == 3  # one Event per orphan, not one per pass

    # Nothing was released or deleted by the report.
    for m in (orphan, live, in_flight, moved):
        assert sim.machine(m.system_id)["status_name"] == "Allocated"
    assert host.id in sim.state.vm_hosts
    assert len(sim.state.dns_resources) == 3

    # An admin re-creates the object that held the machine: it is no orphan any more.
    store.put("maasmachines", body("restored", systemID=orphan.system_id))
    await report.check()
    assert counts[-1] == {"machine": 0, "vm_host": 0, "dns_record": 1}


async def test_a_maas_that_does_not_answer_keeps_its_count(
    sim_client: tuple[Simulator, maas.MaasClient],
) -> None:
    sim, c = sim_client
    counts: list[Mapping[str, int]] = []
    session = _Session(c, "http://maas.test/MAAS")
    report = OrphanReport(Store(), lambda: [session], report=counts.append)
    await c.machines.allocate(agent_name="uid-gone")
    await report.check()
    await report.check()
    assert counts[-1]["machine"] == 1
    async with maas.MaasClient(
        "http://maas.test/MAAS", api_key="a:b:c", transport=httpx.ASGITransport(app=sim.app), max_retries=0
    ) as broken:
        session.client = broken  # 401 on every request
        await report.check()
    assert counts[-1]["machine"] == 1
