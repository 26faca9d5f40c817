"""Node reuse (CAPM3's ``nodeReuse``): on a rollout, the servers a MachineDeployment or control plane gives
back come back to it, their data disks kept.

The record. When a bare-metal MaasMachine cloned from a MaasMachineTemplate with ``spec.nodeReuse: true``
(CAPI's ``cluster.x-k8s.io/cloned-from-*`` annotations name it) is deleted, its owner is resolved from the
CAPI Machine: ``MachineDeployment/<cluster.x-k8s.io/deployment-name label>``, or ``<Kind>/<name>`` of a
control plane owning it (KubeadmControlPlane). The server is released without erase (no erase flags, no
wipe-disks script, whatever ``releaseOptions`` says: a kept disk is the point) and, once MAAS shows it
released, one entry ``{owner, systemID, identity, released}`` is added to the ``…/reusable-machines``
annotation of the cluster's MaasCluster. Why there:

- it is capmaas's own object, one per cluster, in the owner's namespace, and a ``capmaas…/`` annotation: the
  admission policy lets only the operator write it, so a tenant can neither forge an entry nor drop one (an
  annotation on the MachineDeployment would be the tenant's own to edit, and capmaas writes no CAPI object);
- annotations survive ``clusterctl move`` (status does not);
- it is bounded: entries older than ``MachineSettings.reuse_ttl`` are dropped at every write and ignored at
  every read, and at most :data:`MAX_RECORDS` are kept (the oldest go first).

Identity binding. An entry names a server in *one* MAAS as seen by *one* MAAS user: its ``identity`` is the
fingerprint of the connection that released it (:func:`~capmaas.reconcilers.ports.identity_fingerprint`). A
MaasMachine whose pass connects with another identity (the MaasCluster's ``identityRef`` switched to another
MAAS user or endpoint) never uses it: a server released without erase keeps its data, and allocating it by
system ID under another user would hand that data over (or, in another MAAS, name someone else's server).

Taking it back. A new bare-metal MaasMachine whose owner has an entry of its identity claims it: the entry
gets ``claimant: <its UID>`` with a resourceVersion-guarded write of the MaasCluster (so two MaasMachines
never claim one server) and is ignored by every other MaasMachine from then on. The claimant allocates through
the usual crash-safe path (``…/allocating`` first, agent name = its UID, adoption after a lost answer), with
``system_id=<sid>`` added to the template's constraints: MAAS ANDs them, so the pool, tags and sizes of the
new template still hold. A pass that ends between the claim and the allocate (its own write refused with 409
because CAPI changed the MaasMachine meanwhile, a crash, a lost answer) finds its claim again on the next
pass. Once the MaasMachine holds a server (or gave up on reuse), its claimed entries are removed, on every
pass until that write succeeds. A 409 from MAAS (taken meanwhile, gone, no longer matching) ends reuse for
that MaasMachine: it allocates a fresh server at once. With no entry yet, a MaasMachine whose template has
``nodeReuse`` waits up to ``MachineSettings.reuse_wait`` from its creation (a rollout with ``maxSurge: 0``
creates it after the old Machine is gone, so the entry is normally there). Entries are used whatever the new
template says (as CAPM3's labelled hosts take precedence); the wait only with ``nodeReuse``.

What can be lost, never leaked: an entry claimed by a MaasMachine deleted before it allocated is removed by
its deletion (the server stays Ready in MAAS's pool); a crash between the release and the ``…/reuse-for``
write records nothing. The MAAS user never holds a server it did not allocate under a MaasMachine's agent
name.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence

import pydantic
from pydantic import Field

from capmaas import maas
from capmaas.api import conditions as C
from capmaas.api.related import CapiMachine
from capmaas.api.schema import K8sModel
from capmaas.api.v1beta1 import ReleaseOptions
from capmaas.api.v1beta1.maasmachinetemplate import MaasMachineTemplate
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, REUSABLE, REUSE_FOR, REUSE_TRIED
from capmaas.reconcilers.ports import MAASCLUSTER, Body, KubePort, MaasPort
from capmaas.reconcilers.scope import MachineScope, Requeue

#: CAPI's annotations on an object cloned from a template (``util/annotations``).
CLONED_FROM_NAME = "cluster.x-k8s.io/cloned-from-name"
CLONED_FROM_GROUPKIND = "cluster.x-k8s.io/cloned-from-groupkind"
TEMPLATE_GROUPKIND = "MaasMachineTemplate.infrastructure.cluster.x-k8s.io"
#: CAPI's label on the Machines of a MachineDeployment (set through its MachineSets).
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
#: Entries kept per MaasCluster at most (the oldest dropped first): a few rollouts' worth of servers.
MAX_RECORDS = 64
#: Seconds between looks for a kept server while a new MaasMachine waits for one (cache reads, no request).
REUSE_LOOK = 2.0
#: MAAS release scripts (and their tags) that wipe disks: never sent when a server is kept for reuse.
WIPE_SCRIPTS = frozenset({"wipe-disks", "wipe", "disk", "storage"})


class Reusable(K8sModel):
    """One server released without erase for an owner."""

    owner: str = Field(description="MachineDeployment/<name> or <control plane kind>/<name>.")
    system_id: str = Field(alias="systemID", description="The MAAS system ID.")
    identity: str = Field(description="Fingerprint of the MAAS endpoint + user that released it.")
    released: float = Field(description="When, in epoch seconds.")
    claimant: str | None = Field(
        default=None, description="UID of the MaasMachine taking it back (no other MaasMachine uses it then)."
    )


_RECORDS = pydantic.TypeAdapter(list[Reusable])


def parse(text: str | None) -> list[Reusable]:
    """The entries of a ``…/reusable-machines`` value (none for a missing or unreadable one)."""
    if not text:
        return []
    try:
        return _RECORDS.validate_json(text)
    except pydantic.ValidationError:
        return []


def dump(records: Sequence[Reusable]) -> str | None:
    """The annotation value (None: remove it)."""
    if not records:
        return None
    return json.dumps([r.to_k8s() for r in records], separators=(",", ":"))


def live(records: Sequence[Reusable], now: float, ttl: float) -> list[Reusable]:
    """The entries not expired, newest :data:`MAX_RECORDS` at most, oldest first."""
    kept = sorted((r for r in records if now - r.released < ttl), key=lambda r: r.released)
    return kept[-MAX_RECORDS:]


def added(records: Sequence[Reusable], new: Reusable, now: float, ttl: float) -> list[Reusable]:
    """``records`` with ``new`` (replacing any entry of the same server), expired ones dropped."""
    rest = [r for r in records if r.system_id != new.system_id]
    return live([*rest, new], now, ttl)


def pick(records: Sequence[Reusable], owner: str, identity: str, claimant: str) -> Reusable | None:
    """The entry ``claimant`` claimed already, else the oldest unclaimed one, of ``owner`` released through
    ``identity`` (entries of other identities, and those other MaasMachines claimed, are never candidates)."""
    ours = [r for r in records if r.owner == owner and r.identity == identity]
    mine = next((r for r in ours if r.claimant == claimant), None)
    return mine or next((r for r in ours if r.claimant is None), None)


def claimed(records: Sequence[Reusable], system_id: str, claimant: str) -> list[Reusable]:
    """``records`` with ``system_id``'s entry claimed by ``claimant`` (unchanged if another claimed it)."""
    return [
        r.model_copy(update={"claimant": claimant}) if r.system_id == system_id and r.claimant is None else r
        for r in records
    ]


