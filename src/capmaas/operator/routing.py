"""Which loops a watch event wakes besides its own object's: the routing table, declared in one place.

controller-runtime co-locates a controller's watches with their mapping (``Watches(&Machine{},
handler.EnqueueRequestsFromMapFunc(machineToInfra))``); here each :class:`Route` names the watched kind, the
kind of loop it wakes and a pure map function from the event and the watch cache to the keys to wake. The
kopf handlers (:mod:`capmaas.operator.handlers`) keep the caches and the object's own loop, then wake what
:meth:`Router.keys` returns. Nothing here imports kopf or does I/O, so the table is unit-tested as data
(tests/unit/operator/test_routing.py). Another controller adds its wake-ups with :meth:`Router.add`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from capmaas.api.related import CapiCluster, CapiMachine, ObjectMeta
from capmaas.operator.kube import object_key, without_managed_fields
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL

INFRA: Final = "infrastructure.cluster.x-k8s.io"
CAPI: Final = "cluster.x-k8s.io"
MAASMACHINES: Final = "maasmachines"
MAASCLUSTERS: Final = "maasclusters"
MAASREMEDIATIONS: Final = "maasremediations"
MACHINES, CLUSTERS = "machines", "clusters"  # CAPI's
DELETED = "DELETED"


def plural_of(key: str) -> str:
    """The plural a loop key (``plural/namespace/name``) starts with: which loops run it."""
    return key.split("/", 1)[0]


class Cache(Protocol):
    """What the map functions read of the watch cache (:class:`capmaas.operator.kube.Store` has it)."""

    def get(self, key: str) -> Mapping[str, Any] | None: ...

    def find(self, plural: str, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def cluster_members(self, namespace: str, cluster: str) -> list[str]: ...


@dataclass(frozen=True)
class Event:
    """A watch event: ``type`` is ``ADDED``/``MODIFIED``/``DELETED``, or None for a listing (kopf's index)."""

    type: str | None
    body: Mapping[str, Any]

    @functools.cached_property
    def meta(self) -> ObjectMeta:
        """The typed metadata, parsed once for all the routes that read it, without ``managedFields``: never
        read, and most of a watched object's metadata (the parse deep-copies what it is given)."""
        return ObjectMeta.from_body(without_managed_fields(self.body.get("metadata") or {}))

    @property
    def deleted(self) -> bool:
        return self.type == DELETED


MapFunc = Callable[[Cache, Event], Iterable[str]]


@dataclass(frozen=True)
class Route:
    """Events of ``group``/``plural`` wake the loops of ``target`` that ``map`` names."""

    group: str
    plural: str
    target: str
    map: MapFunc


def maascluster_of(cache: Cache, namespace: str, cluster: str) -> str | None:
    """The MaasCluster key of the cached CAPI Cluster ``cluster`` (its ``spec.infrastructureRef``)."""
    name = CapiCluster.from_body(cache.find(CLUSTERS, namespace, cluster) or {}).infra_name
    return object_key(MAASCLUSTERS, namespace, name) if name else None


def _deleting(body: Mapping[str, Any] | None) -> bool:
    return bool(body and (body.get("metadata") or {}).get("deletionTimestamp"))


def maasmachine_to_maascluster(cache: Cache, event: Event) -> Iterable[str]:
    """A control-plane machine's change (its addresses go into the DNS record), and any machine gone while
    the MaasCluster is being deleted (it waits for them). Not every worker event: that would cost a pass over
    all the cluster's machines per event, O(machines²) while a large cluster is created or deleted.

    The labels are read from the body as it is: most events are a worker's, which wake nothing, and need no
    parse of their metadata."""
    labels = (event.body.get("metadata") or {}).get("labels") or {}
    cluster = labels.get(CLUSTER_NAME_LABEL)
    control_plane = CONTROL_PLANE_LABEL in labels
    if not cluster or not (control_plane or event.deleted):
        return ()
    meta = event.meta
    key = maascluster_of(cache, meta.namespace, cluster)
    if key and (control_plane or _deleting(cache.get(key))):
        return (key,)
    return ()


def maascluster_to_maasmachines(cache: Cache, event: Event) -> Iterable[str]:
    """The machines of the MaasCluster's Cluster (they read its failure domains and credentials); nothing
    for its deletion."""
    if event.deleted:
        return ()
    meta = event.meta
    return [
        key
        for ref in meta.owner_references
        if ref.kind == "Cluster"
        for key in cache.cluster_members(meta.namespace, ref.name)
    ]


def machine_to_maasmachine(cache: Cache, event: Event) -> Iterable[str]:
    """The MaasMachine of the CAPI Machine (``spec.infrastructureRef``): its owner, bootstrap data."""
    machine = CapiMachine.from_body(event.body)
    name = machine.infra_name
    return (object_key(MAASMACHINES, machine.metadata.namespace, name),) if name else ()


def cluster_to_maascluster(cache: Cache, event: Event) -> Iterable[str]:
    """The MaasCluster of the CAPI Cluster, as the cache has it (a deleted Cluster is forgotten first)."""
    meta = event.meta
    key = maascluster_of(cache, meta.namespace, meta.name)
    return (key,) if key else ()


def cluster_to_maasmachines(cache: Cache, event: Event) -> Iterable[str]:
    """Every machine of the CAPI Cluster (pause, infrastructure provisioned)."""
    meta = event.meta
    return cache.cluster_members(meta.namespace, meta.name)


def machine_to_remediation(cache: Cache, event: Event) -> Iterable[str]:
    """The MaasRemediation of a CAPI Machine (Cluster API names it after the Machine), if there is one: the
    MachineHealthCheck's verdict arrives as a Machine condition."""
    meta = event.meta
    key = object_key(MAASREMEDIATIONS, meta.namespace, meta.name)
    return (key,) if cache.get(key) is not None else ()


#: The operator's wake-ups across kinds (each object's own loop is its handler's).
ROUTES: tuple[Route, ...] = (
    Route(INFRA, MAASMACHINES, MAASCLUSTERS, maasmachine_to_maascluster),
    Route(INFRA, MAASCLUSTERS, MAASMACHINES, maascluster_to_maasmachines),
    Route(CAPI, MACHINES, MAASMACHINES, machine_to_maasmachine),
    Route(CAPI, CLUSTERS, MAASCLUSTERS, cluster_to_maascluster),
    Route(CAPI, CLUSTERS, MAASMACHINES, cluster_to_maasmachines),
    Route(CAPI, MACHINES, MAASREMEDIATIONS, machine_to_remediation),
)


class Router:
    """The routing table in effect: :data:`ROUTES` plus what other controllers :meth:`add`."""

    def __init__(self, routes: Iterable[Route] = ROUTES) -> None:
        self._routes: list[Route] = list(routes)

    def add(self, *routes: Route) -> None:
        self._routes.extend(routes)

    @property
    def routes(self) -> tuple[Route, ...]:
        return tuple(self._routes)

    def keys(self, group: str, plural: str, cache: Cache, event: Event) -> list[str]:
        """The keys an event of ``group``/``plural`` wakes, in table order, each once."""
        out: dict[str, None] = {}
        for route in self._routes:
            if route.group == group and route.plural == plural:
                for key in route.map(cache, event):
                    if plural_of(key) != route.target:
                        raise ValueError(f"{route.map.__name__} named {key}, not a {route.target} key")
                    out[key] = None
        return list(out)
