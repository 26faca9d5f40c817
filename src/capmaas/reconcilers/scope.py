"""Per-reconcile scopes: the loaded objects plus the changes a reconcile wants, written once.

A reconcile reads the object and its relatives into a scope, records intent through methods
(``set_condition``, ``set_spec``, ``set_annotation``, ``add_finalizer``, ``event``), and
:meth:`ObjectScope.close` writes at most two patches (metadata/spec, then the status subresource) and posts
the Events. Nothing is written when nothing changed, so an idle reconcile costs no API call and, in
particular, a condition's ``lastTransitionTime`` only moves when its status does (otherwise every reconcile
would write, and every write would wake another reconcile).

The one deliberate exception is :meth:`ObjectScope.flush`: right after MAAS allocates a machine, its system ID
must reach ``spec`` before anything else can fail (that is what makes allocation crash-safe).

Fencing: a metadata/spec write that sets or clears one of the annotations that close a crash window
(:data:`~capmaas.reconcilers.keys.GUARDED_ANNOTATIONS`: ``…/allocating``, ``…/replacing``, ...) carries the
``resourceVersion`` this pass read (or its own last write returned). Should anyone have written the object
since, the apiserver answers 409 (:class:`~capmaas.reconcilers.errors.ConflictError`) and nothing of the
pass is written: a writer acting on a stale copy (a replica that lost the Lease and does not know it yet, a
watch cache behind the apiserver) stops before its MAAS request instead of allocating a second machine.

Reconcilers read and write the object through the ``capmaas.api`` models, never through raw keys: ``want`` is
the spec parsed into its model, ``set_spec``/``set_status`` take the models' Python field names and write
their wire names (an unknown name raises at once, so a mistyped key fails a test instead of being pruned by
the apiserver without a word).

The Ready condition is never set by a reconcile step: :meth:`ObjectScope.summary` derives it from the other
conditions and intents when the scope is written (as CAPI's ``conditions.SetSummary`` and CAPA's scope patch
do), so it cannot disagree with them.
"""

from __future__ import annotations

import copy
import datetime
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic

from capmaas.api import conditions as C
from capmaas.api.related import CapiCluster, CapiMachine, ObjectMeta
from capmaas.api.schema import K8sModel, plain
from capmaas.api.v1beta1 import MaasMachineSpec, MaasMachineStatus
from capmaas.reconcilers.errors import ConflictError, TerminalError
from capmaas.reconcilers.keys import (
    ANNOTATION_PREFIX,
    BOUND_ANNOTATIONS,
    CLUSTER_NAME_LABEL,
    GUARDED_ANNOTATIONS,
    IDENTITY,
    IDENTITY_REF,
    PAUSED_ANNOTATION,
)
from capmaas.reconcilers.ports import Body, EventType, KubePort, ObjectPlural

ConditionStatus = Literal["True", "False", "Unknown"]

_GUARDED = frozenset(ANNOTATION_PREFIX + name for name in GUARDED_ANNOTATIONS)
_BOUND = frozenset(ANNOTATION_PREFIX + name for name in BOUND_ANNOTATIONS)
#: Spec fields (wire names) that name a MAAS machine: bound to the identity like the annotations above.
BOUND_SPEC = frozenset({"systemID", "providerID"})


@dataclass(frozen=True)
class Requeue:
    """A successful reconcile's wish: run again after ``after`` seconds (None: when something wakes it)."""

    after: float | None = None


def _generation(body: Body) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


@functools.cache
def wire_names(model: type[K8sModel]) -> dict[str, str]:
    """Python field name → wire name (camelCase alias) of an API model."""
    return {name: f.alias or name for name, f in model.model_fields.items()}


def wire_name(model: type[K8sModel], field: str) -> str:
    """The wire name of ``model.field``; ValueError for a field the model does not have."""
    try:
        return wire_names(model)[field]
    except KeyError:
        raise ValueError(f"{model.__name__} has no field {field!r}") from None