def owner_of(machine: CapiMachine | None) -> str | None:
    """The MachineDeployment or control plane a CAPI Machine belongs to (None: a bare Machine or MachineSet,
    which has no rollout to reuse servers in)."""
    if machine is None:
        return None
    meta = machine.metadata
    if name := meta.labels.get(DEPLOYMENT_NAME_LABEL):
        return f"MachineDeployment/{name}"
    for ref in meta.owner_references:
        if ref.controller and ref.kind.endswith("ControlPlane") and ref.name:
            return f"{ref.kind}/{ref.name}"
    return None


def keeping(opts: ReleaseOptions) -> ReleaseOptions:
    """``opts`` for a server kept for reuse: no erase of any kind, no disk-wiping release script."""
    scripts = [s for s in opts.scripts or () if s not in WIPE_SCRIPTS]
    return opts.model_copy(
        update={"erase": False, "secure_erase": False, "quick_erase": False, "scripts": scripts or None}
    )


class NodeReuse:
    """The record's reads and writes for the bare-metal provisioner (no state of its own)."""

    def __init__(self, kube: KubePort, *, wait: float, ttl: float, clock: Callable[[], float]) -> None:
        self.kube, self.wait, self.ttl, self.clock = kube, wait, ttl, clock

    def template_reuses(self, scope: MachineScope) -> bool:
        """The MaasMachine was cloned from a MaasMachineTemplate (still there) with ``spec.nodeReuse``."""
        meta = scope.meta.annotations
        name = meta.get(CLONED_FROM_NAME)
        if not name or meta.get(CLONED_FROM_GROUPKIND) != TEMPLATE_GROUPKIND:
            return False
        body = self.kube.get_template(scope.namespace, name)
        if body is None:
            return False
        try:
            return bool(MaasMachineTemplate.from_body(body).spec.node_reuse)
        except pydantic.ValidationError:
            return False

    # --- deletion ----------------------------------------------------------------------------------------
    def releasing_for(self, scope: MachineScope) -> str | None:
        """Before the release of a deletion: the owner the server is kept for (written on the object with
        this pass), or None for an ordinary release. Not while the cluster goes: nobody would take it back."""
        owner = owner_of(scope.machine)
        if owner is None or scope.maascluster is None or not self.template_reuses(scope):
            return None
        if scope.cluster is not None and scope.cluster.metadata.deletion_timestamp:
            return None
        if (scope.maascluster.get("metadata") or {}).get("deletionTimestamp"):
            return None
        scope.set_annotation(REUSE_FOR, owner)
        return owner

    async def released(self, scope: MachineScope, port: MaasPort, sid: str) -> None:
        """MAAS shows ``sid`` released by this deletion: record it for its owner (idempotent)."""
        owner = scope.annotation(REUSE_FOR)
        cluster = scope.maascluster
        if not owner or cluster is None:
            return
        now = self.clock()
        entry = Reusable(owner=owner, system_id=sid, identity=port.identity, released=now)
        await self._write(cluster, lambda rs: added(rs, entry, now, self.ttl))
        scope.event("Normal", "MachineKeptForReuse", f"MAAS machine {sid} released without erase for {owner}")

    # --- a new machine -----------------------------------------------------------------------------------
    async def claim(self, scope: MachineScope, port: MaasPort) -> str | Requeue | None:
        """Before a fresh allocation: the system ID of a server released for this Machine's owner through
        this identity (its entry claimed for this MaasMachine, or claimed by an earlier pass), a wait for one,
        or None (allocate as usual)."""
        owner = owner_of(scope.machine)
        cluster = scope.maascluster
        if scope.annotation(REUSE_TRIED):
            await self.settle(scope)
            return None
        if owner is None or cluster is None:
            return None
        now = self.clock()
        records = live(parse(_annotation(cluster)), now, self.ttl)
        found = pick(records, owner, port.identity, scope.uid)
        if found is not None:
            if found.claimant is None:
                await scope.flush()  # the finalizer first: a claimant deleted later drops its claim
                sid, uid = found.system_id, scope.uid
                await self._write(cluster, lambda rs: claimed(rs, sid, uid))
            return found.system_id
        left = self._left(scope, now)
        if left > 0 and self.template_reuses(scope):
            # The same message every look (no status write per look); the record is read from the cache.
            msg = f"nodeReuse: waiting {int(self.wait)}s from creation for a server released by {owner}"
            scope.wait(C.WAITING_FOR_REUSABLE_MACHINE_REASON, msg)
            return Requeue(min(left, REUSE_LOOK))
        return None

    async def settle(self, scope: MachineScope) -> None:
        """This MaasMachine holds a server or gave up on reuse: the entries it claimed go."""
        await drop_claims(scope, self.kube)

    def narrow(
        self, asked: maas.AllocateConstraints, sid: str, *, keep_zone: bool
    ) -> maas.AllocateConstraints:
        """The template's constraints plus ``system_id`` (MAAS ANDs them); a zone the operator's spread chose
        is dropped (the server is where it is)."""
        return asked.model_copy(update={"system_id": sid, **({} if keep_zone else {"zone": None})})

    def taken(self, scope: MachineScope, sid: str, said: str) -> None:
        """MAAS answered the allocate of ``sid`` with 409: no more reuse for this object."""
        scope.set_annotation(REUSE_TRIED, sid)
        msg = f"MAAS machine {sid} could not be taken back ({said}); allocating a fresh one"
        scope.event("Normal", "ReusableMachineTaken", msg)

    def _left(self, scope: MachineScope, now: float) -> float:
        created = scope.body.get("metadata", {}).get("creationTimestamp")
        if not created:
            return 0.0
        try:
            at = datetime.datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
        return max(0.0, at + self.wait - now)

    async def _write(self, cluster: Body, change: Callable[[list[Reusable]], list[Reusable]]) -> None:
        await _write(self.kube, cluster, change)


