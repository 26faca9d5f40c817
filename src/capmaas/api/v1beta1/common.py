"""Types shared by the v1beta1 kinds: conditions, endpoints, addresses, metadata.

The shapes follow the CAPI v1beta2 contract (``metav1.Condition``, ``APIEndpoint``, ``MachineAddress``)
because CAPI copies them from our objects to its own; see ``../shared/reference/capi-hypershift-kopf.md`` §1.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from capmaas.api.schema import DNS1123_SUBDOMAIN, K8sModel, cel, list_map, schema_extra

GROUP = "infrastructure.cluster.x-k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Label CAPI puts on every object of a cluster (read by the printer columns).
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

MAX_CONDITIONS = 32
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(K8sModel):
    """One aspect of the object's state (the standard metav1.Condition shape, read by Cluster API)."""

    type: Annotated[str, StringConstraints(max_length=316, pattern=CONDITION_TYPE_PATTERN)] = Field(
        description="Type of condition in CamelCase, e.g. Ready, MachineProvisioned, LXDHostSelected."
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    observed_generation: int | None = Field(
        None,
        ge=0,
        description="The .metadata.generation the condition was set for; older than the object's: stale.",
    )
    last_transition_time: datetime = Field(
        description="When the condition last changed status (RFC 3339); kept while the status stays the same."
    )
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=CONDITION_REASON_PATTERN)
    ] = Field(
        description="Machine-readable CamelCase reason for the last transition (see capmaas.api.conditions)."
    )
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        "", description="Human-readable details about the transition; may be empty."
    )


#: The list of conditions on every status, keyed by type and bounded (as the CAPI contract asks).
Conditions = Annotated[
    list[Condition],
    Field(
        max_length=MAX_CONDITIONS,
        description="Current service state of the object, one entry per condition type.",
        json_schema_extra=list_map("type"),
    ),
]


def utcnow() -> datetime:
    """Now, in UTC, to the second (metav1.Time has second precision on the wire)."""
    return datetime.now(UTC).replace(microsecond=0)


def find_condition(conditions: Iterable[Condition] | None, type_: str) -> Condition | None:
    """The condition of ``type_``, or None."""
    for cond in conditions or ():
        if cond.type == type_:
            return cond
    return None


def set_condition(
    conditions: list[Condition] | None,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    now: datetime | None = None,
) -> list[Condition]:
    """Return ``conditions`` with ``type_`` set; ``lastTransitionTime`` moves only when the status changes.

    Keeping the transition time stable is what makes "False for 20 minutes" alerts possible, and keeping
    the list order stable keeps status patches small.
    """
    result = list(conditions or [])
    old = find_condition(result, type_)
    when = old.last_transition_time if old is not None and old.status == status else (now or utcnow())
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message[:32768],
        observed_generation=observed_generation,
        last_transition_time=when,
    )
    if old is None:
        result.append(new)
    else:
        result[result.index(old)] = new
    return result


#: An IPv4 or IPv6 address.
IPAddress = Annotated[
    str,
    StringConstraints(min_length=2, max_length=45),
    Field(
        json_schema_extra=schema_extra(rules=[cel("isIP(self)", "must be an IP address such as 10.0.0.10")])
    ),
]


class APIEndpoint(K8sModel):
    """Address of the cluster's Kubernetes API server, as CAPI's APIEndpoint."""

    host: Annotated[str, StringConstraints(min_length=1, max_length=512)] = Field(
        description="DNS name or IP address of the API server (for example the MAAS DNS name capmaas made)."
    )
    port: int = Field(ge=1, le=65535, description="TCP port of the API server, 1-65535 (usually 6443).")


AddressType = Literal["Hostname", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS"]


class MachineAddress(K8sModel):
    """One address of a machine, as CAPI's MachineAddress (copied to Machine.status.addresses)."""

    type: AddressType = Field(
        description="Kind of address: Hostname, InternalIP, ExternalIP, InternalDNS or ExternalDNS."
    )
    address: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        description="The address: an IP for the IP types, a host name or FQDN for the others."
    )


class Initialization(K8sModel):
    """Initialization progress, the v1beta2 contract's replacement for status.ready."""

    provisioned: bool | None = Field(
        None,
        description="True once the infrastructure is provisioned; Cluster API reads this (v1beta2 contract). "
        "Never set back to false.",
    )


LabelMap = Annotated[
    dict[str, Annotated[str, StringConstraints(max_length=63)]],
    Field(json_schema_extra={"maxProperties": 64}),
]
AnnotationMap = Annotated[
    dict[str, Annotated[str, StringConstraints(max_length=65536)]],
    Field(json_schema_extra={"maxProperties": 64}),
]


class TemplateMetadata(K8sModel):
    """Labels and annotations copied onto each object created from a template."""

    labels: LabelMap | None = Field(
        None, description="Labels added to each object cloned from this template (at most 64)."
    )
    annotations: AnnotationMap | None = Field(
        None, description="Annotations added to each object cloned from this template (at most 64)."
    )


class OwnerReference(K8sModel):
    """An owner of an object (only parsed from bodies; not part of any CRD schema)."""

    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(K8sModel):
    """The parts of metav1.ObjectMeta the operator reads (parsed only; not part of the CRD schema)."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list)


#: Names that must be a Kubernetes object name in the same namespace.
LocalObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
