"""MaasCluster: the cluster-wide MAAS settings of one CAPI Cluster (InfraCluster in CAPI's terms)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from capmaas.api.schema import K8sModel, cel, crd_default, list_map, list_set, schema_extra
from capmaas.api.sizes import DiskSize, gigabytes
from capmaas.api.v1beta1.common import (
    API_VERSION,
    APIEndpoint,
    Conditions,
    Initialization,
    IPAddress,
    LocalObjectName,
    ObjectMeta,
)

#: A DNS domain: dot-separated RFC 1123 labels, lower case, no trailing dot.
DNS_DOMAIN_PATTERN = r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
#: A MAAS zone / resource pool name (MAAS allows letters, digits, '-' and '_').
MAAS_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"

ZoneName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=MAAS_NAME_PATTERN)]
MaasName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=MAAS_NAME_PATTERN)]
#: A ``preferredSubnets`` entry: a CIDR, or a MAAS interface by name or tag
#: (:mod:`capmaas.api.preferred_subnets`).
PreferredSubnet = Annotated[
    str,
    StringConstraints(min_length=3, max_length=73),
    Field(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "isCIDR(self) || self.matches('^(interface|tag):[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$')",
                    "must be a CIDR such as 10.0.0.0/24, interface:<name> such as interface:eno2, or "
                    "tag:<interface tag> such as tag:api",
                )
            ]
        )
    ),
]


class IdentityRef(K8sModel):
    """Where the MAAS credentials come from: a Secret in the MaasCluster's own namespace."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.__namespace__)",
                    "identityRef must name a Secret in the MaasCluster's own namespace; "
                    "identityRef.namespace is not allowed",
                    reason="FieldValueForbidden",
                )
            ]
        )
    )

    kind: Literal["Secret"] = Field(
        "Secret",
        description="Kind of the referenced object; only Secret is supported.",
        json_schema_extra=crd_default("Secret"),
    )
    name: LocalObjectName = Field(
        description="Name of a Secret in the same namespace with keys MAAS_ENDPOINT and MAAS_API_KEY "
        "(consumer:token:secret) and optionally MAAS_CA_CERT (PEM); the older keys endpoint and api-key are "
        "accepted too."
    )
    namespace: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        None,
        description="Must be left unset: the Secret is always read from the MaasCluster's namespace, so one "
        "tenant cannot point at another tenant's MAAS credentials.",
    )


#: What the operator reports for host-setup fields MAAS cannot apply (condition SettingsApplied=False).
NO_MAAS_EQUIVALENT = (
    "has no MAAS API equivalent: the Go provider applies it with a privileged DaemonSet that installs LXD on "
    "each host itself, while capmaas lets MAAS set LXD up (deploy with register_vmhost), which takes no such "
    "setting; the field is accepted so Go-provider manifests apply, and reported in the MaasCluster's "
    "SettingsApplied condition (reason NoMaasEquivalent)"
)


