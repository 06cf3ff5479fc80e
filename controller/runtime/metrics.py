"""Prometheus metrics with controller-runtime's names, in the text exposition format.

controller-runtime's names (`controller_runtime_reconcile_total`, `workqueue_*`,
`leader_election_master_status`) are what existing dashboards and alerts expect,
so we keep them. The few metric types needed are implemented here (a page of
code) rather than adding a dependency to the controller image. One `Metrics`
object per controller: no global registry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

CONTROLLER = "inferencerun"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
Labels = tuple[tuple[str, str], ...]


def _fmt_labels(labels: Labels) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_: str, *, labels: Labels = ()) -> None:
        self.name, self.help, self.base = name, help_, labels
        self._lock = threading.Lock()
        self._values: dict[Labels, float] = {}

    def _key(self, extra: dict[str, str]) -> Labels:
        return self.base + tuple(sorted(extra.items()))

    def value(self, **labels: str) -> float:
        """The current value for `labels` (0 when never set)."""
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"
        with self._lock:
            items = sorted(self._values.items())
        for labels, value in items:
            yield f"{self.name}{_fmt_labels(labels)} {value:g}"


class Counter(_Metric):
    """A monotonically increasing count."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        """Add `amount`."""
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Metric):
    """A value that goes up and down."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        """Set the value."""
        with self._lock:
            self._values[self._key(labels)] = value

    def replace(self, values: dict[str, float], *, label: str) -> None:
        """Set one series per value of `label`, dropping series not given."""
        with self._lock:
            self._values = {(*self.base, (label, k)): v for k, v in values.items()}


class Histogram(_Metric):
    """Observations counted into cumulative buckets."""

    kind = "histogram"

    def __init__(self, name: str, help_: str, *, labels: Labels = ()) -> None:
        super().__init__(name, help_, labels=labels)
        self._counts = [0] * len(BUCKETS)
        self._sum = 0.0
        self._count = 0

    def observe(self, value: float) -> None:
        """Record one observation."""
        with self._lock:
            self._sum += value
            self._count += 1
            for i, bound in enumerate(BUCKETS):
                if value <= bound:
                    self._counts[i] += 1

    def lines(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        with self._lock:
            counts, total, count = list(self._counts), self._sum, self._count
        for bound, n in zip(BUCKETS, counts, strict=True):
            yield f"{self.name}_bucket{_fmt_labels((*self.base, ('le', f'{bound:g}')))} {n}"
        yield f"{self.name}_bucket{_fmt_labels((*self.base, ('le', '+Inf')))} {count}"
        yield f"{self.name}_sum{_fmt_labels(self.base)} {total:g}"
        yield f"{self.name}_count{_fmt_labels(self.base)} {count}"


class Metrics:
    """Every metric the controller exports."""

    def __init__(self) -> None:
        ctrl: Labels = (("controller", CONTROLLER),)
        queue: Labels = (("name", CONTROLLER),)
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            labels=ctrl,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            labels=ctrl,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            labels=ctrl,
        )
        self.workqueue_depth = Gauge("workqueue_depth", "Current depth of workqueue", labels=queue)
        self.workqueue_adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", labels=queue
        )
        self.workqueue_retries = Counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", labels=queue
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporter is master (1) or not (0)",
            labels=(("name", "longrun-controller"),),
        )
        self.runs = Gauge("longrun_runs", "InferenceRuns in the cache by phase")
        self.rest_requests = Counter(
            "rest_client_requests_total", "Number of HTTP requests to the API server, by method"
        )

    def all(self) -> list[_Metric]:
        """Every metric, in exposition order."""
        return [
            self.reconcile_total,
            self.reconcile_errors,
            self.reconcile_time,
            self.workqueue_depth,
            self.workqueue_adds,
            self.workqueue_retries,
            self.leader,
            self.runs,
            self.rest_requests,
        ]

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        return "\n".join(line for metric in self.all() for line in metric.lines()) + "\n"
