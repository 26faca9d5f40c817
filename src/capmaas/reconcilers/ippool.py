"""capmaas as a Cluster API IPAM provider: ``MaasIPPool`` and the ``IPAddressClaim``s that name it.

Two reconcilers, run by the operator (:mod:`capmaas.operator.ipam`) in per-object loops:

- :class:`PoolReconciler` (per MaasIPPool): parses the spec, checks it against MAAS **rarely** (a spec change,
  another MAAS identity, or :data:`POOL_RECHECK` seconds; never per claim) and publishes ``gateway``/
  ``prefix`` (the spec's, else the MAAS subnet's), the counts and ``Ready``. Refused: a spec that does not
  parse (``InvalidPool``), a subnet MAAS does not have (``SubnetNotFound``), an address inside a MAAS
  *dynamic* range (``AddressInDynamicRange``: the machine side pins addresses with ``reservedips/``, which
  MAAS 3.7.3 refuses there). Addresses outside every MAAS *reserved* range are allowed but warned about:
  MAAS may hand them to other machines' AUTO links. What MAAS said is stamped with the identity it was read
  through (``status.identity``); under another identity the pool is checked again and nothing from the
  other one is kept (:mod:`capmaas.reconcilers.identity`).
- :class:`ClaimReconciler` (per IPAddressClaim whose ``spec.poolRef`` is a MaasIPPool): the IPAM provider
  duties of Cluster API's contract (``docs/book/.../contracts/ipam.md``): skip while paused or while its
  Cluster is missing, finalizer on the claim, the lowest free address under a per-pool lock, an IPAddress
  named after the claim (protect finalizer, ownerRefs to the claim and to the pool), ``status.addressRef``;
  on deletion the IPAddress goes first, then the finalizer. An IPAddress of the claim's name that names the
  claim is adopted (a crash between create and status), never a second one.

Which addresses are in use is read from the operator's watch cache of every IPAddress, filled completely
before any claim pass (kopf index handlers): a restart never hands an address out twice. A created IPAddress
is put into the cache from the create's answer, inside the pool's lock, so the next claim of the same pool
never picks it again either.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.ip_pools import InvalidPoolAddresses, PoolAddresses, parse_pool
from capmaas.api.related import CapiCluster
from capmaas.api.v1beta1 import GROUP, MaasIPPoolSpec
from capmaas.reconcilers.credentials import DEFAULT_REF, SECRET_REF_PREFIX, connect_ref, maas_step
from capmaas.reconcilers.errors import TransientError
from capmaas.reconcilers.handoff import cluster_paused
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION
from capmaas.reconcilers.ports import Body, EventType, KubePort, MaasConnector, MaasCredentials, MaasPort
from capmaas.reconcilers.scope import Requeue

POOL_KIND = "MaasIPPool"
POOLS = "maasippools"  # store plural of MaasIPPools
CLAIMS = "ipaddressclaims"  # store plurals of the CAPI IPAM objects (capmaas.operator.kube.IP_CLAIMS)
ADDRESSES = "ipaddresses"
IPAM_API = "ipam.cluster.x-k8s.io/v1beta2"
#: The claim's finalizer and the IPAddress's, as Cluster API names them (``api/ipam/v1beta2``).
RELEASE_FINALIZER = "ipam.cluster.x-k8s.io/ReleaseAddress"
PROTECT_FINALIZER = "ipam.cluster.x-k8s.io/ProtectAddress"
#: Seconds between two checks of an unchanged pool against MAAS (a subnet or range edited in MAAS shows
#: within this; a spec change is checked at once).
POOL_RECHECK = 600.0
#: Seconds before a claim whose Cluster is paused or missing is looked at again (a Cluster event wakes it
#: sooner).
WAIT_CLUSTER = 30.0
#: A message lists at most this many problem ranges/addresses.
SHOWN = 5


class IpamKube(Protocol):
    """The Kubernetes side the IPAM reconcilers need beyond :class:`KubePort` (its own Protocol: the shared
    port is not changed for it). Reads come from the operator's watch cache."""

    def find(self, plural: str, namespace: str, name: str) -> Body | None:
        """A cached MaasIPPool, IPAddressClaim, IPAddress or CAPI Cluster."""
        ...

    def items(self, plural: str, namespace: str) -> Sequence[Body]:
        """Every cached object of ``plural`` in ``namespace``."""
        ...

    async def patch(
        self, plural: str, namespace: str, name: str, body: Mapping[str, Any], *, status: bool
    ) -> Body | None:
        """Merge-patch (None: gone). A ``metadata.resourceVersion`` in ``body`` is a precondition
        (:class:`~capmaas.reconcilers.errors.ConflictError` when it fails)."""
        ...

    async def create(self, plural: str, namespace: str, body: Mapping[str, Any]) -> Body | None:
        """Create (None: one of that name exists); the answer goes into the cache."""
        ...

    async def read(self, plural: str, namespace: str, name: str) -> Body | None:
        """GET now (after a create found one of that name the cache does not show yet)."""
        ...

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        """Delete; gone already is fine."""
        ...

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None: ...


