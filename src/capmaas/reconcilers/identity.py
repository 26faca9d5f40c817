"""Identity-bound references: every MAAS reference an object holds names something in *one* MAAS,
as seen by *one* MAAS user, and is acted on only with that identity's credentials.

Why: a system ID, a DNS record id or a VM host id is only a small string or integer. A tenant who may point
its MaasCluster at a MAAS it runs gets the operator to write whatever that MAAS answers (a victim's system ID,
a victim's record id) into fields only the operator may write; switching the MaasCluster to the shared MAAS
afterwards would turn them into the operator's own, trusted, references there.

The rules:

- A connection's identity is :func:`~capmaas.reconcilers.ports.identity_fingerprint` (endpoint + the MAAS
  user ``whoami`` names, hashed; the gateway asks once per identity). Every metadata/spec write that records a
  reference (``spec.systemID``/``providerID`` and :data:`~capmaas.reconcilers.keys.BOUND_ANNOTATIONS`) stamps
  ``…/identity`` (the fingerprint) and ``…/identity-ref`` (``Secret/<name>`` or ``default``) in the same patch
  (:meth:`~capmaas.reconcilers.scope.ObjectScope._stamp_identity`); both are protected by the admission
  policy like every ``capmaas…/`` annotation.
- Every pass that connected compares: a reference stamped with another fingerprint is forgotten with a Warning
  Event ``IdentityChanged`` and nothing is sent to either MAAS about it (:func:`check_machine`,
  :func:`check_cluster`).
- A MaasCluster is bound to the credentials its objects use (``…/identity-ref`` on the MaasCluster); a change
  of ``spec.identityRef`` is applied only once no reference is held under the old one, and is refused until
  then with ``IdentityRefApplied=False``/``IdentityChangeRefused`` naming them (:func:`apply_identity_ref`).
- A deletion whose MaasCluster is gone uses the credentials recorded on the MaasMachine (``…/identity-ref``),
  never silently the default ones (:func:`machine_ref`).
- A MaasMachine's references stay with the credentials they came from (:func:`kept_ref`): a pass that read
  the MaasCluster before an ``identityRef`` change was applied may still allocate under the old credentials
  (the change's check saw nothing held yet); its machine keeps those credentials until it is deleted, and is
  released through them, instead of being forgotten (a machine left allocated in the old MAAS). Only when
  those credentials now name another identity (the Secret was pointed elsewhere) is the reference forgotten.
- Objects from before the stamp (references, no ``…/identity``): the current identity is adopted only after an
  ownership check against it succeeded (:func:`adopt`); until then no in-memory proof counts for them.
"""

from __future__ import annotations

from capmaas.api import conditions as C
from capmaas.api.related import MaasMachineView
from capmaas.reconcilers.credentials import DEFAULT_REF, describe_ref, effective_ref, spec_ref
from capmaas.reconcilers.keys import (
    ADOPTED,
    AGENT_NAME,
    ALLOCATING,
    ANNOTATION_PREFIX,
    COMPOSING,
    DECOMPOSING,
    DEPLOY_STARTED,
    DNS_PENDING,
    DNS_RECORD,
    HOST_ID_ANNOTATION,
    IDENTITY,
    IDENTITY_REF,
    REPLACING,
    VIP,
)
from capmaas.reconcilers.ports import Body, KubePort, MaasPort
from capmaas.reconcilers.scope import MachineScope, ObjectScope

#: MaasMachine annotations that mean something may be held in MAAS (a machine, a VM, a request in doubt).
_HOLDING = (ALLOCATING, COMPOSING, REPLACING, DECOMPOSING, ADOPTED)
#: MaasMachine annotations forgotten with the references (the marks of steps on the forgotten machine).
_FORGOTTEN = (*_HOLDING, AGENT_NAME, HOST_ID_ANNOTATION, DEPLOY_STARTED, IDENTITY, IDENTITY_REF)


def bound(scope: ObjectScope) -> str | None:
    """The fingerprint the object's references were stamped with (None: none, or from before the stamp)."""
    return scope.annotation(IDENTITY)


