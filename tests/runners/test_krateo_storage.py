"""The `krateo` storage backend: the request shapes Krateo's endpoints accept.

Real: the backend, the runner in-process (contract file -> exit code and summary),
Secret files laid out as the controller mounts them, and a stdlib HTTP server on
127.0.0.1 standing in for Krateo's finops-database-handler (http_stub.Receiver:
like the real handler, it answers 500 to a body with a value that is not a string).
Faked: the model (FakeModel registered in place of `kserve-v2`).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeModel, contract
from http_stub import Receiver, serve

from contracts.storage import KrateoStorage
from runners import cli, registry
from runners.api import (
    ConfigError,
    ErrorRecord,
    Outcome,
    OutputRecord,
    Prediction,
    RecordFailure,
    RunContext,
)
from runners.storage.krateo import KrateoBackend, PodLog, PodLogSink


def ctx(secrets: Path | None = None, **parameters: str) -> RunContext:
    return RunContext("uid-9", "job-9-123", parameters, str(secrets or "/nonexistent"))


def secret(root: Path, name: str, key: str, value: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / key).write_text(value)


def krateo(path: str, **api: Any) -> KrateoStorage:
    return KrateoStorage.model_validate(
        {
            "api": {
                "endpointRef": {"name": "finops", "namespace": "krateo-system"},
                "path": path,
                "verb": "POST",
                "headers": ["Accept: application/json", "X-Trace: 42"],
                **api,
            }
        }
    )


def test_krateo_reads_result_posting_parameters_with_endpoint_token(tmp_path: Path) -> None:
    receiver = Receiver([{"sepal": 5.1}, {"sepal": 4.9}])
    with serve(receiver) as url:
        secret(tmp_path, "finops", "server-url", url)
        secret(tmp_path, "finops", "token", "tok")
        source = KrateoBackend().open_source(
            krateo("/compute/sklearninput"), ctx(tmp_path, table="iris")
        )
        got = [r.data for r in source.records(0)]
        source.close()
    assert got == [{"sepal": 5.1}, {"sepal": 4.9}]
    method, path, body, headers = receiver.requests[0]
    assert (method, path, body) == ("POST", "/compute/sklearninput", {"table": "iris"})
    assert headers["Authorization"] == "Bearer tok" and headers["X-Trace"] == "42"


def test_krateo_input_payload_is_merged_over_the_parameters(tmp_path: Path) -> None:
    receiver = Receiver([{"v": 1}])
    payload = json.dumps({"table": "override", "limit": "5"})
    with serve(receiver) as url:
        secret(tmp_path, "finops", "server-url", url)
        source = KrateoBackend().open_source(
            krateo("/compute/input", payload=payload), ctx(tmp_path, table="iris", day="mon")
        )
        assert [r.data for r in source.records(0)] == [{"v": 1}]
        source.close()
    assert receiver.requests[0][2] == {"table": "override", "day": "mon", "limit": "5"}


def test_krateo_input_payload_that_is_not_a_json_object_is_a_config_error(
    tmp_path: Path,
) -> None:
    secret(tmp_path, "finops", "server-url", "http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"^api\.payload: must be a JSON object"):
        KrateoBackend().open_source(krateo("/compute/input", payload="[1]"), ctx(tmp_path))


def test_krateo_output_merges_parameters_job_and_predictions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_UID", "pod-7")
    receiver = Receiver()
    with serve(receiver) as url:
        secret(tmp_path, "finops", "server-url", url + "/")
        sink = KrateoBackend().open_sink(
            krateo("compute/sklearnoutput"), ctx(tmp_path, out="t", chunk="p"), role="output"
        )
        sink.write_chunk(0, [OutputRecord("a", 0, {"s": 5.1}, 1), OutputRecord("b", 1, {}, 2.5)])
        sink.close()
    _, path, body, headers = receiver.requests[0]
    assert path == "/compute/sklearnoutput"
    # Every value is a string (the handler's command line); ours win over a parameter `chunk`.
    assert body == {
        "out": "t",
        "job_uid": "uid-9",
        "pod_uid": "pod-7",
        "job_name": "job-9-123",
        "chunk": "0",
        "predictions": "[1,2.5]",
        "ids": '["a","b"]',
    }
    assert headers["Idempotency-Key"] == "uid-9-job-9-123-0"
    assert list(receiver.chunks) == [("uid-9", "job-9-123", "0", "/compute/sklearnoutput")]


def test_krateo_sends_nothing_for_an_empty_chunk_and_no_completion_request(
    tmp_path: Path,
) -> None:
    receiver = Receiver()
    with serve(receiver) as url:
        secret(tmp_path, "finops", "server-url", url)
        sink = KrateoBackend().open_sink(krateo("/compute/out"), ctx(tmp_path), role="output")
        sink.write_chunk(0, [])
        sink.finish({"recordsWritten": 0, "recordsFailed": 0, "chunks": 1})
        sink.close()
    assert receiver.requests == []


def test_krateo_explicit_error_output_gets_failures_as_a_json_string(tmp_path: Path) -> None:
    receiver = Receiver()
    with serve(receiver) as url:
        secret(tmp_path, "finops", "server-url", url)
        sink = KrateoBackend().open_sink(krateo("/compute/errs"), ctx(tmp_path), role="errors")
        sink.write_chunk(2, [ErrorRecord("x", 20, {"v": 1}, "bad row")])
        sink.close()
    _, _, body, headers = receiver.requests[0]
    assert json.loads(body["errors"]) == [
        {"id": "x", "position": 20, "input": {"v": 1}, "reason": "bad row"}
    ]
    assert body["chunk"] == "2" and "predictions" not in body
    assert headers["Idempotency-Key"] == "uid-9-job-9-123-2-errors"


def test_krateo_default_error_output_is_one_json_line_per_record_in_the_pod_log() -> None:
    backend = KrateoBackend()
    settings = backend.error_settings(krateo("/compute/out"))
    assert isinstance(settings, PodLog)
    sink = backend.open_sink(settings, ctx(), role="errors")
    assert isinstance(sink, PodLogSink) and sink.location == "pod log"
    sink.stream = io.StringIO()
    sink.write_chunk(1, [ErrorRecord("7", 17, {"v": 1}, "no answer"), ErrorRecord("8", 18, {}, "")])
    lines = [json.loads(line) for line in sink.stream.getvalue().splitlines()]
    assert lines == [
        {"failedRecord": "7", "position": 17, "chunk": 1, "reason": "no answer"},
        {"failedRecord": "8", "position": 18, "chunk": 1, "reason": ""},
    ]


@pytest.fixture
def model() -> Iterator[FakeModel]:
    def odd_records_fail(records: Any) -> list[Outcome]:
        return [
            RecordFailure(f"odd {r.id}") if r.position % 2 else Prediction(r.data["v"] * 10)
            for r in records
        ]

    fake = FakeModel(odd_records_fail)
    registry.model_protocols.register("kserve-v2", fake.factory)
    yield fake
    registry.model_protocols.unregister("kserve-v2")


def run_krateo(tmp_path: Path, url: str, **options: Any) -> tuple[int, dict[str, Any]]:
    secret(tmp_path / "secrets", "finops", "server-url", url)
    api = {"endpointRef": {"name": "finops"}}
    doc = contract(
        input={"krateo": {"api": {**api, "path": "/compute/irisinput"}}},
        output={"krateo": {"api": {**api, "path": "/compute/irisoutput"}}},
        parameters={"output_table_name": "out"},
        secretsDir=str(tmp_path / "secrets"),
        **options,
    )
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((tmp_path / "termination-log").read_text())


def test_krateo_run_posts_string_bodies_and_logs_failed_records_instead_of_posting_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: FakeModel,
) -> None:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    receiver = Receiver([{"v": i} for i in range(5)])
    with serve(receiver) as url:
        code, summary = run_krateo(
            tmp_path, url, runner={"chunkSize": 3, "maxFailedRecords": 2, "maxAttempts": 1}
        )
    assert code == 0, summary
    assert summary["errorOutput"] == "pod log" and summary["recordsFailed"] == 2
    posts = [body for _, path, body, _ in receiver.requests if path == "/compute/irisoutput"]
    assert all(isinstance(value, str) for body in posts for value in body.values())
    assert [(b["chunk"], json.loads(b["ids"]), json.loads(b["predictions"])) for b in posts] == [
        ("0", ["0", "2"], [0, 20]),
        ("1", ["4"], [40]),
    ]
    assert all(b["output_table_name"] == "out" for b in posts)
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line[:1] == "{"]
    assert [(line["failedRecord"], line["reason"]) for line in logged] == [
        ("1", "odd 1"),
        ("3", "odd 3"),
    ]


def test_krateo_basic_auth_and_base64_ca_are_used_and_cleaned_up(
    tmp_path: Path, server_certificate: tuple[Path, Path]
) -> None:
    receiver = Receiver([{"v": 1}])
    pem = server_certificate[0].read_text()
    with serve(receiver) as url:
        secret(tmp_path, "finops", "server-url", url)
        secret(tmp_path, "finops", "username", "ann")
        secret(tmp_path, "finops", "password", "pw")
        secret(
            tmp_path,
            "finops",
            "certificate-authority-data",
            base64.b64encode(pem.encode()).decode(),
        )
        source = KrateoBackend().open_source(krateo("/compute/irisinput"), ctx(tmp_path))
        ca_file = Path(str(source.endpoint.session.verify))
        assert ca_file.read_text() == pem
        assert [r.data for r in source.records(0)] == [{"v": 1}]  # plain http: CA unused
        source.close()
    assert not ca_file.exists()
    assert (
        receiver.requests[0][3]["Authorization"] == "Basic " + base64.b64encode(b"ann:pw").decode()
    )


def test_krateo_without_endpoint_secret_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"api\.endpointRef: Secret 'finops' key 'server-url'"):
        KrateoBackend().open_source(krateo("/x"), ctx(tmp_path))


def test_receiver_stand_in_refuses_non_string_values_like_the_finops_handler() -> None:
    receiver = Receiver()
    reply = receiver("POST", "/compute/out", {}, {"job_uid": "u", "chunk": 0}, {})
    assert reply[0] == 500 and receiver.chunks == {}
