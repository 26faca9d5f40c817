"""MaasMachineTemplate: what CAPI MachineSets (and HyperShift NodePools) clone MaasMachines from.

``spec.template.spec`` is immutable (a CEL ``self == oldSelf`` rule, no webhook needed): a change is rolled
out by creating a new template and pointing the MachineDeployment at it, as the CAPI book asks.
``spec.nodeReuse`` is not part of it (as CAPM3's): it decides what happens to a server when its MaasMachine is
deleted, so it may be switched on on the template in use before a rollout
(:mod:`capmaas.reconcilers.reuse`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from capmaas.api.schema import QUANTITY_PATTERN, K8sModel
from capmaas.api.v1beta1.common import API_VERSION, Conditions, ObjectMeta, TemplateMetadata
from capmaas.api.v1beta1.maasmachine import MaasMachineSpec


class MaasMachineTemplateResource(K8sModel):
    """The MaasMachine to create: metadata for it and its spec."""

    metadata: TemplateMetadata | None = Field(
        None, description="Labels and annotations given to each MaasMachine created from this template."
    )
    spec: MaasMachineSpec = Field(
        description="Spec of each MaasMachine created from this template. Immutable (enforced by the "
        "ValidatingAdmissionPolicy capmaas-template-immutability): create a new template to change it.",
    )


class MaasMachineTemplateSpec(K8sModel):
    """Desired state of a MaasMachineTemplate."""

    template: MaasMachineTemplateResource = Field(description="The MaasMachine to create for each Machine.")
    node_reuse: bool | None = Field(
        None,
        description="Bare metal: when a MaasMachine created from this template is deleted, its server is "
        "released without erasing its disks (whatever spec.template.spec.releaseOptions says) and kept for "
        "the Machine's MachineDeployment or control plane; the next MaasMachine of that owner (a rollout's "
        "new template) asks MAAS for that server first, and takes a fresh one when it is taken, gone, or "
        "none is released within the operator's CAPMAAS_MACHINE__REUSE_WAIT. Mutable (outside "
        "spec.template.spec): set it on the current template before a rollout. See docs/operating.md, Node "
        "reuse.",
    )


class NodeInfo(K8sModel):
    """What the Nodes made from this template will report, for autoscaling from zero."""

    architecture: Literal["amd64", "arm64", "s390x", "ppc64le"] | None = Field(
        None, description="CPU architecture of the Nodes."
    )
    operating_system: Literal["linux", "windows"] | None = Field(
        None, description="Operating system of the Nodes."
    )


#: A quantity as a JSON string: the cluster autoscaler reads ``status.capacity`` with ``NestedStringMap``, so
#: one number in the map (``cpu: 4``) makes it drop the whole map.
QuantityString = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=64)]


class MaasMachineTemplateStatus(K8sModel):
    """Observed state of a MaasMachineTemplate: what the cluster autoscaler reads, and what MAAS has free."""

    capacity: (
        Annotated[
            dict[Annotated[str, StringConstraints(max_length=253)], QuantityString],
            Field(json_schema_extra={"maxProperties": 32}),
        ]
        | None
    ) = Field(
        None,
        description="Resources a Node made from this template will have, as quantity strings, e.g. "
        'cpu: "8", memory: 32Gi, nvidia.com/gpu: "2" (lets the cluster autoscaler scale a '
        "MachineDeployment up from zero): the smallest of the matching Ready servers in MAAS, or the "
        "template's minimums while none matches or MAAS is not listed (see the MaasCapacity condition).",
    )
    node_info: NodeInfo | None = Field(
        None, description="Architecture and OS of the Nodes made from this template."
    )
    available: int | None = Field(
        None,
        ge=0,
        description="Servers Ready in MAAS now that match the template (LXD: VM slots on the usable VM "
        "hosts); unset while the template is tied to no Cluster or MAAS is not listed yet.",
    )
    conditions: Conditions | None = Field(
        None, description="MaasCapacity: whether capacity and available were counted in MAAS, and from what."
    )


def capacity_for(spec: MaasMachineSpec) -> MaasMachineTemplateStatus:
    """What a Node made from ``spec`` will have at least, for the cluster autoscaler's scale-from-zero (every
    value a quantity string, as the autoscaler reads them).

    ``cpu`` is minCPU, ``memory`` minMemory (MAAS counts MiB), ``ephemeral-storage`` the VM's disk (lxd) or
    minDiskSize (bare metal) when known. MAAS hands out the smallest machine that satisfies the minimums, so
    these are lower bounds, the safe side for an autoscaler deciding whether a pending Pod would fit.
    ``nodeInfo.operatingSystem`` follows the image's OS (``windows/...`` or else linux); the architecture is
    not in the spec and is left out.
    """
    canonical = spec.canonical()
    capacity: dict[str, str] = {"cpu": str(canonical.min_cpu), "memory": f"{canonical.min_memory}Mi"}
    disk = canonical.min_disk_size
    if canonical.lxd_config is not None and canonical.lxd_config.storage is not None:
        disk = canonical.lxd_config.storage.size_gb or disk
    if disk:
        capacity["ephemeral-storage"] = f"{disk}G"
    osystem = canonical.image.split("/", 1)[0].lower() if "/" in canonical.image else ""
    return MaasMachineTemplateStatus(
        capacity=capacity,
        node_info=NodeInfo(operating_system="windows" if osystem == "windows" else "linux"),
    )


class MaasMachineTemplate(K8sModel):
    """MaasMachineTemplate is the recipe Cluster API clones a MaasMachine from for each new Machine."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasMachineTemplate"] = Field("MaasMachineTemplate", description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasMachineTemplateSpec = Field(description="Desired state of the MaasMachineTemplate.")
    status: MaasMachineTemplateStatus = Field(
        default_factory=MaasMachineTemplateStatus, description="Observed state of the MaasMachineTemplate."
    )