class ClusterLXDConfig(K8sModel):
    """Cluster-wide LXD VM-host settings (field names as the Go provider's MaasCluster.spec.lxdConfig)."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "!has(self.networkBridge) || !has(self.nicParent)"
                    " || self.networkBridge == self.nicParent",
                    "networkBridge is the Go provider's older name of nicParent; set one of them (or both to "
                    "the same value)",
                    reason="FieldValueForbidden",
                    field_path=".networkBridge",
                ),
            ]
        )
    )

    enabled: bool | None = Field(
        None,
        description="When true, this cluster's bare-metal machines are deployed as MAAS LXD VM hosts "
        "(as if each had registerVMHost: true), so LXD MaasMachines can be composed on them.",
    )
    resource_pool: MaasName | None = Field(
        None, description="MAAS resource pool the VM hosts registered by this cluster are put in."
    )
    zone: ZoneName | None = Field(
        None, description="MAAS zone the VM hosts registered by this cluster are put in."
    )
    storage_backend: Literal["zfs", "dir", "btrfs", "lvm", "ceph"] | None = Field(
        None,
        description="LXD storage pool driver of the registered VM hosts (Go provider default zfs). This "
        "field " + NO_MAAS_EQUIVALENT + ".",
    )
    storage_size: DiskSize | None = Field(
        None,
        description='Size of the LXD storage pool on each registered VM host, in GB ("50", 50, "50G", '
        '"50Gi"). This field ' + NO_MAAS_EQUIVALENT + ".",
    )
    nic_type: Literal["bridge", "macvlan"] | None = Field(
        None,
        description="How VMs attach to the host's network: bridge or macvlan. This field "
        + NO_MAAS_EQUIVALENT
        + " (MAAS itself attaches a VM NIC as bridge when the host interface is a bridge, else macvlan).",
    )
    nic_parent: Annotated[str, StringConstraints(min_length=1, max_length=15)] | None = Field(
        None,
        description="Host interface (bridge or NIC) the LXD profile's NIC uses, for example br0. This field "
        + NO_MAAS_EQUIVALENT
        + " (per VM, lxdConfig.network.bridge selects the host interface).",
    )
    network_bridge: Annotated[str, StringConstraints(min_length=1, max_length=15)] | None = Field(
        None,
        description="The Go provider's older name of nicParent (same meaning; set one of them).",
    )
    skip_network_update: bool | None = Field(
        None,
        description="true (the Go provider's default) leaves the hosts' existing networks alone, which is "
        "what MAAS does. false (update them) " + NO_MAAS_EQUIVALENT + ".",
    )

    def canonical(self) -> ClusterLXDConfig:
        """networkBridge folded into nicParent, storageSize in whole gigabytes."""
        size = None if self.storage_size is None else gigabytes(self.storage_size)
        return self.model_copy(
            update={
                "nic_parent": self.nic_parent or self.network_bridge,
                "network_bridge": None,
                "storage_size": size,
            }
        )

    def not_applied(self) -> list[str]:
        """The set fields (spec.lxdConfig.<name>) MAAS cannot apply, for the SettingsApplied condition."""
        out = [
            name
            for name, value in (
                ("storageBackend", self.storage_backend),
                ("storageSize", self.storage_size),
                ("nicType", self.nic_type),
                ("nicParent", self.nic_parent),
                ("networkBridge", self.network_bridge),
            )
            if value is not None
        ]
        if self.skip_network_update is False:
            out.append("skipNetworkUpdate")
        return out


#: A MAAS subnet named by CIDR, name or id (what ``ipaddresses/?op=reserve subnet=`` takes).
SubnetKey = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\s]+$")]


class ControlPlaneVIP(K8sModel):
    """A control-plane virtual IP reserved in MAAS's IPAM (``ipaddresses/?op=reserve``) and served by the
    control-plane machines themselves (kube-vip, the ``kube-vip`` flavor)."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "has(self.address) || has(self.subnet)",
                    "controlPlaneVIP needs an address or a subnet to reserve one in",
                    reason="FieldValueRequired",
                )
            ]
        )
    )

    address: IPAddress | None = Field(
        None,
        description="The address to reserve (the one kube-vip advertises; give it to the kube-vip flavor "
        "too). Empty: MAAS picks a free address in subnet.",
    )
    subnet: SubnetKey | None = Field(
        None,
        description="MAAS subnet (CIDR, name or id) to reserve in. Empty: the subnet MAAS knows address in.",
    )


