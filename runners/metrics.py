"""Prometheus metrics of one runner process, served on the port the pod declares.

Why the counts are read from the pipeline's `Stats` at scrape time rather than counted a
second time: the metrics then say exactly what the summary says (`recordsRead`,
`recordsWritten`, `recordsFailed`, `recordsRetried`), by construction. Like the summary, they
cover the whole run: a pod that resumes after committed chunks starts its counters at the
records those chunks hold (a new pod is a new series, so `rate()` is not fooled).

Labels stay low-cardinality: the run's name and namespace are not labels here, they come
from the scraped pod's labels (the chart's PodMonitor copies `longrun.dev/run` to `run`).

Metrics, all prefixed `longrun_runner_`:
- `records_total{outcome="read|written|failed"}`: records of committed chunks (read =
  written + failed); `failed` are the per-record failures, in the error output;
- `retries_total`: retries made (model requests, input reads, chunk writes);
- `chunks_committed_total`; `input_records`: the input's size, once the source knows it;
- `tokens_total{kind="prompt|completion|total"}`: the token usage of the written records
  (OpenAI protocols; 0 for the others), the summary's promptTokens, completionTokens and
  totalTokens;
- `model_request_duration_seconds{outcome}`: each model call (one batch, one attempt):
  `ok`, `rejected` (4xx), `server_error` (500), `unavailable` (refused, timeout, 429,
  502-504) or `error` (anything else);
- `model_requests_in_flight`.

The exporter listens on METRICS_PORT_ENV (the controller sets it with the containerPort,
controller/core/runnerpod.py). Metrics never stop a run: a port already in use (two
`longrun run` on one machine) falls back to a free port, said in one stderr line; a value
that is not a port turns the exporter off, said the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

import prometheus_client as prom
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runners.api import BatchRejected, TransientError
from runners.retry import ServerFault

METRICS_PORT_ENV = "LONGRUN_METRICS_PORT"
# Where the exporter listens: every address by default (in a pod, its own network namespace:
# the pod IP Prometheus scrapes); `longrun run` sets 127.0.0.1, the host's network being shared.
METRICS_ADDRESS_ENV = "LONGRUN_METRICS_ADDRESS"
PREFIX = "longrun_runner_"
# Model calls take milliseconds (a small KServe model) to minutes (a long generation).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
OUTCOMES = ("ok", "rejected", "server_error", "unavailable", "error")
T = TypeVar("T")


@dataclass
class Stats:
    """Counters of one execution, shared by the threads (guarded by `lock`).

    The summary (runners/cli.py) and the metrics below both read them.
    """

    read: int = 0
    written: int = 0
    failed: int = 0
    retried: int = 0
    chunks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    run_completed: bool | None = None  # a pod of several: it completed the whole run

    def add(self, **counts: int) -> None:
        """Add to counters by name, atomically."""
        with self.lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)

    def snapshot(self) -> Stats:
        """A copy of the counters, taken at one instant."""
        with self.lock:
            return Stats(
                self.read,
                self.written,
                self.failed,
                self.retried,
                self.chunks,
                self.prompt_tokens,
                self.completion_tokens,
                self.total_tokens,
            )


def _unknown() -> int | None:
    return None


def outcome_of(exc: BaseException | None) -> str:
    """The `outcome` label of a model call that raised `exc` (None: it answered)."""
    if exc is None:
        return "ok"
    if isinstance(exc, BatchRejected):
        return "rejected"
    if isinstance(exc, ServerFault):
        return "server_error"
    if isinstance(exc, TransientError):
        return "unavailable"
    return "error"


class _RunCounts(Collector):
    """The record counters, read from the pipeline's Stats at each scrape."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.total: Callable[[], int | None] = _unknown

    def collect(self) -> Iterator[Metric]:
        c, total = self.stats.snapshot(), self.total()
        records = CounterMetricFamily(
            PREFIX + "records",
            "Records of committed chunks by outcome (read = written + failed)",
            labels=["outcome"],
        )
        for outcome, value in (("read", c.read), ("written", c.written), ("failed", c.failed)):
            records.add_metric([outcome], value)
        yield records
        yield CounterMetricFamily(
            PREFIX + "retries", "Retries made: model requests, input reads, chunk writes", c.retried
        )
        yield CounterMetricFamily(PREFIX + "chunks_committed", "Chunks committed", c.chunks)
        tokens = CounterMetricFamily(
            PREFIX + "tokens",
            "Token usage of the written records (OpenAI protocols) by kind",
            labels=["kind"],
        )
        for kind, value in (
            ("prompt", c.prompt_tokens),
            ("completion", c.completion_tokens),
            ("total", c.total_tokens),
        ):
            tokens.add_metric([kind], value)
        yield tokens
        if total is not None:
            yield GaugeMetricFamily(
                PREFIX + "input_records", "Records in the input, once the source knows", total
            )


