"""kopf wiring: settings at startup, thin ``on.event`` handlers that feed the caches and wake the loops.

Handlers are registered on a fresh ``kopf.OperatorRegistry`` built from the config (namespace and watch filter
are known only then), never at import time. Every handler only stores the body and wakes loops; the domain
logic runs in :mod:`capmaas.operator.workers` → :mod:`capmaas.reconcilers`.

kopf's own finalizer and progress/diff-base storage are not used (no change handlers, daemons or timers), but
the progress storage is still pointed at our annotation prefix so nothing ever lands under
``kopf.zalando.org``, and the diff-base storage is :class:`NoDiffBase`: kopf builds a deep-copied "essence"
of every watched body for change detection even when no handler could use it (its cost:
docs/benchmarks/README.md). kopf's
finalizer name is deliberately *not* one of ours: kopf removes its finalizer from objects that have no handler
requiring it, which would strip ``maasmachine.infrastructure.cluster.x-k8s.io`` (see workers.py).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import kopf

from capmaas import maas
from capmaas.config import OperatorConfig
from capmaas.gateway import MaasConnections
from capmaas.operator.kube import KubeAdapter, Store, object_key
from capmaas.operator.kubehttp import KubeHttp, load_configuration
from capmaas.operator.metrics import Metrics
from capmaas.operator.workers import Reconcile, Workers
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.keys import ANNOTATION_PREFIX, CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL
from capmaas.reconcilers.machine import MachineReconciler, MachineSettings
from capmaas.reconcilers.ports import MaasCredentials

log = logging.getLogger(__name__)

INFRA = "infrastructure.cluster.x-k8s.io"
CAPI = "cluster.x-k8s.io"
KOPF_FINALIZER = ANNOTATION_PREFIX + "kopf-unused"
KUBE_CONNECTIONS = 16  # Kubernetes writes and Secret reads in flight (status/spec patches, bootstrap data)


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's change-detection base, switched off: we register no change handlers (see the module docstring),
    so there is nothing to diff against, and nothing is ever stored on the objects."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def label_filter(watch_filter: str | None) -> dict[str, Any] | None:
    """``key=value`` → ``{key: value}``; ``key`` → ``{key: kopf.PRESENT}``; None → no filter."""
    if not watch_filter:
        return None
    key, sep, value = watch_filter.partition("=")
    return {key.strip(): value.strip() if sep else kopf.PRESENT}


def default_credentials(config: OperatorConfig) -> MaasCredentials | None:
    m = config.maas
    if not m.endpoint or m.api_key is None:
        return None
    ca = None
    if m.ca_file:
        with open(m.ca_file, encoding="utf-8") as f:
            ca = f.read()
    return MaasCredentials(
        endpoint=m.endpoint,
        api_key=m.api_key.get_secret_value(),
        ca_data=ca,
        insecure=m.insecure_skip_tls_verify,
        source="operator default",
    )


@dataclass
class Runtime:
    """Everything the handlers share; built once per operator run."""

    config: OperatorConfig
    store: Store
    kube: KubeAdapter
    metrics: Metrics
    connections: MaasConnections
    machines: Workers
    clusters: Workers


def build_runtime(config: OperatorConfig, http: KubeHttp) -> Runtime:
    store = Store()
    metrics = Metrics(store)
    kube = KubeAdapter(store, http, secret_ttl=config.kube.secret_cache_ttl)
    holder: dict[str, Workers] = {}

    def wake(key: str) -> None:
        plural = key.split("/", 1)[0]
        w = holder.get(plural)
        if w is not None:
            w.wake(key)

    allowed = maas.EndpointAllowList(config.maas.allowed_endpoints)  # a bad entry stops the start here
    limits = maas.Limits(
        max_response_bytes=config.maas.max_response_bytes,
        max_list_bytes=config.maas.max_list_response_bytes,
        deadline=config.maas.request_timeout,
    )

    def client_factory(c: MaasCredentials) -> maas.MaasClient:
        insecure = c.insecure or config.maas.insecure_skip_tls_verify
        return maas.MaasClient(
            c.endpoint,
            api_key=c.api_key,
            transport=maas.AiohttpTransport(
                ssl_context=maas.ssl_context(ca_data=c.ca_data, insecure=insecure)
            ),
            ca_data=c.ca_data,
            insecure=insecure,
            timeout=config.maas.request_timeout,
            max_retries=config.maas.max_retries,
            on_response=metrics.on_response(c.endpoint),
            limits=limits,
            allowed_endpoints=allowed,  # EndpointNotAllowedError: InvalidCredentials on the MaasCluster
        )

    connections = MaasConnections(
        client_factory=client_factory,
        fast=config.polling.fast_interval,
        idle=config.polling.idle_interval,
        batch_size=config.polling.batch_size,
        wake=wake,
        max_concurrent_writes=config.maas.max_concurrent_writes,
    )
    creds = default_credentials(config)
    ms = config.machine
    machine_rec = MachineReconciler(
        kube,
        connections,
        default_credentials=creds,
        settings=MachineSettings(
            deploy_timeout=ms.deploy_timeout,
            max_deploy_attempts=ms.max_deploy_attempts,
            retry_base=ms.retry_base_delay,
            retry_max=ms.retry_max_delay,
            power_on_retry=ms.power_on_retry,
            node_retry=ms.node_retry,
        ),
        recorder=metrics,
    )
    cluster_rec = ClusterReconciler(kube, connections, default_credentials=creds)

    def workers(plural: str, reconcile: Reconcile, **extra: Any) -> Workers:
        return Workers(
            plural,
            reconcile,
            store,
            resync=config.kube.resync_interval,
            backoff_base=ms.retry_base_delay,
            backoff_max=ms.retry_max_delay,
            outcome=metrics.outcome,
            **extra,
        )

    machines = workers("maasmachines", machine_rec.reconcile, on_exit=connections.forget_key)
    clusters = workers("maasclusters", cluster_rec.reconcile)
    holder.update(maasmachines=machines, maasclusters=clusters)
    return Runtime(config, store, kube, metrics, connections, machines, clusters)


def _deleting(body: Any) -> bool:
    return bool(body and body.get("metadata", {}).get("deletionTimestamp"))


def _meta(body: Any) -> tuple[str, str]:
    meta = body.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    """Attach every handler to ``registry``. Handlers are async: they only touch in-memory state, and sync
    ones would run in kopf's thread pool, away from the event loop the per-object loops live on."""
    config = rt.config
    labels = label_filter(config.kube.watch_filter)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = KOPF_FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX[:-1])
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.posting.level = logging.getLevelNamesMapping()[config.logging.events_level]
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.request_timeout = 60
        settings.queueing.worker_limit = None

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster service account, else the kubeconfig (``KUBECONFIG``), via the kubernetes client."""
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    @kopf.on.cleanup(registry=registry)
    async def shutdown(**_: Any) -> None:
        await rt.machines.stop()
        await rt.clusters.stop()
        await rt.connections.aclose()
        await rt.kube.aclose()

    def maascluster_key_for(namespace: str, cluster_name: str) -> str | None:
        cluster = rt.store.find("clusters", namespace, cluster_name)
        ref = ((cluster or {}).get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("name"):
            return object_key("maasclusters", namespace, str(ref["name"]))
        return None

    @kopf.on.event(INFRA, "maasmachines", labels=labels, registry=registry)
    async def maasmachine_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        ns, name = _meta(body)
        key = object_key("maasmachines", ns, name)
        if type == "DELETED":
            rt.store.delete("maasmachines", ns, name, uid=body.get("metadata", {}).get("uid"))
            rt.machines.wake(key)
        elif rt.store.put("maasmachines", body):
            rt.machines.ensure(key)
        elif rt.store.get(key) is None:
            rt.machines.wake(key)  # gone meanwhile: its loop ends
        else:
            rt.machines.ensure(key, wake=False)  # the echo of our own write: nothing new to reconcile
        # The MaasCluster cares about its control-plane machines (DNS records) and, while it is being deleted,
        # about every machine going away. Waking it for every worker event would cost a pass over all the
        # cluster's machines per event: O(machines²) while a large cluster is created or deleted.
        mlabels = body.get("metadata", {}).get("labels") or {}
        cluster = mlabels.get(CLUSTER_NAME_LABEL)
        if cluster and (CONTROL_PLANE_LABEL in mlabels or type == "DELETED"):
            mc = maascluster_key_for(ns, cluster)
            if mc and (CONTROL_PLANE_LABEL in mlabels or _deleting(rt.store.get(mc))):
                rt.clusters.wake(mc)

    @kopf.on.event(INFRA, "maasclusters", labels=labels, registry=registry)
    async def maascluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        ns, name = _meta(body)
        key = object_key("maasclusters", ns, name)
        if type == "DELETED":
            rt.store.delete("maasclusters", ns, name, uid=body.get("metadata", {}).get("uid"))
            rt.clusters.wake(key)
            return
        # The echo of our own write (or an old version) is nothing new for the MaasCluster itself; its
        # machines are still woken (they read its failure domains and credentials).
        news = rt.store.put("maasclusters", body)
        rt.clusters.ensure(key, wake=news or rt.store.get(key) is None)
        for ref in body.get("metadata", {}).get("ownerReferences") or ():
            if ref.get("kind") == "Cluster":
                for mkey in rt.store.cluster_members(ns, str(ref.get("name"))):
                    rt.machines.wake(mkey)

    # CAPI Machines and Clusters feed the caches from *index* handlers: kopf runs those before any other
    # handler and holds every other handler (of every resource) until the initial listings are indexed, so no
    # MaasMachine pass runs against a half-filled cache at start-up (it would wait for an owner that is
    # there). Index handlers are not called for deletions: the on.event handlers below take those.
    def machine_seen(type: str | None, body: kopf.Body) -> None:
        ns, name = _meta(body)
        if type == "DELETED":
            rt.store.delete("machines", ns, name)
        elif not rt.store.put("machines", body) and rt.store.find("machines", ns, name) is not None:
            return  # a version already seen (e.g. kopf re-listing after a watch restart)
        ref = (body.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("name"):
            rt.machines.wake(object_key("maasmachines", ns, str(ref["name"])))

    def cluster_seen(type: str | None, body: kopf.Body) -> None:
        ns, name = _meta(body)
        if type == "DELETED":
            rt.store.delete("clusters", ns, name)
        elif not rt.store.put("clusters", body) and rt.store.find("clusters", ns, name) is not None:
            return  # a version already seen: waking every machine of a large cluster for it costs a lot
        mc = maascluster_key_for(ns, name)
        if mc:
            rt.clusters.wake(mc)
        for mkey in rt.store.cluster_members(ns, name):
            rt.machines.wake(mkey)

    @kopf.index(CAPI, "machines", registry=registry)
    async def machine_index(body: kopf.Body, **_: Any) -> None:
        machine_seen(None, body)

    @kopf.index(CAPI, "clusters", registry=registry)
    async def cluster_index(body: kopf.Body, **_: Any) -> None:
        cluster_seen(None, body)

    @kopf.on.event(CAPI, "machines", registry=registry)
    async def machine_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            machine_seen(type, body)

    @kopf.on.event(CAPI, "clusters", registry=registry)
    async def cluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            cluster_seen(type, body)

    @kopf.on.probe(id="machines", registry=registry)
    async def probe_machines(**_: Any) -> int:
        return len(rt.machines)


async def run_operator(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None) -> None:
    """Run until stopped (SIGINT/SIGTERM, or ``stop_flag``)."""
    rt = build_runtime(
        config,
        KubeHttp(
            load_configuration(),
            connections=KUBE_CONNECTIONS,
            field_validation=config.kube.field_validation,
        ),
    )
    registry = kopf.OperatorRegistry()
    register(registry, rt)
    rt.metrics.serve(config.server.metrics_bind_address, config.server.metrics_port)
    liveness = (
        f"http://{config.server.bind_address}:{config.server.health_port}/healthz"
        if config.server.health_port
        else None
    )
    namespaces = [config.kube.namespace] if config.kube.namespace else []
    await kopf.operator(
        registry=registry,
        standalone=config.peering.standalone,
        peering_name=config.peering.name,
        priority=config.peering.priority,
        liveness_endpoint=liveness,
        clusterwide=not namespaces,
        namespaces=namespaces,
        stop_flag=stop_flag,
    )
