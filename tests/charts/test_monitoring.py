"""The chart's monitoring options: the runner PodMonitor, the controller ServiceMonitor and the
Grafana dashboard, rendered and linted by the real Helm library (helm-python-sdk).

Real: Helm's lint and template engine with the chart's values.schema.json; the kubernetes
client's models for the dashboard ConfigMap; the controller's builders (the labels and port the
PodMonitor must select); the controller's and the runner's Prometheus registries (the metric
names the dashboard may use). Faked: no cluster, no Prometheus, no Grafana (offline render; the
PromQL is checked for the metric names it reads, not evaluated).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import kubernetes.client
import pytest
import yaml

from controller.core import builders, runnerpod
from controller.core.settings import Settings
from controller.runtime.metrics import Metrics
from runners.metrics import RunnerMetrics, Stats
from tests.controller.unit.objects import resolved

CHART = Path(__file__).resolve().parents[2] / "charts" / "longrun"
DASHBOARD = CHART / "dashboards" / "longrun.json"
ALL_ON = {
    "metrics": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}},
    "dashboards": {"enabled": True},
}
# PromQL words that are not metric names (functions, aggregations, modifiers).
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "offset", "bool", "clamp_min", "clamp_max", "abs", "time", "vector", "scalar",
}  # fmt: skip


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    loaded = helm_python.Chart.load(str(CHART))
    yield loaded
    loaded.close()


def render(chart: Any, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = chart.render(values or {}, name="lr", namespace="longrun-system")
    docs = [
        yaml.safe_load_all(text) for path, text in sorted(out.items()) if path.endswith(".yaml")
    ]
    return [d for texts in docs for d in texts if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_monitoring_objects_are_off_by_default(chart: Any) -> None:
    docs = render(chart)
    assert by_kind(docs, "PodMonitor") == [] and by_kind(docs, "ServiceMonitor") == []
    assert [
        d for d in by_kind(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]
    ] == []


@pytest.mark.parametrize(
    "values",
    [ALL_ON, {**ALL_ON, "controller": {"watchNamespaces": ["team-a"]}}],
    ids=["all-namespaces", "watched-namespaces"],
)
def test_lint_passes_with_monitoring_on(values: dict[str, Any]) -> None:
    report = helm_python.lint(str(CHART), values, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_pod_monitor_selects_the_runner_pods_the_controller_builds_on_their_metrics_port(
    chart: Any,
) -> None:
    (monitor,) = by_kind(render(chart, ALL_ON), "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    template = builders.build_job(resolved(), Settings(default_runner_image="img:1"))["spec"][
        "template"
    ]
    pod_labels = template["metadata"]["labels"]
    selector = monitor["spec"]["selector"]
    assert selector["matchLabels"].items() <= pod_labels.items()
    assert all(e["key"] in pod_labels for e in selector["matchExpressions"])
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = template["spec"]["containers"][0]["ports"]
    assert endpoint["port"] == runnerpod.METRICS_PORT_NAME == ports[0]["name"]
    relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabel["run"] == ["__meta_kubernetes_pod_label_longrun_dev_run"]
    assert monitor["spec"]["namespaceSelector"] == {"any": True}


def test_pod_monitor_looks_only_in_the_watched_namespaces(chart: Any) -> None:
    values = {**ALL_ON, "controller": {"watchNamespaces": ["team-a", "team-b"]}}
    (monitor,) = by_kind(render(chart, values), "PodMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_service_monitor_scrapes_the_controller_metrics_service(chart: Any) -> None:
    docs = render(chart, ALL_ON)
    (monitor,) = by_kind(docs, "ServiceMonitor")
    service = next(
        s for s in by_kind(docs, "Service") if s["metadata"]["name"] == "lr-longrun-metrics"
    )
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


def test_service_monitor_without_the_service_is_refused_with_the_fix(chart: Any) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}, "service": {"enabled": False}}}
    with pytest.raises(Exception, match=r"metrics\.serviceMonitor\.enabled needs metrics\.service"):
        render(chart, values)


def test_dashboard_config_map_carries_the_dashboard_and_the_sidecar_label(chart: Any) -> None:
    (config_map,) = [
        d
        for d in by_kind(render(chart, ALL_ON), "ConfigMap")
        if d["metadata"]["name"] == "lr-longrun-dashboard"
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["longrun.json"]) == json.loads(DASHBOARD.read_text())
    api = kubernetes.client.ApiClient()
    api._ApiClient__deserialize(config_map, "V1ConfigMap")  # type: ignore[attr-defined]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) reads."""
    if found := re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", expr):
        expr = found.group(1)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)  # label matchers, ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    words = set(re.findall(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", expr))
    return words - PROMQL_WORDS


def exported(registry: Any) -> set[str]:
    """Every series name a registry exposes (a counter's _total, a histogram's _bucket...)."""
    names: set[str] = set()
    for family in registry.collect():
        names |= {family.name, *(s.name for s in family.samples)}
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    variables = [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs + variables


def known_metrics() -> set[str]:
    runner = RunnerMetrics()
    runner.watch(Stats(), total=lambda: 100)  # the input's size is exported once known
    return exported(Metrics().registry) | exported(runner.registry)


def test_every_dashboard_query_names_only_metrics_the_controller_or_runner_export() -> None:
    known = known_metrics()
    queries = dashboard_queries()
    assert len(queries) > 10
    unknown = {q: metric_names(q) - known for q in queries if metric_names(q) - known}
    assert unknown == {}
    used = set().union(*(metric_names(q) for q in queries))
    assert {"controller_runtime_reconcile_total", "workqueue_depth"} <= used
    assert {"longrun_runner_records_total", "longrun_runner_retries_total"} <= used
    assert "longrun_runner_tokens_total" in used  # the LLM runs' tokens panel


def test_name_check_catches_a_misspelled_metric() -> None:
    expr = (
        'sum by (run) (rate(longrun_runner_record_total{outcome="read", run=~"$run"}'
        "[$__rate_interval]))"
    )
    assert metric_names(expr) == {"longrun_runner_record_total"}
    assert metric_names(expr) - known_metrics() == {"longrun_runner_record_total"}


def test_dashboard_panels_fit_the_grid_without_overlapping() -> None:
    board = json.loads(DASHBOARD.read_text())
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine
