"""The runner's JSON codec (runners/jsonio.py) and the JSONL reader and writer built on it.

Real: orjson, the standard library's json, runners.formats. Nothing is faked.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from runners import jsonio
from runners.api import ErrorRecord, InputRecord, OutputRecord
from runners.formats import UnreadableRecord, decode_chunk, encode_chunk
from runners.reading import read_records


def read(text: str, *, id_field: str | None = None, skip: int = 0) -> list[InputRecord]:
    lines = [line + "\n" for line in text.split("\n")]
    return list(
        read_records(lines, fmt="jsonl", start=0, skip=skip, id_field=id_field, record_field=None)
    )


def test_a_line_orjson_reads_is_echoed_as_it_was_written() -> None:
    line = '{"b": 2,  "a": [1.50, "é"]}'
    (record,) = read(line + "\n")
    assert record.data == {"b": 2, "a": [1.5, "é"]} and record.text == line
    output = OutputRecord("0", 0, record.data, 7, None, record.text)
    assert (
        encode_chunk([output], fmt="jsonl")
        == ('{"id":"0","position":0,"input":' + line + ',"prediction":7}\n').encode()
    )


def test_a_line_with_nan_is_read_as_before_and_written_with_the_nan_strings() -> None:
    (record,) = read('{"x": NaN, "y": -Infinity}\n')
    assert math.isnan(record.data["x"]) and record.text is None  # not echoed: no valid JSON
    output = OutputRecord("0", 0, record.data, [float("inf")], None, record.text)
    (row,) = decode_chunk(encode_chunk([output], fmt="jsonl"), fmt="jsonl")
    assert row["input"] == {"x": "NaN", "y": "-Infinity"} and row["prediction"] == ["Infinity"]


def test_only_the_rows_holding_nan_take_the_slow_path_and_null_stays_null() -> None:
    records = [
        OutputRecord("0", 0, {"a": None}, None),
        OutputRecord("1", 1, {"a": 1}, np.float32("nan")),
        OutputRecord("2", 2, {"a": 2}, {"n": None, "v": 1.0}),
    ]
    rows = decode_chunk(encode_chunk(records, fmt="jsonl"), fmt="jsonl")
    assert [row["prediction"] for row in rows] == [None, "NaN", {"n": None, "v": 1.0}]
    assert rows[0]["input"] == {"a": None}


def test_numbers_orjson_cannot_write_take_the_standard_library() -> None:
    huge = 2**80
    (row,) = decode_chunk(encode_chunk([OutputRecord("0", 0, {}, huge)], fmt="jsonl"), fmt="jsonl")
    assert row["prediction"] == huge


def test_a_value_that_is_no_json_raises_type_error_for_the_committer() -> None:
    with pytest.raises(TypeError):
        encode_chunk([OutputRecord("0", 0, {}, object())], fmt="jsonl")


def test_line_separators_inside_strings_are_escaped_so_a_line_stays_a_line() -> None:
    text = "a\u2028b\u2029c\u0085d"
    line = json.dumps({"s": text}, ensure_ascii=False)
    (record,) = read(line + "\n")
    output = OutputRecord("0", 0, record.data, text, None, record.text)
    data = encode_chunk([output], fmt="jsonl")
    assert len(data.decode().splitlines()) == 1
    (row,) = decode_chunk(data, fmt="jsonl")
    assert row["input"] == {"s": text} and row["prediction"] == text


def test_a_line_holding_a_carriage_return_is_not_echoed() -> None:
    records = list(
        read_records(
            ['{"a":\r 1}\n'], fmt="jsonl", start=0, skip=0, id_field=None, record_field=None
        )
    )
    assert records[0].data == {"a": 1} and records[0].text is None


def test_unreadable_lines_keep_their_positions_and_reasons() -> None:
    records = read('{"a": 1}\n\n[1, 2]\n{"a": \n"text"\n{"k": "x"}\n', id_field="k")
    assert [(r.position, r.id) for r in records] == [
        (0, "0"),
        (1, "1"),
        (2, "2"),
        (3, "3"),
        (4, "x"),
    ]
    reasons = [r.reason for r in records if isinstance(r, UnreadableRecord)]
    assert reasons[0].startswith("not a JSON object: [1, 2]")
    assert reasons[1].startswith("invalid JSON: Expecting value")
    assert reasons[2] == 'not a JSON object: "text"'


def test_skipped_lines_are_counted_not_parsed_and_the_count_is_returned() -> None:
    lines = ["not json at all\n", "\n", '{"a": 1}\n', '{"a": 2}\n']
    reader = read_records(lines, fmt="jsonl", start=10, skip=11, id_field=None, record_field=None)
    got: list[Any] = []
    with pytest.raises(StopIteration) as done:
        while True:
            got.append(next(reader))
    assert [(r.position, r.data) for r in got] == [(11, {"a": 1}), (12, {"a": 2})]
    assert done.value.value == 3  # three positions: the blank line is none


def test_error_rows_echo_the_input_text_too() -> None:
    error = ErrorRecord("5", 5, {"x": 1}, "bad", None, None, '{"x":1}')
    assert encode_chunk([error], fmt="jsonl") == (
        b'{"id":"5","position":5,"input":{"x":1},"reason":"bad"}\n'
    )


def test_dumps_writes_compact_utf8() -> None:
    assert jsonio.dumps({"k": "ü", 1: [1.5, None]}) == '{"k":"ü","1":[1.5,null]}'.encode()
