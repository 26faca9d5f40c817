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
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import kopf

from capmaas import maas
from capmaas.config import OperatorConfig
from capmaas.gateway import MaasConnections
from capmaas.operator.ipam import Ipam, build_ipam
from capmaas.operator.ipam import register as register_ipam
from capmaas.operator.kube import KubeAdapter, Store, object_key, parse_watch_filter
from capmaas.operator.kubehttp import KubeHttp, KubeHttpError, load_configuration
from capmaas.operator.leader import (
    LeaseSettings,
    LeaseThread,
    default_identity,
    default_lease_name,
    default_namespace,
)
from capmaas.operator.leaks import LeakAudit
from capmaas.operator.metrics import Metrics
from capmaas.operator.orphans import ORPHAN_REASON, OrphanReport
from capmaas.operator.remediation import register as register_remediation
from capmaas.operator.templates import register as register_templates
from capmaas.operator.workers import Reconcile, Workers
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.credentials import parse_selector
from capmaas.reconcilers.handoff import cluster_paused
from capmaas.reconcilers.keys import (
    ANNOTATION_PREFIX,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL,
    DELETE_FOR_MOVE_ANNOTATION,
)
from capmaas.reconcilers.machine import MachineReconciler, MachineSettings
from capmaas.reconcilers.ports import (
    Body,
    EventType,
    MaasCredentials,
    NamespaceAllowList,
    NodePatch,
    NodePatchResult,
    ObjectPlural,
)
from capmaas.reconcilers.scope import Requeue
from capmaas.reconcilers.tenancy import Tenancy

log = logging.getLogger(__name__)

INFRA = "infrastructure.cluster.x-k8s.io"
CAPI = "cluster.x-k8s.io"
KOPF_FINALIZER = ANNOTATION_PREFIX + "kopf-unused"
KUBE_CONNECTIONS = 16  # Kubernetes writes and Secret reads in flight (status/spec patches, bootstrap data)

Fence = Callable[[], bool]  # True while this process may write (the Lease holder, or no leader election)


def always() -> bool:
    return True


async def _nothing() -> None:
    return None


class LeadershipLost(Exception):
    """The Lease was not renewed in time: every loop has been stopped; the process must exit."""


class NotLeaderError(httpx.ConnectError):
    """A MAAS request refused before it is sent: this process no longer holds the Lease. A connect error to
    the MAAS client (nothing reached MAAS), so a reconcile sees it as MAAS unreachable, never as a crash."""


class FencedKubeHttp(KubeHttp):
    """:class:`KubeHttp` that sends no write unless ``fence()`` says this process holds the Lease."""

    def __init__(
        self, cfg: Any, *, fence: Fence, connections: int, field_validation: str | None = None
    ) -> None:
        super().__init__(cfg, connections=connections, field_validation=field_validation)
        self._fence = fence

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        priority: int = 1,
    ) -> dict[str, Any]:
        if method != "GET" and not self._fence():
            raise KubeHttpError(0, f"{method} {path}: not sent, this process is not the leader")
        return await super().request(method, path, body=body, content_type=content_type, priority=priority)


