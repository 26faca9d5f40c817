"""The MaasIPPool and claim reconcilers against two in-process simulators through the real gateway (only
Kubernetes is the unit tests' fake): what a pool publishes comes from the identity it was checked with,
another identity is checked again, MAAS is read only when the check is due (never per pass, never per claim);
a claim adopts the IPAddress a crash left, never takes another's, and leaves paused or other shards' claims
alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from fakes import FakeKube
from reconciler_env import CLIENT_RETRY, CLIENT_TIMEOUT

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.gateway import MaasConnections
from capmaas.reconcilers import ippool
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ports import Body, EventType, MaasCredentials, NamespaceAllowList
from capmaas_dev.simulator import Faults, Inventory, Simulator, Timings

SHARED = "http://shared.test/MAAS"
OWN = "http://own.test/MAAS"
SUBNETS = ("GET", "/MAAS/api/2.0/subnets/", None)
RANGES = ("GET", "/MAAS/api/2.0/ipranges/", None)


def maas_with(gateway: str, dynamic: tuple[str, str] | None = None) -> Simulator:
    ranges = [{"type": "dynamic", "start": dynamic[0], "end": dynamic[1]}] if dynamic else []
    inventory = Inventory(
        {
            "zones": [{"name": "az1"}],
            "subnets": [{"cidr": "10.70.0.0/24", "name": "lan", "gateway_ip": gateway, "ranges": ranges}],
            "boot_resources": [{"name": "ubuntu/jammy"}],
            "machines": [],
        }
    )
    return Simulator(inventory, timings=Timings.fast(), faults=Faults())


class KubeIpam:
    """:class:`~capmaas.reconcilers.ippool.IpamKube` over the unit tests' fake Kubernetes."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube

    def find(self, plural: str, namespace: str, name: str) -> Body | None:
        return self.kube.objects.get((plural, namespace, name))

    def items(self, plural: str, namespace: str) -> Sequence[Body]:
        return [b for (p, ns, _), b in self.kube.objects.items() if p == plural and ns == namespace]

    async def patch(
        self, plural: str, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        return await self.kube.patch(plural, namespace, name, body, status=status)  # type: ignore[arg-type]

    async def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Body | None:
        if self.find(plural, namespace, body["metadata"]["name"]) is not None:
            return None
        return self.kube.add(plural, dict(body))

    async def read(self, plural: str, namespace: str, name: str) -> Body | None:
        return self.find(plural, namespace, name)

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        self.kube.objects.pop((plural, namespace, name), None)

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        self.kube.emit_event(obj, type, reason, message)


class Two:
    def __init__(self) -> None:
        self.shared = maas_with("10.70.0.1")
        self.own = maas_with("10.70.0.254", dynamic=("10.70.0.200", "10.70.0.250"))
        apps = {SHARED: self.shared.app, OWN: self.own.app}

        def factory(c: MaasCredentials) -> maas.MaasClient:
            return maas.MaasClient(
                c.endpoint,
                api_key=c.api_key,
                transport=httpx.ASGITransport(app=apps[c.endpoint]),
                timeout=CLIENT_TIMEOUT,
                retry=CLIENT_RETRY,
            )

        self.kube = FakeKube()
        self.connections = MaasConnections(
            client_factory=factory, fast=3600, idle=3600, batch_size=200, wake=lambda k: None
        )
        creds = MaasCredentials(
            endpoint=SHARED,
            api_key=self.shared.api_key,
            allow_plaintext=True,
            namespaces=NamespaceAllowList(frozenset({"ns"})),
        )
        self.pools = ippool.PoolReconciler(
            self.kube, KubeIpam(self.kube), self.connections, default_credentials=creds
        )

    def secret(self, endpoint: str, sim: Simulator) -> None:
        self.kube.secrets[("ns", "own")] = {
            "MAAS_ENDPOINT": endpoint.encode(),
            "MAAS_API_KEY": sim.api_key.encode(),
            "MAAS_ALLOW_PLAINTEXT_HTTP": b"true",
        }

    async def run(self) -> dict[str, Any]:
        await self.pools.reconcile(self.kube.get(ippool.POOLS, "p1"))
        return dict(self.kube.get(ippool.POOLS, "p1")["status"])


@pytest.fixture
async def two() -> AsyncIterator[Two]:
    env = Two()
    yield env
    await env.connections.aclose()
    await asyncio.sleep(0)


def ready(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


async def test_another_identity_is_checked_again_and_nothing_of_the_first_is_kept(two: Two) -> None:
    two.secret(OWN, two.own)
    spec = {
        "subnet": "10.70.0.0/24",
        "addresses": ["10.70.0.240-10.70.0.242"],
        "identityRef": {"name": "own"},
    }
    two.kube.add(ippool.POOLS, {"metadata": {"name": "p1"}, "spec": spec})
    status = await two.run()
    assert ready(status)["reason"] == C.ADDRESS_IN_DYNAMIC_RANGE_REASON  # the tenant's MAAS: a DHCP range
    assert (status.get("identity"), status.get("gateway")) == (None, None)
    # The same Secret now names the shared MAAS (another identity, same generation, long before a recheck
    # is due): checked again there, where the addresses are fine and the gateway is another.
    two.secret(SHARED, two.shared)
    status = await two.run()
    shared = await two.connections.connect(
        MaasCredentials(endpoint=SHARED, api_key=two.shared.api_key, allow_plaintext=True)
    )
    assert ready(status)["reason"] == C.READY_REASON
    assert status["identity"] == shared.identity
    assert (status["gateway"], status["prefix"], status["free"]) == ("10.70.0.1", 24, 3)
    # And back: the facts of the shared MAAS are not kept under the tenant's identity.
    two.secret(OWN, two.own)
    status = await two.run()
    assert ready(status)["reason"] == C.ADDRESS_IN_DYNAMIC_RANGE_REASON
    assert (status.get("identity"), status.get("gateway"), status.get("prefix")) == (None, None, None)


async def test_maas_is_read_on_a_spec_change_not_on_every_pass(two: Two) -> None:
    spec = {"subnet": "10.70.0.0/24", "addresses": ["10.70.0.10-10.70.0.12"]}
    two.kube.add(ippool.POOLS, {"metadata": {"name": "p1"}, "spec": spec})
    status = await two.run()
    assert ready(status)["reason"] == C.READY_REASON
    assert (two.shared.counters[SUBNETS], two.shared.counters[RANGES]) == (1, 1)
    for _ in range(5):  # passes for claims coming and going: counts only
        await two.run()
    assert (two.shared.counters[SUBNETS], two.shared.counters[RANGES]) == (1, 1)
    pool = two.kube.get(ippool.POOLS, "p1")
    pool["spec"]["addresses"] = ["10.70.0.10-10.70.0.20"]
    pool["metadata"]["generation"] = 2
    status = await two.run()
    assert (two.shared.counters[SUBNETS], two.shared.counters[RANGES]) == (2, 2)
    assert (status["addresses"], status["observedGeneration"]) == (11, 2)


async def test_an_unusable_identity_publishes_no_maas_facts(two: Two) -> None:
    spec = {"subnet": "10.70.0.0/24", "addresses": ["10.70.0.10"], "identityRef": {"name": "missing"}}
    two.kube.add(ippool.POOLS, {"metadata": {"name": "p1"}, "spec": spec})
    with pytest.raises(Exception, match="does not exist"):
        await two.run()
    status = two.kube.get(ippool.POOLS, "p1")["status"]
    assert ready(status)["reason"] == C.IDENTITY_SECRET_NOT_FOUND_REASON
    assert (status.get("identity"), status.get("gateway")) == (None, None)


def claim_body(name: str, pool: str = "p1") -> dict[str, Any]:
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasIPPool", "name": pool}
    return {
        "apiVersion": ippool.IPAM_API,
        "kind": "IPAddressClaim",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"clusterName": "c1", "poolRef": ref},
    }


async def ready_pool(two: Two) -> None:
    spec = {"subnet": "10.70.0.0/24", "addresses": ["10.70.0.10-10.70.0.11"]}
    two.kube.add(ippool.POOLS, {"metadata": {"name": "p1"}, "spec": spec})
    two.kube.add("clusters", {"metadata": {"name": "c1"}, "spec": {}})
    assert ready(await two.run())["reason"] == C.READY_REASON


async def test_an_ipaddress_left_by_a_crash_is_adopted_never_a_second_one(two: Two) -> None:
    """The process created the IPAddress and died before the claim's status said so: adopted."""
    await ready_pool(two)
    ipam = KubeIpam(two.kube)
    claims = ippool.ClaimReconciler(two.kube, ipam)
    two.kube.add(ippool.CLAIMS, claim_body("c-0"))
    pool = two.kube.get(ippool.POOLS, "p1")
    two.kube.add(
        ippool.ADDRESSES, ippool.address_body(two.kube.get(ippool.CLAIMS, "c-0"), pool, "10.70.0.11")
    )
    await claims.reconcile(two.kube.get(ippool.CLAIMS, "c-0"))
    status = two.kube.get(ippool.CLAIMS, "c-0")["status"]
    assert status["addressRef"] == {"name": "c-0"}
    assert ready(status)["reason"] == C.ADDRESS_ALLOCATED_REASON
    assert [a["spec"]["address"] for a in ipam.items(ippool.ADDRESSES, "ns")] == ["10.70.0.11"]


async def test_an_ipaddress_of_the_claims_name_naming_another_claim_is_left_alone(two: Two) -> None:
    await ready_pool(two)
    ipam = KubeIpam(two.kube)
    claims = ippool.ClaimReconciler(two.kube, ipam)
    two.kube.add(ippool.CLAIMS, claim_body("c-0"))
    squatter = ippool.address_body(claim_body("someone"), two.kube.get(ippool.POOLS, "p1"), "10.70.0.10")
    squatter["metadata"]["name"] = "c-0"
    two.kube.add(ippool.ADDRESSES, squatter)
    await claims.reconcile(two.kube.get(ippool.CLAIMS, "c-0"))
    status = two.kube.get(ippool.CLAIMS, "c-0")["status"]
    assert ready(status)["reason"] == C.ALLOCATION_FAILED_REASON
    assert "belongs to claim 'someone'" in ready(status)["message"]
    assert "addressRef" not in status
    assert two.kube.get(ippool.ADDRESSES, "c-0")["spec"]["claimRef"] == {"name": "someone"}


async def test_claims_of_a_paused_cluster_or_another_shards_pool_are_not_touched(two: Two) -> None:
    await ready_pool(two)
    two.kube.add("clusters", {"metadata": {"name": "c2"}, "spec": {"paused": True}})
    ipam = KubeIpam(two.kube)
    paused = claim_body("paused")
    paused["spec"]["clusterName"] = "c2"
    two.kube.add(ippool.CLAIMS, paused)
    two.kube.add(ippool.CLAIMS, claim_body("elsewhere", pool="p9"))
    await ippool.ClaimReconciler(two.kube, ipam).reconcile(two.kube.get(ippool.CLAIMS, "paused"))
    await ippool.ClaimReconciler(two.kube, ipam, sharded=True).reconcile(
        two.kube.get(ippool.CLAIMS, "elsewhere")
    )
    for name in ("paused", "elsewhere"):
        body = two.kube.get(ippool.CLAIMS, name)
        assert "status" not in body
        assert not body["metadata"].get("finalizers")
    assert not ipam.items(ippool.ADDRESSES, "ns")
    # Not sharded: a pool that does not exist is said on the claim.
    await ippool.ClaimReconciler(two.kube, ipam).reconcile(two.kube.get(ippool.CLAIMS, "elsewhere"))
    assert ready(two.kube.get(ippool.CLAIMS, "elsewhere")["status"])["reason"] == C.POOL_NOT_READY_REASON


async def test_maas_unavailable_holds_a_new_spec_but_not_what_was_checked(two: Two) -> None:
    spec = {"subnet": "10.70.0.0/24", "addresses": ["10.70.0.10-10.70.0.12"]}
    two.kube.add(ippool.POOLS, {"metadata": {"name": "p1"}, "spec": spec})
    assert ready(await two.run())["reason"] == C.READY_REASON
    two.shared.faults.unavailable_rate = 1.0
    # A recheck that fails keeps what this identity said (claims go on being served).
    two.pools.recheck = 0.0
    with pytest.raises(TransientError):
        await two.run()
    status = two.kube.get(ippool.POOLS, "p1")["status"]
    assert (ready(status)["reason"], status["gateway"]) == (C.READY_REASON, "10.70.0.1")
    # A spec that was never checked is not Ready while MAAS does not answer, and says why.
    pool = two.kube.get(ippool.POOLS, "p1")
    pool["spec"]["addresses"] = ["10.70.0.10-10.70.0.20"]
    pool["metadata"]["generation"] = 2
    with pytest.raises(TransientError):
        await two.run()
    status = two.kube.get(ippool.POOLS, "p1")["status"]
    assert ready(status)["reason"] == C.MAAS_UNREACHABLE_REASON
    assert (status.get("gateway"), status.get("prefix"), status["addresses"]) == (None, None, 11)
    two.shared.faults.unavailable_rate = 0.0
    assert ready(await two.run())["reason"] == C.READY_REASON