def to_wire(value: Any) -> Any:
    """A value as it goes into a patch (models in their wire form)."""
    if isinstance(value, K8sModel):
        return value.to_k8s()
    if isinstance(value, list | tuple):
        return [to_wire(v) for v in value]
    return value


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def owner_ref(body: Body, kind: str, group: str = "cluster.x-k8s.io") -> Mapping[str, Any] | None:
    """The ownerReference of ``kind`` in API group ``group`` (any version), if any."""
    for ref in body.get("metadata", {}).get("ownerReferences") or ():
        api_version = str(ref.get("apiVersion", ""))
        if ref.get("kind") == kind and api_version.split("/", maxsplit=1)[0] == group:
            return dict(ref)
    return None


def is_paused(obj: Body, cluster: CapiCluster | None) -> tuple[bool, str]:
    """CAPI's pause contract: ``Cluster.spec.paused`` or the ``cluster.x-k8s.io/paused`` annotation."""
    reasons = []
    if cluster is not None and cluster.paused:
        reasons.append("Cluster spec.paused is set to true")
    if PAUSED_ANNOTATION in (obj.get("metadata", {}).get("annotations") or {}):
        reasons.append(f"{obj.get('kind', 'object')} has the {PAUSED_ANNOTATION} annotation")
    return bool(reasons), "; ".join(reasons)


