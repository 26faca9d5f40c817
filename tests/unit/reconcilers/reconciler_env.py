"""Reconciler tests: the real simulator in-process, the real client over ASGITransport, a fake of our port."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fakes import FakeKube

from capmaas import maas
from capmaas.gateway import MaasConnections
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.machine import MachineReconciler, MachineSettings
from capmaas.reconcilers.ports import MaasCredentials, NamespaceAllowList
from capmaas.reconcilers.scope import Requeue
from capmaas.reconcilers.tenancy import Tenancy
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

ENDPOINT = "http://maas.test/MAAS"
#: The env's MAAS client: one attempt per call, the client's default timeout.
CLIENT_TIMEOUT = 30.0
CLIENT_RETRY = maas.RetryPolicy(max_retries=0)
#: ``MachineSettings.allocate_in_doubt`` as the operator computes it, for this env's client.
IN_DOUBT = maas.in_doubt_window(CLIENT_TIMEOUT, CLIENT_RETRY)


@dataclass
class Env:
    sim: Simulator
    kube: FakeKube
    connections: MaasConnections
    machines: MachineReconciler
    clusters: ClusterReconciler
    creds: MaasCredentials
    #: The reconcilers' wall clock when the env was made with ``clock_step``: it moves that many seconds per
    #: :meth:`settle` (a round of :meth:`drive`), so waits measured in wall time end within a test.
    now: list[float] | None = None
    clock_step: float = 0.0

    def requests(self) -> int:
        return sum(self.sim.counters.values())

    async def settle(self) -> None:
        """Let MAAS finish due steps and the poller see them."""
        self.sim.tick()
        for s in self.connections.sessions():
            await s.poller.poll_once()
        if self.now is not None:
            self.now[0] += self.clock_step

    async def cluster(self, name: str = "c1") -> dict[str, Any]:
        self.kube.add("clusters", demo.cluster(name, "ns"))
        c = self.kube.get("clusters", name)
        self.kube.add("maasclusters", demo.maascluster(name, "ns", cluster_uid=c["metadata"]["uid"]))
        await self.clusters.reconcile(self.kube.get("maasclusters", name))
        c["status"] = {"initialization": {"infrastructureProvisioned": True}}
        return self.kube.get("maasclusters", name)

    async def cluster_with_retries(self, name: str = "c1", attempts: int = 20) -> dict[str, Any]:
        """Like :meth:`cluster`, retrying while the (faulty) MAAS refuses."""
        self.kube.add("clusters", demo.cluster(name, "ns"))
        c = self.kube.get("clusters", name)
        self.kube.add("maasclusters", demo.maascluster(name, "ns", cluster_uid=c["metadata"]["uid"]))
        for _ in range(attempts):
            with contextlib.suppress(Exception):
                await self.clusters.reconcile(self.kube.get("maasclusters", name))
            if self.kube.get("maasclusters", name).get("status", {}).get("ready"):
                break
        c["status"] = {"initialization": {"infrastructureProvisioned": True}}
        return self.kube.get("maasclusters", name)

    def machine(self, name: str, *, cp: bool = False, bootstrap: bool = True, **kw: Any) -> None:
        if bootstrap:
            self.kube.secrets[("ns", f"{name}-bootstrap")] = {
                "value": demo.CLOUD_CONFIG,
                "format": b"cloud-config",
            }
        m = self.kube.add(
            "machines",
            demo.machine(
                name, "ns", "c1", control_plane=cp, bootstrap=f"{name}-bootstrap" if bootstrap else None
            ),
        )
        self.kube.add(
            "maasmachines",
            demo.maasmachine(name, "ns", "c1", control_plane=cp, machine_uid=m["metadata"]["uid"], **kw),
        )

    async def step(self, name: str) -> Requeue:
        return await self.machines.reconcile(self.kube.get("maasmachines", name))

    async def drive(
        self, names: list[str], until: Callable[[dict[str, Any]], bool], rounds: int = 20
    ) -> None:
        for _ in range(rounds):
            for n in names:
                with contextlib.suppress(Exception):  # recorded in conditions; the caller checks them
                    await self.step(n)
            await self.settle()
            if all(until(self.kube.get("maasmachines", n)) for n in names):
                return
        raise AssertionError({n: self.kube.get("maasmachines", n).get("status") for n in names})


def default_credentials(sim: Simulator) -> MaasCredentials:
    """The operator's default credentials for the unit tests. Their objects live in namespace "ns" (fakes.py);
    the simulator is in-process (ASGI), so the http:// endpoint carries nothing over a network: both are the
    explicit configuration an admin gives."""
    return MaasCredentials(
        endpoint=ENDPOINT,
        api_key=sim.api_key,
        allow_plaintext=True,
        namespaces=NamespaceAllowList(frozenset({"ns"})),
    )


#: The unit tests' namespace "ns" may register VM hosts (the admin's ``lxd.vm_host_namespaces``).
TENANCY = Tenancy(vm_host_namespaces=frozenset({"ns"}))


def make_env(
    sim: Simulator,
    settings: MachineSettings | None = None,
    *,
    clock_step: float | None = None,
    tenancy: Tenancy = TENANCY,
) -> Env:
    kube = FakeKube()

    def factory(c: MaasCredentials) -> maas.MaasClient:
        return maas.MaasClient(
            c.endpoint,
            api_key=c.api_key,
            transport=httpx.ASGITransport(app=sim.app),
            timeout=CLIENT_TIMEOUT,
            retry=CLIENT_RETRY,
        )

    conns = MaasConnections(
        client_factory=factory, fast=3600, idle=3600, batch_size=200, wake=lambda key: None
    )
    creds = default_credentials(sim)
    now = None if clock_step is None else [time.time()]
    clock = time.time if now is None else (lambda: now[0])
    machines = MachineReconciler(
        kube,
        conns,
        default_credentials=creds,
        settings=settings or MachineSettings(),
        clock=clock,
        tenancy=tenancy,
    )
    return Env(
        sim,
        kube,
        conns,
        machines,
        ClusterReconciler(kube, conns, default_credentials=creds, tenancy=tenancy),
        creds,
        now,
        clock_step or 0.0,
    )


@pytest.fixture
def sim() -> Simulator:
    return Simulator(
        Inventory.generate(machines=30, zones=3, seed=1), timings=Timings.fast(), faults=Faults()
    )


@pytest.fixture
async def env(sim: Simulator) -> AsyncIterator[Env]:
    e = make_env(sim)
    yield e
    await e.connections.aclose()
    await asyncio.sleep(0)
