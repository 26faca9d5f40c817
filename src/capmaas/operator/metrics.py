"""Prometheus metrics and JSON logging for the operator.

Metrics live in their own ``CollectorRegistry`` (not the process-global one) so two operators in one test
process do not collide. "Machines by phase" is computed at scrape time from the watch cache, so it can never
drift from what the apiserver holds.

No label carries a tenant's data: a MAAS endpoint is labelled by a short hash of its URL
(:func:`endpoint_label`), never the URL itself (which a tenant chooses, and which tells where each tenant's
MAAS is). The listener binds to loopback by default (``server.metrics_bind_address``): it has no
authentication.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from capmaas.operator.cachemetrics import CacheCollector
from capmaas.operator.kube import Store

DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf"))
#: MAAS request latency: most answers take milliseconds; a BMC query waits up to a minute.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf"))
#: Reconcile queue lag: near zero on an idle event loop, seconds when it is saturated.
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf"))


def endpoint_label(endpoint: str) -> str:
    """The ``endpoint`` label of a MAAS URL: 12 hex digits of its SHA-256 (the same URL, the same label)."""
    return hashlib.sha256(endpoint.strip().encode()).hexdigest()[:12]


def machine_phase(body: dict[str, Any]) -> str:
    """A short phase name for dashboards: Deleting, Ready, or MAAS's state, or Pending."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return "Deleting"
    status = body.get("status") or {}
    if status.get("ready"):
        return "Ready"
    return str(status.get("machineState") or "Pending")


class _PhaseCollector(Collector):
    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("capmaas_machines", "MaasMachines by phase", labels=["phase"])
        counts: dict[str, int] = {}
        for body in self._store.values("maasmachines"):
            phase = machine_phase(body)
            counts[phase] = counts.get(phase, 0) + 1
        for phase, n in sorted(counts.items()):
            family.add_metric([phase], n)
        yield family


