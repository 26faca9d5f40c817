"""MaasIPPool: a pool of addresses of one MAAS subnet from which capmaas, as a
Cluster API IPAM provider, fulfils ``IPAddressClaim``s whose ``spec.poolRef`` names it
(``ipam.cluster.x-k8s.io/v1beta2``).

The addresses follow :mod:`capmaas.api.ip_pools`; the machine side pins a claimed address to the server's NIC
with MAAS ``reservedips/`` (docs: "Networking"), so the pool's ranges should be a MAAS *reserved* range.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, list_set, schema_extra
from capmaas.api.v1beta1.common import API_VERSION, Conditions, IPAddress, ObjectMeta
from capmaas.api.v1beta1.maascluster import IdentityRef

#: An address, a range ``a-b`` or a CIDR (what the in-cluster IPAM provider's pools take).
PoolEntry = Annotated[str, StringConstraints(min_length=2, max_length=100, pattern=r"^[0-9A-Fa-f:./-]+$")]


class MaasIPPoolSpec(K8sModel):
    """Which addresses of which MAAS subnet the pool hands out."""

    subnet: Annotated[str, StringConstraints(min_length=3, max_length=49)] = Field(
        description="The MAAS subnet (its CIDR) the addresses belong to. Immutable.",
        json_schema_extra=schema_extra(
            rules=[
                cel("isCIDR(self)", "must be a CIDR such as 10.0.0.0/24"),
                cel("self == oldSelf", "subnet is immutable"),
            ]
        ),
    )
    addresses: Annotated[list[PoolEntry], Field(min_length=1, max_length=64)] = Field(
        description="Addresses, ranges (10.0.0.10-10.0.0.20) and CIDRs inside subnet (at most 65,536).",
        json_schema_extra=list_set(),
    )
    excluded_addresses: Annotated[list[PoolEntry], Field(max_length=64)] | None = Field(
        None, description="Addresses never handed out, same forms.", json_schema_extra=list_set()
    )
    prefix: Annotated[int, Field(ge=0, le=128)] | None = Field(
        None, description="Prefix length of the addresses. Default: the subnet's."
    )
    gateway: IPAddress | None = Field(
        None, description="Gateway of the addresses. Default: the MAAS subnet's."
    )
    identity_ref: IdentityRef | None = Field(
        None, description="MAAS credentials to check the subnet with. Empty: the operator's default ones."
    )


class MaasIPPoolStatus(K8sModel):
    """How full the pool is."""

    addresses: Annotated[int, Field(ge=0)] | None = Field(None, description="Addresses the pool names.")
    used: Annotated[int, Field(ge=0)] | None = Field(None, description="Addresses held by IPAddresses.")
    free: Annotated[int, Field(ge=0)] | None = Field(None, description="Addresses left.")
    gateway: IPAddress | None = Field(
        None, description="Gateway the IPAddresses get: spec.gateway, else the MAAS subnet's (none: empty)."
    )
    prefix: Annotated[int, Field(ge=0, le=128)] | None = Field(
        None, description="Prefix length the IPAddresses get: spec.prefix, else the MAAS subnet's."
    )
    identity: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None,
        description="Fingerprint of the MAAS identity the pool was checked with; gateway and prefix came "
        "from it (another identity: checked again).",
    )
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        None, description="The metadata.generation the pool was last checked at."
    )
    conditions: Conditions | None = Field(
        None,
        description="Ready: the spec parses, the subnet exists in MAAS, no address is in a dynamic range.",
    )


class MaasIPPool(K8sModel):
    """MaasIPPool: addresses of one MAAS subnet that capmaas hands to Cluster API ``IPAddressClaim``s
    naming it (``spec.poolRef`` {apiGroup: infrastructure.cluster.x-k8s.io, kind: MaasIPPool, name})."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasIPPool"] = Field("MaasIPPool", description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasIPPoolSpec = Field(description="Which addresses the pool hands out.")
    status: MaasIPPoolStatus = Field(
        default_factory=MaasIPPoolStatus, description="How full the pool is, and whether it is usable."
    )
