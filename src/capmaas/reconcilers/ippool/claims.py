"""The IPAddressClaim reconciler: the IPAM provider duties of Cluster API's contract for a MaasIPPool's
claims."""

from __future__ import annotations

import asyncio
from typing import Any

from capmaas.api import conditions as C
from capmaas.api.ip_pools import parse_pool
from capmaas.api.v1beta1 import MaasIPPoolSpec
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.ippool.objects import (
    ADDRESSES,
    CLAIMS,
    POOLS,
    PROTECT_FINALIZER,
    RELEASE_FINALIZER,
    WAIT_CLUSTER,
    IpamKube,
    address_body,
    belongs_to,
    claim_cluster,
    claim_pool,
    condition,
    exhausted_message,
    meta_of,
    paused,
    pool_ready,
    same_condition,
    used_addresses,
    with_condition,
)
from capmaas.reconcilers.ports import Body, KubePort
from capmaas.reconcilers.scope import Requeue


class ClaimReconciler:
    """One pass over an IPAddressClaim of a MaasIPPool."""

    def __init__(self, kube: KubePort, ipam: IpamKube, *, sharded: bool = False) -> None:
        self.kube = kube
        self.ipam = ipam
        #: Under a watch filter a shard serves the claims of the pools it caches (its own) only: a claim of
        #: another shard's pool (not cached here) is left to that shard, not told its pool does not exist.
        self.sharded = sharded
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def _lock(self, namespace: str, pool: str) -> asyncio.Lock:
        return self._locks.setdefault((namespace, pool), asyncio.Lock())

    async def _cluster(self, namespace: str, name: str) -> Body | None:
        found = self.ipam.find("clusters", namespace, name)
        if found is not None:
            return found
        unwatched = await self.kube.read_unwatched("clusters", namespace, name)
        return unwatched.body if unwatched is not None else None

    async def reconcile(self, claim: Body) -> Requeue:
        meta = meta_of(claim)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        pool_name = claim_pool(claim)
        if pool_name is None:
            return Requeue()  # another provider's claim
        deleting = bool(meta.get("deletionTimestamp"))
        pool = self.ipam.find(POOLS, ns, pool_name)
        if pool is None and self.sharded:
            return Requeue()  # another shard's pool (or none at all): woken if it comes to this shard
        if paused(claim) or paused(pool):
            return Requeue()  # woken by its own (or its pool's) change
        cluster_name = claim_cluster(claim)
        cluster = await self._cluster(ns, cluster_name) if cluster_name else None
        if paused(cluster):
            return Requeue(after=WAIT_CLUSTER)
        if deleting:
            await self._release(claim)
            return Requeue()
        if cluster is None:
            return Requeue(after=WAIT_CLUSTER)  # the contract: a claim of a missing Cluster is left alone
        finalizers = list(meta.get("finalizers") or ())
        if RELEASE_FINALIZER not in finalizers:
            patch = {
                "metadata": {
                    "finalizers": [*finalizers, RELEASE_FINALIZER],
                    "resourceVersion": meta.get("resourceVersion"),
                }
            }
            new = await self.ipam.patch(CLAIMS, ns, name, patch, status=False)
            if new is None:
                return Requeue()
            claim = new
        ready, why = pool_ready(pool)
        if not ready or pool is None:
            await self._status(claim, None, False, C.POOL_NOT_READY_REASON, f"MaasIPPool {pool_name} {why}")
            return Requeue()  # woken by the pool's change
        existing = self.ipam.find(ADDRESSES, ns, name)
        if existing is None:
            async with self._lock(ns, pool_name):
                existing = await self._allocate(claim, pool)
                if existing is None:
                    return Requeue()  # exhausted: said on the claim; woken when an address is freed
        if not belongs_to(existing, claim):
            owner = ((existing.get("spec") or {}).get("claimRef") or {}).get("name")
            await self._status(
                claim,
                None,
                False,
                C.ALLOCATION_FAILED_REASON,
                f"an IPAddress named {name} exists already and belongs to claim {owner!r} of another pool or "
                "claim; it is left alone",
            )
            return Requeue()
        await self._status(claim, name, True, C.ADDRESS_ALLOCATED_REASON, "")
        return Requeue()

    async def _allocate(self, claim: Body, pool: Body) -> Body | None:
        """Create the IPAddress with the lowest free address (the caller holds the pool's lock); None when the
        pool is exhausted (said on the claim)."""
        meta, pmeta = meta_of(claim), meta_of(pool)
        ns, name, pool_name = (
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(pmeta.get("name")),
        )
        spec = MaasIPPoolSpec.from_body(pool.get("spec") or {})
        status = pool.get("status") or {}
        parsed = parse_pool(
            spec.subnet,
            spec.addresses,
            spec.excluded_addresses or (),
            gateway=status.get("gateway") or spec.gateway,
            prefix=spec.prefix,
        )
        used = used_addresses(self.ipam.items(ADDRESSES, ns), pool_name)
        address = parsed.free(used)
        if address is None:
            await self._status(
                claim, None, False, C.POOL_EXHAUSTED_REASON, exhausted_message(pool_name, parsed.size)
            )
            return None
        created = await self.ipam.create(ADDRESSES, ns, address_body(claim, pool, address))
        if created is None:  # one of that name exists (the cache does not show it yet): read it
            created = await self.ipam.read(ADDRESSES, ns, name)
            if created is None:
                raise TransientError(
                    C.ALLOCATION_FAILED_REASON, f"IPAddress {name} was deleted meanwhile", delay=1.0
                )
        return created

    async def _status(self, claim: Body, address: str | None, ok: bool, reason: str, message: str) -> None:
        meta = meta_of(claim)
        status = claim.get("status") or {}
        have = (status.get("addressRef") or {}).get("name")
        if (address is None or have == address) and same_condition(
            condition(claim, C.READY_CONDITION), ok, reason, message
        ):
            return
        patch: dict[str, Any] = {
            "conditions": with_condition(
                status.get("conditions"),
                C.READY_CONDITION,
                ok,
                reason,
                message,
                generation=meta.get("generation"),
            )
        }
        if address is not None:
            patch["addressRef"] = {"name": address}
        await self.ipam.patch(
            CLAIMS, str(meta.get("namespace", "")), str(meta.get("name", "")), {"status": patch}, status=True
        )

    async def _release(self, claim: Body) -> None:
        """Deletion: the claim's IPAddress loses its finalizer and goes, then the claim's finalizer."""
        meta = meta_of(claim)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        finalizers = list(meta.get("finalizers") or ())
        if RELEASE_FINALIZER not in finalizers:
            return
        address = self.ipam.find(ADDRESSES, ns, name)
        if address is not None and belongs_to(address, claim):
            held = list(meta_of(address).get("finalizers") or ())
            if PROTECT_FINALIZER in held:
                rest = [f for f in held if f != PROTECT_FINALIZER]
                patch = {
                    "metadata": {
                        "finalizers": rest or None,
                        "resourceVersion": meta_of(address).get("resourceVersion"),
                    }
                }
                await self.ipam.patch(ADDRESSES, ns, name, patch, status=False)
            await self.ipam.delete(ADDRESSES, ns, name)
        rest = [f for f in finalizers if f != RELEASE_FINALIZER]
        patch = {"metadata": {"finalizers": rest or None, "resourceVersion": meta.get("resourceVersion")}}
        await self.ipam.patch(CLAIMS, ns, name, patch, status=False)
