"""The kopf handlers of the operator's own kinds and of the CAPI objects they follow: thin, async, in memory.

Every handler only keeps the watch cache, starts or wakes the object's own loop, and wakes what the routing
table (:mod:`capmaas.operator.routing`) names for the event; the domain logic runs in
:mod:`capmaas.operator.workers` → :mod:`capmaas.reconcilers`. Handlers are async: they only touch in-memory
state, and sync ones would run in kopf's thread pool, away from the event loop the per-object loops live on.

CAPI Machines and Clusters feed the caches from *index* handlers: kopf runs those before any other handler
and holds every other handler (of every resource) until the initial listings are indexed, so no MaasMachine
pass runs against a half-filled cache at start-up (it would wait for an owner that is there). Index handlers
are not called for deletions: the on.event handlers take those. A DELETED event also comes when an object
loses the watch filter's label (the apiserver sends it with the labels it had), so these are forgotten
without a tombstone: relabelled, the object is cached again. (Nothing but these watches writes CAPI objects
into the store, so no late write can bring one back.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from capmaas.api.related import CapiCluster, ObjectMeta
from capmaas.operator import jsonbodies
from capmaas.operator.early import EarlyEvents
from capmaas.operator.kopfsettings import label_selector
from capmaas.operator.kube import object_key, without_managed_fields
from capmaas.operator.routing import (
    CAPI,
    CLUSTERS,
    DELETED,
    INFRA,
    MAASCLUSTERS,
    MAASMACHINES,
    MACHINES,
    Event,
)
from capmaas.operator.runtime import Runtime
from capmaas.reconcilers.handoff import cluster_paused
from capmaas.reconcilers.keys import CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION
from capmaas.reconcilers.ports import ObjectPlural

log = logging.getLogger(__name__)


def _meta(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    """Attach the handlers of MaasMachines, MaasClusters, CAPI Machines and Clusters, the audits' start and
    the loops' stop."""
    config = rt.config
    selector = label_selector(config.kube.watch_filter)
    audit: list[asyncio.Task[None]] = []

    def route(group: str, plural: str, type: str | None, body: Mapping[str, Any]) -> None:
        for key in rt.router.keys(group, plural, rt.store, Event(type, body)):
            rt.wake(key)

    @kopf.on.startup(registry=registry)
    async def start_leak_audit(**_: Any) -> None:
        if config.polling.leak_audit_interval > 0:
            task = asyncio.create_task(rt.leaks.run(config.polling.leak_audit_interval), name="leak audit")
            audit.append(task)
        if config.polling.orphan_report_interval > 0:
            interval = config.polling.orphan_report_interval
            audit.append(asyncio.create_task(rt.orphans.run(interval), name="orphan report"))

    @kopf.on.cleanup(registry=registry)
    async def shutdown(**_: Any) -> None:
        jsonbodies.take_watch_events(None)
        for task in audit:
            task.cancel()
        await rt.stop()
        await rt.connections.aclose()
        await rt.kube.aclose()
        await rt.release()  # the Lease, at once: a standby need not wait for kopf's shutdown to end

    async def handed_off(plural: ObjectPlural, body: kopf.Body) -> bool:
        """A DELETED event of an object that still exists and left this shard's watch filter (relabelled):
        dropped from the cache without a tombstone (so it is cached again if it comes back), its loop ends
        (and with it its MAAS poll) without releasing anything, and the leak audit is not told: the shard
        that now matches its label carries on from the annotations and status it has."""
        if not await rt.kube.handed_off(plural, body):
            return False
        rt.orphans.handed_on(body)  # another shard carries what it holds on
        ns, name = _meta(body)
        key = object_key(plural, ns, name)
        rt.store.forget(plural, ns, name)
        rt.wake(key)  # its loop sees it gone, ends
        rt.metrics.handed_off.labels(plural).inc()
        log.info("%s left this shard's watch filter %s: handed off, nothing released", key, selector)
        return True

    def moved_out(body: Mapping[str, Any]) -> bool:
        """Deleted for ``clusterctl move`` while its Cluster was paused (what the reconcilers honour): what it
        held lives on under the target's operator."""
        meta = ObjectMeta.from_body(without_managed_fields(body.get("metadata", {})))
        if DELETE_FOR_MOVE_ANNOTATION not in meta.annotations:
            return False
        owner = meta.owner("Cluster")
        name = (owner.name if owner else "") or meta.labels.get(CLUSTER_NAME_LABEL) or ""
        return cluster_paused(CapiCluster.view(rt.store.find(CLUSTERS, meta.namespace, name)))

    def outside(plural: ObjectPlural, type: str | None, body: kopf.Body) -> bool:
        """An object outside the watch filter: ignored, and counted. The label selector on the watch keeps
        the apiserver from sending these at all, so the count stays 0; this is the check of it (and the
        filter in effect should a watch ever run without the selector). A DELETED event is never ignored
        here: it carries the object as it was, and :func:`handed_off` tells what it means."""
        if type == DELETED or rt.kube.in_shard(body):
            return False
        rt.metrics.outside_filter.labels(plural).inc()
        return True

    async def arrived(plural: ObjectPlural, type: str | None, body: kopf.Body) -> bool:
        """Whether an event of one of ours is this shard's to handle."""
        return not (outside(plural, type, body) or (type == DELETED and await handed_off(plural, body)))

    def machine_seen(type: str | None, body: Mapping[str, Any]) -> None:
        """A MaasMachine's event, once known to be this shard's (kopf's handler and :class:`EarlyEvents`)."""
        ns, name = _meta(body)
        key = object_key(MAASMACHINES, ns, name)
        meta = body.get("metadata", {})
        if type == DELETED or (meta.get("deletionTimestamp") and not meta.get("finalizers")):
            moved = moved_out(body)
            rt.leaks.deleted(body, moved=moved)  # first: its loop's end stops the poll the audit needs
            if moved:
                rt.orphans.handed_on(body)
        if type == DELETED:
            rt.store.delete(MAASMACHINES, ns, name, uid=meta.get("uid"))
            rt.machines.wake(key)
        elif rt.store.put(MAASMACHINES, body):
            rt.machines.ensure(key)
        elif rt.store.get(key) is None:
            rt.machines.wake(key)  # gone meanwhile: its loop ends
        else:
            rt.machines.ensure(key, wake=False)  # the echo of our own write: nothing new to reconcile
        route(INFRA, MAASMACHINES, type, body)

    def cluster_seen(type: str | None, body: Mapping[str, Any]) -> None:
        """A MaasCluster's event, once known to be this shard's (kopf's handler and :class:`EarlyEvents`)."""
        ns, name = _meta(body)
        key = object_key(MAASCLUSTERS, ns, name)
        if type == DELETED:
            if moved_out(body):
                rt.orphans.handed_on(body)
            rt.store.delete(MAASCLUSTERS, ns, name, uid=body.get("metadata", {}).get("uid"))
            rt.clusters.wake(key)
            return
        # The echo of our own write (or an old version) is nothing new for the MaasCluster itself; its
        # machines are still woken (they read its failure domains and credentials).
        news = rt.store.put(MAASCLUSTERS, body)
        rt.clusters.ensure(key, wake=news or rt.store.get(key) is None)
        route(INFRA, MAASCLUSTERS, type, body)

    def seen_early(plural: str, type: str, body: Mapping[str, Any]) -> None:
        (machine_seen if plural == MAASMACHINES else cluster_seen)(type, body)

    def counted(plural: str, type: str, echo: bool) -> None:
        if echo:
            rt.metrics.echoes.labels(plural).inc()
        rt.metrics.early_events.labels(plural, type).inc()

    early = EarlyEvents(rt.store, in_shard=rt.kube.in_shard, handle=seen_early, counted=counted)

    @kopf.on.startup(registry=registry)
    async def take_early_events(**_: Any) -> None:
        jsonbodies.take_watch_events(early)

    @kopf.on.event(INFRA, MAASMACHINES, registry=registry)
    async def maasmachine_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        early.open(MAASMACHINES)
        if await arrived(MAASMACHINES, type, body):
            machine_seen(type, body)

    @kopf.on.event(INFRA, MAASCLUSTERS, registry=registry)
    async def maascluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        early.open(MAASCLUSTERS)
        if await arrived(MAASCLUSTERS, type, body):
            cluster_seen(type, body)

    def capi_seen(plural: str, type: str | None, body: kopf.Body) -> None:
        """A CAPI Machine or Cluster into the cache; a version already seen (kopf re-listing after a watch
        restart) wakes nothing: for a Cluster that would be every machine of a large cluster."""
        ns, name = _meta(body)
        if type == DELETED:
            rt.store.forget(plural, ns, name)
        elif not rt.store.put(plural, body) and rt.store.find(plural, ns, name) is not None:
            return
        route(CAPI, plural, type, body)

    @kopf.index(CAPI, MACHINES, registry=registry)
    async def machine_index(body: kopf.Body, **_: Any) -> None:
        capi_seen(MACHINES, None, body)

    @kopf.index(CAPI, CLUSTERS, registry=registry)
    async def cluster_index(body: kopf.Body, **_: Any) -> None:
        capi_seen(CLUSTERS, None, body)

    @kopf.on.event(CAPI, MACHINES, registry=registry)
    async def machine_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == DELETED:
            capi_seen(MACHINES, type, body)

    @kopf.on.event(CAPI, CLUSTERS, registry=registry)
    async def cluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == DELETED:
            capi_seen(CLUSTERS, type, body)

    @kopf.on.probe(id="machines", registry=registry)
    async def probe_machines(**_: Any) -> int:
        return len(rt.machines)
