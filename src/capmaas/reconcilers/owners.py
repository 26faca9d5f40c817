"""The CAPI owners of our objects (a MaasMachine's Machine, a Cluster), also when a watch filter hides them.

Under ``--watch-filter`` the operator caches only the Machines and Clusters that carry the filter's label, as
CAPI's own controllers do under theirs (MachineSets copy ``spec.template.metadata.labels`` to the Machine and
to the MaasMachine, so a labelled template labels both). A labelled MaasMachine whose Machine lacks the label
would otherwise wait for an owner "not found yet" for ever. Here such an owner is read from the apiserver
instead (the operator keeps the answer a few seconds, so a resync of many objects is not as many GETs), the
pass goes on, and the object gets one Warning Event naming the owner and the label it lacks. Nothing wakes the
object when an owner it cannot watch changes, so such a pass runs again after :data:`UNWATCHED_RECHECK` s.
"""

from __future__ import annotations

from collections import OrderedDict

from capmaas.reconcilers.ports import Body, CapiPlural, KubePort
from capmaas.reconcilers.scope import ObjectScope, Requeue

#: Seconds until the next pass of an object that read an owner outside the watch cache.
UNWATCHED_RECHECK = 10.0
#: Objects remembered as warned (the oldest are forgotten first; one may then be warned again).
WARNED_MAX = 10_000
#: The Warning Event's reason.
OWNER_NOT_WATCHED_REASON = "OwnerNotWatched"

KINDS: dict[CapiPlural, str] = {"machines": "Machine", "clusters": "Cluster"}


class Owners:
    """Owner lookups of one reconciler: the watch cache, then (a miss under a watch filter) the apiserver."""

    def __init__(self, kube: KubePort) -> None:
        self.kube = kube
        self._warned: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def get(
        self, scope: ObjectScope, plural: CapiPlural, name: str, *, warn: bool = True
    ) -> Body | None:
        """The owner ``plural/name`` in ``scope``'s namespace, None if it does not exist (or is not seen
        yet). ``warn``: post the Warning on ``scope``'s object if the owner is outside the watch (False where
        another object says it already: a MaasMachine's Cluster is its MaasCluster's owner)."""
        lookup = self.kube.get_machine if plural == "machines" else self.kube.get_cluster
        cached = lookup(scope.namespace, name)
        if cached is not None:
            return cached
        found = await self.kube.read_unwatched(plural, scope.namespace, name)
        if found is None:
            return None
        scope.unwatched_owner = True
        key = (scope.uid, f"{plural}/{name}")
        if warn and key not in self._warned:
            self._warned[key] = None
            while len(self._warned) > WARNED_MAX:
                self._warned.popitem(last=False)
            scope.event(
                "Warning",
                OWNER_NOT_WATCHED_REASON,
                f"{KINDS[plural]} {name} lacks the label {found.label} of this operator's watch filter: it "
                f"is read from the apiserver instead of the watch cache, and its changes are seen only every "
                f"{UNWATCHED_RECHECK:g} s. Add the label to it (and to the template it comes from).",
            )
        return found.body


def recheck(scope: ObjectScope, requeue: Requeue) -> Requeue:
    """``requeue``, or sooner (:data:`UNWATCHED_RECHECK` s) if the pass read an owner outside the watch."""
    if scope.unwatched_owner and (requeue.after is None or requeue.after > UNWATCHED_RECHECK):
        return Requeue(UNWATCHED_RECHECK)
    return requeue
