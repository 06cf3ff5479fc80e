"""Faults between the runner and a model server: flaky answers, a hanging server, poison.

Real: the runner in-process (contract file -> exit code), the file backend, the
registered `kserve-v2` and `openai-chat` protocol clients (runners/models/) speaking
HTTP to local stubs (stdlib http.server on 127.0.0.1, see http_stub.KServeStub and
http_stub.OpenAIStub), with the retry waits they really make. Faked: the models
themselves (the stubs double row sums or echo prompts, and misbehave on purpose,
with a seeded RNG).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import contract
from http_stub import KServeStub, OpenAIStub, serve

from runners import cli

FAST_RETRY = {"initialBackoffSeconds": 0.01, "maxBackoffSeconds": 0.05}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("LONGRUN_RUNNER_PLUGINS", raising=False)
    return tmp_path


def run(
    env: Path, url: str, *, records: list[dict[str, Any]], **options: Any
) -> tuple[int, dict[str, Any]]:
    data = env / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        output={"file": {"path": str(env / "out")}},
        runner={**FAST_RETRY, **options.pop("runner", {})},
    )
    doc["model"] = {
        "protocol": "kserve-v2",
        "url": url,
        "name": "iris",
        "binaryData": False,
        "inputFields": ["a", "b"],
        **options.pop("model", {}),
    }
    path = env / "contract.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((env / "termination-log").read_text())


def rows(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for part in sorted(directory.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def records(count: int, *, poison: set[int] = frozenset()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    return [
        {"key": f"k{i}", "a": 666.0 if i in poison else float(i), "b": 1.0} for i in range(count)
    ]


@pytest.fixture
def flaky() -> Iterator[tuple[str, KServeStub]]:
    stub = KServeStub(unavailable=0.10, throttled=0.05)
    with serve(stub) as url:
        yield url, stub


def test_flaky_server_gets_every_record_through_with_the_default_attempts(
    env: Path, flaky: tuple[str, KServeStub]
) -> None:
    url, stub = flaky
    code, summary = run(env, url, records=records(3000), runner={"batchSize": 10, "concurrency": 4})
    assert code == 0, summary
    written = rows(env / "out")
    assert len(written) == 3000 and len({r["id"] for r in written}) == 3000
    assert written[5]["prediction"] == pytest.approx((5.0 + 1.0) * 2)
    assert stub.statuses.get(503, 0) > 0 and stub.statuses.get(429, 0) > 0
    assert summary["recordsRetried"] == stub.statuses[503] + stub.statuses[429]


def test_default_attempts_outlast_a_server_down_for_nine_requests(env: Path) -> None:
    # A model server restarting under a long run: it answered, then every request fails until
    # it is back.
    stub = KServeStub(down_for=9, down_from=2)
    with serve(stub) as url:
        code, summary = run(
            env, url, records=records(20), runner={"batchSize": 10, "concurrency": 1}
        )
    assert code == 0, summary
    assert (summary["recordsWritten"], summary["recordsRetried"]) == (20, 9)
    assert stub.statuses == {503: 9, 200: 2}


def test_hanging_server_times_out_and_fails_the_run_with_reason(env: Path) -> None:
    stub = KServeStub(hang=30)
    with serve(stub) as url:
        try:
            code, summary = run(
                env,
                url,
                records=records(3),
                model={"timeoutSeconds": 0.3},
                runner={"maxAttempts": 2},
            )
        finally:
            stub.release.set()
    assert code == 1  # the Job retries the pod: the records are not at fault
    assert summary["reason"] == (
        "model unavailable: it never answered (2 attempts): kserve-v2 infer: no answer within 0.3s"
    )
    assert (summary["recordsFailed"], summary["recordsWritten"]) == (0, 0)


def test_poison_records_are_isolated_and_the_rest_written(env: Path) -> None:
    stub = KServeStub(poison=666.0)
    with serve(stub) as url:
        code, summary = run(
            env,
            url,
            records=records(100, poison={7, 42}),
            runner={"batchSize": 16, "maxFailedRecords": 2},
        )
    assert code == 0, summary
    assert (summary["recordsWritten"], summary["recordsFailed"]) == (98, 2)
    errors = rows(env / "out-errors")
    assert sorted(e["id"] for e in errors) == ["k42", "k7"]
    assert all("HTTP 400" in e["reason"] for e in errors)


def test_flaky_chat_server_answers_every_record_exactly_once(env: Path) -> None:
    stub = OpenAIStub(unavailable=0.10, throttled=0.05)
    prompts = [f"question {i}" for i in range(320)]
    data = env / "in.jsonl"
    data.write_text("".join(json.dumps({"key": p, "prompt": p}) + "\n" for p in prompts))
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        output={"file": {"path": str(env / "out")}},
        runner={**FAST_RETRY, "batchSize": 32, "concurrency": 4, "chunkSize": 100},
    )
    with serve(stub) as url:
        doc["model"] = {"protocol": "openai-chat", "url": url, "name": "tiny"}
        (env / "contract.json").write_text(json.dumps(doc))
        code = cli.main(["--contract", str(env / "contract.json")])
    summary = json.loads((env / "termination-log").read_text())
    assert code == 0, summary
    assert stub.statuses[503] > 0 and stub.statuses[429] > 0
    # Each request was retried on its own: no batch was retried, no answer was asked twice.
    assert stub.answered == dict.fromkeys(prompts, 1)
    assert summary["recordsRetried"] == 0
    written = rows(env / "out")
    assert sorted(r["prediction"] for r in written) == sorted(f"re: {p}" for p in prompts)


def test_a_500_from_one_poison_record_fails_only_that_record(env: Path) -> None:
    # Issue 15 item 8: the model crashes (HTTP 500) on one record; after the attempts on the
    # whole batch, the batch is bisected so that only that record fails.
    stub = KServeStub(poison=666.0, poison_status=500)
    with serve(stub) as url:
        code, summary = run(
            env,
            url,
            records=records(64, poison={42}),
            runner={"batchSize": 32, "maxFailedRecords": 1, "maxAttempts": 3},
        )
    assert code == 0, summary
    assert (summary["recordsWritten"], summary["recordsFailed"]) == (63, 1)
    errors = rows(env / "out-errors")
    assert [e["id"] for e in errors] == ["k42"] and "HTTP 500" in errors[0]["reason"]
    # 3 attempts on the batch of 32, then one request per part holding it: 16, 8, 4, 2, 1.
    assert stub.statuses[500] == 3 + 5


def test_a_model_that_never_answered_stops_the_run_after_four_attempts_per_batch(
    env: Path,
) -> None:
    # Issue 15 item 16: a model down from the start is not given `maxAttempts` (10) per batch.
    stub = KServeStub(down_for=10**6)
    with serve(stub) as url:
        code, summary = run(
            env, url, records=records(40), runner={"batchSize": 10, "concurrency": 2}
        )
    assert code == 1
    assert "never answered" in summary["reason"] and "HTTP 503" in summary["reason"]
    assert summary["recordsFailed"] == 0 and rows(env / "out-errors") == []
    # The batches in flight (at most 2 x concurrency) each made at most 4 attempts.
    assert stub.statuses[503] <= 4 * 2 * 2
