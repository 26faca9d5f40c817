"""MaasRemediationTemplate / MaasRemediation: Cluster API's *external remediation* of a bare-metal server.

A MachineHealthCheck whose ``spec.remediation.templateRef`` names a MaasRemediationTemplate makes Cluster API
create one MaasRemediation per unhealthy Machine (same name, same namespace, an ownerReference to the Machine;
``spec`` copied from the template's ``spec.template.spec``) and delete it once the Machine is healthy again.
capmaas then, with a timeout for each step and every step a condition and an Event
(:mod:`capmaas.reconcilers.remediation`):

1. power-cycles the server through MAAS (``op=power_off``, then ``op=power_on``), ``retryLimit`` times, each
   time waiting ``timeoutSeconds`` for the Machine to be healthy; a server MAAS cannot power (``manual``
   power type) is said so and skipped;
2. with ``redeploy``, releases the same server without erasing it, allocates it again by system ID under the
   MaasMachine's agent name and lets the MaasMachine deploy it with its bootstrap data (providerID kept);
3. otherwise gives up as the contract says: the Machine's v1beta2 condition ``OwnerRemediated=False``, so its
   MachineSet or control plane replaces it (with ``markBrokenOnFailure``, the server is marked Broken in MAAS
   first, so nobody is handed it again).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from capmaas.api.schema import K8sModel
from capmaas.api.v1beta1.common import API_VERSION, Conditions, ObjectMeta, TemplateMetadata

#: Where a remediation is (``status.phase``): the first three while it runs, the last two when it ended.
RemediationPhase = Literal["PowerCycling", "WaitingForNode", "Redeploying", "Succeeded", "Failed"]
#: The step a remediation recorded *before* acting on it (``status.step``): what a restart resumes. A
#: recorded ``PowerOff`` means the power-off may have been sent: a restart never sends it again.
RemediationStep = Literal[
    "PowerOff", "PowerOn", "WaitNode", "Release", "Allocate", "Deploy", "GiveUp", "Done"
]

Seconds = Annotated[int, Field(ge=1, le=86400)]


class MaasRemediationSpec(K8sModel):
    """How to remediate the server of an unhealthy Machine."""

    retry_limit: Annotated[int, Field(ge=0, le=10)] = Field(
        1,
        description="Power cycles to try before going further (0: none; the redeploy, if enabled, comes "
        "at once). Default 1.",
    )
    timeout_seconds: Seconds = Field(
        600,
        description="Seconds to wait after a power cycle for the Machine to be healthy again. Default 600.",
    )
    power_off_timeout_seconds: Seconds = Field(
        120,
        description="Seconds to wait for MAAS to report the server off before powering it on (a state "
        "other than off is reported in the PowerCycled condition, not taken for off). Default 120.",
    )
    redeploy: bool = Field(
        False,
        description="When the power cycles did not help: release the same server without erasing it, "
        "allocate it again by system ID and deploy it with the same bootstrap data (the providerID stays). "
        "Default false.",
    )
    redeploy_timeout_seconds: Seconds = Field(
        3600,
        description="Seconds to wait after the redeploy for the Machine to be healthy again. Default 3600.",
    )
    mark_broken_on_failure: bool = Field(
        False,
        description="When giving up: mark the server Broken in MAAS (with the reason) before the Machine's "
        "owner replaces it, so it is not handed out again until someone fixes it. Default false.",
    )


class MaasRemediationStatus(K8sModel):
    """What the remediation did so far; ``step`` is written before its action (crash safety)."""

    phase: RemediationPhase | None = Field(None, description="Where the remediation is.")
    step: RemediationStep | None = Field(
        None,
        description="The step recorded before its action was sent; a restart resumes it (a recorded "
        "PowerOff is never sent again).",
    )
    step_started: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, description="When the step was recorded (RFC 3339); its timeout counts from it."
    )
    retry_count: Annotated[int, Field(ge=0)] | None = Field(None, description="Power cycles done so far.")
    power_offs: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Power-off requests sent to MAAS (at most one per power cycle)."
    )
    system_id: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, alias="systemID", description="The MAAS server being remediated."
    )
    last_remediated: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, description="When the last remediation action was sent (RFC 3339)."
    )
    conditions: Conditions | None = Field(
        None,
        description="Ready (healthy again / still remediating / gave up), PowerCycled, Redeployed.",
    )


class MaasRemediation(K8sModel):
    """MaasRemediation: the remediation of one unhealthy Machine's MAAS server (created by Cluster API's
    MachineHealthCheck from a MaasRemediationTemplate, named after the Machine)."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasRemediation"] = Field("MaasRemediation", description="Kind of the object.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasRemediationSpec = Field(
        default_factory=MaasRemediationSpec, description="How to remediate the server."
    )
    status: MaasRemediationStatus = Field(
        default_factory=MaasRemediationStatus, description="What the remediation did so far."
    )


class MaasRemediationTemplateResource(K8sModel):
    """The MaasRemediation Cluster API creates for each unhealthy Machine."""

    metadata: TemplateMetadata | None = Field(
        None, description="Labels and annotations given to each MaasRemediation created from this template."
    )
    spec: MaasRemediationSpec = Field(
        default_factory=MaasRemediationSpec, description="Spec of each MaasRemediation."
    )


class MaasRemediationTemplateSpec(K8sModel):
    """Desired state of a MaasRemediationTemplate."""

    template: MaasRemediationTemplateResource = Field(
        description="The MaasRemediation to create for each unhealthy Machine."
    )


class MaasRemediationTemplate(K8sModel):
    """MaasRemediationTemplate: what a MachineHealthCheck's ``spec.remediation.templateRef`` names to have
    capmaas remediate unhealthy Machines (power cycle, then optionally redeploy, then give up)."""

    api_version: str = Field(API_VERSION, description="API version of the object.")
    kind: Literal["MaasRemediationTemplate"] = Field(
        "MaasRemediationTemplate", description="Kind of the object."
    )
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Standard object metadata.")
    spec: MaasRemediationTemplateSpec = Field(description="Desired state of the MaasRemediationTemplate.")
