"""Identity-bound references (issue 21, item 1) and deletion without MAAS (item 6), against two in-process
simulators: the shared MAAS (the operator's default credentials) and a tenant's own MAAS (an identity Secret).

The real gateway (``MaasConnections``: one ``whoami`` per identity gives its fingerprint) and the real
reconcilers; only Kubernetes is the fake of ``fakes.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from fakes import FakeKube
from reconciler_env import CLIENT_RETRY, CLIENT_TIMEOUT, Env
from test_lxd_lifecycle import add_lxd, lxd_sim

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.gateway import MaasConnections
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.keys import (
    AGENT_NAME,
    ANNOTATION_PREFIX,
    IDENTITY,
    IDENTITY_REF,
)
from capmaas.reconcilers.machine import MachineReconciler
from capmaas.reconcilers.ports import MaasCredentials, NamespaceAllowList, identity_fingerprint
from capmaas_dev import demo
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

SHARED = "http://shared.test/MAAS"
LIST = ("GET", "/MAAS/api/2.0/machines/", None)  # a machines list (the lookups by agent name)
OWN = "http://own.test/MAAS"
STAMP = ANNOTATION_PREFIX + IDENTITY
REF = ANNOTATION_PREFIX + IDENTITY_REF


class TwoMaas(Env):
    own: Simulator
    patches: list[Mapping[str, Any]]

    async def settle(self) -> None:
        self.own.tick()
        await super().settle()

    def requests(self) -> int:
        return sum(self.sim.counters.values()) + sum(self.own.counters.values())


def make(shared: Simulator, own: Simulator, *, allowed: frozenset[str] = frozenset({"ns"})) -> TwoMaas:
    kube = FakeKube()
    apps = {SHARED: shared.app, OWN: own.app}

    def factory(c: MaasCredentials) -> maas.MaasClient:
        return maas.MaasClient(
            c.endpoint,
            api_key=c.api_key,
            transport=httpx.ASGITransport(app=apps[c.endpoint]),
            timeout=CLIENT_TIMEOUT,
            retry=CLIENT_RETRY,
        )

    conns = MaasConnections(client_factory=factory, fast=3600, idle=3600, batch_size=200, wake=lambda k: None)
    creds = MaasCredentials(
        endpoint=SHARED, api_key=shared.api_key, allow_plaintext=True, namespaces=NamespaceAllowList(allowed)
    )
    env = TwoMaas(
        shared,
        kube,
        conns,
        MachineReconciler(kube, conns, default_credentials=creds),
        ClusterReconciler(kube, conns, default_credentials=creds),
        creds,
    )
    env.own = own
    env.patches = []
    real_patch = kube.patch

    async def recording(
        plural: Any, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Any:
        got = await real_patch(plural, namespace, name, body, status=status)
        if not status and got is not None:
            env.patches.append(got)
        return got

    kube.patch = recording  # type: ignore[method-assign]
    return env


def sim(seed: int = 1) -> Simulator:
    return Simulator(
        Inventory.generate(machines=8, zones=1, seed=seed), timings=Timings.fast(), faults=Faults()
    )


@pytest.fixture
async def two() -> AsyncIterator[TwoMaas]:
    env = make(sim(1), sim(2))
    yield env
    await env.connections.aclose()
    await asyncio.sleep(0)


def own_identity(env: TwoMaas) -> None:
    """The tenant's identity Secret (its own MAAS), named by the MaasCluster c1."""
    env.kube.secrets[("ns", "own")] = {
        "MAAS_ENDPOINT": OWN.encode(),
        "MAAS_API_KEY": env.own.api_key.encode(),
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",
    }


async def tenant_cluster(env: TwoMaas) -> dict[str, Any]:
    own_identity(env)
    env.kube.add("clusters", demo.cluster("c1", "ns"))
    c = env.kube.get("clusters", "c1")
    env.kube.add(
        "maasclusters", demo.maascluster("c1", "ns", identity="own", cluster_uid=c["metadata"]["uid"])
    )
    await env.clusters.reconcile(env.kube.get("maasclusters", "c1"))
    c["status"] = {"initialization": {"infrastructureProvisioned": True}}
    return env.kube.get("maasclusters", "c1")


def ready(b: dict[str, Any]) -> bool:
    return bool(b.get("status", {}).get("ready"))


def annotations(env: Env, plural: str, name: str) -> dict[str, str]:
    return dict(env.kube.get(plural, name)["metadata"].get("annotations") or {})


