"""Every example of testdata/examples (but serving/) run with `longrun run`, as its header says.

Real: the `longrun` command as a subprocess, as a user runs it; the runner it starts; the
model servers of e2e/peers (KServe, Triton via PyTriton, llama.cpp); PostgreSQL on
127.0.0.1:5432; moto's S3 server; local files; a local HTTP API standing in for Krateo's
finops-database-handler (tests/runners/http_stub.Receiver). Faked: nothing on the path from
the example file to the data. Changed, with `--set` as the example's header documents it:
what only a cluster has (service DNS names, volume paths), the model name the local server
serves, and, so that tests never share data, table names, buckets and directories.
Servers that cannot be built here are skipped (failed in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.peers.server import PeerServer
from tests.iris import accuracy, class_of, iris_rows, seed_iris, sql_rows
from tests.runners.http_stub import Receiver, serve
from tests.runners.runner_stores import drop_tables
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]

EXAMPLES = REPO_ROOT / "testdata" / "examples"
BIN = Path(sys.executable).parent
KRATEO_IMAGE = "ghcr.io/krateoplatformops/kserve-krateo-runner-test"
Obj = dict[str, Any]


def longrun_run(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`longrun run ARGS --work-dir WORK` from the repository's top folder."""
    return subprocess.run(
        [str(BIN / "longrun"), "run", *args, "--work-dir", str(work)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )


def sets(target: str, **paths: Any) -> list[str]:
    """`--set TARGET:PATH=VALUE` for each path (`__` in a keyword stands for a dot)."""
    return [
        arg
        for path, value in paths.items()
        for arg in ("--set", f"{target}:{path.replace('__', '.')}={value}")
    ]


def succeeded(done: subprocess.CompletedProcess[str], run: str, *, read: int) -> None:
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"InferenceRun {run}: Succeeded" in done.stderr, done.stderr[-4000:]
    assert f"records: read={read} written={read} failed=0" in done.stderr, done.stderr[-4000:]


@pytest.fixture
def tables(postgres_url: str) -> Iterator[str]:
    """A unique table-name prefix; its tables are dropped after the test."""
    prefix = f"ex_{uuid.uuid4().hex[:10]}"
    yield prefix
    drop_tables(postgres_url, prefix)


def test_iris_sql_example_writes_150_predictions_to_postgres(
    tmp_path: Path, kserve_server: PeerServer, postgres_url: str, tables: str
) -> None:
    seed_iris(postgres_url, f"{tables}_in")
    model = sets(
        "InferenceConfig/iris-sql",
        spec__model__url=kserve_server.http_url,
        spec__model__name=kserve_server.model,
        spec__storage__input__sql__table=f"{tables}_in",
        spec__storage__output__sql__table=f"{tables}_out",
    )
    secret = sets("Secret/iris-db", stringData__url=postgres_url)

    done = longrun_run(tmp_path, "-f", "testdata/examples/iris-sql", *model, *secret)

    succeeded(done, "default/iris-sql-once", read=150)
    rows = sql_rows(postgres_url, f"{tables}_out")
    predicted = {int(r["record_id"]): class_of(json.loads(r["prediction"])) for r in rows}
    assert sorted(predicted) == list(range(1, 151))
    assert accuracy(predicted) > 0.9


def test_scheduled_example_runs_one_occurrence_now_and_names_the_next_time(
    tmp_path: Path, kserve_server: PeerServer, postgres_url: str, tables: str
) -> None:
    nightly = [{**r, "batch": "nightly" if r["id"] <= 100 else "other"} for r in iris_rows()]
    seed_iris(postgres_url, f"{tables}_in", nightly)
    (tmp_path / "iris-db.env").write_text(f"url={postgres_url}\n")
    query = f"SELECT * FROM {tables}_in WHERE batch = :batch"
    overrides = sets(
        "InferenceConfig/nightly-iris",
        spec__model__url=kserve_server.http_url,
        spec__model__name=kserve_server.model,
        spec__storage__input__sql__query=query,
        spec__storage__output__sql__table=f"{tables}_out",
    )
    env_file = f"iris-db={tmp_path / 'iris-db.env'}"

    done = longrun_run(
        tmp_path, "-f", "testdata/examples/scheduled", "--env-file", env_file, *overrides
    )

    succeeded(done, "default/nightly-iris", read=100)  # only the rows of batch "nightly"
    assert "running one occurrence now; next scheduled time" in done.stderr
    rows = sql_rows(postgres_url, f"{tables}_out")
    assert {r["job_name"].rsplit("-", 1)[0] for r in rows} == {"nightly-iris"}
    predicted = {int(r["record_id"]): class_of(json.loads(r["prediction"])) for r in rows}
    assert sorted(predicted) == list(range(1, 101))
    assert accuracy(predicted) > 0.9


def test_triton_s3_example_reads_a_csv_object_and_writes_jsonl_chunks(
    tmp_path: Path, triton_server: PeerServer, moto_endpoint: str
) -> None:
    import boto3

    bucket = f"ex-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=bucket)
    csv_text = (REPO_ROOT / "testdata" / "quickstart" / "iris.csv").read_bytes()
    s3.put_object(Bucket=bucket, Key="iris/input.csv", Body=csv_text)
    assert triton_server.grpc_url is not None
    overrides = sets(
        "InferenceConfig/triton-s3",
        spec__model__url=triton_server.grpc_url,
        spec__model__inputName="input-0",  # the name PyTriton's iris model binds
        spec__storage__input__s3__endpointUrl=moto_endpoint,
        spec__storage__output__s3__endpointUrl=moto_endpoint,
        spec__storage__input__s3__bucket=bucket,
        spec__storage__output__s3__bucket=bucket,
    )

    done = longrun_run(tmp_path, "-f", "testdata/examples/triton-s3", *overrides)

    succeeded(done, "default/triton-s3-once", read=150)
    assert f"output: s3://{bucket}/iris/predictions/" in done.stderr
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="iris/predictions/")["Contents"]
    lines = [
        json.loads(line)
        for item in listed
        if item["Key"].endswith(".jsonl")
        for line in s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().splitlines()
    ]
    predicted = {int(line["id"]): class_of(line["prediction"]) for line in lines}
    assert len(lines) == 150 and sorted(predicted) == list(range(1, 151))
    assert accuracy(predicted) > 0.9
    s3.close()


