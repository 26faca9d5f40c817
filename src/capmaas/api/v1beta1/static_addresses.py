"""Fixed addresses for a bare-metal machine's interfaces (``MaasMachineSpec.addresses``): each from an IP pool
through Cluster API's IPAM contract (an ``IPAddressClaim`` capmaas creates, fulfilled by any IPAM provider -
capmaas's own ``MaasIPPool`` among them), or a literal address.

How MAAS is made to give the server that address (docs/operating.md "Networking"): the address is pinned to
the interface's MAC with MAAS ``reservedips/`` right after allocation, and the interface's AUTO link on the
address's subnet gets exactly it at deploy; the pin is deleted before the server is released, so the next
user of the server finds nothing of ours.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, schema_extra
from capmaas.api.v1beta1.common import IPAddress

#: MAAS interface names (Linux's 15-character limit).
INTERFACE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
#: The claim name suffix is the interface name; Kubernetes object names allow no ``_`` or ``:``.
_Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class IPPoolRef(K8sModel):
    """Which IP pool a claim asks (Cluster API's ``IPPoolReference``: all three fields required)."""

    api_group: Annotated[str, StringConstraints(min_length=1, max_length=253)] = Field(
        description="API group of the pool, e.g. infrastructure.cluster.x-k8s.io (capmaas's MaasIPPool)."
    )
    kind: Annotated[str, StringConstraints(min_length=1, max_length=63)] = Field(
        description="Kind of the pool, e.g. MaasIPPool."
    )
    name: _Name = Field(description="Name of the pool, in the MaasMachine's namespace.")


class InterfaceAddress(K8sModel):
    """The address one interface of the server gets: from a pool (``poolRef``) or literal (``ipAddress``)."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "has(self.poolRef) != has(self.ipAddress)",
                    "set exactly one of poolRef and ipAddress",
                    reason="FieldValueInvalid",
                ),
            ]
        )
    )

    interface: Annotated[
        str, StringConstraints(min_length=1, max_length=15, pattern=INTERFACE_NAME_PATTERN)
    ] = Field(
        description="The server's interface as MAAS names it (e.g. eno1). It must have an AUTO link on the "
        "address's MAAS subnet (the MAAS default after commissioning); a server whose interface does not is "
        "released and another one tried."
    )
    pool_ref: IPPoolRef | None = Field(
        None,
        description="Take the address from this IP pool through Cluster API's IPAM contract: capmaas creates "
        "an IPAddressClaim named <MaasMachine>-<interface> and allocates nothing in MAAS until the IPAM "
        "provider has given the address.",
    )
    ip_address: IPAddress | None = Field(
        None, description="A literal address for the interface (no pool, no claim)."
    )

    @property
    def claim_suffix(self) -> str:
        """The interface name as part of a Kubernetes object name (lower case, ``_``/``:``/``.`` as ``-``)."""
        return "".join(c if c.isalnum() or c == "-" else "-" for c in self.interface.lower())
