"""JSONL/CSV reading and chunk encoding (runners.formats) against the stdlib json module.

Nothing is faked: pure functions over strings and records; `json.loads`/`json.dumps` are the
reference the faster paths must match, message for message and byte for byte.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any

import pytest

from runners.api import ErrorRecord, InputRecord, OutputRecord
from runners.formats import (
    UnreadableRecord,
    decode_chunk,
    encode_chunk,
    iter_text_lines,
    json_safe,
    make_record,
    parse_rows,
)

BAD_LINES = ['{"a": 1} x', '{"a": 1}{"b": 2}', '{"a": ', "[1, 2]", "nope", '"text"', "{} \t {}"]


def read_jsonl(lines: list[str]) -> list[InputRecord]:
    """The records a source makes of `lines`, as the file source does."""
    rows = enumerate(parse_rows(lines, fmt="jsonl"))
    return [make_record(row, position, id_field=None) for position, row in rows if row is not None]


def loads_reason(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"invalid JSON: {exc}"
    assert not isinstance(value, dict)
    return f"not a JSON object: {text}"


def test_jsonl_lines_parse_as_json_loads_and_blank_lines_take_no_position() -> None:
    lines = ['{"a": 1, "b": [1.5, "é"]}\n', "\n", '  {"a": 2}  \r\n', '{"a": {"c": null}}']
    found = read_jsonl(lines)
    assert [(r.position, r.id, r.data) for r in found] == [
        (0, "0", {"a": 1, "b": [1.5, "é"]}),
        (1, "1", {"a": 2}),
        (2, "2", {"a": {"c": None}}),
    ]


@pytest.mark.parametrize("text", BAD_LINES)
def test_unreadable_jsonl_lines_say_what_json_loads_says(text: str) -> None:
    (record,) = read_jsonl([text + "\n"])
    assert isinstance(record, UnreadableRecord)
    assert record.reason == loads_reason(text.strip())


VALUES: list[Any] = [
    {"x": [1, 2.5, -0.0, 1e300], "s": 'héllo \u2028 "q" \\ \n'},
    "plain text",
    None,
    True,
    [{"nested": [[]]}, {}],
    decimal.Decimal("2.50"),
    dt.date(2026, 11, 24),
]


def test_output_lines_are_compact_utf8_json_with_line_separators_escaped() -> None:
    records = [
        OutputRecord(str(i), i, {"in": value, "k": "ü"}, value) for i, value in enumerate(VALUES)
    ]
    text = encode_chunk(records, fmt="jsonl").decode()
    expected = [
        json.dumps(
            {"id": str(i), "position": i, "input": {"in": v, "k": "ü"}, "prediction": v},
            default=lambda o: float(o) if isinstance(o, decimal.Decimal) else o.isoformat(),
            ensure_ascii=False,
            separators=(",", ":"),
        ).replace("\u2028", "\\u2028")
        for i, v in enumerate(VALUES)
    ]
    assert text == "".join(line + "\n" for line in expected)
    assert "\u2028" not in text and len(text.splitlines()) == len(VALUES)


def test_error_lines_carry_the_reason_and_decode_back() -> None:
    records = [ErrorRecord("7", 7, {"a": 1}, "value 'x' is not a number")]
    assert decode_chunk(encode_chunk(records, fmt="jsonl"), fmt="jsonl") == [
        {"id": "7", "position": 7, "input": {"a": 1}, "reason": "value 'x' is not a number"}
    ]


def test_an_empty_chunk_is_empty() -> None:
    assert encode_chunk([], fmt="jsonl") == b""


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_numbers_json_cannot_hold_are_written_as_the_documented_strings(fmt: str) -> None:
    # Issue 15 item 4: a NaN anywhere in a record failed the chunk, and so the run, for good.
    value = {"x": [1.0, math.nan], "y": {"z": -math.inf}, "w": math.inf}
    expected = {"x": [1.0, "NaN"], "y": {"z": "-Infinity"}, "w": "Infinity"}
    records = [OutputRecord("0", 0, {"a": math.nan, "b": 2}, value), OutputRecord("1", 1, {}, 3)]
    rows = decode_chunk(encode_chunk(records, fmt=fmt), fmt=fmt)
    assert [(row["input"], row["prediction"]) for row in rows] == [
        ({"a": "NaN", "b": 2}, expected),
        ({}, 3),
    ]
    errors = [ErrorRecord("0", 0, {"a": [math.inf]}, "refused")]
    assert decode_chunk(encode_chunk(errors, fmt=fmt), fmt=fmt)[0]["input"] == {"a": ["Infinity"]}


def test_json_safe_returns_clean_values_as_they_are() -> None:
    value = {"a": [1.0, "x", None, {"b": True}]}
    assert json_safe(value) is value
    assert json_safe({"a": (decimal.Decimal("NaN"), decimal.Decimal("-Infinity"))}) == {
        "a": ["NaN", "-Infinity"]
    }


def test_decimals_json_cannot_hold_follow_the_same_rule() -> None:
    records = [OutputRecord("0", 0, {"d": decimal.Decimal("Infinity")}, decimal.Decimal("NaN"))]
    (row,) = decode_chunk(encode_chunk(records, fmt="jsonl"), fmt="jsonl")
    assert (row["input"], row["prediction"]) == ({"d": "Infinity"}, "NaN")


def test_a_value_json_cannot_hold_fails_the_chunk_with_type_error() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_chunk([OutputRecord("0", 0, {}, object())], fmt="jsonl")


def test_numpy_numbers_and_arrays_are_written_as_json_numbers_and_lists() -> None:
    import numpy as np

    value = {"p": np.float32(0.5), "n": np.int64(3), "a": np.array([[1, 2]])}
    (row,) = decode_chunk(encode_chunk([OutputRecord("0", 0, {}, value)], fmt="jsonl"), fmt="jsonl")
    assert row["prediction"] == {"p": 0.5, "n": 3, "a": [[1, 2]]}


def test_a_csv_header_naming_a_column_twice_makes_its_rows_unreadable() -> None:
    # Two columns of one name would silently become one field, the other's values lost.
    rows = list(parse_rows(["a,b,a\n", "1,2,3\n"], fmt="csv"))
    assert rows == ["CSV header names column 'a' twice"]


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_a_character_split_across_chunks_is_read_whole(size: int) -> None:
    data = '{"p": "héllo wörld"}\r\n{"p": "日本語 😀"}\nlast'.encode()
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    assert list(iter_text_lines(chunks)) == data.decode().splitlines(keepends=True)


def test_a_byte_order_mark_at_the_start_is_not_data() -> None:
    data = "\ufeff".encode() + b'{"a": 1}\n{"a": 2}\n'
    lines = list(iter_text_lines([data[:2], data[2:]]))
    assert [r.data for r in read_jsonl(lines)] == [{"a": 1}, {"a": 2}]
