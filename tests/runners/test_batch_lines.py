"""OpenAI batch files: request lines read into records, records written as OpenAI's lines.

Real: runners/formats.py and runners/batchlines.py, on text as files hold it (and one file
through the file source). Faked: nothing
(no model, no store: the pipeline and the sinks are tested with them in
test_llm_batch_run.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contracts.storage import FileStorage
from runners.api import ErrorRecord, OutputRecord
from runners.batchlines import request_id
from runners.formats import (
    UnreadableRecord,
    decode_chunk,
    encode_chunk,
    extension,
    make_record,
    parse_rows,
)
from runners.storage.file import FileSource

CHAT = "/v1/chat/completions"


def request(custom_id: Any = "r1", **fields: Any) -> dict[str, Any]:
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": {"messages": []}}
    line.update(fields)
    return {k: v for k, v in line.items() if v is not None}


def read(text: str) -> list[Any]:
    rows = parse_rows(text.splitlines(keepends=True), fmt="openai-batch")
    return [make_record(row, n, id_field=None, batch=True) for n, row in enumerate(rows)]


def test_a_request_line_is_a_record_keyed_by_its_custom_id_holding_the_whole_line() -> None:
    line = request("q-7", body={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    [record] = read(json.dumps(line) + "\n")
    assert not isinstance(record, UnreadableRecord)
    assert (record.id, record.position, record.data) == ("q-7", 0, line)


@pytest.mark.parametrize(
    ("text", "code", "custom_id", "says"),
    [
        ("not json {", "invalid_json_line", "", "input position 0: invalid JSON"),
        ("[1, 2]", "invalid_json_line", "", "not a JSON object"),
        (json.dumps(request(None)), "missing_required_parameter", "", "custom_id is missing"),
        (json.dumps(request(7)), "invalid_custom_id", "", "non-empty string, not 7"),
        (json.dumps(request("")), "invalid_custom_id", "", 'not ""'),
        (json.dumps(request(method=None)), "missing_required_parameter", "r1", "method is miss"),
        (json.dumps(request(method="GET")), "invalid_method", "r1", "only POST"),
        (json.dumps(request(url="/v1/images")), "invalid_url", "r1", '"/v1/images" is not one'),
        (json.dumps(request(body=None)), "missing_required_parameter", "r1", "body is missing"),
        (json.dumps(request(body=[1])), "invalid_body", "r1", "not list"),
        (json.dumps(request(body={"stream": True})), "invalid_body", "r1", "body.stream"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 30 else None,
)
def test_a_line_breaking_a_rule_is_unreadable_with_a_code_and_a_reason(
    text: str, code: str, custom_id: str, says: str
) -> None:
    [record] = read(text + "\n")
    assert isinstance(record, UnreadableRecord)
    assert (record.code, record.id) == (code, custom_id)
    assert says in record.reason


def test_every_url_of_the_batch_api_is_taken() -> None:
    urls = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
    text = "".join(json.dumps(request(f"r{n}", url=url)) + "\n" for n, url in enumerate(urls))
    records = read(text)
    assert [r.id for r in records] == ["r0", "r1", "r2", "r3"]
    assert not any(isinstance(r, UnreadableRecord) for r in records)


def test_a_body_held_as_json_text_is_read_as_an_object() -> None:
    row = {"custom_id": "a", "method": "POST", "url": CHAT, "body": '{"messages": []}'}
    record = make_record(row, 0, id_field=None, batch=True)
    assert not isinstance(record, UnreadableRecord) and record.data["body"] == {"messages": []}
    bad = make_record({**row, "body": "{not json"}, 1, id_field=None, batch=True)
    assert isinstance(bad, UnreadableRecord) and bad.code == "invalid_body"


def test_record_field_reads_a_request_back_from_an_earlier_runs_row() -> None:
    line = request("q1")
    row = {"id": "q1", "position": 4, "input": line, "reason": "HTTP 503"}
    record = make_record(row, 0, id_field=None, record_field="input", batch=True)
    assert not isinstance(record, UnreadableRecord)
    assert (record.id, record.data) == ("q1", line)
    unread = {"id": "", "position": 2, "input": {}, "reason": "input position 2: invalid JSON"}
    again = make_record(unread, 1, id_field=None, record_field="input", batch=True)
    assert isinstance(again, UnreadableRecord) and "could not read" in again.reason


def answer(text: str) -> dict[str, Any]:
    body = {"choices": [{"message": {"content": text}}], "usage": {"total_tokens": 3}}
    return {"status_code": 200, "request_id": "req-1", "body": body}


def test_an_output_line_has_openais_keys_in_openais_order() -> None:
    record = OutputRecord("q1", 3, request("q1"), answer("hi"), {"total_tokens": 3})
    [line] = [json.loads(t) for t in encode_chunk([record], fmt="openai-batch").splitlines()]
    assert list(line) == ["id", "custom_id", "response", "error"]
    assert line["id"].startswith("batch_req_") and len(line["id"]) == len("batch_req_") + 32
    assert line["custom_id"] == "q1" and line["error"] is None
    assert line["response"] == answer("hi")  # usage stays in the body, not beside it


def test_an_error_line_keeps_the_servers_answer_and_says_why_in_error() -> None:
    response = {"status_code": 400, "request_id": "req-9", "body": {"error": {"message": "no"}}}
    refused = ErrorRecord("q2", 4, request("q2"), "HTTP 400: no", "invalid_request", response)
    unread = ErrorRecord("", 5, {}, "input position 5: invalid JSON", "invalid_json_line")
    plain = ErrorRecord("q3", 6, request("q3"), "something else")
    chunk = encode_chunk([refused, unread, plain], fmt="openai-batch")
    lines = [json.loads(t) for t in chunk.splitlines()]
    assert [list(line) for line in lines] == [["id", "custom_id", "response", "error"]] * 3
    assert lines[0]["response"] == response
    assert lines[0]["error"] == {"code": "invalid_request", "message": "HTTP 400: no"}
    assert lines[1]["custom_id"] is None and lines[1]["response"] is None
    assert lines[1]["error"]["code"] == "invalid_json_line"
    assert lines[2]["error"] == {"code": "failed", "message": "something else"}


def test_line_ids_are_the_same_for_the_same_run_and_position_only() -> None:
    assert request_id("uid/job", 7) == request_id("uid/job", 7)
    assert len({request_id("uid/job", 7), request_id("uid/job", 8), request_id("x/job", 7)}) == 3
    record = OutputRecord("q1", 3, {}, answer("hi"))
    first = encode_chunk([record], fmt="openai-batch", salt="uid/job")
    assert encode_chunk([record], fmt="openai-batch", salt="uid/job") == first


def test_a_chunk_decodes_to_rows_keyed_by_custom_id_and_files_end_in_jsonl() -> None:
    records = [OutputRecord("q1", 0, {}, answer("a")), ErrorRecord("", 1, {}, "bad", "x")]
    rows = decode_chunk(encode_chunk(records, fmt="openai-batch"), fmt="openai-batch")
    assert [row["id"] for row in rows] == ["q1", ""]
    assert extension("openai-batch") == "jsonl" and extension("csv") == "csv"


def test_jsonl_and_csv_outputs_put_usage_beside_the_prediction() -> None:
    usage = {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
    records = [OutputRecord("1", 0, {"p": "x"}, "text", usage), OutputRecord("2", 1, {}, "t")]
    rows = decode_chunk(encode_chunk(records, fmt="jsonl"), fmt="jsonl")
    assert rows[0]["usage"] == usage and "usage" not in rows[1]
    csv_rows = decode_chunk(encode_chunk(records, fmt="csv"), fmt="csv")
    assert csv_rows[0]["usage"] == usage and csv_rows[1]["usage"] is None
    plain = decode_chunk(encode_chunk(records[1:], fmt="csv"), fmt="csv")
    assert "usage" not in plain[0]  # no column for protocols without usage


def test_a_batch_file_saved_with_a_byte_order_mark_reads_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes("\ufeff".encode() + (json.dumps(request("first")) + "\r\n").encode())
    source = FileSource(FileStorage(path=str(path), format="openai-batch"))
    [record] = list(source.records(0))
    assert not isinstance(record, UnreadableRecord) and record.id == "first"
    assert source.total() == 1
