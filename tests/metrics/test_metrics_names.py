"""The Grafana dashboard and the metrics docs page name only series the runtime exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from qtg.services.metrics import RuntimeMetrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "qtg" / "api" / "metrics" / "grafana-dashboard.json"
METRICS_PAGE = REPO / "docs" / "metrics.md"


def exposed_names() -> set[str]:
    metrics = RuntimeMetrics()
    metrics.describe_process(network_class="default", workers=["w"], instance="i")
    metrics.worker("w").succeeded(1, 0.01)
    metrics.http_requests.labels("GET", "/healthz", "200").inc()
    metrics.http_seconds.labels("GET", "/healthz").observe(0.01)
    metrics.backlog.labels(kind="node", state="READY").set(0)
    metrics.node_left_state("READY", 0.001)
    text = metrics.exposition().decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_dashboard_query_names_an_exposed_series() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bqtg_[a-z_]+", e)}
    assert used and used <= exposed_names(), used - exposed_names()


def test_every_metric_the_docs_list_is_exposed() -> None:
    listed = set(re.findall(r"^\| `(qtg_[a-z_]+)` \|", METRICS_PAGE.read_text(), re.M))
    exposed = exposed_names()
    suffixes = ("", "_total", "_bucket", "_count", "_sum", "_info")
    missing = {n for n in listed if not any(n + suffix in exposed for suffix in suffixes)}
    assert len(listed) > 10 and not missing, missing


def test_the_process_info_does_not_shadow_prometheus_instance_label() -> None:
    metrics = RuntimeMetrics()
    metrics.describe_process(network_class="default", workers=["b", "a"], instance="host:1")
    [family] = [
        f
        for f in text_string_to_metric_families(metrics.exposition().decode())
        if f.name == "qtg_process_info"
    ]
    assert family.samples[0].labels == {
        "network_class": "default",
        "workers": "a+b",
        "instance_id": "host:1",
    }