class ObjectScope:
    """Common part of :class:`MachineScope` and :class:`ClusterScope`."""

    #: The API models of the object's spec and status (subclasses name theirs).
    spec_type: type[K8sModel] = K8sModel
    status_type: type[K8sModel] = K8sModel

    def __init__(
        self,
        kube: KubePort,
        plural: ObjectPlural,
        body: Body,
        *,
        now: Callable[[], datetime.datetime] = utcnow,
    ) -> None:
        self.kube = kube
        self.plural = plural
        self.body = body
        self.now = now
        meta = body.get("metadata", {})
        self.namespace: str = meta.get("namespace", "")
        self.name: str = meta.get("name", "")
        self.uid: str = meta.get("uid", "")
        self.generation: int = int(meta.get("generation") or 0)
        #: The generation this pass's own spec writes made (None: none; 0: someone else's came between).
        self.own_generation: int | None = None
        # Copies of the body as read (JSON: dicts, lists, scalars), by plain() rather than copy.deepcopy,
        # which cost ~10x as much and, three times per pass, was the largest copy cost of a pass.
        self.spec: dict[str, Any] = plain(body.get("spec") or {})
        self.status: dict[str, Any] = plain(body.get("status") or {})
        self._orig_status = plain(self.status)
        self.annotations: dict[str, str] = dict(meta.get("annotations") or {})
        self.labels: dict[str, str] = dict(meta.get("labels") or {})
        #: The metadata as read (typed; ``annotations``/``labels`` above are what this pass writes).
        self.meta = ObjectMeta.from_body(meta)
        self.finalizers: list[str] = list(meta.get("finalizers") or [])
        self._orig_finalizers = list(self.finalizers)
        self._spec_patch: dict[str, Any] = {}
        self._annotation_patch: dict[str, str | None] = {}
        self._events: list[tuple[EventType, str, str]] = []
        self.gone = False
        #: A write of this pass was refused as based on a stale copy (409): nothing more is written.
        self.stale = False
        #: What a deletion is waiting for, as (reason, message): Ready says it while the object is deleted.
        self.deletion: tuple[str, str] | None = None
        #: This pass's status changes are not written (:meth:`hold_status`).
        self.status_held = False
        #: An owner (Machine, Cluster) was read outside the watch cache: no watch event wakes this object.
        self.unwatched_owner = False
        self._want: K8sModel | None = None
        #: The MAAS identity this pass talks to, as (fingerprint, credentials ref), once connected: every
        #: metadata/spec write that records a reference stamps it (``…/identity``, ``…/identity-ref``) in the
        #: same patch (:mod:`capmaas.reconcilers.identity`).
        self.bound_to: tuple[str, str] | None = None

    @property
    def key(self) -> str:
        return f"{self.plural}/{self.namespace}/{self.name}"

    @property
    def deleting(self) -> bool:
        return bool(self.body.get("metadata", {}).get("deletionTimestamp"))

    # --- intent ------------------------------------------------------------------------------------------
    def annotation(self, name: str) -> str | None:
        return self.annotations.get(ANNOTATION_PREFIX + name)

    def set_annotation(self, name: str, value: str | None) -> None:
        full = ANNOTATION_PREFIX + name
        if self.annotations.get(full) != value:
            self._annotation_patch[full] = value
            if value is None:
                self.annotations.pop(full, None)
            else:
                self.annotations[full] = value

    def _typed_spec(self) -> K8sModel:
        """The spec parsed into :attr:`spec_type` (once per pass; :meth:`set_spec` keeps it current)."""
        if self._want is None:
            try:
                typed = self.spec_type.model_validate(self.spec)
            except pydantic.ValidationError as exc:
                # The apiserver validates with the schema generated from the same model, so only a CRD older
                # than this operator gets here: say so, do not retry in a loop.
                raise TerminalError(
                    C.INVALID_SPEC_REASON, f"spec does not match this operator's API: {exc}"
                ) from exc
            # Readers get the canonical form (the Go provider's spelling and unit sizes folded into ours), so
            # every reconciler does the same thing whichever spelling the user wrote.
            canonical = getattr(typed, "canonical", None)
            self._want = canonical() if callable(canonical) else typed
        return self._want

    def set_spec(self, **fields: Any) -> None:
        """Change spec fields, by the model's Python names (``system_id=...``); None removes one."""
        for name, value in fields.items():
            key = wire_name(self.spec_type, name)
            wire = to_wire(value)
            if self._want is not None:
                setattr(self._want, name, value)
            if self.spec.get(key) != wire:
                self.spec[key] = wire
                self._spec_patch[key] = wire

    def set_status(self, **fields: Any) -> None:
        """Change status fields, by the model's Python names (``machine_state=...``); None removes one."""
        for name, value in fields.items():
            key = wire_name(self.status_type, name)
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = to_wire(value)

    def status_value(self, field: str) -> Any:
        """A status field, by the model's Python name (its wire form, as stored)."""
        return self.status.get(wire_name(self.status_type, field))

    @property
    def ready(self) -> bool:
        """``status.ready``."""
        return bool(self.status_value("ready"))

    def add_finalizer(self, name: str) -> None:
        if name not in self.finalizers:
            self.finalizers.append(name)

    def remove_finalizer(self, name: str) -> None:
        if name in self.finalizers:
            self.finalizers.remove(name)

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        for c in self.status.get("conditions") or ():
            if c.get("type") == type_:
                return dict(c)
        return None

    def condition_reason(self, type_: str) -> str | None:
        c = self.condition(type_)
        return None if c is None else str(c.get("reason"))

    def set_condition(
        self, type_: str, status: bool | ConditionStatus, reason: str, message: str = ""
    ) -> None:
        if type_ == C.READY_CONDITION:
            raise ValueError("Ready is the summary of the other conditions (see ObjectScope.summary)")
        self._put_condition(type_, status, reason, message)

    def _put_condition(self, type_: str, status: bool | ConditionStatus, reason: str, message: str) -> None:
        value: str = ("True" if status else "False") if isinstance(status, bool) else status
        conds: list[dict[str, Any]] = [dict(c) for c in self.status.get("conditions") or ()]
        for c in conds:
            if c.get("type") == type_:
                if c.get("status") != value:
                    c["lastTransitionTime"] = self._ts()
                c.update(status=value, reason=reason, message=message, observedGeneration=self.generation)
                break
        else:
            conds.append(
                {
                    "type": type_,
                    "status": value,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": self._ts(),
                    "observedGeneration": self.generation,
                }
            )
        conds.sort(key=lambda c: (c["type"] != C.READY_CONDITION, c["type"]))
        self.status["conditions"] = conds

    def set_deletion(self, reason: str, message: str) -> None:
        """The deletion's current step (Ready says it, False, until the object is gone)."""
        self.deletion = (reason, message)

    def summary(self) -> tuple[bool | ConditionStatus, str, str] | None:
        """Ready as (status, reason, message), derived from the rest of the scope; None leaves it as it is.
        Each scope kind says how; computed once, when the scope is written."""
        return None

    def _summarise(self) -> None:
        ready = self.summary()
        if ready is not None:
            self._put_condition(C.READY_CONDITION, *ready)

    def set_paused_condition(self, paused: bool, message: str) -> None:
        if paused:
            self.set_condition(C.PAUSED_CONDITION, True, C.PAUSED_REASON, message)
        else:
            self.set_condition(C.PAUSED_CONDITION, False, C.NOT_PAUSED_REASON)

    def hold_status(self) -> None:
        """Write no status in this pass: a step that is likely over before anyone reads it (the caller
        requeues soon, and the next pass, which derives the same status again, writes it if the step still
        is not over). Only for status a pass derives afresh every time, never for what one pass records
        for the next."""
        self.status_held = True

    def status_changes(self) -> set[str]:
        """The status fields (wire names) this pass would write as it stands (Ready summarised)."""
        self._summarise()
        return set(self._status_patch())

    def event(self, type_: EventType, reason: str, message: str) -> None:
        self._events.append((type_, reason, message))

    def take_event(self, reason: str) -> str | None:
        """Withdraw a not yet posted Event of ``reason``, returning its message: a later step of the same pass
        says both in one Event (each Event is a write, and a watch event for every reader of Events)."""
        for i, (_, r, message) in enumerate(self._events):
            if r == reason:
                del self._events[i]
                return message
        return None

    def _ts(self) -> str:
        return self.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    # --- writing -----------------------------------------------------------------------------------------
    def _stamp_identity(self) -> None:
        """A write that records a MAAS reference carries the identity it came from, in the same patch."""
        if self.bound_to is None:
            return
        sets_ref = any(v is not None for k, v in self._annotation_patch.items() if k in _BOUND) or any(
            v is not None for k, v in self._spec_patch.items() if k in BOUND_SPEC
        )
        if sets_ref:
            fingerprint, ref = self.bound_to
            self.set_annotation(IDENTITY, fingerprint)
            self.set_annotation(IDENTITY_REF, ref)

    def _meta_patch(self) -> dict[str, Any]:
        self._stamp_identity()
        patch: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        if self._annotation_patch:
            meta["annotations"] = dict(self._annotation_patch)
        if self.finalizers != self._orig_finalizers:
            meta["finalizers"] = list(self.finalizers)
            if self._orig_finalizers:
                # Optimistic lock: the finalizer list is replaced whole; fail rather than drop someone else's.
                meta["resourceVersion"] = self.body.get("metadata", {}).get("resourceVersion")
        if _GUARDED & self._annotation_patch.keys():
            # Fencing (module docstring): only if the object is still the version this pass acted on.
            meta["resourceVersion"] = self.body.get("metadata", {}).get("resourceVersion")
        if meta:
            patch["metadata"] = meta
        if self._spec_patch:
            patch["spec"] = dict(self._spec_patch)
        return patch

    def _status_patch(self) -> dict[str, Any]:
        patch: dict[str, Any] = {}
        for k, v in self.status.items():
            if self._orig_status.get(k) != v:
                patch[k] = v
        for k in self._orig_status:
            if k not in self.status:
                patch[k] = None
        return patch

    async def flush(self) -> None:
        """Write the metadata/spec changes now (not status); see the module docstring."""
        patch = self._meta_patch()
        if not patch or self.gone or self.stale:
            return
        try:
            new = await self.kube.patch(self.plural, self.namespace, self.name, patch, status=False)
        except ConflictError:
            self.stale = True
            raise
        self._spec_patch.clear()
        self._annotation_patch.clear()
        self._orig_finalizers = list(self.finalizers)
        if new is None:
            self.gone = True
        else:
            if "spec" in patch:  # the generations since the read are this pass's own, or not all are
                before = _generation(self.body)
                mine = self.own_generation != 0 and before == (self.own_generation or self.generation)
                mine = mine and _generation(new) == before + 1
                self.own_generation = _generation(new) if mine else 0
            self.body = new

    def _restamp(self) -> bool:
        """This pass's own spec write moved the generation: the conditions it stamped with the generation it
        read hold for the new one (the change is its own), and say so, or the next pass would write them
        again for their ``observedGeneration`` alone. Whether any changed."""
        new, old = self.own_generation, self.generation
        conds = self.status.get("conditions") or []
        if not new or new == old or not any(c.get("observedGeneration") == old for c in conds):
            return False
        self.generation = new
        self.status["conditions"] = [
            {**c, "observedGeneration": new} if c.get("observedGeneration") == old else c for c in conds
        ]
        return True

    async def close(self) -> None:
        """Write what changed (metadata/spec first, then status) and post the Events.

        Spec before status: a reader that acts on status (CAPI copies ``spec.controlPlaneEndpoint`` once the
        MaasCluster says provisioned) must find the spec already there. The exception is a finalizer being
        removed: that write may delete the object, so status goes first then (and is not written at all when
        the write removes the last finalizer of an object being deleted)."""
        self._summarise()
        try:
            removing = set(self._orig_finalizers) - set(self.finalizers)
            if not removing:
                await self.flush()
            # Removing the last finalizer of an object being deleted deletes it: its status is moot, and
            # not written (one write fewer per deletion; with another finalizer left, it is written).
            last = bool(removing) and self.deleting and not self.finalizers
            status_patch = self._status_patch()
            if status_patch and self._restamp():
                status_patch = self._status_patch()
            if status_patch and not self.gone and not self.stale and not last and not self.status_held:
                new = await self.kube.patch(
                    self.plural, self.namespace, self.name, {"status": status_patch}, status=True
                )
                self._orig_status = copy.deepcopy(self.status)
                if new is None:
                    self.gone = True
                else:
                    self.body = new
            # Metadata last: removing the final finalizer may delete the object, after which status is moot.
            await self.flush()
        finally:
            for type_, reason, message in () if self.stale else self._events:
                self.kube.emit_event(self.body, type_, reason, message)
            self._events.clear()