def krateo_args(finops_url: str, model: PeerServer) -> list[str]:
    """The overrides of the krateo example's header: the endpoint Secret, the model."""
    host = model.http_url.removeprefix("http://")
    return [
        "--image-map",
        f"{KRATEO_IMAGE}={BIN / 'longrun-runner'}",
        "--set",
        f"Secret/finops-database-handler-endpoint:stringData.server-url={finops_url}",
        *sets(
            "InferenceConfig/krateo-iris",
            spec__kserve__modelUrl=f"{host}/v2/models/{model.model}/infer",
            spec__kserve__modelName=model.model,
        ),
    ]


def test_krateo_example_reads_and_writes_through_the_finops_api(
    tmp_path: Path, kserve_server: PeerServer
) -> None:
    features = ("sepal_length", "sepal_width", "petal_length", "petal_width")
    finops = Receiver([{k: row[k] for k in features} for row in iris_rows()])
    with serve(finops) as url:
        done = longrun_run(
            tmp_path,
            "-f",
            "testdata/examples/krateo/krateo.yaml",
            *krateo_args(url, kserve_server),
        )

    succeeded(done, "kserve-test/krateo-iris", read=150)
    inputs = [b for _, path, b, _ in finops.requests if path == "/compute/sklearninput"]
    assert inputs and inputs[0]["input_table_name"] == "kserve_controller_input_sklearn"
    chunks = [b for (*_, path), b in finops.chunks.items() if path == "/compute/sklearnoutput"]
    predictions = [class_of(p) for body in chunks for p in json.loads(body["predictions"])]
    ids = [int(i) for body in chunks for i in json.loads(body["ids"])]
    assert sorted(ids) == list(range(150))  # Krateo's records have no id: their positions
    assert accuracy({i + 1: p for i, p in zip(ids, predictions, strict=True)}) > 0.9