class _TemplateCollector(Collector):
    """``status.available`` of every MaasMachineTemplate that has one, read from the watch cache at scrape
    time: one series per template that exists (a deleted template's series goes with it), labelled by
    namespace and name only."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "capmaas_template_available",
            "Servers Ready in MAAS matching a MaasMachineTemplate (LXD: VM slots), by namespace and template",
            labels=["namespace", "template"],
        )
        for body in self._store.values("maasmachinetemplates"):
            available = (body.get("status") or {}).get("available")
            if isinstance(available, int):
                meta = body.get("metadata", {})
                family.add_metric([str(meta.get("namespace", "")), str(meta.get("name", ""))], available)
        yield family


class Metrics:
    """Every metric the operator exports; also the reconcilers' ``Recorder``."""

    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "capmaas_reconciles_total",
            "Reconciles by kind and result",
            ["kind", "result"],
            registry=self.registry,
        )
        self.errors = Counter(
            "capmaas_reconcile_errors_total", "Failed reconciles by kind", ["kind"], registry=self.registry
        )
        self.maas_invalid_items = Counter(
            "capmaas_maas_invalid_items_total",
            "Items of a MAAS list answer left out because they did not parse (e.g. a machine without a "
            "hostname), by endpoint (a hash of its URL) and path template",
            ["endpoint", "path"],
            registry=self.registry,
        )
        self.maas_requests = Counter(
            "capmaas_maas_requests_total",
            "MAAS API requests by endpoint (a hash of its URL), method, path template and HTTP status",
            ["endpoint", "method", "path", "status"],
            registry=self.registry,
        )
        self.maas_latency = Histogram(
            "capmaas_maas_request_duration_seconds",
            "MAAS API request duration (one attempt, answer read) by endpoint (a hash of its URL), method "
            "and path template",
            ["endpoint", "method", "path"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.queue_lag = Histogram(
            "capmaas_reconcile_queue_lag_seconds",
            "Time from an object becoming due (changed, woken, or its requeue delay over) to its reconcile "
            "starting, by kind",
            ["kind"],
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self.adopted = Counter(
            "capmaas_machines_adopted_total",
            "MAAS machines adopted by their MaasMachine after the answer to its allocate was lost",
            registry=self.registry,
        )
        self.released_extra = Counter(
            "capmaas_extra_machines_released_total",
            "Extra MAAS machines found under a MaasMachine's agent name (a second allocate after a lost "
            "answer) and released",
            registry=self.registry,
        )
        self.outside_filter = Counter(
            "capmaas_watch_events_outside_filter_total",
            "Watch events received for objects outside this process's watch filter, ignored, by kind (the "
            "filter is a label selector on the watch, so the apiserver sends none)",
            ["kind"],
            registry=self.registry,
        )
        self.echoes = Counter(
            "capmaas_watch_echoes_total",
            "Watch events that only echoed this process's own writes (the version already cached), taken "
            "before kopf, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.early_events = Counter(
            "capmaas_watch_events_early_total",
            "Watch events of MaasMachines and MaasClusters handled as they were decoded, before kopf (echoes "
            "included), by kind and event type",
            ["kind", "type"],
            registry=self.registry,
        )
        self.handed_off = Counter(
            "capmaas_objects_handed_off_total",
            "Objects relabelled out of this process's watch filter, handed off (nothing released), by kind",
            ["kind"],
            registry=self.registry,
        )
        for kind in ("maasmachines", "maasclusters"):
            self.outside_filter.labels(kind)
            self.echoes.labels(kind)
            for event in ("ADDED", "MODIFIED", "DELETED"):
                self.early_events.labels(kind, event)
            self.handed_off.labels(kind)
        #: Set by the leak audit (:mod:`capmaas.operator.leaks`): MAAS machines still held under the agent
        #: name of a deleted MaasMachine.
        self.leaked = 0
        leaked = Gauge(
            "capmaas_machines_leaked",
            "MAAS machines still held under the agent name of a MaasMachine this operator saw deleted",
            registry=self.registry,
        )
        leaked.set_function(lambda: self.leaked)
        #: Set by the orphan report (:mod:`capmaas.operator.orphans`): what capmaas holds in MAAS that no live
        #: object names, by kind (machine, vm_host, dns_record).
        self.orphaned: dict[str, int] = {}
        orphans = Gauge(
            "capmaas_orphans",
            "MAAS machines, VM hosts and DNS records of capmaas that no live object names (never released "
            "automatically), by kind",
            ["kind"],
            registry=self.registry,
        )
        for kind in ("machine", "vm_host", "dns_record"):
            orphans.labels(kind).set_function(self._orphan_count(kind))
        self.allocation = Histogram(
            "capmaas_allocation_duration_seconds", "MAAS allocate call duration", registry=self.registry
        )
        self.deploy = Histogram(
            "capmaas_deploy_duration_seconds",
            "Deploy request to Deployed+on",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_PhaseCollector(store))
        self.registry.register(_TemplateCollector(store))
        # zones, reasons, ages, invariants
        self.registry.register(CacheCollector(store, machine_phase, leaked=lambda: self.leaked))

    def outcome(self, kind: str, result: str) -> None:
        self.reconciles.labels(kind, result).inc()
        if result != "success":
            self.errors.labels(kind).inc()

    def on_invalid_item(self, endpoint: str) -> Callable[[str], None]:
        label = endpoint_label(endpoint)

        def hook(path: str) -> None:
            self.maas_invalid_items.labels(label, path).inc()

        return hook

    def on_response(self, endpoint: str) -> Callable[[str, str, int, float], None]:
        label = endpoint_label(endpoint)

        def hook(method: str, path: str, status: int, seconds: float) -> None:
            self.maas_requests.labels(label, method, path, str(status)).inc()
            self.maas_latency.labels(label, method, path).observe(seconds)

        return hook

    def lag(self, kind: str, seconds: float) -> None:
        self.queue_lag.labels(kind).observe(seconds)

    # Recorder
    def allocation_duration(self, seconds: float) -> None:
        self.allocation.observe(seconds)

    def deploy_duration(self, seconds: float) -> None:
        self.deploy.observe(seconds)

    def machine_phase(self, key: str, phase: str | None) -> None:
        return None  # computed from the cache at scrape time

    def leaked_machines(self, count: int) -> None:
        """The leak audit's latest count."""
        self.leaked = count

    def _orphan_count(self, kind: str) -> Callable[[], float]:
        return lambda: self.orphaned.get(kind, 0)

    def orphans(self, counts: Mapping[Any, int]) -> None:
        """The orphan report's latest counts, by kind."""
        self.orphaned = dict(counts)

    def machine_adopted(self) -> None:
        self.adopted.inc()

    def extra_machine_released(self) -> None:
        self.released_extra.inc()

    def serve(self, address: str, port: int) -> None:
        if port:
            start_http_server(port, addr=address, registry=self.registry)


def setup_logging(fmt: str, level: str) -> None:
    """JSON (one object per line) or text logs on stderr; replaces kopf's CLI-only log setup."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "asctime": "time"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("kubernetes", "urllib3", "httpx", "httpcore", "kopf.objects"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
