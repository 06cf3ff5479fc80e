"""The runner's Prometheus metrics, scraped over HTTP from a real run.

Real: the runner in-process (contract file -> exit code, runners.cli.main), its pipeline,
the file backend, the registered `kserve-v2` client speaking HTTP to a local stub, and the
metrics exporter (prometheus_client's HTTP server on the port LONGRUN_METRICS_PORT names),
scraped with urllib and parsed with prometheus_client's own parser. Faked: the model (the
stub doubles row sums, answers 503 while "restarting" and refuses poison with 400).
The exporter outlives `main` as it does in a pod; the test stops it (`exporters`).
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import contract
from http_stub import KServeStub, serve
from prometheus_client.parser import text_string_to_metric_families

from runners import cli
from runners.metrics import METRICS_ADDRESS_ENV, METRICS_PORT_ENV, RunnerMetrics, outcome_of

FAST_RETRY = {"initialBackoffSeconds": 0.01, "maxBackoffSeconds": 0.05}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def exporters(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RunnerMetrics]]:
    """Every RunnerMetrics that started an exporter in the test, stopped afterwards."""
    started: list[RunnerMetrics] = []
    start = RunnerMetrics._start

    def tracked(self: RunnerMetrics, port: int, address: str) -> None:
        start(self, port, address)
        started.append(self)

    monkeypatch.setattr(RunnerMetrics, "_start", tracked)
    yield started
    for metrics in started:
        metrics.close()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("LONGRUN_RUNNER_PLUGINS", raising=False)
    return tmp_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(env: Path, url: str, *, count: int, poison: set[int], **runner: Any) -> dict[str, Any]:
    data = env / "in.jsonl"
    rows = [
        {"key": f"k{i}", "a": 666.0 if i in poison else float(i), "b": 1.0} for i in range(count)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        output={"file": {"path": str(env / "out")}},
        runner={**FAST_RETRY, **runner},
    )
    doc["model"] = {
        "protocol": "kserve-v2",
        "url": url,
        "name": "iris",
        "binaryData": False,
        "inputFields": ["a", "b"],
    }
    (env / "contract.json").write_text(json.dumps(doc))
    cli.main(["--contract", str(env / "contract.json")])
    summary: dict[str, Any] = json.loads((env / "termination-log").read_text())
    return summary


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_scraped_counts_equal_the_records_failures_and_retries_of_the_run(
    env: Path, exporters: list[RunnerMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv(METRICS_PORT_ENV, str(port))
    stub = KServeStub(poison=666.0, down_for=3, down_from=2)  # 3 retries, 2 records refused
    with serve(stub) as url:
        summary = run(
            env, url, count=100, poison={7, 42}, batchSize=10, chunkSize=25, maxFailedRecords=2
        )
    samples = scrape(port)
    assert (summary["recordsWritten"], summary["recordsFailed"]) == (98, 2), summary
    assert summary["recordsRetried"] == 3
    records = "longrun_runner_records_total"
    assert value(samples, records, outcome="read") == summary["recordsRead"] == 100
    assert value(samples, records, outcome="written") == 98
    assert value(samples, records, outcome="failed") == 2
    assert value(samples, "longrun_runner_retries_total") == 3
    assert value(samples, "longrun_runner_chunks_committed_total") == summary["chunks"] == 4
    assert value(samples, "longrun_runner_input_records") == 100


def test_every_model_request_is_timed_by_outcome_and_none_is_left_in_flight(
    env: Path, exporters: list[RunnerMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv(METRICS_PORT_ENV, str(port))
    stub = KServeStub(poison=666.0, down_for=3, down_from=2)
    with serve(stub) as url:
        run(env, url, count=100, poison={7, 42}, batchSize=10, chunkSize=25, maxFailedRecords=2)
    samples = scrape(port)
    latency = "longrun_runner_model_request_duration_seconds"
    for outcome, status in (("ok", 200), ("rejected", 400), ("unavailable", 503)):
        counted = value(samples, f"{latency}_count", outcome=outcome)
        assert counted == stub.statuses[status], outcome
        infinite = value(samples, f"{latency}_bucket", outcome=outcome, le="+Inf")
        assert infinite == counted
    assert value(samples, f"{latency}_count", outcome="server_error") == 0
    assert value(samples, f"{latency}_sum", outcome="ok") > 0
    assert value(samples, "longrun_runner_model_requests_in_flight") == 0


def test_a_port_in_use_falls_back_to_a_free_one_and_the_run_goes_on(
    env: Path,
    exporters: list[RunnerMetrics],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:  # another `longrun run` on this machine holds the port
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setenv(METRICS_PORT_ENV, str(busy))
        with serve(KServeStub()) as url:
            summary = run(env, url, count=10, poison=set())
    assert summary["recordsWritten"] == 10 and summary.get("reason") is None
    (metrics,) = exporters
    assert metrics.port not in (None, busy)
    assert metrics.port is not None
    assert value(scrape(metrics.port), "longrun_runner_records_total", outcome="written") == 10
    assert f"metrics port {busy} unavailable" in capsys.readouterr().err


def test_no_port_in_the_environment_starts_no_exporter(
    env: Path, exporters: list[RunnerMetrics], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(METRICS_PORT_ENV, raising=False)
    with serve(KServeStub()) as url:
        summary = run(env, url, count=5, poison=set())
    assert summary["recordsWritten"] == 5
    assert exporters == []


@pytest.mark.parametrize("raw", ["http", "70000", "-1"])
def test_a_value_that_is_no_port_turns_the_exporter_off_with_one_line(raw: str) -> None:
    lines: list[str] = []
    metrics = RunnerMetrics()
    metrics.serve_from_env({METRICS_PORT_ENV: raw}, log=lines.append)
    assert metrics.port is None
    assert lines == [f"{METRICS_PORT_ENV}={raw!r} is not a port (0-65535): no metrics endpoint"]


def test_outcomes_follow_what_the_model_call_raised() -> None:
    from runners.api import BatchRejected, TransientError
    from runners.retry import ServerFault

    assert [
        outcome_of(e)
        for e in (None, BatchRejected("x"), ServerFault("x"), TransientError("x"), KeyError("x"))
    ] == ["ok", "rejected", "server_error", "unavailable", "error"]


def test_the_exporter_listens_on_the_address_the_environment_names() -> None:
    metrics = RunnerMetrics()
    env = {METRICS_PORT_ENV: "0", METRICS_ADDRESS_ENV: "127.0.0.1"}
    metrics.serve_from_env(env, log=lambda _line: None)
    try:
        assert metrics._server is not None
        assert metrics._server[0].server_address[0] == "127.0.0.1"  # not every interface
        assert value(scrape(metrics.port), "longrun_runner_records_total", outcome="read") == 0
    finally:
        metrics.close()