async def delete_until_gone(env: Env, name: str) -> None:
    """Mark MaasMachine ``name`` deleted and run its passes until it is gone (asserted)."""
    env.kube.get("maasmachines", name)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for _ in range(8):
        if ("maasmachines", "ns", name) not in env.kube.objects:
            break
        await env.step(name)
        await env.settle()
    assert ("maasmachines", "ns", name) not in env.kube.objects


def identity_ref_applied(env: Env) -> dict[str, Any]:
    mc = env.kube.get("maasclusters", "c1")
    return next(c for c in mc["status"]["conditions"] if c["type"] == C.IDENTITY_REF_APPLIED_CONDITION)


def test_the_fingerprint_is_the_endpoint_and_the_user() -> None:
    a = identity_fingerprint("https://MAAS.example/MAAS/", "alice")
    assert a == identity_fingerprint("https://maas.example/MAAS", "alice")  # same MAAS, a rotated key
    assert a != identity_fingerprint("https://maas.example/MAAS", "bob")  # another user of it
    assert a != identity_fingerprint("https://evil.example/MAAS", "alice")  # another MAAS, same user name
    assert len(a) == 32


async def test_every_reference_is_stamped_in_the_patch_that_writes_it(two: TwoMaas) -> None:
    """After every metadata/spec write, an object that holds a reference carries the identity stamp: never a
    moment with a reference and no stamp (a crash then would leave an unbound reference)."""
    await tenant_cluster(two)
    two.machine("w0")
    await two.drive(["w0"], ready)
    session = next(s for s in two.connections.sessions() if s.endpoint == OWN)
    assert two.patches, "no write recorded"
    for after in two.patches:
        notes = after["metadata"].get("annotations") or {}
        held = bool((after.get("spec") or {}).get("systemID")) or any(
            notes.get(ANNOTATION_PREFIX + k) for k in ("allocating", "agent-name", "dns-record", "composing")
        )
        if held:
            assert notes.get(STAMP) == session.identity, after["metadata"]["name"]
            assert notes.get(REF) == "Secret/own"


async def test_references_of_another_identity_are_forgotten_and_nothing_is_sent(two: TwoMaas) -> None:
    """The identity Secret now names the shared MAAS (same Secret, another identity): the machine's system ID
    came from the tenant's MAAS and names a machine there; the pass forgets it and sends neither MAAS
    anything about it (attacks 1-3's root: a reference crossing identities)."""
    await tenant_cluster(two)
    two.machine("w0")
    await two.drive(["w0"], ready)
    sid = two.kube.get("maasmachines", "w0")["spec"]["systemID"]
    shared_before = dict(two.sim.machine(sid))
    two.kube.secrets[("ns", "own")] = {
        "MAAS_ENDPOINT": SHARED.encode(),
        "MAAS_API_KEY": two.sim.api_key.encode(),
        "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",
    }
    await two.connections.connect(two.creds)  # the shared identity's whoami: not counted below
    two.sim.reset_counters()
    two.own.reset_counters()
    await two.step("w0")
    mm = two.kube.get("maasmachines", "w0")
    assert "systemID" not in mm["spec"] or not mm["spec"]["systemID"]
    assert STAMP not in annotations(two, "maasmachines", "w0")
    assert ANNOTATION_PREFIX + AGENT_NAME not in annotations(two, "maasmachines", "w0")
    assert ("w0", "Warning", C.IDENTITY_CHANGED_REASON) in [e[:3] for e in two.kube.events]
    assert sum(two.sim.counters.values()) == 0
    assert sum(two.own.counters.values()) == 0
    assert two.sim.machine(sid) == shared_before
    assert two.own.machine(sid)["status_name"] == "Deployed"  # left where it is, not released by anyone


async def test_an_identity_ref_change_is_refused_while_references_are_held(two: TwoMaas) -> None:
    await tenant_cluster(two)
    two.machine("w0")
    await two.drive(["w0"], ready)
    sid = two.kube.get("maasmachines", "w0")["spec"]["systemID"]
    del two.kube.get("maasclusters", "c1")["spec"]["identityRef"]  # the switch to the default credentials
    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    cond = identity_ref_applied(two)
    assert (cond["status"], cond["reason"]) == ("False", C.IDENTITY_CHANGE_REFUSED_REASON)
    assert f"MaasMachine w0 (spec.systemID={sid})" in cond["message"]
    assert "DNS record" in cond["message"]
    assert annotations(two, "maasclusters", "c1")[REF] == "Secret/own"
    # The machines keep the identity they are bound to: the deletion releases in the tenant's MAAS.
    two.sim.reset_counters()
    await delete_until_gone(two, "w0")
    assert two.own.machine(sid)["status_name"] == "Ready"
    assert not [k for k in two.sim.counters if k[0] != "GET"]  # nothing written to the shared MAAS
    # Still the DNS record: refused. Once it is gone (the cluster is deleted) nothing is held.
    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    assert annotations(two, "maasclusters", "c1")[REF] == "Secret/own"


