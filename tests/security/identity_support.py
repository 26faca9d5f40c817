"""Helpers of the identity-binding tests (issue 21): the tenant's own MAAS (a second simulator it controls),
tampering with its answers, and a victim's machines in the shared MAAS."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from operator_harness import Harness
from security_support import Tenant

from capmaas import maas
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, NodeStatus, Simulator, Timings
from capmaas_dev.simulator.serve import serve

ASGI = Callable[
    [dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[Any], Awaitable[None]]], Any
]


def tenant_sim(*, machines: int = 12, zones: int = 3, vmhosts: int = 0, seed: int = 7) -> Simulator:
    """The tenant's own MAAS. With the shared simulator's inventory (machines 12, zones 3, seed 7) its
    machines have the very system IDs of the shared MAAS: whatever it allocates names a machine there too."""
    return Simulator(
        Inventory.generate(machines=machines, zones=zones, vmhosts=vmhosts, seed=seed),
        timings=Timings(deploy=1.0, release=0.3),
        faults=Faults(),
    )


class ForcedIds(random.Random):
    """A simulator's random source whose next system ID is ``sid`` (the tenant's MAAS answering a compose
    with a victim's system ID); then random again."""

    def __init__(self, sid: str) -> None:
        super().__init__(1)
        self.chars = list(sid)

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.chars.pop(0) if self.chars else super().choice(seq)


def rewrite_dns_create(app: ASGI, record_id: int, fqdn: str) -> ASGI:
    """``app`` whose answer to ``POST dnsresources/`` claims to be record ``record_id`` named ``fqdn`` (the
    tenant's MAAS answering the operator's record create with a victim's record)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not (
            scope.get("type") == "http"
            and scope.get("method") == "POST"
            and str(scope.get("path", "")).rstrip("/").endswith("/dnsresources")
        ):
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        body = bytearray()

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            out = bytes(body)
            if start.get("status") == 200:
                doc = json.loads(out)
                doc["id"] = record_id
                doc["fqdn"] = fqdn
                out = json.dumps(doc).encode()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(out)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": out})

        await app(scope, receive, capture)

    return wrapped


@asynccontextmanager
async def serving(sim: Simulator) -> AsyncIterator[str]:
    async with serve(sim, host="127.0.0.1", port=0) as url:
        yield url


def hold_for_victim(sim: Simulator, sid: str, status: NodeStatus) -> dict[str, Any]:
    """Machine ``sid`` of the shared MAAS, held by another MAAS user (the victim) in ``status``; its JSON."""
    m = sim.state.machines[sid]
    sim.state.set_status(m, status, check=False)
    m.owner = "victim"
    m.power_state = "on" if status == NodeStatus.DEPLOYED else "off"
    sim.state.set_agent(m, "victim-agent")
    return sim.machine(sid)


def victim_view(sim: Simulator, sid: str) -> tuple[str, str | None, str, bytes | None] | None:
    """What the victim cares about of machine ``sid``: state, owner, agent, user data (None: deleted)."""
    m = sim.state.machines.get(sid)
    return None if m is None else (m.status.name, m.owner, m.agent_name, m.user_data)


async def create_record(url: str, api_key: str, fqdn: str, ips: list[str]) -> tuple[int, list[str]]:
    async with maas.MaasClient(url, api_key=api_key) as c:
        r = await c.dns_resources.create(fqdn, ips)
    return r.id, sorted(a.ip for a in r.ip_addresses if a.ip)


def record(sim: Simulator, record_id: int) -> tuple[str, list[str]] | None:
    """A DNS resource of ``sim``: its name and A records (None: deleted)."""
    r = sim.state.dns_resources.get(record_id)
    if r is None:
        return None
    return r.name, sorted(r.ips)


async def tenant_cluster(
    h: Harness, t: Tenant, name: str, url: str, api_key: str, *, endpoint_host: str | None = None
) -> None:
    """The tenant's Cluster and MaasCluster, on its own MAAS (an identity Secret), made by the tenant;
    ``endpoint_host``: its own control-plane endpoint (no DNS record in MAAS)."""
    ns = t.namespace
    secret = demo.identity_secret(f"{name}-maas", ns, url, api_key)
    await t.apply(secret, demo.cluster(name, ns))
    cuid = json.loads((await t.ak("get", "clusters.cluster.x-k8s.io", name, "-o", "json")).stdout)
    mc = demo.maascluster(
        name, ns, identity=f"{name}-maas", cluster_uid=cuid["metadata"]["uid"], endpoint_host=endpoint_host
    )
    await t.apply(mc)


async def provision(t: Tenant, name: str) -> None:
    """The tenant marks its own Cluster's infrastructure provisioned (it has rights on the status)."""
    status = {"status": {"initialization": {"infrastructureProvisioned": True}}}
    await t.ak(
        "patch", "clusters.cluster.x-k8s.io", name, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


async def tenant_machine(t: Tenant, cluster: str, name: str, **kw: Any) -> None:
    ns = t.namespace
    await t.apply(
        demo.bootstrap_secret(f"{name}-bootstrap", ns, cluster, b"#cloud-config\nruncmd: [tenant-payload]\n"),
        demo.machine(name, ns, cluster, control_plane=False, bootstrap=f"{name}-bootstrap"),
    )
    muid = json.loads((await t.ak("get", "machines.cluster.x-k8s.io", name, "-o", "json")).stdout)
    await t.apply(
        demo.maasmachine(name, ns, cluster, control_plane=False, machine_uid=muid["metadata"]["uid"], **kw)
    )


async def get(t: Tenant, plural: str, name: str) -> dict[str, Any] | None:
    return await t.read(plural, name)


async def condition(t: Tenant, plural: str, name: str, type_: str) -> dict[str, Any] | None:
    obj = await get(t, plural, name) or {}
    for c in obj.get("status", {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


async def drop_identity_ref(t: Tenant, name: str) -> None:
    """The switch: the tenant's MaasCluster leaves its own MAAS for the operator's default credentials."""
    await t.ak(
        "patch", "maasclusters", name, "--type=json", "-p", '[{"op":"remove","path":"/spec/identityRef"}]'
    )


async def poke(t: Tenant, plural: str, name: str, n: int) -> None:
    """A label change (not a protected field): wakes the operator's pass of the object."""
    await t.ak("label", plural, name, f"poke={n}", "--overwrite")