def test_krateo_custom_example_fails_with_exit_2_naming_the_unknown_storage_kind(
    tmp_path: Path, kserve_server: PeerServer
) -> None:
    done = longrun_run(
        tmp_path,
        "-f",
        "testdata/examples/krateo",
        "-n",
        "kserve-test",
        "krateo-custom",
        *krateo_args("http://127.0.0.1:9", kserve_server),
    )

    assert done.returncode == 2, done.stderr[-4000:]
    assert "InferenceRun kserve-test/krateo-custom: Failed" in done.stderr, done.stderr[-4000:]
    assert "no storage backend registered for 'custom'" in done.stderr, done.stderr[-4000:]
    assert "Traceback" not in done.stderr


def test_openai_files_example_answers_every_question_into_jsonl_files(
    tmp_path: Path, llama_chat_server: PeerServer
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    questions = [{"id": f"q{i}", "question": f"What is {i} + {i}?"} for i in range(6)]
    (data / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    overrides = sets(
        "InferenceConfig/openai-files",
        spec__model__url=f"{llama_chat_server.http_url}/v1",
        spec__storage__input__file__mountPath=data,
        spec__storage__input__file__path=data / "questions.jsonl",
        spec__storage__output__file__mountPath=data,
        spec__storage__output__file__path=data / "answers",
    )

    done = longrun_run(tmp_path, "-f", "testdata/examples/openai-files", *overrides)

    succeeded(done, "default/openai-files-once", read=6)
    lines = [
        json.loads(line)
        for part in sorted((data / "answers").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert sorted(line["id"] for line in lines) == [q["id"] for q in questions]
    assert all(isinstance(line["prediction"], str) for line in lines), lines[0]
    assert "sk-local-test" not in done.stderr  # the API key went by reference, never shown


BATCH_EXAMPLE = EXAMPLES / "openai-batch"
# Lines a batch file may hold that no model can answer, and the error code each one gets.
BAD_BATCH_LINES = {
    "this line is not JSON": "invalid_json_line",
    json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}): (
        "missing_required_parameter"
    ),
    json.dumps(
        {
            "custom_id": "img-1",
            "method": "POST",
            "url": "/v1/images/generations",
            "body": {"prompt": "a cat"},
        }
    ): "invalid_url",
    json.dumps(
        {
            "custom_id": "get-1",
            "method": "GET",
            "url": "/v1/chat/completions",
            "body": {"messages": []},
        }
    ): "invalid_method",
    json.dumps(
        {
            "custom_id": "other-model",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": []},
        }
    ): "model_mismatch",
    # llama.cpp refuses a prompt longer than its context (512 tokens) with a 400.
    json.dumps(
        {
            "custom_id": "too-long",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "word " * 1500}], "max_tokens": 4},
        }
    ): "invalid_request",
}


