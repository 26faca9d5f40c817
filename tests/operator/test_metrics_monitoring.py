"""deploy/monitoring/ against a running operator: every metric the Grafana dashboard and the PrometheusRule
name is exported (with samples) by ``capmaas run`` on the real apiserver with the simulator; the chart's
copies are the same files; the watch-cache metrics (zones, reasons, ages, invariants) count what they
claim."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from operator_harness import Harness
from prometheus_client.parser import text_string_to_metric_families

from capmaas import maas
from capmaas.operator.cachemetrics import CacheCollector
from capmaas.operator.kube import Store
from capmaas.operator.metrics import machine_phase
from capmaas_dev import demo

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
CHART_COPY = ROOT / "deploy" / "charts" / "capmaas" / "files" / "monitoring"
METRIC = re.compile(r"\bcapmaas_[a-z0-9_]+\b")


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return data


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r for g in doc["spec"]["groups"] for r in g["rules"]]


def exprs() -> list[str]:
    out = [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", ())]
    out += [str(r["expr"]) for r in rules()]
    return out


def named_metrics() -> set[str]:
    return {m for e in exprs() for m in METRIC.findall(e)}


def test_the_chart_ships_the_same_files() -> None:
    for name in ("grafana-dashboard.json", "prometheusrule.yaml"):
        assert (CHART_COPY / name).read_bytes() == (MONITORING / name).read_bytes(), (
            f"deploy/charts/capmaas/files/monitoring/{name} differs from deploy/monitoring/{name}: "
            f"cp deploy/monitoring/{name} deploy/charts/capmaas/files/monitoring/"
        )


def test_dashboard_and_rules_are_well_formed() -> None:
    d = dashboard()
    assert d["uid"] == "capmaas-operator"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        for t in p.get("targets", ()):
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
    names = [r["alert"] for r in rules()]
    assert len(names) == len(set(names))
    for r in rules():
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert r["annotations"]["description"], r["alert"]
        assert str(r["expr"]).count("(") == str(r["expr"]).count(")"), r["alert"]
    # What the issue asks the alerts to cover.
    assert {
        "CapmaasMaasUnreachable", "CapmaasDeployStuck", "CapmaasMachinesFailingRepeatedly",
        "CapmaasInvariantViolation",
    } <= set(names)  # fmt: skip
    # Machines by phase and zone, MAAS requests/errors/latency by endpoint, readiness and reconcile queue
    # lag, adopted/released-extra/leaked machines, invariants.
    assert {
        "capmaas_machines", "capmaas_machines_by_zone", "capmaas_maas_requests_total",
        "capmaas_allocation_duration_seconds_bucket", "capmaas_machines_not_ready_seconds",
        "capmaas_maas_request_duration_seconds_bucket", "capmaas_reconcile_queue_lag_seconds_bucket",
        "capmaas_machines_adopted_total", "capmaas_extra_machines_released_total",
        "capmaas_machines_leaked", "capmaas_invariant_violations",
    } <= named_metrics()  # fmt: skip


def mm(
    name: str, *, sid: str = "", pid: str = "", zone: str = "", ready: bool = False, **status: Any
) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True" if ready else "False", "reason": status.pop("reason", "Ready")}
    if "since" in status:
        cond["lastTransitionTime"] = status.pop("since")
    spec: dict[str, Any] = {}
    if sid:
        spec["systemID"] = sid
    if pid:
        spec["providerID"] = pid
    st: dict[str, Any] = {"ready": ready, "conditions": [cond], **status}
    if zone:
        st["failureDomain"] = zone
    return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": spec, "status": st}


def samples(store: Store, now: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in CacheCollector(store, machine_phase, clock=lambda: now).collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_cache_metrics_count_zones_reasons_ages_and_invariants() -> None:
    from datetime import datetime

    now = datetime.fromisoformat("2026-01-01T01:00:00+00:00").timestamp()
    store = Store()
    store.put("maasmachines", mm("a", sid="s1", pid="maas://az1/s1", zone="az1", ready=True))
    store.put("maasmachines", mm("b", sid="s2", pid="maas://az2/s2", zone="az2", ready=True))
    store.put(
        "maasmachines",
        mm("c", sid="s3", zone="az2", machineState="Deploying", reason="MachineDeploying",
           since="2026-01-01T00:00:00Z"),
    )  # fmt: skip
    store.put("maasmachines", mm("d", reason="NoMachineAvailable", since="2026-01-01T00:59:00Z"))
    got = samples(store, now)
    assert got[("capmaas_machines_by_zone", (("phase", "Ready"), ("zone", "az1")))] == 1
    assert got[("capmaas_machines_by_zone", (("phase", "Deploying"), ("zone", "az2")))] == 1
    assert got[("capmaas_machines_by_zone", (("phase", "Pending"), ("zone", "none")))] == 1
    assert got[("capmaas_machines_not_ready", (("reason", "NoMachineAvailable"),))] == 1
    assert got[("capmaas_machines_not_ready_seconds", (("phase", "Deploying"),))] == 3600
    assert got[("capmaas_machines_not_ready_seconds", (("phase", "Pending"),))] == 60
    assert got[("capmaas_invariant_violations", (("invariant", "shared_system_id"),))] == 0
    assert got[("capmaas_invariant_violations", (("invariant", "provider_id_mismatch"),))] == 0
    # A double allocation (two live MaasMachines on s1) and a providerID naming another machine.
    store.put("maasmachines", mm("e", sid="s1", zone="az1"))
    store.put("maasmachines", mm("f", sid="s9", pid="maas://az1/s8", zone="az1", ready=True))
    got = samples(store, now)
    assert got[("capmaas_invariant_violations", (("invariant", "shared_system_id"),))] == 1
    assert got[("capmaas_invariant_violations", (("invariant", "provider_id_mismatch"),))] == 1
    # A MaasMachine being deleted still holds its machine until MAAS released it: not a double allocation.
    deleting = mm("e", sid="s1", zone="az1")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    store.put("maasmachines", deleting)
    assert samples(store, now)[("capmaas_invariant_violations", (("invariant", "shared_system_id"),))] == 0


@pytest.mark.k8s
async def test_every_metric_in_the_dashboard_and_rules_is_exported(harness: Harness) -> None:
    h = harness
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.machine("huge", cp=False, min_cpu=512)  # nothing in MAAS fits: NoMachineAvailable
    # A MaasCluster whose identity Secret does not exist: not ready, IdentitySecretNotFound.
    await h.cluster(
        "c2", maascluster=demo.maascluster("c2", h.namespace, identity="missing"), provision=False
    )

    async def settled() -> bool:
        ready = await h.field("maasmachines", "w0", "status", "ready")
        huge = await h.condition("maasmachines", "huge", "Ready")
        c2 = await h.condition("maasclusters", "c2", "Ready")
        return bool(ready and huge and huge.get("reason") == "NoMachineAvailable" and c2)

    await h.wait("w0 Ready, huge NoMachineAvailable, c2 not ready", settled)
    port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    missing = sorted(named_metrics() - exported)
    assert not missing, f"named in deploy/monitoring but not exported: {missing}\n{text}"
    assert 'capmaas_machines_not_ready{reason="NoMachineAvailable"} 1.0' in text
    assert 'capmaas_clusters_not_ready{reason="IdentitySecretNotFound"} 1.0' in text
    assert 'capmaas_invariant_violations{invariant="shared_system_id"} 0.0' in text
    assert re.search(r'capmaas_machines_by_zone\{phase="Ready",zone="az\d"\} 1\.0', text), text
    # MAAS latency per endpoint: one observation per answer, labelled like the request counter.
    got = scraped(text)
    allocate = {"method": "POST", "path": "machines/?op=allocate"}
    assert value(got, "capmaas_maas_request_duration_seconds_count", **allocate) >= 2  # w0, huge
    assert value(got, "capmaas_maas_request_duration_seconds_sum", **allocate) > 0
    endpoints = {
        name: {lb["endpoint"] for n, lb, _ in got if n == name}
        for name in ("capmaas_maas_request_duration_seconds_count", "capmaas_maas_requests_total")
    }
    assert endpoints["capmaas_maas_requests_total"], endpoints
    assert len(set(map(frozenset, endpoints.values()))) == 1, endpoints
    assert value(got, "capmaas_reconcile_queue_lag_seconds_count", kind="maasmachines") >= 2
    assert value(got, "capmaas_reconcile_queue_lag_seconds_count", kind="maasclusters") >= 2
    # The watch events of the operator's own writes were taken before kopf (operator/early.py), and with
    # them the other events of its kinds once kopf had run their handlers.
    assert value(got, "capmaas_watch_echoes_total", kind="maasmachines") >= 1
    assert value(got, "capmaas_watch_echoes_total", kind="maasclusters") >= 1
    early = {"kind": "maasmachines", "type": "MODIFIED"}
    assert value(got, "capmaas_watch_events_early_total", **early) >= value(
        got, "capmaas_watch_echoes_total", kind="maasmachines"
    )


Sample = tuple[str, dict[str, str], float]


def scraped(text: str) -> list[Sample]:
    return [
        (s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples
    ]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for n, lb, v in samples if n == name and labels.items() <= lb.items())


async def _gone(h: Harness, name: str) -> bool:
    return await h.get("maasmachines", name) is None


async def scrape(h: Harness) -> list[Sample]:
    port = h.operator.env["CAPMAAS_SERVER__METRICS_PORT"]
    async with httpx.AsyncClient() as client:
        return scraped((await client.get(f"http://127.0.0.1:{port}/metrics")).text)


@pytest.mark.k8s
async def test_adopted_released_extra_and_leaked_counts_move(harness: Harness) -> None:
    """The counters behind the dashboard's "adopted / released extra / leaked" panel and the invariant alert,
    each driven by the thing it counts on a running operator: a MaasMachine that finds two machines under its
    agent name (an allocate whose answer was lost, then a second one) adopts one and releases the other; a
    MaasMachine whose stuck deletion is ended by stripping its finalizer leaves its machine held in MAAS
    (leaked) until someone releases it."""
    h = harness
    h.operator.env["CAPMAAS_POLLING__LEAK_AUDIT_INTERVAL"] = "0.5"
    h.operator.start()
    await h.cluster()
    await h.machine("w0", cp=False)
    await h.wait("w0 Ready", lambda: h.field("maasmachines", "w0", "status", "ready"))
    got = await scrape(h)
    for name in ("capmaas_machines_adopted_total", "capmaas_extra_machines_released_total"):
        assert value(got, name) == 0, name
    assert value(got, "capmaas_machines_leaked") == 0
    assert value(got, "capmaas_invariant_violations", invariant="allocation_without_maasmachine") == 0
    lag_before = value(got, "capmaas_reconcile_queue_lag_seconds_count")

    # Lost answers: the operator is down; a0's allocate is in doubt (annotation written) and MAAS holds two
    # machines under its agent name (the first allocate did happen, and a second one was sent after it).
    h.operator.stop()
    await h.machine("a0", cp=False)
    await h.k(
        "annotate", "maasmachines", "a0", "-n", h.namespace,
        "capmaas.infrastructure.cluster.x-k8s.io/allocating=1",
    )  # fmt: skip
    uid = await h.uid("maasmachines", "a0")
    async with maas.MaasClient(h.url, api_key=h.sim.api_key) as client:
        held = sorted([(await client.machines.allocate(agent_name=uid)).system_id for _ in range(2)])
    h.operator.start()
    await h.wait("a0 Ready", lambda: h.field("maasmachines", "a0", "status", "ready"), within=90)
    assert await h.field("maasmachines", "a0", "spec", "systemID") == held[0]
    got = await scrape(h)
    assert value(got, "capmaas_machines_adopted_total") == 1
    assert value(got, "capmaas_extra_machines_released_total") == 1
    assert value(got, "capmaas_reconcile_queue_lag_seconds_count") > 0  # a fresh process: its own passes
    assert lag_before > 0

    # A stuck deletion "fixed" by hand: w0 is deleted while paused (the operator keeps its hands off), then
    # its finalizer is stripped, so it goes without its machine being released.
    sid = await h.field("maasmachines", "w0", "spec", "systemID")
    await h.k("annotate", "maasmachines", "w0", "-n", h.namespace, "cluster.x-k8s.io/paused=")

    async def paused() -> bool:
        c = await h.condition("maasmachines", "w0", "Paused")
        return bool(c and c.get("status") == "True")

    await h.wait("w0 paused", paused)
    await h.k("delete", "maasmachines", "w0", "-n", h.namespace, "--wait=false")
    await h.k(
        "patch", "maasmachines", "w0", "-n", h.namespace, "--type=merge", "-p",
        '{"metadata":{"finalizers":null}}',
    )  # fmt: skip
    await h.wait("w0 gone", lambda: _gone(h, "w0"))

    async def leaked(n: int) -> bool:
        got = await scrape(h)
        return (
            value(got, "capmaas_machines_leaked") == n
            and value(got, "capmaas_invariant_violations", invariant="allocation_without_maasmachine") == n
        )

    await h.wait("w0's machine counted leaked", lambda: leaked(1))
    assert h.sim.machine(sid)["status_name"] == "Deployed"
    # Someone releases it in MAAS: the count falls back.
    async with maas.MaasClient(h.url, api_key=h.sim.api_key) as client:
        await client.machines.release(sid)
    await h.wait("the leak count back to 0", lambda: leaked(0))
