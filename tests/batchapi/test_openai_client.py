"""The Batch API as the official `openai` Python client sees it: files, batches, lists, cancel.

Real: the server (HTTP, file store in a directory) and the `openai` client (pinned in
pyproject's test extras), only base_url and key set; every object the server answers is
validated with the openai package's own models, extra keys forbidden. Faked: the cluster
(tests/batchapi/fakes.py) and, in `finish_run`, the controller and runner that a real batch
has (tests/e2e/test_batch_api.py runs those for real).
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from batchapi.manifests import ERRORS
from controller.core.ports import ApiError
from tests.batchapi.conftest import MODEL, Served
from tests.batchapi.strict import strict

ENDPOINT = "/v1/chat/completions"


def request_line(index: int, *, model: str = MODEL, **changes: object) -> dict[str, object]:
    body = {"model": model, "messages": [{"role": "user", "content": f"Say {index}"}]}
    line: dict[str, object] = {
        "custom_id": f"req-{index}",
        "method": "POST",
        "url": ENDPOINT,
        "body": body,
    }
    line.update(changes)
    return line


def jsonl(lines: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def upload(client: openai.OpenAI, lines: list[dict[str, object]]) -> str:
    created = client.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    return created.id


def raw_batch(client: openai.OpenAI, batch_id: str) -> dict[str, object]:
    answer = client.batches.with_raw_response.retrieve(batch_id)
    data: dict[str, object] = answer.http_response.json()
    strict("batch", data)
    return data


def answer_line(index: int) -> dict[str, object]:
    body = {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    }
    return {
        "id": f"batch_req_{index:032x}",
        "custom_id": f"req-{index}",
        "response": {"status_code": 200, "request_id": "r", "body": body},
        "error": None,
    }


def test_a_batch_goes_from_upload_to_downloaded_results(served: Served) -> None:
    client = served.client("alice-token")
    raw_file = client.files.with_raw_response.create(
        file=("requests.jsonl", jsonl([request_line(i) for i in range(5)])), purpose="batch"
    ).http_response.json()
    strict("file", raw_file)
    assert raw_file["purpose"] == "batch" and raw_file["filename"] == "requests.jsonl"

    batch = client.batches.create(
        input_file_id=raw_file["id"],
        endpoint=ENDPOINT,
        completion_window="24h",
        metadata={"team": "a"},
    )
    created = raw_batch(client, batch.id)
    assert created["status"] == "validating" and created["metadata"] == {"team": "a"}
    assert created["request_counts"] == {"total": 5, "completed": 0, "failed": 0}
    assert created["expires_at"] == created["created_at"] + 24 * 3600
    name = "batch-" + batch.id.removeprefix("batch_")
    config = served.cluster.configs[("team-a", name)]
    run = served.cluster.runs[("team-a", name)]
    assert run["spec"] == {"configRef": {"name": name}, "timeoutSeconds": 86400}
    assert config["spec"]["storage"]["input"]["file"]["format"] == "openai-batch"
    assert config["spec"]["runner"] == {
        "concurrency": 4,
        "maxFailedRecords": 0,
        "maxFailedRatio": 1,
    }
    assert config["metadata"]["ownerReferences"][0]["uid"] == run["metadata"]["uid"]

    errors = [
        {
            "id": "batch_req_e",
            "custom_id": "req-4",
            "response": None,
            "error": {"code": "server_error", "message": "boom"},
        }
    ]
    answers = [answer_line(i) for i in range(4)]
    served.cluster.finish_run(
        "team-a", name, phase="Succeeded", root=served.root, answers=answers, errors=errors
    )
    done = raw_batch(client, batch.id)
    assert done["status"] == "completed" and done["completed_at"] is not None
    assert done["request_counts"] == {"total": 5, "completed": 4, "failed": 1}
    assert done["usage"]["total_tokens"] == 15  # type: ignore[index]
    output = client.files.content(str(done["output_file_id"])).read()
    assert [json.loads(line) for line in output.splitlines()] == answers
    error_file = client.files.content(str(done["error_file_id"])).read()
    assert json.loads(error_file)["error"]["code"] == "server_error"
    info = client.files.with_raw_response.retrieve(str(done["output_file_id"]))
    meta = info.http_response.json()
    strict("file", meta)
    assert meta["purpose"] == "batch_output" and meta["bytes"] == len(output)
    assert client.files.content(raw_file["id"]).read() == jsonl([request_line(i) for i in range(5)])


def test_lists_page_newest_first_with_after_and_limit(served: Served) -> None:
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0)])
    made = [
        client.batches.create(input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h").id
        for _ in range(5)
    ]
    first = client.batches.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    every = [b.id for b in client.batches.list(limit=2)]  # the client follows `after`
    assert sorted(every) == sorted(made) and len(every) == 5
    raw = client.batches.with_raw_response.list(limit=3).http_response.json()
    for item in raw["data"]:
        strict("batch", item)
    assert raw["has_more"] is True and raw["last_id"] == raw["data"][-1]["id"]
    files = client.files.with_raw_response.list(purpose="batch").http_response.json()
    assert [f["id"] for f in files["data"]] == [file_id] and files["has_more"] is False


def test_cancel_stops_the_run_and_the_batch_ends_cancelled(served: Served) -> None:
    client = served.client("alice-token")
    batch = client.batches.create(
        input_file_id=upload(client, [request_line(0)]), endpoint=ENDPOINT, completion_window="24h"
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    name = "batch-" + batch.id.removeprefix("batch_")
    assert served.cluster.runs[("team-a", name)]["spec"]["cancel"] is True
    served.cluster.finish_run(
        "team-a", name, phase="Cancelled", root=served.root, answers=[answer_line(0)], errors=[]
    )
    cancelled = raw_batch(client, batch.id)
    assert cancelled["status"] == "cancelled" and cancelled["output_file_id"]
    assert cancelled["error_file_id"] is None  # no failed line, no error file
    with pytest.raises(openai.ConflictError):
        served.cluster.runs[("team-a", name)]["status"]["phase"] = "Succeeded"
        client.batches.cancel(batch.id)


def test_a_run_past_its_window_is_an_expired_batch(served: Served) -> None:
    client = served.client("alice-token")
    batch = client.batches.create(
        input_file_id=upload(client, [request_line(0)]), endpoint=ENDPOINT, completion_window="1h"
    )
    name = "batch-" + batch.id.removeprefix("batch_")
    assert served.cluster.runs[("team-a", name)]["spec"]["timeoutSeconds"] == 3600
    served.cluster.finish_run(
        "team-a",
        name,
        phase="Failed",
        root=served.root,
        answers=[],
        errors=[],
        reason="DeadlineExceeded",
    )
    expired = raw_batch(client, batch.id)
    assert expired["status"] == "expired" and expired["expired_at"] is not None


def test_a_file_breaking_the_rules_fails_its_batch_line_by_line(served: Served) -> None:
    client = served.client("alice-token")
    lines = [
        request_line(0),
        request_line(0),
        request_line(2, method="GET"),
        request_line(3, url="/v1/embeddings"),
        request_line(4, model="other"),
    ]
    text = jsonl(lines) + b"not json\n"
    file_id = client.files.create(file=("bad.jsonl", text), purpose="batch").id
    batch = client.batches.create(input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h")
    failed = raw_batch(client, batch.id)
    assert failed["status"] == "failed" and failed["failed_at"] == failed["created_at"]
    found = [(e["line"], e["code"], e["param"]) for e in failed["errors"]["data"]]  # type: ignore[index]
    assert found == [
        (2, "duplicate_custom_id", "custom_id"),
        (3, "invalid_method", "method"),
        (4, "url_mismatch", "url"),
        (5, "model_mismatch", "body.model"),
        (6, "invalid_json_line", None),
    ]
    run = served.cluster.runs[("team-a", "batch-" + batch.id.removeprefix("batch_"))]
    assert run["spec"]["cancel"] is True and ERRORS in run["metadata"]["annotations"]
    assert not served.cluster.configs.get(("team-a", run["metadata"]["name"]))


def test_an_unknown_model_is_a_400_naming_the_models_there_are(served: Served) -> None:
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0, model="gpt-4o")])
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h")
    message = refused.value.message
    assert "'gpt-4o'" in message and f"Models in this namespace: {MODEL}." in message
    assert served.cluster.runs == {}


def test_bad_requests_name_the_field(served: Served) -> None:
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0)])
    cases = [
        ({"endpoint": "/v1/images/generations"}, "endpoint"),
        ({"completion_window": "soon"}, "completion_window"),
        ({"metadata": {"k": "v" * 600}}, "metadata"),
    ]
    for change, param in cases:
        args = {
            "input_file_id": file_id,
            "endpoint": ENDPOINT,
            "completion_window": "24h",
            **change,
        }
        with pytest.raises(openai.BadRequestError) as refused:
            client.batches.create(**args)  # type: ignore[arg-type]
        assert refused.value.param == param  # type: ignore[attr-defined]
    with pytest.raises(openai.BadRequestError, match="purpose 'fine-tune' is not supported"):
        client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    assert served.store.list_ids("team-a") == [file_id]


def test_a_deleted_file_is_gone(served: Served) -> None:
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0)])
    deleted = client.files.with_raw_response.delete(file_id).http_response.json()
    strict("deleted", deleted)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file_id)
    assert list((served.root / "team-a" / "files").iterdir()) == []


def test_an_upload_over_the_limit_is_413_and_leaves_nothing(served: Served) -> None:
    client = served.client("alice-token")
    line = request_line(0)
    big = jsonl([{**line, "custom_id": f"r{i}"} for i in range(12_000)])
    assert len(big) > 1_000_000
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("big.jsonl", big), purpose="batch")
    assert refused.value.status_code == 413
    assert "limit of 1000000 bytes" in refused.value.message
    assert [p for p in served.root.rglob("*") if p.is_file()] == []
    assert client.files.list().data == []
    upload(client, [request_line(0)])  # the server is fine afterwards


def test_the_namespace_comes_from_the_organization_header(served: Served) -> None:
    client = served.client("alice-token", None, organization="team-a")
    file_id = upload(client, [request_line(0)])
    assert served.store.get_meta("team-a", file_id) is not None
    nameless = served.client("alice-token", None)
    with pytest.raises(openai.BadRequestError, match="Name a namespace"):
        nameless.files.list()


def test_models_lists_the_annotated_templates(served: Served) -> None:
    models = served.client("alice-token").models.list()
    assert [m.id for m in models] == [MODEL]


def test_files_of_a_directory_store_are_listed_only_once_whole(
    served: Served, tmp_path: Path
) -> None:
    client = served.client("alice-token")
    file_id = upload(client, [request_line(0)])
    folder = served.root / "team-a" / "files"
    (folder / ".upload-half.jsonl.1.2").write_bytes(b'{"custom_id"')  # a killed upload
    (folder / "file-0000000000000000000000000000000000000000.jsonl").write_bytes(b"{}")
    assert [f.id for f in client.files.list()] == [file_id]


def test_a_config_the_api_server_refuses_fails_the_batch_with_the_reason(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(namespace: str, config: dict[str, object]) -> None:
        raise ApiError(422, 'InferenceConfig "x" is invalid: spec.runner.concurrency: 0')

    monkeypatch.setattr(served.cluster, "create_config", refuse)
    client = served.client("alice-token")
    batch = client.batches.create(
        input_file_id=upload(client, [request_line(0)]), endpoint=ENDPOINT, completion_window="24h"
    )
    failed = raw_batch(client, batch.id)
    (error,) = failed["errors"]["data"]  # type: ignore[index]
    assert failed["status"] == "failed" and error["code"] == "invalid_template"
    assert error["message"].startswith("InferenceConfig/llm cannot run this batch: ")


def test_a_run_left_without_its_config_gets_it_when_read(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    create = served.cluster.create_config

    def unanswered(namespace: str, config: dict[str, object]) -> None:
        raise ApiError(0, "ConnectionRefusedError")

    monkeypatch.setattr(served.cluster, "create_config", unanswered)
    client = served.client("alice-token")
    batch = client.batches.create(
        input_file_id=upload(client, [request_line(0)]), endpoint=ENDPOINT, completion_window="24h"
    )
    assert batch.status == "validating"
    name = "batch-" + batch.id.removeprefix("batch_")
    assert ("team-a", name) not in served.cluster.configs
    monkeypatch.setattr(served.cluster, "create_config", create)
    waiting = {"type": "Accepted", "status": "False", "reason": "ConfigNotFound"}
    served.cluster.runs[("team-a", name)]["status"] = {"phase": "Pending", "conditions": [waiting]}
    assert client.batches.retrieve(batch.id).status == "validating"
    config = served.cluster.configs[("team-a", name)]
    assert config["metadata"]["ownerReferences"][0]["name"] == name