# --- pure decisions ------------------------------------------------------------------------------------
def _meta(body: Body) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def names_pool(ref: Mapping[str, Any] | None) -> str | None:
    """The MaasIPPool a ``spec.poolRef`` names (None: another IPAM provider's pool)."""
    if not ref or ref.get("kind") != POOL_KIND or ref.get("apiGroup") != GROUP or not ref.get("name"):
        return None
    return str(ref["name"])


def claim_pool(claim: Body) -> str | None:
    return names_pool((claim.get("spec") or {}).get("poolRef"))


def claim_cluster(claim: Body) -> str | None:
    """The claim's Cluster: ``spec.clusterName``, else the deprecated label."""
    name = (claim.get("spec") or {}).get("clusterName") or (_meta(claim).get("labels") or {}).get(
        CLUSTER_NAME_LABEL
    )
    return str(name) if name else None


def paused(obj: Body | None) -> bool:
    """``cluster.x-k8s.io/paused`` on the object, or (a Cluster) ``spec.paused``."""
    if obj is None:
        return False
    return PAUSED_ANNOTATION in (_meta(obj).get("annotations") or {}) or cluster_paused(CapiCluster.view(obj))


def condition(obj: Body | None, type_: str) -> Mapping[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


def with_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """``conditions`` (metav1.Condition dicts) with ``type_`` set; its transition time kept while the status
    stays, the order of the others kept."""
    status = "True" if ok else "False"
    items = [dict(c) for c in conditions or ()]
    at = next((i for i, c in enumerate(items) if c.get("type") == type_), None)
    old = items[at] if at is not None else None
    when = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    new = _condition(
        type_, status=status, reason=reason, message=message, generation=generation, when=when, now=now
    )
    if at is None:
        items.append(new)
    else:  # in its place: the others keep their order
        items[at] = new
    return items


def _condition(
    type_: str,
    *,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    when: Any,
    now: datetime | None,
) -> dict[str, Any]:
    stamp = when or (now or datetime.now(UTC)).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    c: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": stamp,
    }
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def same_condition(old: Mapping[str, Any] | None, ok: bool, reason: str, message: str) -> bool:
    return (
        old is not None
        and old.get("status") == ("True" if ok else "False")
        and old.get("reason") == reason
        and (old.get("message") or "") == message
    )


def pool_ready(pool: Body | None) -> tuple[bool, str]:
    """Whether claims may be served from ``pool`` now, else why not (for the claim's PoolNotReady)."""
    if pool is None:
        return False, "does not exist"
    status = pool.get("status") or {}
    ready = condition(pool, C.READY_CONDITION)
    if ready is None or ready.get("status") != "True":
        why = (ready or {}).get("message") or "not checked yet"
        return False, f"is not Ready: {why}"
    if status.get("observedGeneration") != _meta(pool).get("generation"):
        return False, "its spec changed and is not checked yet"
    if status.get("prefix") is None:
        return False, "has no prefix yet"
    return True, ""


def used_addresses(addresses: Iterable[Body], pool: str) -> set[str]:
    """The addresses IPAddresses naming ``pool`` hold (any of them, also one being deleted)."""
    out = set()
    for a in addresses:
        spec = a.get("spec") or {}
        if names_pool(spec.get("poolRef")) == pool and spec.get("address"):
            out.add(str(spec["address"]))
    return out


def exhausted_message(pool: str, size: int) -> str:
    return f"pool {pool}: all {size} addresses are in use"


