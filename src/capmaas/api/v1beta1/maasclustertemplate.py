"""MaasClusterTemplate: the MaasCluster a ClusterClass stamps out for each Cluster of that class."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from capmaas.api.schema import K8sModel
from capmaas.api.v1beta1.common import API_VERSION, ObjectMeta, TemplateMetadata
from capmaas.api.v1beta1.maascluster import MaasClusterSpec


class MaasClusterTemplateResource(K8sModel):
    """The MaasCluster to create: metadata for it and its spec."""

    metadata: TemplateMetadata | None = Field(
        None, description="Labels and annotations given to each MaasCluster created from this template."
    )
    spec: MaasClusterSpec = Field(
        description="Spec of each MaasCluster created from this template. Immutable (enforced by the "
        "ValidatingAdmissionPolicy capmaas-template-immutability): create a new template to change it.",
    )


class MaasClusterTemplateSpec(K8sModel):
    """Desired state of a MaasClusterTemplate."""

    template: MaasClusterTemplateResource = Field(description="The MaasCluster to create for each Cluster.")


class MaasClusterTemplate(K8sModel):
    """MaasClusterTemplate is the MaasCluster recipe a ClusterClass refers to (spec.infrastructure)."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasClusterTemplate"] = Field("MaasClusterTemplate", description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasClusterTemplateSpec = Field(description="Desired state of the MaasClusterTemplate.")
