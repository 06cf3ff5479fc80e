"""The check of a batch file, line by line, as OpenAI reports it (`errors.data`).

Real: the checker fed the file's bytes in pieces of every size. Faked: nothing.
"""

from __future__ import annotations

import json

import pytest

from batchapi.lines import MAX_LINE_BYTES, LineChecker, batch_errors

ENDPOINT = "/v1/chat/completions"


def line(custom_id: object = "a", **changes: object) -> bytes:
    request: dict[str, object] = {
        "custom_id": custom_id,
        "method": "POST",
        "url": ENDPOINT,
        "body": {"model": "m", "messages": []},
    }
    request.update(changes)
    return json.dumps(request).encode() + b"\n"


def check(
    data: bytes, *, step: int = 7, max_requests: int = 100
) -> list[tuple[int | None, str, str | None]]:
    checker = LineChecker(max_requests=max_requests)
    for start in range(0, len(data), step):
        checker.feed(data[start : start + step])
    found = checker.finish()
    return [(e.line, e.code, e.param) for e in batch_errors(found, endpoint=ENDPOINT)]


@pytest.mark.parametrize("step", [1, 5, 64, 1 << 20])
def test_a_good_file_has_no_errors_however_it_arrives(step: int) -> None:
    data = line("a") + b"\n   \n" + line("b") + line("c").rstrip(b"\n")  # blank lines, no final \n
    checker = LineChecker(max_requests=10)
    for start in range(0, len(data), step):
        checker.feed(data[start : start + step])
    found = checker.finish()
    assert (found.requests, found.errors, found.models, found.urls) == (
        3,
        [],
        {"m": 1},
        {ENDPOINT: 1},
    )


def test_each_rule_names_its_line_code_and_parameter() -> None:
    data = (
        line("a")
        + b"[1, 2]\n"
        + b'{"custom_id": "x"}\n'
        + line("")
        + line(7)
        + line("a")
        + line("b", method="GET")
        + line("c", url="/v1/images/generations")
        + line("d", body=[])
        + line("e", body={"model": "m", "stream": True})
        + line("f", body={"messages": []})
        + b"{not json\n"
    )
    assert check(data) == [
        (2, "invalid_json_line", None),
        (3, "missing_required_parameter", "method"),
        (4, "invalid_custom_id", "custom_id"),
        (5, "invalid_custom_id", "custom_id"),
        (6, "duplicate_custom_id", "custom_id"),
        (7, "invalid_method", "method"),
        (8, "invalid_url", "url"),
        (9, "invalid_body", "body"),
        (10, "invalid_body", "body.stream"),
        (11, "missing_required_parameter", "body.model"),
        (12, "invalid_json_line", None),
    ]


def test_the_batch_adds_its_endpoint_and_its_one_model() -> None:
    data = line("a") + line("b", url="/v1/embeddings", body={"model": "m", "input": "x"})
    data += line("c", body={"model": "other", "messages": []})
    assert check(data) == [(2, "url_mismatch", "url"), (3, "model_mismatch", "body.model")]


def test_too_many_lines_too_long_a_line_and_an_empty_file() -> None:
    assert check(line("a") + line("b") + line("c"), max_requests=2) == [(3, "too_many_tasks", None)]
    long_line = b"x" * (MAX_LINE_BYTES + 1) + b"\n" + line("a")
    assert check(long_line, step=1 << 20) == [(1, "line_too_long", None)]
    assert check(b"\n\n") == [(None, "empty_file", None)]
