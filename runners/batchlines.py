"""OpenAI batch files: request lines in, OpenAI batch output lines out (`format: openai-batch`).

Why here and not in a backend: files, S3 objects and SQL rows (`recordField`) all hold the
same request lines, and the file and S3 sinks write the same output lines.

Reading (`line_problem`, used by formats.make_record): a line is `{"custom_id", "method",
"url", "body"}` as OpenAI's Batch API takes it; extra keys are ignored. Its record's id is
the custom_id, its data the whole line (a jsonl or SQL output keeps the request under
`input`, and `recordField: input` re-runs it). A line that breaks a rule is an
UnreadableRecord with one of these codes, and goes to the error output in the shape below;
nothing is dropped:
- invalid_json_line: the line is not a JSON object;
- missing_required_parameter: custom_id, method, url or body is missing;
- invalid_custom_id: custom_id is not a non-empty string (or, from the id screen, longer than
  255 characters); duplicate_custom_id: an earlier line had it (runners/recordids.py);
- invalid_method: a method other than POST; invalid_url: a url other than BATCH_URLS;
- invalid_body: a body that is not an object, or that asks for a stream.
The model client adds model_mismatch and the server's refusals (runners/models/openai_batch.py).

Writing (`encode_chunk`): one JSON object per line, keys in OpenAI's order:
`{"id": "batch_req_<32 hex>", "custom_id", "response": {"status_code", "request_id", "body"}
| null, "error": null | {"code", "message"}}`. A failed record keeps the server's response
(status code and error body) when there was one, and always says why in `error`, which
OpenAI's own error file leaves null for HTTP errors. The `id` is a hash of the run, the Job
and the record's position, so a chunk written twice is the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from contracts.llm import BATCH_URLS
from runners.api import ErrorRecord, OutputRecord
from runners.jsonio import dump_lines

FAILED = "failed"  # the code of a failure nothing more is known about
_URLS = ", ".join(BATCH_URLS)


def line_problem(line: dict[str, Any], position: int) -> tuple[str, str] | None:
    """(code, reason) of the first rule a request line breaks, or None (see module doc)."""
    custom_id = line.get("custom_id")
    if custom_id is None:
        return "missing_required_parameter", f"input position {position}: custom_id is missing"
    if not isinstance(custom_id, str) or not custom_id:
        shown = json.dumps(custom_id)[:80]
        why = f"input position {position}: custom_id must be a non-empty string, not {shown}"
        return "invalid_custom_id", why
    for key in ("method", "url", "body"):
        if line.get(key) is None:
            return "missing_required_parameter", f"custom_id {custom_id!r}: {key} is missing"
    method, url, body = line["method"], line["url"], line["body"]
    if method != "POST":
        shown = json.dumps(method)[:40]
        return "invalid_method", f"custom_id {custom_id!r}: method {shown}: only POST is supported"
    if url not in BATCH_URLS:
        shown = json.dumps(url)[:100]
        return "invalid_url", f"custom_id {custom_id!r}: url {shown} is not one of {_URLS}"
    if not isinstance(body, dict):
        kind = type(body).__name__
        return "invalid_body", f"custom_id {custom_id!r}: body must be a JSON object, not {kind}"
    if body.get("stream"):
        why = "body.stream: the runner reads whole answers; leave stream out"
        return "invalid_body", f"custom_id {custom_id!r}: {why}"
    return None


def json_object(text: str) -> Any:
    """The JSON object `text` holds, else `text` itself (line_problem then refuses it)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def request_id(salt: str, position: int) -> str:
    """The `id` of a record's output line: the same for the same run, Job and position."""
    digest = hashlib.blake2b(f"{salt}\0{position}".encode(), digest_size=16).hexdigest()
    return f"batch_req_{digest}"


def _response(prediction: Any) -> Any:
    """An answer as the line's `response`: the client gives one already (status, id, body)."""
    if isinstance(prediction, dict) and "status_code" in prediction and "body" in prediction:
        return prediction
    return {"status_code": 200, "request_id": None, "body": prediction}


def line(record: OutputRecord | ErrorRecord, *, salt: str) -> dict[str, Any]:
    """The OpenAI batch output (or error) line of one record."""
    if isinstance(record, ErrorRecord):
        return {
            "id": request_id(salt, record.position),
            "custom_id": record.id or None,
            "response": record.response,
            "error": {"code": record.code or FAILED, "message": record.reason},
        }
    return {
        "id": request_id(salt, record.position),
        "custom_id": record.id,
        "response": _response(record.prediction),
        "error": None,
    }


def encode_chunk(records: Sequence[OutputRecord | ErrorRecord], *, salt: str) -> bytes:
    """One chunk of output (or error) lines."""
    if not records:
        return b""
    return dump_lines(records, row=lambda record: line(record, salt=salt))


def decode_rows(text: str) -> list[dict[str, Any]]:
    """The lines of a chunk as rows keyed like formats' own (`id` is the custom_id)."""
    rows = [json.loads(text_line) for text_line in text.split("\n") if text_line.strip()]
    return [{**row, "id": row.get("custom_id") or ""} for row in rows]
