"""kopf wiring of capmaas's IPAM provider: MaasIPPools, and the Cluster API IPAddressClaims/IPAddresses.

Every claim and every IPAddress is cached (store plurals ``ipaddressclaims``/``ipaddresses``, whichever
provider's pool they name: the MaasMachine side reads its claims from there), pinned to
``ipam.cluster.x-k8s.io/v1beta2``. Both are fed by kopf *index* handlers, as app.py feeds CAPI Machines and
Clusters: kopf holds every other handler until the initial listings are indexed, and no claim or pool pass
runs before the first of those handlers ran (:attr:`Ipam.synced`), so a pass never sees a half-filled list of
IPAddresses (a restart would hand an address out twice).

Loops (:class:`~capmaas.operator.workers.Workers`) run per MaasIPPool and per claim of a MaasIPPool. Wake-ups:
a pool wakes its claims (PoolNotReady ones may go on); an IPAddress wakes its pool (counts), its claim and the
pool's waiting claims (one freed); a claim or its IPAddress wakes the MaasMachine that controller-owns the
claim; a Cluster wakes its claims (paused/unpaused).

Without the CAPI IPAM CRDs (a helm install without Cluster API) kopf simply finds no such resource: nothing
of it is watched, the rest of the operator runs (kopf watches the CRDs and starts once they appear).

Under a watch filter only MaasIPPools carry the label selector: a shard serves the claims of its own pools,
and so must see every claim and every IPAddress of them, labelled or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from capmaas.config import OperatorConfig
from capmaas.operator.kube import (
    IP_ADDRESSES,
    IP_CLAIMS,
    IPAM_API,
    KubeAdapter,
    Store,
    create_cached,
    delete_if_present,
    kube_failure,
    object_key,
    patch_refused,
)
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError
from capmaas.operator.workers import Lag, Outcome, Reconcile, Workers
from capmaas.reconcilers import ippool
from capmaas.reconcilers.ports import Body, EventType, MaasConnector, MaasCredentials
from capmaas.reconcilers.scope import Requeue

log = logging.getLogger(__name__)

INFRA = "infrastructure.cluster.x-k8s.io"
INFRA_VERSION = "v1beta1"
CAPI = "cluster.x-k8s.io"
IPAM_GROUP, IPAM_VERSION = IPAM_API.split("/")
_APIS = {ippool.POOLS: f"{INFRA}/{INFRA_VERSION}", IP_CLAIMS: IPAM_API, IP_ADDRESSES: IPAM_API}
assert (ippool.CLAIMS, ippool.ADDRESSES, ippool.IPAM_API) == (IP_CLAIMS, IP_ADDRESSES, IPAM_API)


class IpamAdapter:
    """:class:`~capmaas.reconcilers.ippool.IpamKube` over the shared :class:`Store` and :class:`KubeHttp`
    (the operator's fenced one: no write unless this process leads)."""

    def __init__(self, store: Store, http: KubeHttp, kube: KubeAdapter) -> None:
        self.store = store
        self._http = http
        self._kube = kube

    def find(self, plural: str, namespace: str, name: str) -> Body | None:
        return self.store.find(plural, namespace, name)

    def items(self, plural: str, namespace: str) -> Sequence[Body]:
        return [
            b for b in self.store.values(plural) if (b.get("metadata") or {}).get("namespace") == namespace
        ]

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        self._kube.emit_event(obj, type, reason, message)

    async def patch(
        self, plural: str, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        try:
            new = await self._http.merge_patch(_APIS[plural], plural, namespace, name, body, status=status)
        except KubeHttpError as exc:
            await patch_refused(exc, self.store, plural, namespace, name, reread=self.read)
            return None
        self.store.put(plural, new)
        return new

    async def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Body | None:
        return await create_cached(self._http, self.store, _APIS[plural], plural, namespace, body=body)

    async def read(self, plural: str, namespace: str, name: str) -> Body | None:
        try:
            body = await self._http.get_object(_APIS[plural], plural, namespace, name)
        except KubeHttpError as exc:
            if exc.status == 404:
                return None
            raise kube_failure(f"reading {plural}/{name}", exc) from exc
        self.store.put(plural, body)
        return body

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        await delete_if_present(self._http, _APIS[plural], plural, namespace, name)


@dataclass
class Ipam:
    """The IPAM provider's share of the operator's runtime: its adapter, reconcilers and loops."""

    store: Store
    adapter: IpamAdapter
    pool_reconciler: ippool.PoolReconciler
    claim_reconciler: ippool.ClaimReconciler
    pools: Workers
    claims: Workers
    #: Set once a non-index handler ran: kopf has indexed every initial listing (IPAddresses included).
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    def activate(self) -> None:
        """Leadership won: a loop for every cached pool and claim of a pool (new ones from their events)."""
        self.pools.activate(_keys(self.store, ippool.POOLS))
        self.claims.activate(
            _keys(self.store, IP_CLAIMS, lambda b: ippool.claim_pool(b) is not None),
        )

    def cancel(self) -> None:
        self.pools.cancel()
        self.claims.cancel()

    async def stop(self) -> None:
        await self.claims.stop()
        await self.pools.stop()


def _keys(store: Store, plural: str, keep: Callable[[Body], bool] = lambda b: True) -> list[str]:
    out = []
    for body in store.values(plural):
        if keep(body):
            meta = body.get("metadata") or {}
            out.append(object_key(plural, meta.get("namespace", ""), meta.get("name", "")))
    return out


def build_ipam(
    config: OperatorConfig,
    store: Store,
    http: KubeHttp,
    kube: KubeAdapter,
    connector: MaasConnector,
    *,
    default_credentials: MaasCredentials | None,
    active: bool,
    outcome: Outcome,
    lag: Lag,
) -> Ipam:
    adapter = IpamAdapter(store, http, kube)
    pools = ippool.PoolReconciler(kube, adapter, connector, default_credentials=default_credentials)
    claims = ippool.ClaimReconciler(kube, adapter, sharded=bool(config.kube.watch_filter))
    synced = asyncio.Event()

    def gated(reconcile: Reconcile) -> Reconcile:
        async def run(body: Body) -> Requeue:
            await synced.wait()
            return await reconcile(body)

        return run

    def workers(plural: str, reconcile: Reconcile) -> Workers:
        return Workers.configured(
            plural, gated(reconcile), store, config, active=active, outcome=outcome, lag=lag
        )

    return Ipam(
        store,
        adapter,
        pools,
        claims,
        workers(ippool.POOLS, pools.reconcile),
        workers(IP_CLAIMS, claims.reconcile),
        synced,
    )


def _meta(body: Body) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def register(
    registry: kopf.OperatorRegistry,
    ipam: Ipam,
    *,
    wake_machine: Callable[[str], None],
    label_selector: str | None,
) -> None:
    """The handlers of MaasIPPools, IPAddressClaims and IPAddresses (and Clusters, for their claims)."""
    store = ipam.store

    @kopf.on.startup(registry=registry)
    def configure_ipam(settings: kopf.OperatorSettings, **_: Any) -> None:
        if label_selector:
            settings.watching.label_selectors[INFRA, ippool.POOLS] = label_selector

    def claims_of_pool(namespace: str, pool: str, *, waiting_only: bool = False) -> list[str]:
        out = []
        for claim in store.values(IP_CLAIMS):
            ns, name = _meta(claim)
            if ns != namespace or ippool.claim_pool(claim) != pool:
                continue
            if waiting_only and ((claim.get("status") or {}).get("addressRef") or {}).get("name"):
                continue
            out.append(object_key(IP_CLAIMS, ns, name))
        return out

    def wake_owner(claim: Body | None) -> None:
        """The MaasMachine that controller-owns ``claim`` (the machine side waits for its address)."""
        if claim is None:
            return
        ns, _ = _meta(claim)
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
            if ref.get("kind") == "MaasMachine" and ref.get("controller") and ref.get("name"):
                wake_machine(object_key("maasmachines", ns, str(ref["name"])))

    # Index handlers: the caches, complete before any other handler runs (module docstring).
    @kopf.index(group=IPAM_GROUP, version=IPAM_VERSION, plural=IP_ADDRESSES, registry=registry)
    async def ipaddress_index(body: kopf.Body, **_: Any) -> None:
        store.put(IP_ADDRESSES, body)

    @kopf.index(group=IPAM_GROUP, version=IPAM_VERSION, plural=IP_CLAIMS, registry=registry)
    async def ipaddressclaim_index(body: kopf.Body, **_: Any) -> None:
        store.put(IP_CLAIMS, body)

    @kopf.on.event(group=IPAM_GROUP, version=IPAM_VERSION, plural=IP_ADDRESSES, registry=registry)
    async def ipaddress_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        ipam.synced.set()
        ns, name = _meta(body)
        if type == "DELETED":
            store.delete(IP_ADDRESSES, ns, name, uid=(body.get("metadata") or {}).get("uid"))
        pool = ippool.names_pool((body.get("spec") or {}).get("poolRef"))
        claim_name = str(((body.get("spec") or {}).get("claimRef") or {}).get("name") or name)
        claim = store.find(IP_CLAIMS, ns, claim_name)
        wake_owner(claim)
        if pool is None:
            return
        ipam.pools.wake(object_key(ippool.POOLS, ns, pool))
        ipam.claims.wake(object_key(IP_CLAIMS, ns, claim_name))
        if type == "DELETED" or (body.get("metadata") or {}).get("deletionTimestamp"):
            for key in claims_of_pool(ns, pool, waiting_only=True):  # an address is free again
                ipam.claims.wake(key)

    @kopf.on.event(group=IPAM_GROUP, version=IPAM_VERSION, plural=IP_CLAIMS, registry=registry)
    async def ipaddressclaim_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        ipam.synced.set()
        ns, name = _meta(body)
        key = object_key(IP_CLAIMS, ns, name)
        wake_owner(body)
        if type == "DELETED":
            store.delete(IP_CLAIMS, ns, name, uid=(body.get("metadata") or {}).get("uid"))
            ipam.claims.wake(key)  # its loop sees it gone and ends
            return
        if ippool.claim_pool(body) is not None and store.get(key) is not None:
            ipam.claims.ensure(key)

    @kopf.on.event(group=INFRA, version=INFRA_VERSION, plural=ippool.POOLS, registry=registry)
    async def maasippool_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        ipam.synced.set()
        ns, name = _meta(body)
        key = object_key(ippool.POOLS, ns, name)
        if type == "DELETED" and label_selector:
            # Also what a pool relabelled out of this shard looks like: no tombstone, so that it is cached
            # again if it comes back (app.py reads its objects back to tell; a pool holds nothing to hand on).
            store.forget(ippool.POOLS, ns, name)
        elif type == "DELETED":
            store.delete(ippool.POOLS, ns, name, uid=(body.get("metadata") or {}).get("uid"))
        if type == "DELETED":
            ipam.pool_reconciler.forget(str((body.get("metadata") or {}).get("uid", "")))
            ipam.pools.wake(key)
        elif store.put(ippool.POOLS, body):
            ipam.pools.ensure(key)
        elif store.get(key) is None:
            ipam.pools.wake(key)
        else:
            ipam.pools.ensure(key, wake=False)  # the echo of our own status write
        for claim in claims_of_pool(ns, name, waiting_only=True):  # a claim holding an address needs no pool
            ipam.claims.wake(claim)

    @kopf.on.event(group=CAPI, plural="clusters", registry=registry)
    async def cluster_claims(type: str | None, body: kopf.Body, **_: Any) -> None:
        """A Cluster paused, unpaused, made or deleted: its claims (app.py's handlers cache it)."""
        ipam.synced.set()
        ns, name = _meta(body)
        for claim in store.values(IP_CLAIMS):
            if _meta(claim)[0] == ns and ippool.claim_cluster(claim) == name and ippool.claim_pool(claim):
                ipam.claims.wake(object_key(IP_CLAIMS, ns, _meta(claim)[1]))
