"""The runner's JSON codec (runners/jsonio.py) and the JSONL reader and writer built on it.

Real: orjson, the standard library's json, runners.formats. Nothing is faked.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from runners import formats, jsonio
from runners.api import ErrorRecord, InputRecord, OutputRecord
from runners.formats import (
    UnreadableRecord,
    count_positions,
    decode_chunk,
    encode_chunk,
    make_record,
    parse_rows,
)
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


def mixed_lines(count: int, seed: int) -> list[str]:
    """`count` JSONL lines, most of them plain objects (some with an id, some without), with
    blank, unreadable, NaN, non-object and carriage-return lines here and there."""
    rng = random.Random(seed)
    odd = ["\n", "   \n", "[1, 2]\n", '{"a": \n', '{"a": NaN, "k": "n"}\n', '"text"\n']
    odd += ['{"a": "x\ry"}\n', '{"k": 7, "a": 1}\r\n', "\t\n"]
    lines = []
    for n in range(count):
        if rng.random() < 0.03:
            lines.append(rng.choice(odd))
        elif rng.random() < 0.5:
            lines.append(json.dumps({"k": f"id{n}", "a": n}) + "\n")
        else:
            lines.append(json.dumps({"a": n, "b": [n * 0.5]}) + "\n")
    return lines


def one_by_one(lines: list[str], *, skip: int, id_field: str | None) -> list[Any]:
    """What the general reader (parse_rows and make_record, a line at a time) makes of them."""
    rows = enumerate(parse_rows(lines, fmt="jsonl", skip=skip))
    records = [make_record(row, n, id_field=id_field) for n, row in rows if row is not None]
    return [described(r) for r in records if r.position >= skip]


def described(record: InputRecord) -> tuple[Any, ...]:
    reason = record.reason if isinstance(record, UnreadableRecord) else None
    return type(record).__name__, record.position, record.id, record.data, reason


@pytest.mark.parametrize("id_field", [None, "k"])
@pytest.mark.parametrize("skip", [0, 1, 15, 16, 528, 777, 2000])
def test_lines_read_a_block_at_a_time_make_the_records_the_line_reader_makes(
    skip: int, id_field: str | None
) -> None:
    # Blocks of 16 lines, then of 512: unreadable lines inside blocks and at their edges,
    # blank lines that hold no position, a skip inside, at and past a block's end.
    lines = mixed_lines(1700, seed=skip)
    reader = read_records(
        lines, fmt="jsonl", start=0, skip=skip, id_field=id_field, record_field=None
    )
    found: list[InputRecord] = []
    with pytest.raises(StopIteration) as done:
        while True:
            found.append(next(reader))
    assert [described(r) for r in found] == one_by_one(lines, skip=skip, id_field=id_field)
    assert done.value.value == sum(1 for line in lines if line.strip())
    for record in found:  # the text echoed is the line's, where it may be echoed as it is
        if record.text is not None:
            assert "\r" not in record.text and json.loads(record.text) == record.data
    echoed = [r for r in found if r.text is not None]
    assert len(echoed) >= len(found) * 0.9


def test_long_lines_are_read_a_few_at_a_time() -> None:
    # A block holds about a MiB of text: 200 KB lines (long prompts) come five at a time, so
    # reading holds little more than the batches in flight do.
    pulled: list[int] = []

    def lines() -> Iterator[str]:
        for n in range(100):
            pulled.append(n)
            yield json.dumps({"n": n, "text": "x" * 200_000}) + "\n"

    reader = read_records(lines(), fmt="jsonl", start=0, skip=0, id_field=None, record_field=None)
    first = [next(reader) for _ in range(30)]
    assert [r.data["n"] for r in first] == list(range(30))
    assert len(pulled) <= 16 + 3 * 6
    assert [r.position for r in reader] == list(range(30, 100))


@pytest.mark.parametrize("fmt", ["jsonl", "openai-batch"])
def test_the_progress_count_is_the_number_of_positions_the_reader_gives(fmt: str) -> None:
    lines = mixed_lines(1300, seed=3)
    positions = list(parse_rows(lines, fmt=fmt))
    assert count_positions(lines, fmt=fmt) == len(positions) == 1300 - blank(lines)


def blank(lines: list[str]) -> int:
    return sum(1 for line in lines if not line.strip())


def test_error_rows_echo_the_input_text_too() -> None:
    error = ErrorRecord("5", 5, {"x": 1}, "bad", None, None, '{"x":1}')
    assert encode_chunk([error], fmt="jsonl") == (
        b'{"id":"5","position":5,"input":{"x":1},"reason":"bad"}\n'
    )


PREDICTIONS: list[Any] = [
    1,
    "setosa",
    None,
    True,
    2.5,
    math.nan,
    -math.inf,
    [0.1, math.nan],
    {"p": [0.2, 0.8], "label": None},
    "line \u2028 separator",
    2**70,
    np.float32(0.5),
    np.array([1, 2]),
]


@pytest.mark.parametrize("prediction", PREDICTIONS, ids=repr)
def test_a_chunk_of_plain_answers_is_written_as_the_general_encoder_writes_it(
    prediction: Any,
) -> None:
    # The common chunk (answers with their input's text, no usage) is built in one loop; its
    # bytes must be the general row-by-row encoder's, NaN, big integers and numpy included.
    text = '{"a":1,"s":"x\u2029y"}'
    records = [
        OutputRecord(str(n), n, {}, prediction if n % 3 else 7, None, text) for n in range(9)
    ]
    general = jsonio.dump_lines(records, row=formats._echoing_row, plain=formats.output_row)
    assert encode_chunk(records, fmt="jsonl") == general
    assert [row["position"] for row in decode_chunk(general, fmt="jsonl")] == list(range(9))
    # Only a non-finite number or one orjson cannot write (beyond 64 bits) sends the chunk
    # row by row; numpy goes through `default` in both.
    row_by_row = jsonio.has_non_finite(prediction) or (
        type(prediction) is int and prediction > 2**63
    )
    assert (formats._answer_lines(records) is None) == row_by_row


@pytest.mark.parametrize(
    "record",
    [
        OutputRecord("u", 9, {"a": 1}, 2, {"total_tokens": 3}, '{"a":1}'),
        OutputRecord("t", 9, {"a": 1}, 2, None, None),
        ErrorRecord("e", 9, {"a": 1}, "bad", None, None, '{"a":1}'),
    ],
    ids=["usage", "no input text", "error"],
)
def test_a_chunk_with_another_record_is_written_row_by_row(record: Any) -> None:
    records = [OutputRecord("0", 0, {"a": 0}, 1, None, '{"a":0}'), record]
    general = jsonio.dump_lines(records, row=formats._echoing_row, plain=formats.output_row)
    assert encode_chunk(records, fmt="jsonl") == general
    assert list(decode_chunk(general, fmt="jsonl")[1]) == list(formats.output_row(record))


def test_a_value_no_json_holds_still_raises_type_error_from_a_plain_chunk() -> None:
    records = [OutputRecord("0", 0, {}, object(), None, "{}")]
    with pytest.raises(TypeError):
        encode_chunk(records, fmt="jsonl")


def test_dumps_writes_compact_utf8() -> None:
    assert jsonio.dumps({"k": "ü", 1: [1.5, None]}) == '{"k":"ü","1":[1.5,null]}'.encode()
