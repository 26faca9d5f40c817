"""The chart's monitoring switches (``monitoring.*``), rendered by the real helm: nothing by default; when
asked, a PrometheusRule with deploy/monitoring/prometheusrule.yaml's groups, a dashboard ConfigMap holding
deploy/monitoring/grafana-dashboard.json, a ServiceMonitor on the metrics Service; bad values refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from capmaas_dev.devcluster import MissingToolError, find_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "charts" / "capmaas"
MONITORING = REPO / "deploy" / "monitoring"
CREDS = ["--set", "credentials.endpoint=http://127.0.0.1:5240/MAAS", "--set", "credentials.apiKey=a:b:c"]
#: The metrics listener may be bound to loopback by default (metrics.bindAddress); a ServiceMonitor needs
#: it on the pod's address.
BINDS = "bindAddress" in (yaml.safe_load((CHART / "values.yaml").read_text())["metrics"])
SCRAPEABLE = ["--set", "metrics.bindAddress=0.0.0.0"] if BINDS else []
ALL = [
    "--set", "monitoring.serviceMonitor.enabled=true",
    "--set", "monitoring.prometheusRule.enabled=true",
    "--set", "monitoring.dashboard.enabled=true",
    *SCRAPEABLE,
]  # fmt: skip


def helm(tmp_path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        binary = find_binary("helm")
    except MissingToolError as exc:
        pytest.fail(str(exc), pytrace=False)
    env = {**os.environ, **{f"HELM_{k}_HOME": str(tmp_path / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}}
    proc = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def render(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = helm(tmp_path, "template", "rel", str(CHART), "--namespace", "capmaas-system", *CREDS, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


def test_nothing_by_default(tmp_path: Path) -> None:
    docs = render(tmp_path)
    assert not kinds(docs) & {"PrometheusRule", "ServiceMonitor"}
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]


def test_everything_when_asked(tmp_path: Path) -> None:
    docs = render(
        tmp_path, *ALL,
        "--set", "monitoring.prometheusRule.labels.release=kube-prometheus",
        "--set", "monitoring.dashboard.namespace=grafana",
    )  # fmt: skip
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert rule["metadata"]["namespace"] == "capmaas-system"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    source = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["spec"] == source["spec"]  # the alerts' {{ $labels }} survive helm untouched
    assert "{{ $labels.endpoint }}" in json.dumps(rule["spec"])

    dash = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-capmaas-dashboard"
    )
    assert dash["metadata"]["namespace"] == "grafana"
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dash["data"]["capmaas.json"]) == json.loads(
        (MONITORING / "grafana-dashboard.json").read_text()
    )

    sm = next(d for d in docs if d["kind"] == "ServiceMonitor")
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics"))
    assert sm["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == ["capmaas-system"]


def test_no_servicemonitor_without_the_metrics_service(tmp_path: Path) -> None:
    docs = render(tmp_path, *ALL, "--set", "metrics.enabled=false")
    assert "ServiceMonitor" not in kinds(docs)
    assert "PrometheusRule" in kinds(docs)


def test_servicemonitor_refuses_a_loopback_metrics_listener(tmp_path: Path) -> None:
    if not BINDS:
        pytest.skip("this chart has no metrics.bindAddress")
    bad = helm(
        tmp_path, "template", "rel", str(CHART), *CREDS, "--set", "monitoring.serviceMonitor.enabled=true",
        "--set", "metrics.bindAddress=127.0.0.1", check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "set metrics.bindAddress=0.0.0.0" in bad.stderr


def test_lint_and_schema(tmp_path: Path) -> None:
    helm(tmp_path, "lint", str(CHART), *CREDS, *ALL)
    bad = helm(
        tmp_path, "template", "rel", str(CHART), *CREDS, "--set", "monitoring.prometheusRule.enable=true",
        check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "enable" in bad.stderr
    bad = helm(
        tmp_path, "template", "rel", str(CHART), *CREDS, "--set", "monitoring.serviceMonitor.interval=soon",
        check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "interval" in bad.stderr
