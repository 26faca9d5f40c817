"""When a deletion hands the MAAS machine (or DNS record) on instead of giving it back: ``clusterctl move``.

clusterctl deletes the source objects of a move with ``clusterctl.cluster.x-k8s.io/delete-for-move`` on them;
the target's objects carry the same system IDs and records on, so the source must release nothing. But the
annotation alone proves nothing: anyone who may write the object could set it and delete, and the MAAS
machine would stay allocated with no object left to give it back. clusterctl (v1.13,
``cmd/clusterctl/client/cluster/mover.go``) refuses to move a paused Cluster and pauses every Cluster it moves
(``spec.paused: true``) before it creates anything on the target, and deletes the source objects only after
that, owners last. So the annotation is honoured only while the owning Cluster is paused; otherwise the
deletion releases as usual, and a Warning Event says the annotation was ignored and why. (The admission policy
also keeps tenants from setting the annotation at all: docs/security.md.)
"""

from __future__ import annotations

from collections import OrderedDict

from capmaas.api.related import CapiCluster
from capmaas.reconcilers.keys import DELETE_FOR_MOVE_ANNOTATION
from capmaas.reconcilers.scope import ObjectScope

#: The Warning Event's reason when the annotation is not honoured.
DELETE_FOR_MOVE_IGNORED_REASON = "DeleteForMoveIgnored"
#: Objects remembered as warned (the oldest are forgotten first; one may then be warned again).
WARNED_MAX = 10_000


def cluster_paused(cluster: CapiCluster | None) -> bool:
    """Whether the Cluster is paused the way clusterctl pauses it before a move (``spec.paused``)."""
    return cluster is not None and cluster.paused


class Handoff:
    """Decides whether a deletion is clusterctl's move; warns once per object when the annotation is not
    honoured (the deletion takes several passes)."""

    def __init__(self) -> None:
        self._warned: OrderedDict[str, None] = OrderedDict()

    def moving_out(self, scope: ObjectScope, cluster: CapiCluster | None, cluster_name: str | None) -> bool:
        """True when ``scope``'s object is deleted for ``clusterctl move``: the annotation is on it and its
        ``cluster`` (named ``cluster_name``) is paused. With the annotation on an unpaused (or missing)
        Cluster: False, and a Warning."""
        if DELETE_FOR_MOVE_ANNOTATION not in scope.annotations:
            return False
        if cluster_paused(cluster):
            return True
        if scope.uid not in self._warned:
            self._warned[scope.uid] = None
            while len(self._warned) > WARNED_MAX:
                self._warned.popitem(last=False)
            whose = "is not found" if cluster is None else "is not paused"
            scope.event(
                "Warning",
                DELETE_FOR_MOVE_IGNORED_REASON,
                f"{DELETE_FOR_MOVE_ANNOTATION} ignored: the Cluster {cluster_name or '?'} {whose} "
                "(clusterctl move pauses it before it deletes anything), so this deletion gives what it "
                "holds back to MAAS as usual",
            )
        return False