def is_bound_to(scope: ObjectScope, port: MaasPort) -> bool:
    """The object's references are stamped with ``port``'s identity (what an in-memory proof requires)."""
    return bound(scope) == port.identity


def connected(scope: ObjectScope, port: MaasPort, ref: str) -> None:
    """This pass talks to ``port`` (reached with ``ref``): references it writes are stamped with it."""
    scope.bound_to = (port.identity, ref)


def adopt(scope: ObjectScope) -> None:
    """An ownership check against the current identity succeeded: stamp it (objects from before the stamp)."""
    if scope.bound_to is not None and bound(scope) != scope.bound_to[0]:
        scope.set_annotation(IDENTITY, scope.bound_to[0])
        scope.set_annotation(IDENTITY_REF, scope.bound_to[1])


# --- MaasMachines ----------------------------------------------------------------------------------------
def machine_references(body: Body) -> list[str]:
    """What a MaasMachine holds in MAAS, as people read it (``spec.systemID=abc``, ``…/allocating``)."""
    return _references(MaasMachineView.glance(body))  # strings out, the view dropped: no copy of the body


def _references(mm: MaasMachineView) -> list[str]:
    out = [f"spec.systemID={mm.spec.system_id}"] if mm.spec.system_id else []
    annotations = mm.metadata.annotations
    out += [ANNOTATION_PREFIX + a for a in _HOLDING if annotations.get(ANNOTATION_PREFIX + a)]
    return out


def holds_maas(scope: MachineScope) -> bool:
    """Whether anything of this MaasMachine may be in MAAS: a system ID, or a request in doubt. Without one a
    deletion has nothing to give back and sends nothing (a refused object still deletes)."""
    return bool(machine_references(scope.body) or scope.want.system_id)


def machine_ref(scope: MachineScope) -> str:
    """The credentials a MaasMachine's pass uses: its MaasCluster's (:func:`effective_ref`); once the
    MaasCluster is gone, the ones recorded with its references; ``default`` only for an object from before
    the record (the ownership checks then run against the default identity)."""
    if scope.maascluster is not None:
        return effective_ref(scope.maascluster)
    return scope.annotation(IDENTITY_REF) or DEFAULT_REF


def kept_ref(scope: MachineScope, ref: str) -> str | None:
    """The credentials recorded with the MaasMachine's references when they are not ``ref`` (what its
    MaasCluster now uses): the pass tries them first, and uses them while they still reach the identity the
    references are stamped with."""
    recorded = scope.annotation(IDENTITY_REF)
    if recorded is None or recorded == ref or bound(scope) is None or not machine_references(scope.body):
        return None
    return recorded


def _foreign(scope: ObjectScope, port: MaasPort, held: str) -> str | None:
    """Says that ``held`` (what the object holds in MAAS, as people read it) came from another identity than
    ``port``'s; None when nothing is held or it came from this one."""
    was = bound(scope)
    if not held or was is None or was == port.identity:
        return None
    return (
        f"{held} came from another MAAS identity ({was[:12]}) than the credentials now in use "
        f"({port.identity[:12]}, {port.endpoint})"
    )


def check_machine(scope: MachineScope, port: MaasPort) -> bool:
    """False when the MaasMachine's references came from another identity than ``port``'s: they are forgotten
    (written with the next flush) with a Warning Event, and the caller sends nothing to MAAS in this pass."""
    was = bound(scope)
    if was is None or was == port.identity:  # every pass asks: decided without parsing the whole object
        return True
    foreign = _foreign(scope, port, ", ".join(machine_references(scope.body)))
    if foreign is None:
        return True
    msg = f"{foreign}; forgot them, nothing sent to either MAAS"
    port.unwatch(str(scope.want.system_id or ""))
    scope.set_spec(system_id=None, provider_id=None)
    for name in _FORGOTTEN:
        scope.set_annotation(name, None)
    scope.set_status(machine_state=None, machine_powered=None, hostname=None)
    scope.event("Warning", C.IDENTITY_CHANGED_REASON, msg)
    if scope.deleting:
        scope.set_deletion(C.IDENTITY_CHANGED_REASON, msg)
    else:
        scope.set_condition(C.MACHINE_PROVISIONED_CONDITION, False, C.IDENTITY_CHANGED_REASON, msg)
    return False


