"""LLM runs end to end in the runner: OpenAI batch files, bodies from rows, tokens counted.

Real: `runners.cli.main` in-process (contract file in, exit code and summary out), the
pipeline, the file backend, the SQL backend on SQLite (its sink also on PostgreSQL and
MariaDB), the S3 backend on moto's S3 server,
the OpenAI clients over real HTTP. Faked: the model server, a small OpenAI-compatible server
(tests/runners/openai_stub.py) whose answers and usage are deterministic. The same runs
against a real llama.cpp server: tests/local/test_examples_run.py.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fakes import contract
from openai_stub import MODEL, OpenAIStub, serve
from runner_stores import drop_tables

from contracts.storage import SqlStorage
from runners import cli
from runners.api import OutputRecord, RunContext
from runners.opening import load_contract, open_all
from runners.pipeline import Pipeline, Stats
from runners.storage.sql import SqlSink
from runners.tokens import sum_usage

CHAT = "/v1/chat/completions"


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with serve() as running:
        yield running


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return tmp_path


def llm_contract(stub: OpenAIStub, **blocks: Any) -> dict[str, Any]:
    doc = contract()
    doc["model"] = {"protocol": "openai-chat", "url": f"{stub.url}/v1", "name": MODEL}
    doc["runner"] = {"progressIntervalSeconds": 1, "maxFailedRatio": 1, **blocks.pop("runner", {})}
    doc.update(blocks)
    return doc


def run(env: Path, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    path = env / "contract.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((env / "termination-log").read_text())


def lines(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(text)
        for part in sorted(directory.glob("part-*.jsonl"))
        for text in part.read_text().splitlines()
    ]


def ask(custom_id: str, content: str, url: str = CHAT, **body: Any) -> str:
    body = {"messages": [{"role": "user", "content": content}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


BAD_LINES = {
    "not json {": "invalid_json_line",
    json.dumps({"method": "POST", "url": CHAT, "body": {}}): "missing_required_parameter",
    ask("get", "x").replace('"POST"', '"GET"'): "invalid_method",
    ask("img", "x", url="/v1/images/generations"): "invalid_url",
    ask("other", "x", model="gpt-4o"): "model_mismatch",
    ask("refused", "x", max_tokens=-1): "invalid_request",
    ask("a", "again"): "duplicate_custom_id",
}


def test_each_line_of_a_batch_file_is_answered_or_refused_once_and_tokens_add_up(
    env: Path, stub: OpenAIStub
) -> None:
    good = [ask("a", "hi"), ask("b", "yo", max_tokens=2), ask("c", "yes", model=MODEL)]
    good.append(json.dumps({"custom_id": "e", "method": "POST", "url": "/v1/embeddings",
                            "body": {"input": "vector please"}}))  # fmt: skip
    text = "\n".join([*good[:2], *BAD_LINES, *good[2:]]) + "\n"
    (env / "batch.jsonl").write_text(text)
    doc = llm_contract(
        stub,
        input={"file": {"path": str(env / "batch.jsonl"), "format": "openai-batch"}},
        output={"file": {"path": str(env / "out")}},  # format: from the input's
    )

    code, summary = run(env, doc)

    assert code == 0
    written, failed = lines(env / "out"), lines(env / "out-errors")
    assert [line["custom_id"] for line in written] == ["a", "b", "c", "e"]
    assert all(list(line) == ["id", "custom_id", "response", "error"] for line in written)
    assert all(line["error"] is None and line["response"]["status_code"] == 200 for line in written)
    assert written[1]["response"]["body"]["usage"]["completion_tokens"] == 2
    assert [line["error"]["code"] for line in failed] == list(BAD_LINES.values())
    assert [line["custom_id"] for line in failed] == [
        None,
        None,
        "get",
        "img",
        "other",
        "refused",
        "a",
    ]
    assert failed[5]["response"]["status_code"] == 400  # the server's answer, kept
    assert failed[5]["response"]["body"]["error"]["message"] == "max_tokens must be at least 0"
    assert summary["recordsRead"] == len(good) + len(BAD_LINES) == len(written) + len(failed)
    assert summary["recordsWritten"] == 4 and summary["recordsFailed"] == len(BAD_LINES)
    usage = sum_usage(line["response"]["body"]["usage"] for line in written)
    assert usage["total_tokens"] > 0
    assert summary["totalTokens"] == usage["total_tokens"]
    assert summary["promptTokens"] == usage["prompt_tokens"]
    assert summary["completionTokens"] == usage["completion_tokens"]
    assert len({line["id"] for line in written + failed}) == 11  # batch_req ids, each its own


def test_a_resumed_run_counts_the_tokens_of_the_chunks_committed_before(
    env: Path, stub: OpenAIStub
) -> None:
    (env / "batch.jsonl").write_text("".join(ask(f"q{n}", f"n{n}") + "\n" for n in range(9)))
    doc = llm_contract(
        stub,
        input={"file": {"path": str(env / "batch.jsonl"), "format": "openai-batch"}},
        output={"file": {"path": str(env / "out")}},
        runner={"chunkSize": 3, "batchSize": 3},
    )
    first = run(env, doc)[1]
    (env / "out" / "part-000002.jsonl").unlink()  # as if the pod died before the last chunk
    (env / "out" / "_SUCCESS").unlink()
    sent = len(stub.requests)

    code, summary = run(env, doc)

    assert code == 0 and len(stub.requests) == sent + 3  # only the last chunk again
    assert summary["totalTokens"] == first["totalTokens"]
    assert (
        summary["totalTokens"]
        == sum_usage(line["response"]["body"]["usage"] for line in lines(env / "out"))[
            "total_tokens"
        ]
    )


def test_rows_with_a_messages_column_get_answers_and_usage_into_an_sql_table(
    env: Path, stub: OpenAIStub
) -> None:
    db = env / "chats.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE chats (id INTEGER PRIMARY KEY, dialog TEXT)")
        turns = [[{"role": "user", "content": f"question {n}"}] for n in range(5)]
        conn.executemany(
            "INSERT INTO chats VALUES (?, ?)", [(n, json.dumps(t)) for n, t in enumerate(turns)]
        )
        conn.execute("INSERT INTO chats VALUES (9, 'not a conversation')")
    url = f"sqlite:///{db}"
    doc = llm_contract(
        stub,
        input={"sql": {"url": url, "table": "chats"}},
        output={"sql": {"url": url, "table": "answers"}},
    )
    doc["model"].update(messagesField="dialog", systemPrompt="Be brief.", body={"seed": 7})

    code, summary = run(env, doc)

    assert code == 0 and summary["recordsWritten"] == 5 and summary["recordsFailed"] == 1
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT record_id, prediction, usage FROM answers").fetchall()
        [(reason,)] = conn.execute("SELECT reason FROM answers_errors").fetchall()
    assert sorted(r[0] for r in rows) == ["0", "1", "2", "3", "4"]
    assert {json.loads(r[1]) for r in rows} == {f"re: question {n}" for n in range(5)}
    assert summary["totalTokens"] == sum_usage(json.loads(r[2]) for r in rows)["total_tokens"]
    assert reason == "record field 'dialog' is text that is not JSON array of messages"
    sent = [body for _, body in stub.requests]
    assert sent[0]["seed"] == 7 and sent[0]["messages"][0] == {
        "role": "system",
        "content": "Be brief.",
    }


def test_failed_requests_run_again_from_a_jsonl_error_output(env: Path, stub: OpenAIStub) -> None:
    (env / "batch.jsonl").write_text("".join(ask(f"q{n}", f"n{n}") + "\n" for n in range(6)))
    stub.refuse = {"n1", "n4"}  # overloaded, say, in the first run
    first = llm_contract(
        stub,
        input={"file": {"path": str(env / "batch.jsonl"), "format": "openai-batch"}},
        output={"file": {"path": str(env / "out")}},
        errors={"file": {"path": str(env / "failed"), "format": "jsonl"}},
    )
    assert run(env, first)[1]["recordsFailed"] == 2
    stub.refuse = set()
    again = llm_contract(
        stub,
        input={
            "file": {"path": str(env / "failed"), "format": "openai-batch", "recordField": "input"}
        },
        output={"file": {"path": str(env / "retry")}},
    )

    code, summary = run(env, again)

    assert code == 0 and summary["recordsWritten"] == 2 and summary["recordsFailed"] == 0
    assert sorted(line["custom_id"] for line in lines(env / "retry")) == ["q1", "q4"]


def test_a_batch_file_on_s3_gets_openai_lines_under_the_output_prefix(
    env: Path, stub: OpenAIStub, moto_endpoint: str, s3_bucket: str
) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.put_object(
        Bucket=s3_bucket, Key="in/batch.jsonl", Body=ask("a", "hi") + "\n" + ask("b", "yo")
    )
    where = {"bucket": s3_bucket, "endpointUrl": moto_endpoint, "forcePathStyle": True}
    doc = llm_contract(
        stub,
        input={"s3": {**where, "key": "in/batch.jsonl", "format": "openai-batch"}},
        output={"s3": {**where, "prefix": "out"}},
    )

    code, summary = run(env, doc)

    listed = s3.list_objects_v2(Bucket=s3_bucket, Prefix="out/")["Contents"]
    assert code == 0 and "out/part-000000.jsonl" in [item["Key"] for item in listed]
    body = s3.get_object(Bucket=s3_bucket, Key="out/part-000000.jsonl")["Body"].read()
    got = [json.loads(line) for line in body.splitlines()]
    assert [line["custom_id"] for line in got] == ["a", "b"] and summary["totalTokens"] > 0
    s3.close()


def test_the_metrics_count_the_tokens_the_summary_counts(env: Path, stub: OpenAIStub) -> None:
    (env / "batch.jsonl").write_text("".join(ask(f"q{n}", f"n{n}") + "\n" for n in range(4)))
    doc = llm_contract(
        stub,
        input={"file": {"path": str(env / "batch.jsonl"), "format": "openai-batch"}},
        output={"file": {"path": str(env / "out")}},
    )
    (env / "contract.json").write_text(json.dumps(doc))
    loaded = load_contract(str(env / "contract.json"))
    with ExitStack() as stack:
        opened = open_all(loaded, stack)
        stats = Stats()
        pipeline = Pipeline(
            opened.source,
            opened.sink,
            opened.error_sink,
            opened.client,
            loaded.runner,
            stats,
            counts_tokens=True,
            ids_from_field=True,
        )
        pipeline.run()
    text = pipeline.metrics.render()
    assert stats.total_tokens > 0
    assert f'longrun_runner_tokens_total{{kind="total"}} {float(stats.total_tokens)}' in text
    assert f'longrun_runner_tokens_total{{kind="prompt"}} {float(stats.prompt_tokens)}' in text


def test_failed_requests_run_again_from_an_sql_error_table(env: Path, stub: OpenAIStub) -> None:
    (env / "batch.jsonl").write_text("".join(ask(f"q{n}", f"n{n}") + "\n" for n in range(5)))
    stub.refuse = {"n0", "n3"}
    url = f"sqlite:///{env / 'out.db'}"
    first = llm_contract(
        stub,
        input={"file": {"path": str(env / "batch.jsonl"), "format": "openai-batch"}},
        output={"sql": {"url": url, "table": "answers"}},
    )
    assert run(env, first)[1]["recordsFailed"] == 2
    stub.refuse = set()
    query = "SELECT record_id, input FROM answers_errors ORDER BY position"
    again = llm_contract(
        stub,
        input={
            "sql": {"url": url, "query": query, "format": "openai-batch", "recordField": "input"}
        },
        output={"file": {"path": str(env / "retry")}},
    )

    code, summary = run(env, again)

    assert code == 0 and summary["recordsWritten"] == 2
    assert [line["custom_id"] for line in lines(env / "retry")] == ["q0", "q3"]


@pytest.mark.parametrize("database", ["sqlite", "postgres", "mariadb"])
def test_every_sql_dialect_keeps_usage_in_its_column_and_counts_it_on_resume(
    request: pytest.FixtureRequest, tmp_path: Path, database: str
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'out.db'}"
        if database == "sqlite"
        else request.getfixturevalue(f"{database}_url")
    )
    table = f"usage_{uuid.uuid4().hex[:10]}"
    ctx = RunContext(run_uid="uid-1", job_name="job-1")
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    records = [OutputRecord(str(n), n, {"p": n}, f"a{n}", usage) for n in range(3)]
    try:
        sink = SqlSink(SqlStorage(url=url, table=table), ctx, role="output")
        sink.write_chunk(0, records)
        sink.write_chunk(1, [OutputRecord("9", 9, {}, "plain")])  # no usage: NULL
        assert sink.committed_usage({0, 1}) == {
            "prompt_tokens": 9,
            "completion_tokens": 6,
            "total_tokens": 15,
        }
        assert sink.committed_usage({1}) == {}
        sink.close()
    finally:
        if database != "sqlite":
            drop_tables(url, table)
