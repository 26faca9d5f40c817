"""MaasIPPool (WIP, not yet a CRD): a pool of addresses of one MAAS subnet from which capmaas, as a
Cluster API IPAM provider, fulfils ``IPAddressClaim``s whose ``spec.poolRef`` names it
(``ipam.cluster.x-k8s.io/v1beta2``).

The addresses follow :mod:`capmaas.api.ip_pools`; the machine side pins a claimed address to the server's NIC
with MAAS ``reservedips/`` (docs: "Networking"), so the pool's ranges should be a MAAS *reserved* range.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, list_set, schema_extra
from capmaas.api.v1beta1.common import Conditions, IPAddress
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
    conditions: Conditions | None = Field(
        None, description="Ready: the subnet exists in MAAS and the spec parses."
    )