class MachineScope(ObjectScope):
    """The MaasMachine plus its owner Machine, the Cluster and the MaasCluster (from the caches)."""

    spec_type = MaasMachineSpec
    status_type = MaasMachineStatus

    machine: CapiMachine | None = None
    cluster: CapiCluster | None = None
    maascluster: Body | None = None
    #: ``deploy-started`` was written with the allocation in this pass (the deploy follows at once).
    deploy_stamped: bool = False
    #: The system ID MAAS showed held for this object *in this pass*, by this pass's identity (an allocate or
    #: an ownership lookup answered): a destructive call on it needs no other lookup in the same pass. Never
    #: carried over between passes (that would be a memory skipping the check).
    proven: str | None = None

    @property
    def cluster_name(self) -> str | None:
        if self.machine is not None and self.machine.spec.cluster_name:
            return self.machine.spec.cluster_name
        return self.labels.get(CLUSTER_NAME_LABEL)

    @property
    def want(self) -> MaasMachineSpec:
        """The spec, typed."""
        spec = self._typed_spec()
        assert isinstance(spec, MaasMachineSpec)
        return spec

    @property
    def attempts(self) -> int:
        """``status.attempts``: MAAS machines (or VMs) tried so far."""
        return int(self.status_value("attempts") or 0)

    @property
    def hostname(self) -> str | None:
        """``status.hostname``: the machine's MAAS hostname (the future Node name)."""
        value = self.status_value("hostname")
        return str(value) if value else None

    def summary(self) -> tuple[bool | ConditionStatus, str, str] | None:
        """Deleting: the deletion's step. Otherwise MachineProvisioned: True is Ready; anything else says the
        current step, in the same words."""
        if self.deleting:
            return None if self.deletion is None else (False, *self.deletion)
        provisioned = self.condition(C.MACHINE_PROVISIONED_CONDITION)
        if provisioned is None:
            return None
        if provisioned.get("status") == "True":
            return True, C.READY_REASON, ""
        status: ConditionStatus = "Unknown" if provisioned.get("status") == "Unknown" else "False"
        return status, str(provisioned.get("reason") or ""), str(provisioned.get("message") or "")

    def wait(self, reason: str, message: str) -> None:
        """Not provisioned yet, for an outside reason: both conditions say which. A provisioned machine stays
        so: an owner missing from the cache or a failed MAAS call says nothing about it (no stale message)."""
        provisioned = (self.condition(C.MACHINE_PROVISIONED_CONDITION) or {}).get("status") == "True"
        if not (self.ready and provisioned):
            self.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, reason, message)