def address_body(claim: Body, pool: Body, address: str) -> dict[str, Any]:
    """The IPAddress for ``claim``: its name and namespace, the protect finalizer, ownerRefs to the claim
    (controller) and to the pool, the claim's cluster-name label, and spec {claimRef, poolRef, address,
    prefix, gateway} (the pool's resolved ones)."""
    cmeta, pmeta = _meta(claim), _meta(pool)
    status = pool.get("status") or {}
    labels = {}
    cluster = (cmeta.get("labels") or {}).get(CLUSTER_NAME_LABEL) or claim_cluster(claim)
    if cluster:
        labels[CLUSTER_NAME_LABEL] = cluster
    spec: dict[str, Any] = {
        "claimRef": {"name": cmeta.get("name")},
        "poolRef": {"apiGroup": GROUP, "kind": POOL_KIND, "name": pmeta.get("name")},
        "address": address,
        "prefix": int(status["prefix"]),
    }
    if status.get("gateway"):
        spec["gateway"] = status["gateway"]
    meta: dict[str, Any] = {
        "name": cmeta.get("name"),
        "namespace": cmeta.get("namespace"),
        "finalizers": [PROTECT_FINALIZER],
        "ownerReferences": [
            {
                "apiVersion": claim.get("apiVersion") or IPAM_API,
                "kind": "IPAddressClaim",
                "name": cmeta.get("name"),
                "uid": cmeta.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            },
            {
                "apiVersion": pool.get("apiVersion") or f"{GROUP}/v1beta1",
                "kind": POOL_KIND,
                "name": pmeta.get("name"),
                "uid": pmeta.get("uid"),
                "controller": False,
                "blockOwnerDeletion": True,
            },
        ],
    }
    if labels:
        meta["labels"] = labels
    return {"apiVersion": IPAM_API, "kind": "IPAddress", "metadata": meta, "spec": spec}


def belongs_to(address: Body, claim: Body) -> bool:
    """An IPAddress is the claim's: it names the claim and (when it names one) the claim's own pool."""
    spec = address.get("spec") or {}
    if (spec.get("claimRef") or {}).get("name") != _meta(claim).get("name"):
        return False
    return names_pool(spec.get("poolRef")) == claim_pool(claim)


# --- the pool ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MaasFacts:
    """What a check of the pool against MAAS found (through one identity, at one generation)."""

    identity: str
    generation: int
    at: float
    problem: tuple[str, str] | None  # (reason, message): Ready=False
    gateway: str | None
    prefix: int
    warning: str  # addresses outside MAAS reserved ranges ("" none)


def _span(first: int, last: int) -> str:
    a, b = ipaddress.ip_address(first), ipaddress.ip_address(last)
    return str(a) if first == last else f"{a}-{b}"


def in_ranges(pool: PoolAddresses, start: str, end: str) -> list[str]:
    """The pool's addresses inside MAAS range ``start``-``end``, as spans (empty: none)."""
    lo, hi = int(ipaddress.ip_address(start)), int(ipaddress.ip_address(end))
    out = []
    for r in pool.ranges:
        first, last = max(r.first, lo), min(r.last, hi)
        if first > last:
            continue
        run: int | None = None
        for value in range(first, last + 2):
            usable = value <= last and pool.holds(str(ipaddress.ip_address(value)))
            if usable and run is None:
                run = value
            elif not usable and run is not None:
                out.append(_span(run, value - 1))
                run = None
    return out


def outside_reserved(pool: PoolAddresses, reserved: Sequence[tuple[str, str]]) -> int:
    """How many pool addresses lie in no MAAS reserved range."""
    spans = [(int(ipaddress.ip_address(s)), int(ipaddress.ip_address(e))) for s, e in reserved]
    return sum(1 for a in pool if not any(lo <= int(ipaddress.ip_address(a)) <= hi for lo, hi in spans))


