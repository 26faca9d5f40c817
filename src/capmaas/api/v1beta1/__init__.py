"""API version v1beta1 of group infrastructure.cluster.x-k8s.io: the capmaas kinds and their parts.

Parse a body: ``MaasMachine.from_body(body)`` (or ``MaasMachineSpec.from_body(spec)``); build a status patch:
``MaasMachineStatus(ready=True, ...).to_k8s()``.
"""

from __future__ import annotations

from capmaas.api.v1beta1.common import (
    API_VERSION,
    CLUSTER_NAME_LABEL,
    GROUP,
    VERSION,
    APIEndpoint,
    Condition,
    Initialization,
    MachineAddress,
    ObjectMeta,
    OwnerReference,
    TemplateMetadata,
    find_condition,
    set_condition,
    utcnow,
)
from capmaas.api.v1beta1.layout import Bond, DataFilesystem, NetworkLayout, Vlan
from capmaas.api.v1beta1.maascluster import (
    ClusterLXDConfig,
    ClusterNetworkStatus,
    FailureDomain,
    IdentityRef,
    MaasCluster,
    MaasClusterSpec,
    MaasClusterStatus,
)
from capmaas.api.v1beta1.maasclustertemplate import (
    MaasClusterTemplate,
    MaasClusterTemplateResource,
    MaasClusterTemplateSpec,
)
from capmaas.api.v1beta1.maasippool import MaasIPPool, MaasIPPoolSpec, MaasIPPoolStatus
from capmaas.api.v1beta1.maasmachine import (
    GO_DEFAULT_VM_DISK_GB,
    PROVISIONING_MODE_BARE_METAL,
    PROVISIONING_MODE_LXD,
    GoMachineLXD,
    GoVMConfig,
    LXDConfig,
    LXDNetwork,
    LXDStorage,
    MaasMachine,
    MaasMachineSpec,
    MaasMachineStatus,
    ProvisioningMode,
    ReleaseOptions,
    StaticIP,
    VMResourceUsage,
)
from capmaas.api.v1beta1.maasmachinetemplate import (
    MaasMachineTemplate,
    MaasMachineTemplateResource,
    MaasMachineTemplateSpec,
    MaasMachineTemplateStatus,
    NodeInfo,
    capacity_for,
)
from capmaas.api.v1beta1.selection import DeviceFilter, ExtraDisk, InterfaceConstraint
from capmaas.api.v1beta1.static_addresses import InterfaceAddress, IPPoolRef

__all__ = [
    "API_VERSION",
    "CLUSTER_NAME_LABEL",
    "GO_DEFAULT_VM_DISK_GB",
    "GROUP",
    "PROVISIONING_MODE_BARE_METAL",
    "PROVISIONING_MODE_LXD",
    "VERSION",
    "APIEndpoint",
    "Bond",
    "ClusterLXDConfig",
    "ClusterNetworkStatus",
    "Condition",
    "DataFilesystem",
    "DeviceFilter",
    "ExtraDisk",
    "FailureDomain",
    "GoMachineLXD",
    "GoVMConfig",
    "IPPoolRef",
    "IdentityRef",
    "Initialization",
    "InterfaceAddress",
    "InterfaceConstraint",
    "LXDConfig",
    "LXDNetwork",
    "LXDStorage",
    "MaasCluster",
    "MaasClusterSpec",
    "MaasClusterStatus",
    "MaasClusterTemplate",
    "MaasClusterTemplateResource",
    "MaasClusterTemplateSpec",
    "MaasIPPool",
    "MaasIPPoolSpec",
    "MaasIPPoolStatus",
    "MaasMachine",
    "MaasMachineSpec",
    "MaasMachineStatus",
    "MaasMachineTemplate",
    "MaasMachineTemplateResource",
    "MaasMachineTemplateSpec",
    "MaasMachineTemplateStatus",
    "MachineAddress",
    "NetworkLayout",
    "NodeInfo",
    "ObjectMeta",
    "OwnerReference",
    "ProvisioningMode",
    "ReleaseOptions",
    "StaticIP",
    "TemplateMetadata",
    "VMResourceUsage",
    "Vlan",
    "capacity_for",
    "find_condition",
    "set_condition",
    "utcnow",
]