class _WithoutCreated(Collector):
    """A registry's metrics minus the `_created` series prometheus_client adds (unused)."""

    def __init__(self, registry: prom.CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class RunnerMetrics:
    """Every metric of one runner, in a registry of its own, and its HTTP exporter."""

    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        self._counts = _RunCounts()
        self.registry.register(self._counts)
        self.in_flight = prom.Gauge(
            PREFIX + "model_requests_in_flight",
            "Model calls waiting for an answer",
            registry=self.registry,
        )
        self.latency = prom.Histogram(
            PREFIX + "model_request_duration_seconds",
            "Duration of each model call (one batch, one attempt) by outcome",
            ["outcome"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # every series exported from the start, at 0
            self.latency.labels(outcome)
        prom.ProcessCollector(registry=self.registry)
        self.exposed: Collector = _WithoutCreated(self.registry)
        self._server: tuple[WSGIServer, threading.Thread] | None = None
        self.port: int | None = None

    def watch(self, stats: Stats, *, total: Callable[[], int | None]) -> None:
        """Read the record counters from `stats`, the input's size from `total()`, per scrape."""
        self._counts.stats, self._counts.total = stats, total

    def timed(self, call: Callable[[], T]) -> T:
        """`call()` (one model request), counted in flight and timed by outcome."""
        started = time.perf_counter()
        error: BaseException | None = None
        self.in_flight.inc()
        try:
            return call()
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.in_flight.dec()
            self.latency.labels(outcome_of(error)).observe(time.perf_counter() - started)

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        return prom.generate_latest(self.exposed).decode()

    def serve_from_env(self, environ: Mapping[str, str], *, log: Callable[[str], None]) -> None:
        """Start the exporter on the port `environ` names (METRICS_PORT_ENV), once.

        Unset or empty: no exporter. 0: a free port. A port in use: a free port instead.
        """
        raw = environ.get(METRICS_PORT_ENV, "").strip()
        if not raw or self._server is not None:
            return
        try:
            port = int(raw)
            if not 0 <= port <= 65535:
                raise ValueError
        except ValueError:
            log(f"{METRICS_PORT_ENV}={raw!r} is not a port (0-65535): no metrics endpoint")
            return
        address = environ.get(METRICS_ADDRESS_ENV, "").strip() or "0.0.0.0"
        try:
            self._start(port, address)
        except OSError as exc:
            self._start(0, address)
            log(f"metrics port {port} unavailable ({exc.strerror}): serving on {self.port}")

    def _start(self, port: int, address: str) -> None:
        server, thread = prom.start_http_server(port, addr=address, registry=self.exposed)
        self._server = (server, thread)
        self.port = int(server.server_port)

    def close(self) -> None:
        """Stop the exporter, if it runs (the process exiting stops it too)."""
        if self._server is None:
            return
        server, thread = self._server
        self._server = None
        server.shutdown()
        server.server_close()
        thread.join()