def jsonl_lines(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for part in sorted(directory.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def final_status(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The run's final status, as `longrun run -o json` prints it on stdout."""
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_openai_batch_example_answers_each_line_in_openais_output_shape(
    tmp_path: Path, llama_chat_server: PeerServer
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    requests = (BATCH_EXAMPLE / "requests.jsonl").read_text()
    (data / "requests.jsonl").write_text(requests + "\n".join(BAD_BATCH_LINES) + "\n")
    good = [json.loads(line)["custom_id"] for line in requests.splitlines()]
    overrides = sets(
        "InferenceConfig/openai-batch",
        spec__model__url=f"{llama_chat_server.http_url}/v1",
        spec__storage__input__file__mountPath=data,
        spec__storage__input__file__path=data / "requests.jsonl",
        spec__storage__output__file__mountPath=data,
        spec__storage__output__file__path=data / "answers",
    )

    done = longrun_run(tmp_path, "-f", str(BATCH_EXAMPLE), *overrides, "-o", "json")

    assert done.returncode == 0, done.stderr[-4000:]
    assert "InferenceRun default/openai-batch-once: Succeeded" in done.stderr, done.stderr[-4000:]
    answers, failed = jsonl_lines(data / "answers"), jsonl_lines(data / "answers-errors")
    assert [line["custom_id"] for line in answers] == good
    for line in answers:
        assert list(line) == ["id", "custom_id", "response", "error"]
        assert line["id"].startswith("batch_req_") and line["error"] is None
        response = line["response"]
        assert response["status_code"] == 200 and response["request_id"]
        assert response["body"]["object"] in ("chat.completion", "text_completion")
        assert response["body"]["model"] == "tiny-llama"  # filled in where the line had none
    assert [line["error"]["code"] for line in failed] == list(BAD_BATCH_LINES.values())
    too_long = failed[-1]
    assert too_long["response"]["status_code"] == 400
    assert "maximum context length is 512 tokens" in too_long["error"]["message"]
    assert too_long["response"]["body"]["error"]["code"] == "context_length_exceeded"
    result = final_status(done)["result"]
    assert result["recordsWritten"] == len(good)
    assert result["recordsFailed"] == len(BAD_BATCH_LINES)
    usage = [line["response"]["body"]["usage"] for line in answers]
    assert result["totalTokens"] == sum(u["total_tokens"] for u in usage) > 0
    assert result["promptTokens"] == sum(u["prompt_tokens"] for u in usage)
    assert result["completionTokens"] == sum(u["completion_tokens"] for u in usage)
    assert f"tokens: prompt={result['promptTokens']}" in done.stderr


def test_sql_messages_example_answers_each_conversation_with_its_usage(
    tmp_path: Path, llama_chat_server: PeerServer, postgres_url: str, tables: str
) -> None:
    import sqlalchemy as sa
    from sqlalchemy.dialects.postgresql import JSONB

    dialogs = [
        [{"role": "user", "content": "Hi!"}],
        [
            {"role": "user", "content": "2 + 2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "3 + 3?"},
        ],
        [{"role": "user", "content": "Name a colour."}],
    ]
    engine = sa.create_engine(postgres_url)
    table = sa.Table(
        f"{tables}_chats",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("dialog", JSONB),
    )
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), [{"id": n, "dialog": d} for n, d in enumerate(dialogs)])
    engine.dispose()
    overrides = sets(
        "InferenceConfig/sql-messages",
        spec__model__url=f"{llama_chat_server.http_url}/v1",
        spec__storage__input__sql__table=f"{tables}_chats",
        spec__storage__output__sql__table=f"{tables}_answers",
    )
    secret = sets("Secret/chat-db", stringData__url=postgres_url)

    done = longrun_run(
        tmp_path, "-f", "testdata/examples/sql-messages", *overrides, *secret, "-o", "json"
    )

    succeeded(done, "default/sql-messages-once", read=3)
    rows = sql_rows(postgres_url, f"{tables}_answers")
    assert sorted(int(r["record_id"]) for r in rows) == [0, 1, 2]
    assert all(isinstance(json.loads(r["prediction"]), str) for r in rows)
    usage = [json.loads(r["usage"]) for r in rows]
    result = final_status(done)["result"]
    assert result["totalTokens"] == sum(u["total_tokens"] for u in usage) > 0
    # The system prompt and each conversation went: the longer dialog has more prompt tokens.
    by_id = {int(r["record_id"]): json.loads(r["usage"]) for r in rows}
    assert by_id[1]["prompt_tokens"] > by_id[0]["prompt_tokens"]


def test_queued_example_runs_at_once_where_there_is_no_queue(
    tmp_path: Path, kserve_server: PeerServer
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    flowers = [{k: v for k, v in row.items() if k != "species"} for row in iris_rows()]
    (data / "flowers.jsonl").write_text("".join(json.dumps(f) + "\n" for f in flowers))
    overrides = sets(
        "InferenceConfig/iris-queued",
        spec__model__url=kserve_server.http_url,
        spec__model__name=kserve_server.model,
        spec__storage__input__file__mountPath=data,
        spec__storage__input__file__path=data / "flowers.jsonl",
        spec__storage__output__file__mountPath=data,
        spec__storage__output__file__path=data / "scores",
    )

    done = longrun_run(tmp_path, "-f", "testdata/examples/queued", *overrides)

    succeeded(done, "default/iris-queued-once", read=150)
    lines = [
        json.loads(line)
        for part in sorted((data / "scores").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert sorted(int(line["id"]) for line in lines) == [f["id"] for f in flowers]
    assert accuracy({int(line["id"]): class_of(line["prediction"]) for line in lines}) > 0.9
