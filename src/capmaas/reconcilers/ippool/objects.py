"""The CAPI IPAM objects as the IPAM reconcilers read and write them: names, conditions, which claim an
address belongs to, the IPAddress to create. Pure functions, no I/O (and the Kubernetes side they need, as a
Protocol)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from capmaas.api import conditions as C
from capmaas.api.related import CapiCluster
from capmaas.api.v1beta1 import GROUP
from capmaas.reconcilers.handoff import cluster_paused
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION
from capmaas.reconcilers.ports import Body, EventType

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
def meta_of(body: Body) -> Mapping[str, Any]:
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
    name = (claim.get("spec") or {}).get("clusterName") or (meta_of(claim).get("labels") or {}).get(
        CLUSTER_NAME_LABEL
    )
    return str(name) if name else None


def paused(obj: Body | None) -> bool:
    """``cluster.x-k8s.io/paused`` on the object, or (a Cluster) ``spec.paused``."""
    if obj is None:
        return False
    return PAUSED_ANNOTATION in (meta_of(obj).get("annotations") or {}) or cluster_paused(
        CapiCluster.view(obj)
    )


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
    if status.get("observedGeneration") != meta_of(pool).get("generation"):
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
    cmeta, pmeta = meta_of(claim), meta_of(pool)
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
    if (spec.get("claimRef") or {}).get("name") != meta_of(claim).get("name"):
        return False
    return names_pool(spec.get("poolRef")) == claim_pool(claim)