async def drop_claims(scope: MachineScope, kube: KubePort) -> None:
    """Remove the entries this MaasMachine claimed (it holds a server, gave up on reuse or is gone). No
    request unless it has one; a refused write fails the pass, and the next pass tries again."""
    cluster = scope.maascluster
    text = _annotation(cluster) if cluster is not None else None
    uid = scope.uid
    if cluster is None or not text or not uid or uid not in text:
        return
    if any(r.claimant == uid for r in parse(text)):
        await _write(kube, cluster, lambda rs: [r for r in rs if r.claimant != uid])


async def _write(kube: KubePort, cluster: Body, change: Callable[[list[Reusable]], list[Reusable]]) -> None:
    """Compare-and-set of the MaasCluster's entries: the patch carries the resourceVersion read, so a
    concurrent writer makes it fail with 409 (the pass runs again from the current object)."""
    meta = cluster.get("metadata") or {}
    before = parse(_annotation(cluster))
    after = change(before)
    if after == before:
        return
    body = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {ANNOTATION_PREFIX + REUSABLE: dump(after)},
        }
    }
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    await kube.patch(MAASCLUSTER, namespace, name, body, status=False)


def _annotation(cluster: Body) -> str | None:
    annotations = (cluster.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_PREFIX + REUSABLE)
    return str(value) if value is not None else None