async def tenant_cluster_without_dns(two: TwoMaas) -> dict[str, Any]:
    """:func:`tenant_cluster` with an endpoint of the user's own: no DNS record is held by the MaasCluster."""
    own_identity(two)
    two.kube.add("clusters", demo.cluster("c1", "ns"))
    c = two.kube.get("clusters", "c1")
    mc = demo.maascluster("c1", "ns", identity="own", cluster_uid=c["metadata"]["uid"])
    mc["spec"]["controlPlaneEndpoint"] = {"host": "api.example.com", "port": 6443}  # no DNS record
    two.kube.add("maasclusters", mc)
    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    return c


async def test_the_change_applies_once_nothing_is_held(two: TwoMaas) -> None:
    await tenant_cluster_without_dns(two)
    assert annotations(two, "maasclusters", "c1")[REF] == "Secret/own"
    del two.kube.get("maasclusters", "c1")["spec"]["identityRef"]
    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    assert annotations(two, "maasclusters", "c1")[REF] == "default"
    assert ("c1", "Normal", C.IDENTITY_REF_APPLIED_REASON) in [e[:3] for e in two.kube.events]


async def test_a_deletion_without_its_maascluster_uses_the_recorded_identity(two: TwoMaas) -> None:
    """Never silently the default credentials: the release goes to the MAAS the machine came from."""
    await tenant_cluster(two)
    two.machine("w0")
    await two.drive(["w0"], ready)
    sid = two.kube.get("maasmachines", "w0")["spec"]["systemID"]
    del two.kube.objects[("maasclusters", "ns", "c1")]  # finalizer stripped, deleted
    del two.kube.objects[("clusters", "ns", "c1")]
    two.sim.reset_counters()
    await delete_until_gone(two, "w0")
    assert two.own.machine(sid)["status_name"] == "Ready"
    assert sum(two.sim.counters.values()) == 0


async def test_no_memory_skips_the_lookup_before_power_on(two: TwoMaas) -> None:
    """The process verified the machine once; then it is held for someone else (same identity, another agent
    name) and powered off: the pass looks again before powering it on, and forgets it."""
    await tenant_cluster(two)
    two.machine("w0")
    await two.drive(["w0"], ready)
    sid = two.kube.get("maasmachines", "w0")["spec"]["systemID"]
    m = two.own.state.machines[sid]
    two.own.state.set_agent(m, "someone-else")
    m.power_state = "off"
    session = next(s for s in two.connections.sessions() if s.endpoint == OWN)
    await session.poller.poll_once()
    two.own.reset_counters()
    await two.step("w0")
    assert not [k for k in two.own.counters if k[2] == "power_on"]
    assert ("w0", "Warning", "MachineNotOurs") in [e[:3] for e in two.kube.events]
    assert not two.kube.get("maasmachines", "w0")["spec"].get("systemID")


async def test_an_object_from_before_the_stamp_adopts_the_identity_after_the_ownership_check(
    two: TwoMaas,
) -> None:
    await tenant_cluster(two)
    two.machine("w0")
    await two.drive(["w0"], ready)
    body = two.kube.get("maasmachines", "w0")
    stamp = body["metadata"]["annotations"].pop(STAMP)
    body["metadata"]["annotations"].pop(REF)
    # A new process (no memory): the pass checks ownership, then stamps.
    fresh = MachineReconciler(two.kube, two.connections, default_credentials=two.creds)
    two.own.reset_counters()
    await fresh.reconcile(two.kube.get("maasmachines", "w0"))
    assert annotations(two, "maasmachines", "w0")[STAMP] == stamp
    assert annotations(two, "maasmachines", "w0")[REF] == "Secret/own"
    assert two.own.counters[LIST] >= 1  # the ownership lookup by agent name


