"""The operator's runtime: every long-lived part one ``capmaas run`` shares, built once from the config.

:func:`build_runtime` wires the caches, the Kubernetes and MAAS clients (fenced:
:mod:`capmaas.operator.fencing`), the reconcilers and their per-object loops; the kopf handlers
(:mod:`capmaas.operator.handlers`) feed it events, and :mod:`capmaas.operator.app` starts and stops it.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from capmaas import maas
from capmaas.config import OperatorConfig
from capmaas.gateway import MaasConnections
from capmaas.operator.fencing import Fence, FencedKubeAdapter, FencedTransport, always
from capmaas.operator.ipam import Ipam, build_ipam
from capmaas.operator.kube import KubeAdapter, Store, object_key
from capmaas.operator.kubehttp import KubeHttp
from capmaas.operator.leader import default_namespace
from capmaas.operator.leaks import LeakAudit
from capmaas.operator.metrics import Metrics
from capmaas.operator.orphans import ORPHAN_REASON, OrphanReport
from capmaas.operator.routing import Router, plural_of
from capmaas.operator.workers import Reconcile, Workers
from capmaas.reconcilers.cluster import ClusterReconciler
from capmaas.reconcilers.credentials import parse_selector
from capmaas.reconcilers.machine import MachineReconciler, MachineSettings
from capmaas.reconcilers.ports import Body, MaasCredentials, NamespaceAllowList
from capmaas.reconcilers.scope import Requeue
from capmaas.reconcilers.tenancy import Tenancy

log = logging.getLogger(__name__)


async def _nothing() -> None:
    return None


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
    #: The per-object loops by the plural of their keys (another controller adds its own).
    loops: dict[str, Workers] = field(default_factory=dict)
    #: Which loops a watch event wakes besides its own object's (operator/routing.py).
    router: Router = field(default_factory=Router)

    def wake(self, key: str) -> None:
        """Wake the loop of ``key`` (``plural/namespace/name``), if a loop of that plural runs here."""
        loops = self.loops.get(plural_of(key))
        if loops is not None:
            loops.wake(key)

    async def lead(self) -> None:
        """Leadership won: loops for every cached object (new ones start from their watch events)."""
        self.first_pass[:] = [time.time()]
        for plural, loops in self.loops.items():  # MaasMachines, MaasClusters, and any other controller's
            loops.activate(_keys(self.store, plural))
        if self.ipam is not None:
            self.ipam.activate()

    async def stop(self) -> None:
        """Every loop ends (each finishes the pass it is in)."""
        for loops in self.loops.values():
            await loops.stop()
        if self.ipam is not None:
            await self.ipam.stop()

    def cancel(self) -> None:
        """Leadership lost: every loop is cancelled at once (every request is fenced already)."""
        for loops in self.loops.values():
            loops.cancel()
        if self.ipam is not None:
            self.ipam.cancel()


def _keys(store: Store, plural: str) -> list[str]:
    out = []
    for body in store.values(plural):
        meta = body.get("metadata", {})
        out.append(object_key(plural, meta.get("namespace", ""), meta.get("name", "")))
    return out


#: The cyclic garbage collector's thresholds for the operator (CPython's default: ``(700, 10, 10)``): a
#: young collection after 10,000 new container objects instead of 700, the older generations as often as
#: before relative to it. Every watch event and pass allocates thousands of short-lived dicts; with the
#: default, young collections promoted enough of them that the heap's growth set off full collections over
#: every cached body, a large share of the operator's CPU in a burst (docs/benchmarks/per-machine.md).
#: Cycles are still collected, by the same generations; most die young, before they are looked at.
GC_THRESHOLDS = (10_000, 10, 10)


def collect_less() -> None:
    """Set :data:`GC_THRESHOLDS` (the process's garbage collector: once, when the runtime is built)."""
    gc.set_threshold(*GC_THRESHOLDS)


def build_runtime(
    config: OperatorConfig, http: KubeHttp, *, fence: Fence = always, active: bool = True
) -> Runtime:
    collect_less()
    store = Store()
    metrics = Metrics(store)
    kube = FencedKubeAdapter(
        store,
        http,
        secret_ttl=config.kube.secret_cache_ttl,
        fence=fence,
        watch_filter=config.kube.watch_filter,
        events_level=logging.getLevelNamesMapping()[config.logging.events_level],
        events_burst=config.logging.events_burst,
    )
    # Without leader election the process leads from its start (its first reconcile is its start-up time).
    first_pass: list[float] = [time.time()] if active else []
    loops: dict[str, Workers] = {}

    def wake(key: str) -> None:  # the pollers': a MAAS change wakes the machine's loop
        w = loops.get(plural_of(key))
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
        # Without a CA or the insecure switch: the system store, loaded only if the endpoint is https.
        tls = maas.ssl_context(ca_data=c.ca_data, insecure=insecure) if c.ca_data or insecure else None
        return maas.MaasClient(
            c.endpoint,
            api_key=c.api_key,
            transport=FencedTransport(
                maas.AiohttpTransport(ssl_context=tls),
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
            reuse_wait=ms.reuse_wait,  # node reuse (issue 24)
            reuse_ttl=ms.reuse_ttl,
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
                    "first reconcile %s: %s/%s at=%.3f (%.2fs after %s; process CPU cpu=%.2fs)",
                    "without leader election" if active else "as leader",
                    meta.get("namespace"), meta.get("name"), time.time(), time.time() - first_pass[0],
                    "the runtime was built" if active else "leadership began", time.process_time(),
                )  # fmt: skip
                first_pass.clear()
            return await reconcile(body)

        return first

    def workers(plural: str, reconcile: Reconcile, **extra: Any) -> Workers:
        return Workers.configured(
            plural, logged(reconcile), store, config, active=active, outcome=metrics.outcome, lag=metrics.lag,
            **extra,
        )  # fmt: skip

    machines = workers("maasmachines", machine_rec.reconcile, on_exit=connections.forget_key)
    clusters = workers("maasclusters", cluster_rec.reconcile)
    loops.update(maasmachines=machines, maasclusters=clusters)
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
        config,
        store,
        kube,
        metrics,
        connections,
        machines,
        clusters,
        first_pass,
        leaks,
        orphans,
        ipam=ipam,
        loops=loops,
    )


def operator_object(config: OperatorConfig) -> Body:
    """What the operator's own Events (the orphan report's) are about: its Pod (``POD_NAME`` and
    ``POD_NAMESPACE``, as the chart sets them), else the namespace it runs in: where an admin looks."""
    pod, namespace = os.environ.get("POD_NAME"), default_namespace(config.kube.namespace)
    if pod:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": namespace}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "namespace": namespace}}