class FencedTransport(httpx.AsyncBaseTransport):
    """Every MAAS request (the pollers' reads too) only while ``fence()`` holds."""

    def __init__(self, inner: httpx.AsyncBaseTransport, fence: Fence) -> None:
        self._inner, self._fence = inner, fence

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self._fence():
            raise NotLeaderError("not sent: this process is not the leader", request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class FencedKubeAdapter(KubeAdapter):
    """The Events and workload-cluster Node writes, fenced like the rest (the patches are, in KubeHttp)."""

    def __init__(
        self, store: Store, http: KubeHttp, *, secret_ttl: float, fence: Fence, watch_filter: str | None
    ) -> None:
        super().__init__(store, http, secret_ttl=secret_ttl, watch_filter=watch_filter)
        self._fence = fence

    async def set_node_provider_id(
        self, kubeconfig: bytes, node_name: str, provider_id: str, labels: Mapping[str, str]
    ) -> NodePatch:
        if not self._fence():
            return NodePatch(NodePatchResult.UNREACHABLE, "not the leader")
        return await super().set_node_provider_id(kubeconfig, node_name, provider_id, labels)

    def emit_event(self, obj: Body, type: EventType, reason: str, message: str) -> None:
        if self._fence():
            super().emit_event(obj, type, reason, message)


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's change-detection base, switched off: we register no change handlers (see the module docstring),
    so there is nothing to diff against, and nothing is ever stored on the objects."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def label_selector(watch_filter: str | None) -> str | None:
    """The watch filter as a Kubernetes label selector (``key=value`` or ``key``); None → no filter."""
    parsed = parse_watch_filter(watch_filter)
    if parsed is None:
        return None
    key, value = parsed
    return key if value is None else f"{key}={value}"


def default_credentials(config: OperatorConfig) -> MaasCredentials | None:
    """The operator's default credentials and the namespaces allowed to use them; a malformed namespace
    selector stops the start here (ValueError naming it)."""
    m = config.maas
    parse_selector(m.default_identity_namespace_selector)
    if not m.endpoint or m.api_key is None:
        return None
    ca = None
    if m.ca_file:
        with open(m.ca_file, encoding="utf-8") as f:
            ca = f.read()
    allowed = NamespaceAllowList(
        frozenset(m.default_identity_namespaces), m.default_identity_namespace_selector
    )
    if not allowed.names and not allowed.selector.strip():
        log.warning(
            "default MAAS credentials are configured but no namespace may use them: set "
            "maas.default_identity_namespaces or maas.default_identity_namespace_selector (docs/security.md)"
        )
    return MaasCredentials(
        endpoint=m.endpoint,
        api_key=m.api_key.get_secret_value(),
        ca_data=ca,
        insecure=m.insecure_skip_tls_verify,
        source="operator default",
        allow_plaintext=m.allow_plaintext_http,
        namespaces=allowed,
    )


def tenancy(config: OperatorConfig) -> Tenancy:
    """Which namespaces may register VM hosts, use which DNS domains, adopt records by name."""
    return Tenancy(
        vm_host_namespaces=frozenset(config.lxd.vm_host_namespaces),
        dns_domains={ns: frozenset(d) for ns, d in config.dns.namespace_domains.items()},
        adopt_dns_by_name=config.dns.adopt_records_by_name,
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
    first_pass: list[float]  # wall time leadership began, until the first reconcile after it logs it
    leaks: LeakAudit
    orphans: OrphanReport
    release: Callable[[], Awaitable[None]] = _nothing  # gives the Lease up (leader election on)
    ipam: Ipam | None = None  # MaasIPPools and the IPAddressClaims they fulfil (operator/ipam.py)

    async def lead(self) -> None:
        """Leadership won: loops for every cached object (new ones start from their watch events)."""
        self.first_pass[:] = [time.time()]
        self.machines.activate(_keys(self.store, "maasmachines"))
        self.clusters.activate(_keys(self.store, "maasclusters"))
        if self.ipam is not None:
            self.ipam.activate()


def _keys(store: Store, plural: str) -> list[str]:
    out = []
    for body in store.values(plural):
        meta = body.get("metadata", {})
        out.append(object_key(plural, meta.get("namespace", ""), meta.get("name", "")))
    return out


def build_runtime(
    config: OperatorConfig, http: KubeHttp, *, fence: Fence = always, active: bool = True
) -> Runtime:
    store = Store()
    metrics = Metrics(store)
    kube = FencedKubeAdapter(
        store,
        http,
        secret_ttl=config.kube.secret_cache_ttl,
        fence=fence,
        watch_filter=config.kube.watch_filter,
    )
    first_pass: list[float] = []
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
        insecure = c.insecure  # each identity's own setting: the operator's applies to its default only
        return maas.MaasClient(
            c.endpoint,
            api_key=c.api_key,
            transport=FencedTransport(
                maas.AiohttpTransport(ssl_context=maas.ssl_context(ca_data=c.ca_data, insecure=insecure)),
                fence,
            ),
            ca_data=c.ca_data,
            insecure=insecure,
            timeout=config.maas.request_timeout,
            max_retries=config.maas.max_retries,
            on_response=metrics.on_response(c.endpoint),
            on_invalid_item=metrics.on_invalid_item(c.endpoint),
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
        negative_ttl=config.polling.connect_failure_ttl,
        poll_deadline=config.polling.poll_deadline,
        hot_max=config.polling.hot_max_interval,
    )
    creds = default_credentials(config)
    rules = tenancy(config)
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
            allocate_in_doubt=maas.in_doubt_window(
                config.maas.request_timeout, maas.RetryPolicy(max_retries=config.maas.max_retries)
            ),
        ),
        recorder=metrics,
        tenancy=rules,
    )
    cluster_rec = ClusterReconciler(kube, connections, default_credentials=creds, tenancy=rules)

    def logged(reconcile: Reconcile) -> Reconcile:
        async def first(body: Body) -> Requeue:
            if first_pass:
                meta = body.get("metadata", {})
                log.info(
                    "first reconcile as leader: %s/%s at=%.3f (%.2fs after leadership began)",
                    meta.get("namespace"), meta.get("name"), time.time(), time.time() - first_pass[0],
                )  # fmt: skip
                first_pass.clear()
            return await reconcile(body)

        return first

    def workers(plural: str, reconcile: Reconcile, **extra: Any) -> Workers:
        return Workers(
            plural,
            logged(reconcile),
            store,
            active=active,
            resync=config.kube.resync_interval,
            backoff_base=ms.retry_base_delay,
            backoff_max=ms.retry_max_delay,
            outcome=metrics.outcome,
            lag=metrics.lag,
            **extra,
        )

    machines = workers("maasmachines", machine_rec.reconcile, on_exit=connections.forget_key)
    clusters = workers("maasclusters", cluster_rec.reconcile)
    holder.update(maasmachines=machines, maasclusters=clusters)
    leaks = LeakAudit(store, connections.sessions, report=metrics.leaked_machines)
    me = operator_object(config)
    orphans = OrphanReport(
        store,
        connections.sessions,
        report=metrics.orphans,
        warn=lambda message: kube.emit_event(me, "Warning", ORPHAN_REASON, message),
    )
    ipam = build_ipam(
        config, store, http, kube, connections, default_credentials=creds, active=active,
        outcome=metrics.outcome, lag=metrics.lag,
    )  # fmt: skip
    return Runtime(
        config, store, kube, metrics, connections, machines, clusters, first_pass, leaks, orphans, ipam=ipam
    )


