"""Typed views of the objects a reconcile reads beside its own: the CAPI Machine and Cluster, and the sibling
MaasMachines of a cluster.

Why views and not the CRDs' models: these objects are someone else's (CAPI's), or ours but read in bulk from
the watch cache, where one sibling's odd spec must not stop the pass of another. A view names only the
fields capmaas reads, ignores every other one, and reads a missing or ``null`` map as empty, so a newer CAPI
release never breaks parsing; a mistyped field name is an attribute error in a test instead of a silent
``None`` from a wire key. No CRD schema is generated from these (they are not in ``capmaas.api.v1beta1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, ValidationError

from capmaas.api.schema import K8sModel

__all__ = [
    "CapiCluster",
    "CapiMachine",
    "MaasMachineView",
    "ObjectMeta",
    "ObjectRef",
    "OwnerReference",
]


def _empty_if_null(value: Any) -> Any:
    return {} if value is None else value


def _none_if_empty(value: Any) -> Any:
    return value or None


StrMap = Annotated[dict[str, str], BeforeValidator(_empty_if_null)]
Text = Annotated[str | None, BeforeValidator(_none_if_empty)]


class _View(K8sModel):
    """A lenient view: unknown fields ignored (K8sModel), ``null`` sections read as empty ones."""

    @classmethod
    def view(cls, body: Mapping[str, Any] | None) -> Self | None:
        """The view of ``body`` (None for None)."""
        return None if body is None else cls.from_body(body)

    @classmethod
    def glance(cls, body: Mapping[str, Any]) -> Self:
        """The view of ``body`` for a caller that reads it and drops it in the same expression: a plain dict
        is parsed as it is, even by a view that keeps a value as given (an ``Any`` field), so the values it
        keeps may be the body's own; nothing must hold the view, or change what it reads. Otherwise, or should
        that parse fail, :meth:`~capmaas.api.schema.K8sModel.from_body`: the same view, or the same error."""
        if type(body) is dict:
            try:
                return cls.model_validate(body)
            except ValidationError:
                pass
        return cls.from_body(body)


class ObjectRef(_View):
    """A reference to another object (``spec.infrastructureRef``)."""

    api_version: Text = None
    kind: Text = None
    name: Text = None


class OwnerReference(_View):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_View):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: StrMap = Field(default_factory=dict)
    annotations: StrMap = Field(default_factory=dict)
    owner_references: Annotated[list[OwnerReference], BeforeValidator(lambda v: v or [])] = Field(
        default_factory=list
    )
    deletion_timestamp: Text = None

    def owner(self, kind: str) -> OwnerReference | None:
        """The first owner of ``kind`` (any API group)."""
        return next((r for r in self.owner_references if r.kind == kind), None)


class _Bootstrap(_View):
    data_secret_name: Text = None


class _MachineSpec(_View):
    cluster_name: Text = None
    bootstrap: Annotated[_Bootstrap, BeforeValidator(_empty_if_null)] = Field(default_factory=_Bootstrap)
    failure_domain: Text = None
    infrastructure_ref: ObjectRef | None = None


class CapiMachine(_View):
    """A CAPI ``Machine`` (``cluster.x-k8s.io``), as far as a MaasMachine reads its owner."""

    metadata: Annotated[ObjectMeta, BeforeValidator(_empty_if_null)] = Field(default_factory=ObjectMeta)
    spec: Annotated[_MachineSpec, BeforeValidator(_empty_if_null)] = Field(default_factory=_MachineSpec)

    @property
    def bootstrap_secret(self) -> str | None:
        """``spec.bootstrap.dataSecretName``: the Secret with the bootstrap data, once CAPI set it."""
        return self.spec.bootstrap.data_secret_name

    @property
    def infra_name(self) -> str | None:
        """The name of its infrastructure object (the MaasMachine)."""
        return self.spec.infrastructure_ref.name if self.spec.infrastructure_ref else None


class _ClusterNetwork(_View):
    api_server_port: int | None = None


class _ClusterSpec(_View):
    paused: bool | None = None
    infrastructure_ref: ObjectRef | None = None
    cluster_network: Annotated[_ClusterNetwork, BeforeValidator(_empty_if_null)] = Field(
        default_factory=_ClusterNetwork
    )


class _Initialization(_View):
    infrastructure_provisioned: bool | None = None


class _ClusterStatus(_View):
    initialization: Annotated[_Initialization, BeforeValidator(_empty_if_null)] = Field(
        default_factory=_Initialization
    )
    infrastructure_ready: bool | None = None  # v1beta1 CAPI's field


class CapiCluster(_View):
    """A CAPI ``Cluster``, as far as a MaasCluster and its machines read it."""

    metadata: Annotated[ObjectMeta, BeforeValidator(_empty_if_null)] = Field(default_factory=ObjectMeta)
    spec: Annotated[_ClusterSpec, BeforeValidator(_empty_if_null)] = Field(default_factory=_ClusterSpec)
    status: Annotated[_ClusterStatus, BeforeValidator(_empty_if_null)] = Field(default_factory=_ClusterStatus)

    @property
    def paused(self) -> bool:
        """``spec.paused`` (CAPI's pause contract; clusterctl move pauses the Cluster first)."""
        return bool(self.spec.paused)

    @property
    def infra_name(self) -> str | None:
        """The name of its infrastructure object (the MaasCluster)."""
        return self.spec.infrastructure_ref.name if self.spec.infrastructure_ref else None

    @property
    def infra_provisioned(self) -> bool:
        """The infrastructure is provisioned (``initialization``, or v1beta1's ``infrastructureReady``)."""
        status = self.status
        return bool(status.initialization.infrastructure_provisioned or status.infrastructure_ready)


class _SiblingSpec(_View):
    system_id: Text = Field(default=None, alias="systemID")
    failure_domain: Text = None


class _SiblingStatus(_View):
    failure_domain: Text = None
    lxd_host: Text = None
    machine_state: Text = None
    machine_powered: bool | None = None
    addresses: Annotated[list[Any], BeforeValidator(lambda v: v or [])] = Field(default_factory=list)


class MaasMachineView(_View):
    """A MaasMachine as a sibling reads it from the watch cache (placement, DNS, identity checks): only
    those fields, so a sibling whose spec is otherwise odd still counts. The reconciled object itself is
    parsed into the CRD's models (``scope.want``)."""

    metadata: Annotated[ObjectMeta, BeforeValidator(_empty_if_null)] = Field(default_factory=ObjectMeta)
    spec: Annotated[_SiblingSpec, BeforeValidator(_empty_if_null)] = Field(default_factory=_SiblingSpec)
    status: Annotated[_SiblingStatus, BeforeValidator(_empty_if_null)] = Field(default_factory=_SiblingStatus)

    @property
    def zone(self) -> str | None:
        """Where it runs: ``status.failureDomain``, else ``spec.failureDomain``."""
        return self.status.failure_domain or self.spec.failure_domain

    @classmethod
    def all(cls, bodies: Any) -> list[MaasMachineView]:
        """Views of every body of ``bodies``."""
        return [cls.from_body(b) for b in bodies]
