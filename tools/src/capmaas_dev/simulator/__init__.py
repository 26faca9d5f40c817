"""capmaas_dev.simulator: an independent MAAS 3.7 API 2.0 server for tests, benchmarks and the demo.

It shares nothing with ``capmaas.maas`` but the wire format (import-linter enforces the independence), so the
client is tested against an oracle written from the MAAS sources, not against itself::

    sim = Simulator(Inventory.from_yaml(SAMPLE_INVENTORY), api_key="a:b:c")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=sim.app), base_url="http://maas") as c: ...
    async with serve(sim, port=0) as url: ...            # a real loopback socket (uvicorn)
"""

from __future__ import annotations

from capmaas_dev.simulator.core import Simulator
from capmaas_dev.simulator.faults import ConnectionDropped, Faults, Timings
from capmaas_dev.simulator.inventory import LXD_INVENTORY, SAMPLE_INVENTORY, Inventory, InventoryError
from capmaas_dev.simulator.models import NodeStatus
from capmaas_dev.simulator.serve import serve

__all__ = [
    "LXD_INVENTORY",
    "SAMPLE_INVENTORY",
    "ConnectionDropped",
    "Faults",
    "Inventory",
    "InventoryError",
    "NodeStatus",
    "Simulator",
    "Timings",
    "serve",
]