class MaasClusterSpec(K8sModel):
    """Desired state of a MaasCluster."""

    model_config = ConfigDict(
        json_schema_extra=schema_extra(
            rules=[
                cel(
                    "has(self.controlPlaneVIP) == has(oldSelf.controlPlaneVIP)",
                    "controlPlaneVIP can be set only when the MaasCluster is created, and not removed",
                ),
            ]
        )
    )

    dns_domain: Annotated[
        str, StringConstraints(min_length=1, max_length=253, pattern=DNS_DOMAIN_PATTERN)
    ] = Field(
        description="MAAS DNS domain in which the API server name <cluster>-<suffix>.<dnsDomain> is created, "
        "for example maas. Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "dnsDomain is immutable")]),
    )
    control_plane_endpoint: APIEndpoint | None = Field(
        None,
        description="Where the cluster's API server is reached. Leave empty to let capmaas create a MAAS DNS "
        "name for the control-plane machines; set the host to use your own load balancer or DNS instead.",
    )
    failure_domains: Annotated[list[ZoneName], Field(max_length=100)] | None = Field(
        None,
        description="MAAS zones machines may be placed in (at most 100). Empty means every zone MAAS has.",
        json_schema_extra=list_set(),
    )
    identity_ref: IdentityRef | None = Field(
        None,
        description="Secret holding the MAAS endpoint and API key for this cluster. Empty means the "
        "operator's default credentials.",
    )
    lxd_config: ClusterLXDConfig | None = Field(
        None, description="Settings for turning this cluster's bare-metal machines into LXD VM hosts."
    )
    preferred_subnets: Annotated[list[PreferredSubnet], Field(max_length=32)] | None = Field(
        None,
        description="Which address of a control-plane machine with several the DNS record uses, in order "
        "(the first entry that finds one wins; at most 32): a CIDR, interface:<name> (a MAAS interface name "
        "such as interface:eno2) or tag:<tag> (a MAAS tag on the interface, such as tag:api). Overrides the "
        "Go provider's ConfigMap maas-preferred-subnet (key preferredSubnets) in the same namespace. Empty: "
        "the ConfigMap, else every machine's first address.",
        json_schema_extra=list_set(),
    )

    control_plane_vip: ControlPlaneVIP | None = Field(
        None,
        alias="controlPlaneVIP",
        description="Reserve a virtual IP for the API server in MAAS: capmaas's DNS record for the cluster "
        "points at it (instead of at each control-plane machine), and it is released with the cluster. "
        "Needs capmaas's DNS record (no spec.controlPlaneEndpoint.host of your own). Immutable.",
        json_schema_extra=schema_extra(rules=[cel("self == oldSelf", "controlPlaneVIP is immutable")]),
    )
    region: (
        Annotated[
            str,
            StringConstraints(max_length=63, pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"),
        ]
        | None
    ) = Field(
        None,
        description="Value of the topology.kubernetes.io/region label capmaas puts on this cluster's Nodes "
        "(a Kubernetes label value). Empty: the MAAS endpoint's host name.",
    )

    def canonical(self) -> MaasClusterSpec:
        """This spec in canonical form (see ``ClusterLXDConfig.canonical``)."""
        if self.lxd_config is None:
            return self.model_copy()
        return self.model_copy(update={"lxd_config": self.lxd_config.canonical()})


class FailureDomain(K8sModel):
    """A failure domain (MAAS zone) machines can be placed in, as CAPI's v1beta2 FailureDomain."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        description="Name of the failure domain: the MAAS zone name."
    )
    control_plane: bool | None = Field(
        None, description="Whether control-plane machines may be placed in this failure domain."
    )
    attributes: (
        Annotated[
            dict[str, Annotated[str, StringConstraints(max_length=1024)]],
            Field(json_schema_extra={"maxProperties": 32}),
        ]
        | None
    ) = Field(None, description="Free-form facts about the failure domain (for example the MAAS zone id).")


class ClusterNetworkStatus(K8sModel):
    """Network facts capmaas worked out for the cluster."""

    vip: Annotated[str, StringConstraints(max_length=45)] | None = Field(
        None,
        description="The control-plane virtual IP capmaas reserved in MAAS (spec.controlPlaneVIP).",
    )

    dns_name: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        None, description="Fully qualified MAAS DNS name created for the API server."
    )
    dns_record_id: Annotated[int, Field(ge=0)] | None = Field(
        None,
        alias="dnsRecordID",
        description="MAAS id of the DNS resource capmaas created for dnsName. capmaas writes and deletes "
        "only this record: a record of the same name with another id belongs to someone else "
        "(DNSRecordConflict).",
    )


class MaasClusterStatus(K8sModel):
    """Observed state of a MaasCluster, written by capmaas."""

    ready: bool | None = Field(
        None, description="True once the cluster infrastructure is provisioned (v1beta1 contract field)."
    )
    initialization: Initialization | None = Field(
        None, description="Provisioning progress read by Cluster API (v1beta2 contract)."
    )
    failure_domains: Annotated[list[FailureDomain], Field(max_length=100)] | None = Field(
        None,
        description="Failure domains (MAAS zones) Cluster API may spread machines over.",
        json_schema_extra=list_map("name"),
    )
    network: ClusterNetworkStatus | None = Field(None, description="Network facts for the cluster.")
    conditions: Conditions | None = Field(
        None, description="Current state: Ready, MaasConnected, DNSReady, FailureDomainsDiscovered, Paused."
    )
    failure_reason: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        None, description="Deprecated (v1beta1 contract): a terminal problem's reason. Prefer conditions."
    )
    failure_message: Annotated[str, StringConstraints(max_length=10240)] | None = Field(
        None, description="Deprecated (v1beta1 contract): a terminal problem's message. Prefer conditions."
    )


class MaasCluster(K8sModel):
    """MaasCluster is the MAAS side of a Cluster API Cluster: DNS domain, endpoint, zones, credentials."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasCluster"] = Field("MaasCluster", description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasClusterSpec = Field(description="Desired state of the MaasCluster.")
    status: MaasClusterStatus = Field(
        default_factory=MaasClusterStatus, description="Observed state of the MaasCluster."
    )
