"""Issue 16 item 5 on the real apiserver: MAAS assigns the AUTO IP a second after it accepts the deploy; the
operator puts it in the control-plane DNS record then, while the machine still deploys, not at Ready."""

from __future__ import annotations

import pytest
from operator_harness import Harness

from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

pytestmark = pytest.mark.k8s


@pytest.fixture
def sim() -> Simulator:
    inventory = Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": "10.60.0.0/24", "name": "lan"}],
            "boot_resources": [{"name": "ubuntu/jammy"}],
            "machines": [
                {"hostname": f"m{n}", "zone": "az1", "cpu_count": 4, "memory": 8192,
                 "interfaces": [{"name": "eth0", "subnet": "lan"}]}
                for n in range(2)
            ],
        }
    )  # fmt: skip
    # A deploy long enough to tell "while deploying" from "at Ready" without any timing assertion.
    return Simulator(inventory, timings=Timings(deploy=600.0, auto_ip=(1.0, 1.0)), faults=Faults())


async def test_the_record_lists_the_auto_ip_before_the_machine_is_ready(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("cp0", cp=True)
    fqdn = str(await h.field("maasclusters", "c1", "spec", "controlPlaneEndpoint", "host"))
    name = fqdn.split(".", maxsplit=1)[0]

    def record() -> list[str]:
        return next((sorted(r.ips) for r in h.sim.state.dns_resources.values() if r.name == name), [])

    async def listed() -> bool:
        return bool(record())

    await h.wait("the record lists the control plane's AUTO IP", listed, within=120)
    sid = str(await h.field("maasmachines", "cp0", "spec", "systemID"))
    m = h.sim.state.machines[sid]
    assert record() == [m.interfaces[0].ip]
    assert m.status.name == "DEPLOYING"  # MAAS is still deploying it
    assert not await h.field("maasmachines", "cp0", "status", "ready")