def operator_object(config: OperatorConfig) -> Body:
    """What the operator's own Events (the orphan report's) are about: its Pod (``POD_NAME`` and
    ``POD_NAMESPACE``, as the chart sets them), else the namespace it runs in: where an admin looks."""
    pod, namespace = os.environ.get("POD_NAME"), default_namespace(config.kube.namespace)
    if pod:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": namespace}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "namespace": namespace}}


def _deleting(body: Any) -> bool:
    return bool(body and body.get("metadata", {}).get("deletionTimestamp"))


def _meta(body: Any) -> tuple[str, str]:
    meta = body.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


def register(registry: kopf.OperatorRegistry, rt: Runtime) -> None:
    """Attach every handler to ``registry``. Handlers are async: they only touch in-memory state, and sync
    ones would run in kopf's thread pool, away from the event loop the per-object loops live on."""
    config = rt.config
    selector = label_selector(config.kube.watch_filter)

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
        if selector:
            # Objects outside the filter are not even sent (a label selector on the watch): each shard caches
            # only its own. A MaasMachine whose owner lacks the label still gets it, by a GET
            # (capmaas.reconcilers.owners). An object relabelled out of the shard comes as DELETED: see
            # handed_off below.
            for group, plural in (
                (CAPI, "machines"),
                (CAPI, "clusters"),
                (INFRA, "maasmachines"),
                (INFRA, "maasclusters"),
            ):
                settings.watching.label_selectors[group, plural] = selector

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster service account, else the kubeconfig (``KUBECONFIG``), via the kubernetes client."""
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
        return info

    audit: list[asyncio.Task[None]] = []

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
        for task in audit:
            task.cancel()
        await rt.machines.stop()
        await rt.clusters.stop()
        if rt.ipam is not None:
            await rt.ipam.stop()
        await rt.connections.aclose()
        await rt.kube.aclose()
        await rt.release()  # the Lease, at once: a standby need not wait for kopf's shutdown to end

    def maascluster_key_for(namespace: str, cluster_name: str) -> str | None:
        cluster = rt.store.find("clusters", namespace, cluster_name)
        ref = ((cluster or {}).get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("name"):
            return object_key("maasclusters", namespace, str(ref["name"]))
        return None

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
        (rt.machines if plural == "maasmachines" else rt.clusters).wake(key)  # its loop sees it gone, ends
        rt.metrics.handed_off.labels(plural).inc()
        log.info("%s left this shard's watch filter %s: handed off, nothing released", key, selector)
        return True

    def moved_out(body: kopf.Body) -> bool:
        """Deleted for ``clusterctl move`` while its Cluster was paused (what the reconcilers honour): what it
        held lives on under the target's operator."""
        annotations = body.get("metadata", {}).get("annotations") or {}
        if DELETE_FOR_MOVE_ANNOTATION not in annotations:
            return False
        meta = body.get("metadata", {})
        owner = next((r for r in meta.get("ownerReferences") or () if r.get("kind") == "Cluster"), None)
        name = str((owner or {}).get("name") or (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL) or "")
        return cluster_paused(rt.store.find("clusters", meta.get("namespace", ""), name))

    def outside(plural: ObjectPlural, type: str | None, body: kopf.Body) -> bool:
        """An object outside the watch filter: ignored, and counted. The label selector on the watch keeps
        the apiserver from sending these at all, so the count stays 0; this is the check of it (and the
        filter in effect should a watch ever run without the selector). A DELETED event is never ignored
        here: it carries the object as it was, and :func:`handed_off` tells what it means."""
        if type == "DELETED" or rt.kube.in_shard(body):
            return False
        rt.metrics.outside_filter.labels(plural).inc()
        return True

    @kopf.on.event(INFRA, "maasmachines", registry=registry)
    async def maasmachine_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if outside("maasmachines", type, body):
            return
        ns, name = _meta(body)
        key = object_key("maasmachines", ns, name)
        meta = body.get("metadata", {})
        if type == "DELETED" and await handed_off("maasmachines", body):
            return
        if type == "DELETED" or (meta.get("deletionTimestamp") and not meta.get("finalizers")):
            moved = moved_out(body)
            rt.leaks.deleted(body, moved=moved)  # first: its loop's end stops the poll the audit needs
            if moved:
                rt.orphans.handed_on(body)
        if type == "DELETED":
            rt.store.delete("maasmachines", ns, name, uid=meta.get("uid"))
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

    @kopf.on.event(INFRA, "maasclusters", registry=registry)
    async def maascluster_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if outside("maasclusters", type, body):
            return
        ns, name = _meta(body)
        key = object_key("maasclusters", ns, name)
        if type == "DELETED" and await handed_off("maasclusters", body):
            return
        if type == "DELETED":
            if moved_out(body):
                rt.orphans.handed_on(body)
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
    # A DELETED event also comes when an object loses the watch filter's label (the apiserver sends it with
    # the labels it had), so these are forgotten without a tombstone: relabelled, the object is cached again.
    # (Nothing but these watches writes CAPI objects into the store, so no late write can bring one back.)
    def machine_seen(type: str | None, body: kopf.Body) -> None:
        ns, name = _meta(body)
        if type == "DELETED":
            rt.store.forget("machines", ns, name)
        elif not rt.store.put("machines", body) and rt.store.find("machines", ns, name) is not None:
            return  # a version already seen (e.g. kopf re-listing after a watch restart)
        ref = (body.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("name"):
            rt.machines.wake(object_key("maasmachines", ns, str(ref["name"])))

    def cluster_seen(type: str | None, body: kopf.Body) -> None:
        ns, name = _meta(body)
        if type == "DELETED":
            rt.store.forget("clusters", ns, name)
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

    # MaasMachineTemplate status (capacity counted in MAAS) and the MachineDeployment Warnings.
    register_templates(registry, rt, default_credentials(config), lambda: rt.machines.active)
    if rt.ipam is not None:
        register_ipam(registry, rt.ipam, wake_machine=rt.machines.wake, label_selector=selector)
    register_remediation(
        registry, rt, default_credentials=default_credentials(config), label_selector=selector
    )


def lease_settings(config: OperatorConfig) -> LeaseSettings:
    le = config.leader_election
    return LeaseSettings(
        namespace=le.namespace or default_namespace(config.kube.namespace),
        name=le.lease_name or default_lease_name(config.kube.namespace, config.kube.watch_filter),
        identity=le.identity or default_identity(),
        lease_duration=le.lease_duration,
        renew_deadline=le.renew_deadline,
        retry_period=le.retry_period,
    )


async def run_operator(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None) -> None:
    """Run until stopped (SIGINT/SIGTERM, or ``stop_flag``); raise :class:`LeadershipLost` if the Lease is
    lost (every loop has stopped by then).

    With leader election, kopf runs from the start in every process (the standbys' watch caches stay warm),
    but the per-object loops start only once the Lease is held, and every MAAS and Kubernetes write is fenced
    by it (see :mod:`capmaas.operator.leader`)."""
    kube_cfg = load_configuration()
    elector: LeaseThread | None = None
    if config.leader_election.enabled:
        # On a thread of its own: renewals never wait behind reconciles on this loop (see leader.py).
        elector = LeaseThread(lambda: KubeHttp(kube_cfg, connections=2, timeout=5.0), lease_settings(config))
    fence = elector.is_leader if elector else always
    http = FencedKubeHttp(
        kube_cfg, fence=fence, connections=KUBE_CONNECTIONS, field_validation=config.kube.field_validation
    )
    rt = build_runtime(config, http, fence=fence, active=elector is None)
    if elector is not None:
        rt.release = elector.release
    registry = kopf.OperatorRegistry()
    register(registry, rt)
    rt.metrics.serve(config.server.metrics_bind_address, config.server.metrics_port)
    liveness = (
        f"http://{config.server.bind_address}:{config.server.health_port}/healthz"
        if config.server.health_port
        else None
    )
    namespaces = [config.kube.namespace] if config.kube.namespace else []
    operator = kopf.operator(
        registry=registry,
        standalone=True,  # kopf's peering is not a lock: the Lease is
        liveness_endpoint=liveness,
        clusterwide=not namespaces,
        namespaces=namespaces,
        # Only a flag someone sets: kopf waits on it in a task of its own that it does not cancel on a signal,
        # and then waits five seconds for that "hung" task at every stop.
        stop_flag=stop_flag,
    )
    if elector is None:
        await operator
        return
    kopf_task = asyncio.create_task(operator, name="kopf")
    lease_task = asyncio.create_task(elector.run(rt.lead), name="leader election")
    try:
        await asyncio.wait({kopf_task, lease_task}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        lease_task.cancel()
        kopf_task.cancel()
        raise
    if not kopf_task.done():
        # Lost (or an unexpected error in the election, which ends the process the same way): every
        # request is fenced already; the loops are cancelled and the caller ends the process at once. Nothing
        # here waits for kopf: its shutdown can take a minute on a loaded machine, and writes nothing.
        rt.machines.cancel()
        if rt.ipam is not None:
            rt.ipam.cancel()
        rt.clusters.cancel()
        if not lease_task.cancelled() and (error := lease_task.exception()) is not None:
            raise LeadershipLost(f"leader election failed: {error!r}") from error
        raise LeadershipLost(f"lost the Lease {elector.settings.namespace}/{elector.settings.name}")
    # kopf stopped (a signal or the caller): its cleanup stopped every loop and gave the Lease up.
    lease_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await lease_task
    await elector.release()
    await elector.aclose()
    await kopf_task
