"""Prometheus metrics with controller-runtime's names, exposed by `prometheus_client`.

controller-runtime's names (`controller_runtime_reconcile_total`, `workqueue_*`,
`leader_election_master_status`) are what existing dashboards and alerts expect,
so we keep them and their labels. `prometheus_client` does the exposition (escaping,
number formatting, content type) and adds the process and platform metrics
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
`python_info`, `python_gc_*`).

One private `CollectorRegistry` per `Metrics` object: no global registry, so a
process (or a test) can hold several controllers. The thin wrappers below bind the
fixed labels (`controller="inferencerun"`) once; callers pass only the varying ones
(`result`, `method`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

import prometheus_client as prom
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTROLLER = "inferencerun"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE: str = prom.CONTENT_TYPE_LATEST
# prometheus_client adds a `<name>_created` series to counters and histograms;
# controller-runtime's (Go) metrics have none, and nothing reads them: left out.
_WITH_CREATED = ("counter", "histogram", "summary")

M = TypeVar("M", prom.Counter, prom.Gauge, prom.Histogram)


class _Bound(Generic[M]):
    """A prometheus_client metric with its fixed labels bound."""

    def __init__(self, metric: M, fixed: Mapping[str, str]) -> None:
        self._metric: M = metric
        self._fixed = dict(fixed)

    def _child(self, labels: Mapping[str, str]) -> M:
        return self._metric.labels(**self._fixed, **labels)

    def value(self, **labels: str) -> float:
        """The current value for `labels` (0 when never set); a histogram's count."""
        wanted = {**self._fixed, **labels}
        for family in self._metric.collect():
            for sample in family.samples:
                kept = sample.name in (family.name + "_total", family.name + "_count", family.name)
                if kept and sample.labels == wanted:
                    return float(sample.value)
        return 0.0


class Counter(_Bound[prom.Counter]):
    """A monotonically increasing count."""

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        """Add `amount`."""
        self._child(labels).inc(amount)


class Gauge(_Bound[prom.Gauge]):
    """A value that goes up and down."""

    def set(self, value: float, **labels: str) -> None:
        """Set the value."""
        self._child(labels).set(value)


class Histogram(_Bound[prom.Histogram]):
    """Observations counted into cumulative buckets."""

    def observe(self, value: float) -> None:
        """Record one observation."""
        self._child({}).observe(value)


class Snapshot(Collector):
    """A gauge whose series are replaced as a whole (`longrun_runs`, computed per scrape).

    A replace drops the series it does not name (a phase no run is in any more), and
    a concurrent scrape sees either the old set or the new one.
    """

    def __init__(self, name: str, help_: str, *, label: str) -> None:
        self.name, self.help, self.label = name, help_, label
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}

    def replace(self, values: Mapping[str, float], *, label: str) -> None:
        """Set one series per value of `label` (the label this gauge was made with)."""
        if label != self.label:
            raise ValueError(f"{self.name} is labelled by {self.label!r}, not {label!r}")
        with self._lock:
            self._values = {key: float(value) for key, value in values.items()}

    def value(self, **labels: str) -> float:
        """The value of one series (0 when absent)."""
        with self._lock:
            return self._values.get(labels.get(self.label, ""), 0.0)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.help, labels=[self.label])
        with self._lock:
            for key, value in sorted(self._values.items()):
                family.add_metric([key], value)
        yield family


class _WithoutCreated(Collector):
    """A registry's metrics minus the `_created` series."""

    def __init__(self, registry: prom.CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.type in _WITH_CREATED:
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class Metrics:
    """Every metric the controller exports, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        self._reconcile_metrics({"controller": CONTROLLER})
        self._queue_metrics({"name": CONTROLLER})
        self.leader = self._gauge(
            "leader_election_master_status",
            "Gauge of if the reporter is master (1) or not (0)",
            {"name": "longrun-controller"},
        )
        self.runs = Snapshot("longrun_runs", "InferenceRuns in the cache by phase", label="phase")
        self.registry.register(self.runs)
        self.rest_requests = self._counter(
            "rest_client_requests_total", "Number of HTTP requests to the API server", {}, "method"
        )
        self._add_runtime_collectors()

    def _reconcile_metrics(self, ctrl: dict[str, str]) -> None:
        self.reconcile_total = self._counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ctrl,
            "result",
        )
        self.reconcile_errors = self._counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ctrl,
        )
        histogram = prom.Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            list(ctrl),
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.reconcile_time = Histogram(histogram, ctrl)
        self.reconcile_time._child({})

    def _queue_metrics(self, queue: dict[str, str]) -> None:
        self.workqueue_depth = self._gauge("workqueue_depth", "Current depth of workqueue", queue)
        self.workqueue_adds = self._counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", queue
        )
        self.workqueue_retries = self._counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", queue
        )

    def _counter(self, name: str, help_: str, fixed: dict[str, str], *varying: str) -> Counter:
        metric = Counter(
            prom.Counter(name, help_, [*fixed, *varying], registry=self.registry), fixed
        )
        if not varying:
            metric._child({})  # exported at 0 from the start, so `== 0` and rate() work
        return metric

    def _gauge(self, name: str, help_: str, fixed: dict[str, str]) -> Gauge:
        metric = Gauge(prom.Gauge(name, help_, list(fixed), registry=self.registry), fixed)
        metric._child({})
        return metric

    def _add_runtime_collectors(self) -> None:
        """Process (CPU, memory, file descriptors), platform and garbage-collector metrics."""
        prom.ProcessCollector(registry=self.registry)
        prom.PlatformCollector(registry=self.registry)
        prom.GCCollector(registry=self.registry)
        self._exposed = _WithoutCreated(self.registry)

    def render(self) -> str:
        """The Prometheus text exposition of every metric (`CONTENT_TYPE`)."""
        return prom.generate_latest(self._exposed).decode()