# --- MaasClusters ----------------------------------------------------------------------------------------
def check_cluster(scope: ObjectScope, port: MaasPort) -> bool:
    """:func:`check_machine` for a MaasCluster's DNS record (or the name of one being created)."""
    record = scope.annotation(DNS_RECORD) or scope.annotation(DNS_PENDING)
    foreign = _foreign(scope, port, f"DNS record {record}" if record else "")
    if foreign is None:
        return True
    msg = f"{foreign}; forgot it, nothing sent to either MAAS"
    for name in (DNS_RECORD, DNS_PENDING, VIP, IDENTITY):  # not identity-ref: what the objects use
        scope.set_annotation(name, None)
    scope.set_status(network=None)
    scope.event("Warning", C.IDENTITY_CHANGED_REASON, msg)
    return False


def cluster_references(scope: ObjectScope, kube: KubePort, cluster_name: str, want: str) -> list[str]:
    """What is held in MAAS under other credentials than ``want``: the MaasCluster's DNS record (under the
    bound ref), its MaasMachines' references (under the ref recorded with them, else the bound one)."""
    was = scope.annotation(IDENTITY_REF) or want
    out = []
    if was != want and (record := scope.annotation(DNS_RECORD) or scope.annotation(DNS_PENDING)):
        out.append(f"DNS record {record}")
    for mm in MaasMachineView.all(kube.list_maasmachines(scope.namespace, cluster_name)):
        held = _references(mm)
        recorded = mm.metadata.annotations.get(ANNOTATION_PREFIX + IDENTITY_REF)
        if held and (recorded or was) != want:
            out.append(f"MaasMachine {mm.metadata.name} ({', '.join(held)})")
    return out


def apply_identity_ref(scope: ObjectScope, kube: KubePort, cluster_name: str) -> str:
    """The credentials ref the MaasCluster's objects use from now on: ``spec.identityRef``'s, unless it
    changed while references are held under the bound one (then the bound one, and the refusal is said).

    A change applied while a machine's pass was still allocating under the old credentials (the cached
    view showed nothing held) leaves that machine on them (:func:`kept_ref`): said as
    ``IdentityRefApplied=False``/``IdentityKept`` until it is gone."""
    want = spec_ref(scope.body)
    was = scope.annotation(IDENTITY_REF)
    held = cluster_references(scope, kube, cluster_name, want) if was is not None else []
    if held and was == want:
        shown = "; ".join(held[:10]) + (f"; and {len(held) - 10} more" if len(held) > 10 else "")
        msg = (
            f"using {describe_ref(want)}, but {shown} keep the credentials their references came from "
            "until they are deleted"
        )
        scope.set_condition(C.IDENTITY_REF_APPLIED_CONDITION, False, C.IDENTITY_KEPT_REASON, msg)
        return want
    if held and was is not None:
        shown = "; ".join(held[:10]) + (f"; and {len(held) - 10} more" if len(held) > 10 else "")
        old = describe_ref(was)
        msg = (
            f"spec.identityRef asks for {describe_ref(want)}, but references are held under {old}: {shown}; "
            f"the operator keeps using {old} until they are gone (delete those objects, or set "
            "spec.identityRef back)"
        )
        if scope.condition_reason(C.IDENTITY_REF_APPLIED_CONDITION) != C.IDENTITY_CHANGE_REFUSED_REASON:
            scope.event("Warning", C.IDENTITY_CHANGE_REFUSED_REASON, msg)
        scope.set_condition(C.IDENTITY_REF_APPLIED_CONDITION, False, C.IDENTITY_CHANGE_REFUSED_REASON, msg)
        return was
    if was is not None and was != want:
        scope.event("Normal", C.IDENTITY_REF_APPLIED_REASON, f"now using {describe_ref(want)}")
    scope.set_annotation(IDENTITY_REF, want)
    if scope.condition(C.IDENTITY_REF_APPLIED_CONDITION) is not None:
        scope.set_condition(C.IDENTITY_REF_APPLIED_CONDITION, True, C.IDENTITY_REF_APPLIED_REASON, "")
    return want