def _inside(address: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(address) in network
    except ValueError:
        return False


def check_against_maas(
    spec: MaasIPPoolSpec,
    pool: PoolAddresses,
    subnets: Sequence[maas.Subnet],
    ranges: Sequence[maas.IpRange],
) -> tuple[tuple[str, str] | None, maas.Subnet | None, str]:
    """(problem, the MAAS subnet, warning) of ``pool`` against MAAS's subnets and IP ranges."""
    want = ipaddress.ip_network(spec.subnet, strict=False)
    subnet = None
    for s in subnets:
        try:
            if ipaddress.ip_network(s.cidr, strict=False) == want:
                subnet = s
                break
        except ValueError:
            continue
    if subnet is None:
        return (
            (C.SUBNET_NOT_FOUND_REASON, f"MAAS has no subnet {want} (visible to these credentials)"),
            None,
            "",
        )
    mine = [r for r in ranges if _inside(r.start_ip, want)]
    clashes = []
    for r in mine:
        if r.type == "dynamic":
            for span in in_ranges(pool, r.start_ip, r.end_ip):
                clashes.append(f"{span} (dynamic range {r.start_ip} - {r.end_ip})")
    if clashes:
        shown = ", ".join(clashes[:SHOWN]) + (
            f" and {len(clashes) - SHOWN} more" if len(clashes) > SHOWN else ""
        )
        return (
            (
                C.ADDRESS_IN_DYNAMIC_RANGE_REASON,
                f"addresses inside a MAAS dynamic range, which MAAS hands out by DHCP and where it refuses "
                f"to pin an address to a machine: {shown}; exclude them (spec.excludedAddresses) or shrink "
                "the range in MAAS",
            ),
            subnet,
            "",
        )
    reserved = [(r.start_ip, r.end_ip) for r in mine if r.type == "reserved"]
    loose = outside_reserved(pool, reserved)
    warning = ""
    if loose:
        warning = (
            f"{loose} of {pool.size} addresses are in no MAAS reserved range of {want}: MAAS may give them "
            "to other machines' automatic (AUTO) addresses; add a MAAS reserved range that covers the pool"
        )
    return None, subnet, warning


class PoolReconciler:
    """One pass over a MaasIPPool: parse, check against MAAS when due, publish status."""

    def __init__(
        self,
        kube: KubePort,
        ipam: IpamKube,
        connector: MaasConnector,
        *,
        default_credentials: MaasCredentials | None,
        recheck: float = POOL_RECHECK,
    ) -> None:
        self.kube = kube
        self.ipam = ipam
        self.connector = connector
        self.default = default_credentials
        self.recheck = recheck
        self._facts: dict[str, MaasFacts] = {}  # pool UID -> the last check
        self._warned: dict[str, str] = {}  # pool UID -> the reserved-range warning last posted as an Event

    def forget(self, uid: str) -> None:
        self._facts.pop(uid, None)
        self._warned.pop(uid, None)

    async def reconcile(self, body: Body) -> Requeue:
        meta = _meta(body)
        ns, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
        generation = int(meta.get("generation") or 0)
        if meta.get("deletionTimestamp"):
            self.forget(uid)
            return Requeue()
        try:
            spec = MaasIPPoolSpec.from_body(body.get("spec") or {})
            parsed = parse_pool(
                spec.subnet,
                spec.addresses,
                spec.excluded_addresses or (),
                gateway=spec.gateway,
                prefix=spec.prefix,
            )
        except (ValidationError, InvalidPoolAddresses, ValueError) as exc:
            text = str(exc).splitlines()[0] if isinstance(exc, ValidationError) else str(exc)
            await self._publish(body, None, None, (C.INVALID_POOL_REASON, text), "")
            return Requeue()
        ref = SECRET_REF_PREFIX + spec.identity_ref.name if spec.identity_ref else DEFAULT_REF
        try:
            port, _ = await connect_ref(self.kube, self.connector, ns, ref, self.default)
        except TransientError as exc:
            self.forget(uid)  # facts of the identity it had are not kept for whatever comes next
            await self._publish(body, None, None, (exc.reason, exc.message), "")
            raise
        facts = self._facts.get(uid)
        if (
            facts is None
            or facts.identity != port.identity
            or facts.generation != generation
            or time.monotonic() - facts.at > self.recheck
        ):
            current = facts is not None and facts.identity == port.identity and facts.generation == generation
            try:
                facts = await self._check(port, spec, parsed, generation, name)
            except TransientError as exc:
                if not current:  # nothing checked for this spec and identity: claims must wait, and see why
                    self.forget(uid)
                    await self._publish(body, parsed, None, (exc.reason, exc.message), "")
                raise  # a due recheck that failed: what this identity said stays until one succeeds
            self._facts[uid] = facts
        if facts.problem is None and facts.gateway and not spec.gateway:
            parsed = parse_pool(  # the MAAS gateway is never handed out either
                spec.subnet,
                spec.addresses,
                spec.excluded_addresses or (),
                gateway=facts.gateway,
                prefix=spec.prefix,
            )
        if facts.warning and self._warned.get(uid) != facts.warning:
            self._warned[uid] = facts.warning
            self.ipam.emit_event(body, "Warning", C.POOL_OUTSIDE_RESERVED_RANGE_REASON, facts.warning)
        await self._publish(body, parsed, facts, facts.problem, facts.warning)
        return Requeue(after=self.recheck)

    async def _check(
        self, port: MaasPort, spec: MaasIPPoolSpec, parsed: PoolAddresses, generation: int, name: str
    ) -> MaasFacts:
        with maas_step(f"checking MaasIPPool {name}"):
            subnets = await port.subnets()
            ranges = await port.ip_ranges()
        problem, subnet, warning = check_against_maas(spec, parsed, subnets, ranges)
        gateway = spec.gateway or (subnet.gateway_ip if subnet is not None else None) or None
        prefix = (
            spec.prefix
            if spec.prefix is not None
            else ipaddress.ip_network(spec.subnet, strict=False).prefixlen
        )
        return MaasFacts(port.identity, generation, time.monotonic(), problem, gateway, prefix, warning)

    async def _publish(
        self,
        body: Body,
        parsed: PoolAddresses | None,
        facts: MaasFacts | None,
        problem: tuple[str, str] | None,
        warning: str,
    ) -> None:
        meta = _meta(body)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        status: dict[str, Any] = {"observedGeneration": meta.get("generation")}
        if parsed is not None:
            used = used_addresses(self.ipam.items(ADDRESSES, ns), name)
            held = {a for a in used if parsed.holds(a)}
            status.update(addresses=parsed.size, used=len(used), free=parsed.count_free(held))
        else:
            status.update(addresses=None, used=None, free=None)
        ok = problem is None and facts is not None
        if ok and facts is not None:
            status.update(gateway=facts.gateway, prefix=facts.prefix, identity=facts.identity)
        else:
            status.update(gateway=None, prefix=None, identity=None)  # never facts of another identity
        reason, message = (C.READY_REASON, warning) if problem is None else problem
        old = body.get("status") or {}
        same = all(old.get(k) == v for k, v in status.items()) and same_condition(
            condition(body, C.READY_CONDITION), ok, reason, message
        )
        ready = condition(body, C.READY_CONDITION)
        if same and ready is not None and ready.get("observedGeneration") == meta.get("generation"):
            return
        status["conditions"] = with_condition(
            old.get("conditions"), C.READY_CONDITION, ok, reason, message, generation=meta.get("generation")
        )
        await self.ipam.patch(POOLS, ns, name, {"status": status}, status=True)


# --- the claims ----------------------------------------------------------------------------------------
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
        meta = _meta(claim)
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
        meta, pmeta = _meta(claim), _meta(pool)
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
        meta = _meta(claim)
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
        meta = _meta(claim)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        finalizers = list(meta.get("finalizers") or ())
        if RELEASE_FINALIZER not in finalizers:
            return
        address = self.ipam.find(ADDRESSES, ns, name)
        if address is not None and belongs_to(address, claim):
            held = list(_meta(address).get("finalizers") or ())
            if PROTECT_FINALIZER in held:
                rest = [f for f in held if f != PROTECT_FINALIZER]
                patch = {
                    "metadata": {
                        "finalizers": rest or None,
                        "resourceVersion": _meta(address).get("resourceVersion"),
                    }
                }
                await self.ipam.patch(ADDRESSES, ns, name, patch, status=False)
            await self.ipam.delete(ADDRESSES, ns, name)
        rest = [f for f in finalizers if f != RELEASE_FINALIZER]
        patch = {"metadata": {"finalizers": rest or None, "resourceVersion": meta.get("resourceVersion")}}
        await self.ipam.patch(CLAIMS, ns, name, patch, status=False)