async def test_lxd_memory_is_per_identity_and_never_skips_the_lookup_before_decompose() -> None:
    shared, own = lxd_sim(), lxd_sim()
    env = make(shared, own)
    try:
        await tenant_cluster(env)
        add_lxd(env, "v0")
        await env.drive(["v0"], ready, rounds=30)
        sid = env.kube.get("maasmachines", "v0")["spec"]["systemID"]
        session = next(s for s in env.connections.sessions() if s.endpoint == OWN)
        assert any(k[0] == session.identity for k in env.machines.lxd.placer.allocated)
        own.reset_counters()
        env.kube.get("maasmachines", "v0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        for _ in range(8):
            if ("maasmachines", "ns", "v0") not in env.kube.objects:
                break
            await env.step("v0")
            await env.settle()
        assert ("maasmachines", "ns", "v0") not in env.kube.objects
        assert own.counters[LIST] >= 1  # looked up before the DELETE
        assert sid not in own.state.machines
    finally:
        await env.connections.aclose()


async def test_an_object_holding_nothing_deletes_without_maas() -> None:
    """Item 6: the namespace may not use the default credentials; nothing was ever allocated."""
    env = make(sim(1), sim(2), allowed=frozenset())
    try:
        env.kube.add("clusters", demo.cluster("c1", "ns"))
        c = env.kube.get("clusters", "c1")
        env.kube.add("maasclusters", demo.maascluster("c1", "ns", cluster_uid=c["metadata"]["uid"]))
        c["status"] = {"initialization": {"infrastructureProvisioned": True}}
        env.machine("w0")
        with pytest.raises(Exception, match="may not use"):
            await env.step("w0")
        assert env.kube.get("maasmachines", "w0")["metadata"]["finalizers"]
        env.kube.get("maasmachines", "w0")["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        await env.step("w0")
        assert ("maasmachines", "ns", "w0") not in env.kube.objects
        assert env.requests() == 0
    finally:
        await env.connections.aclose()


async def test_a_machine_allocated_while_a_change_applied_is_released_through_its_own_identity(
    two: TwoMaas,
) -> None:
    """The race behind the refusal: the MaasCluster's pass applies an ``identityRef`` change because its
    cached view of the MaasMachines shows nothing held yet, while a machine's pass that read the MaasCluster
    before the change allocates under the old credentials. That machine keeps them: its next pass neither
    forgets it (which would leave it allocated in the tenant's MAAS with no object) nor sends anything to the
    shared MAAS; the MaasCluster says so; its deletion releases it where it was allocated."""
    c = await tenant_cluster_without_dns(two)
    c["status"] = {"initialization": {"infrastructureProvisioned": True}}
    two.machine("w0")
    await two.drive(["w0"], ready)
    sid = two.kube.get("maasmachines", "w0")["spec"]["systemID"]
    assert annotations(two, "maasmachines", "w0")[REF] == "Secret/own"

    # The MaasCluster's pass, with a view of the MaasMachines from before w0's allocation: the change applies.
    del two.kube.get("maasclusters", "c1")["spec"]["identityRef"]
    real_list = two.kube.list_maasmachines
    two.kube.list_maasmachines = lambda namespace, cluster: []  # type: ignore[method-assign]
    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    two.kube.list_maasmachines = real_list  # type: ignore[method-assign]
    assert annotations(two, "maasclusters", "c1")[REF] == "default"

    two.sim.reset_counters()
    await two.connections.connect(two.creds)  # the shared identity's whoami: not counted below
    two.sim.reset_counters()
    await two.step("w0")
    assert two.kube.get("maasmachines", "w0")["spec"].get("systemID") == sid, "the machine was forgotten"
    assert ("w0", "Warning", C.IDENTITY_CHANGED_REASON) not in [e[:3] for e in two.kube.events]
    assert not [k for k in two.sim.counters if k[0] != "GET"]

    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    cond = identity_ref_applied(two)
    assert (cond["status"], cond["reason"]) == ("False", C.IDENTITY_KEPT_REASON)
    assert f"MaasMachine w0 (spec.systemID={sid})" in cond["message"]

    await delete_until_gone(two, "w0")
    assert two.own.machine(sid)["status_name"] == "Ready", "left allocated in the tenant's MAAS"
    assert not [k for k in two.sim.counters if k[0] != "GET"]  # nothing written to the shared MAAS

    await two.clusters.reconcile(two.kube.get("maasclusters", "c1"))
    cond = identity_ref_applied(two)
    assert cond["status"] == "True"
