"""Metrics computed at scrape time from the operator's watch cache, for dashboards and alerts.

Like "machines by phase" (:mod:`capmaas.operator.metrics`), these are read from the MaasMachines and
MaasClusters the operator already holds, so they can never drift from what the apiserver says and cost
nothing between scrapes:

- ``capmaas_machines_by_zone{phase,zone}``: MaasMachines by phase and failure domain (``none`` before a zone
  is chosen);
- ``capmaas_machines_not_ready{reason}``: MaasMachines that are not Ready, by their Ready condition's reason
  (``MaasUnreachable``, ``NoMachineAvailable``, ``DeploymentFailed``, ``RetriesExhausted``, ...);
- ``capmaas_machines_not_ready_seconds{phase}``: the longest time any MaasMachine in that phase has been not
  Ready (since its Ready condition last changed), e.g. the oldest deploy for ``phase="Deploying"``;
- ``capmaas_clusters_not_ready{reason}``: MaasClusters that are not ready, by reason (``MaasUnreachable``,
  ``InvalidCredentials``, ``IdentitySecretNotFound``, ...);
- ``capmaas_invariant_violations{invariant}``: what must never happen and can be seen from the cache:
  ``shared_system_id`` (two live MaasMachines naming the same MAAS machine: a double allocation) and
  ``provider_id_mismatch`` (a providerID that does not end in the MaasMachine's own system ID), and
  ``allocation_without_maasmachine`` (a MAAS machine still held under a deleted MaasMachine's agent name:
  not in the cache by definition, so it comes from the leak audit, :mod:`capmaas.operator.leaks`). Every
  invariant is exported, 0 when it holds, so an alert can tell "fine" from "not scraped";
- ``capmaas_watch_cache_objects{kind}``: objects held in the watch cache, by kind (``maasmachines``,
  ``maasclusters``, ``machines``, ``clusters``): with a watch filter, only the shard's own
  (docs/operating.md).

Labels are bounded: phases and reasons are the operator's own words, zones are MAAS zone names. No object
name, system ID or endpoint URL becomes a label.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from capmaas.operator.kube import Store

INVARIANTS = ("shared_system_id", "provider_id_mismatch", "allocation_without_maasmachine")
CACHED_KINDS = ("maasmachines", "maasclusters", "machines", "clusters")


def _ready_condition(body: dict[str, Any]) -> dict[str, Any]:
    for c in (body.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return dict(c)
    return {}


def _since(stamp: object, now: float) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return max(0.0, now - datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


class CacheCollector(Collector):
    """The families above; ``phase_of`` is the phase function of "machines by phase", so both agree."""

    def __init__(
        self,
        store: Store,
        phase_of: Callable[[dict[str, Any]], str],
        clock: Callable[[], float] = time.time,
        *,
        leaked: Callable[[], int] = lambda: 0,
    ) -> None:
        self._store = store
        self._phase_of = phase_of
        self._clock = clock
        self._leaked = leaked

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self._clock()
        by_zone: dict[tuple[str, str], int] = {}
        not_ready: dict[str, int] = {}
        oldest: dict[str, float] = {}
        holders: dict[str, int] = {}
        mismatched = 0
        for body in self._store.values("maasmachines"):
            phase = self._phase_of(body)
            spec, status = body.get("spec") or {}, body.get("status") or {}
            zone = str(status.get("failureDomain") or spec.get("failureDomain") or "none")
            by_zone[(phase, zone)] = by_zone.get((phase, zone), 0) + 1
            if phase != "Ready":
                cond = _ready_condition(body)
                reason = str(cond.get("reason") or "Unknown")
                not_ready[reason] = not_ready.get(reason, 0) + 1
                age = _since(cond.get("lastTransitionTime"), now)
                if age is None:
                    age = _since((body.get("metadata") or {}).get("creationTimestamp"), now)
                if age is not None:
                    oldest[phase] = max(oldest.get(phase, 0.0), age)
            sid = str(spec.get("systemID") or "")
            if sid and not (body.get("metadata") or {}).get("deletionTimestamp"):
                holders[sid] = holders.get(sid, 0) + 1
            pid = str(spec.get("providerID") or "")
            if sid and pid and pid.rsplit("/", 1)[-1] != sid:
                mismatched += 1

        family = GaugeMetricFamily(
            "capmaas_machines_by_zone", "MaasMachines by phase and failure domain", labels=["phase", "zone"]
        )
        for (phase, zone), n in sorted(by_zone.items()):
            family.add_metric([phase, zone], n)
        yield family

        family = GaugeMetricFamily(
            "capmaas_machines_not_ready",
            "MaasMachines not Ready, by Ready condition reason",
            labels=["reason"],
        )
        for reason, n in sorted(not_ready.items()):
            family.add_metric([reason], n)
        yield family

        family = GaugeMetricFamily(
            "capmaas_machines_not_ready_seconds",
            "Longest time a MaasMachine in this phase has been not Ready (since its Ready condition changed)",
            labels=["phase"],
        )
        for phase, age in sorted(oldest.items()):
            family.add_metric([phase], age)
        yield family

        clusters: dict[str, int] = {}
        for body in self._store.values("maasclusters"):
            if not (body.get("status") or {}).get("ready"):
                reason = str(_ready_condition(body).get("reason") or "Unknown")
                clusters[reason] = clusters.get(reason, 0) + 1
        family = GaugeMetricFamily(
            "capmaas_clusters_not_ready",
            "MaasClusters not ready, by Ready condition reason",
            labels=["reason"],
        )
        for reason, n in sorted(clusters.items()):
            family.add_metric([reason], n)
        yield family

        family = GaugeMetricFamily(
            "capmaas_invariant_violations",
            "Violations of what must never happen, seen in the watch cache (0 when it holds)",
            labels=["invariant"],
        )
        family.add_metric(["shared_system_id"], sum(1 for n in holders.values() if n > 1))
        family.add_metric(["provider_id_mismatch"], mismatched)
        family.add_metric(["allocation_without_maasmachine"], self._leaked())
        yield family

        counts = self._store.counts()
        family = GaugeMetricFamily(
            "capmaas_watch_cache_objects",
            "Objects held in the operator's watch cache, by kind",
            labels=["kind"],
        )
        for kind in CACHED_KINDS:
            family.add_metric([kind], counts.get(kind, 0))
        yield family
