"""capmaas.maas: a typed async client for the MAAS REST API 2.0 (MAAS 3.7).

Only the names in ``__all__`` are public; everything else lives in private modules and may change. Errors are
in :mod:`capmaas.maas.errors` (also re-exported here), response and request models in
:mod:`capmaas.maas.models`::

    async with MaasClient("http://127.0.0.1:5240/MAAS", api_key="consumer:token:secret") as maas:
        machine = await maas.machines.allocate(AllocateConstraints(cpu_count=4, tags=["gpu"]), agent_name=uid)
        await maas.machines.deploy(machine.system_id, user_data=b"#cloud-config\\n")
"""

from __future__ import annotations

from capmaas.maas._allowlist import EndpointAllowList
from capmaas.maas._auth import Credentials
from capmaas.maas._client import MaasClient, normalize_base_url
from capmaas.maas._http import Limits, RetryPolicy, in_doubt_window
from capmaas.maas._transports import AiohttpTransport, ssl_context
from capmaas.maas.errors import (
    ApiError,
    BadRequestError,
    ConflictError,
    EndpointNotAllowedError,
    ForbiddenError,
    GoneError,
    InvalidApiKeyError,
    InvalidBaseUrlError,
    InvalidCaError,
    MaasError,
    NoMachineAvailableError,
    NotFoundError,
    RequestInfo,
    RequestTimeoutError,
    ResponseParseError,
    ResponseTooLargeError,
    ServiceUnavailableError,
    TransportError,
    UnauthorizedError,
)
from capmaas.maas.models import (
    AllocateConstraints,
    BootResource,
    ComposedMachine,
    ComposeRequest,
    DnsResource,
    Domain,
    Interface,
    InterfaceLink,
    IpAddress,
    Machine,
    NodeStatus,
    PodRef,
    PoolRef,
    PowerState,
    ResourcePool,
    StoragePool,
    Subnet,
    Tag,
    TagUpdateResult,
    User,
    Version,
    VlanRef,
    VmHost,
    VmHostHostRef,
    VmHostResources,
    Zone,
    ZoneRef,
)

__all__ = [
    "AiohttpTransport",
    "AllocateConstraints",
    "ApiError",
    "BadRequestError",
    "BootResource",
    "ComposeRequest",
    "ComposedMachine",
    "ConflictError",
    "Credentials",
    "DnsResource",
    "Domain",
    "EndpointAllowList",
    "EndpointNotAllowedError",
    "ForbiddenError",
    "GoneError",
    "Interface",
    "InterfaceLink",
    "InvalidApiKeyError",
    "InvalidBaseUrlError",
    "InvalidCaError",
    "IpAddress",
    "Limits",
    "MaasClient",
    "MaasError",
    "Machine",
    "NoMachineAvailableError",
    "NodeStatus",
    "NotFoundError",
    "PodRef",
    "PoolRef",
    "PowerState",
    "RequestInfo",
    "RequestTimeoutError",
    "ResourcePool",
    "ResponseParseError",
    "ResponseTooLargeError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "StoragePool",
    "Subnet",
    "Tag",
    "TagUpdateResult",
    "TransportError",
    "UnauthorizedError",
    "User",
    "Version",
    "VlanRef",
    "VmHost",
    "VmHostHostRef",
    "VmHostResources",
    "Zone",
    "ZoneRef",
    "in_doubt_window",
    "normalize_base_url",
    "ssl_context",
]
