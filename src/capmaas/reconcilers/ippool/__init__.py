"""capmaas as a Cluster API IPAM provider: ``MaasIPPool`` and the ``IPAddressClaim``s that name it.

Two reconcilers, run by the operator (:mod:`capmaas.operator.ipam`) in per-object loops, one module each
(:mod:`.pools`, :mod:`.claims`), beside the pure reading of the IPAM objects (:mod:`.objects`) and of MAAS's
subnets and ranges (:mod:`.maascheck`):

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

from capmaas.reconcilers.ippool.claims import ClaimReconciler
from capmaas.reconcilers.ippool.maascheck import check_against_maas
from capmaas.reconcilers.ippool.objects import (
    ADDRESSES,
    CLAIMS,
    IPAM_API,
    POOLS,
    IpamKube,
    address_body,
    belongs_to,
    claim_cluster,
    claim_pool,
    exhausted_message,
    names_pool,
    paused,
    pool_ready,
    used_addresses,
    with_condition,
)
from capmaas.reconcilers.ippool.pools import PoolReconciler

__all__ = [
    "ADDRESSES",
    "CLAIMS",
    "IPAM_API",
    "POOLS",
    "ClaimReconciler",
    "IpamKube",
    "PoolReconciler",
    "address_body",
    "belongs_to",
    "check_against_maas",
    "claim_cluster",
    "claim_pool",
    "exhausted_message",
    "names_pool",
    "paused",
    "pool_ready",
    "used_addresses",
    "with_condition",
]
