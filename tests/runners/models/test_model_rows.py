"""Records to tensor rows (runners.models.common) and tensors back to per-record values.

Nothing is faked: these are pure functions over InputRecords, lists and numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from model_fakes import records

from runners.api import Prediction, RecordFailure
from runners.models import tensors
from runners.models.common import Rows


def rows_of(*data: Any, datatype: str | None = "FP32", fields: list[str] | None = None) -> Rows:
    return Rows(records(*data), fields=fields, datatype=datatype)


def test_plain_numeric_records_become_rows_in_key_order() -> None:
    batch = rows_of({"b": 1.0, "a": 2}, {"b": 3.0, "a": 4})
    assert batch.rows == [[1.0, 2], [3.0, 4]]
    assert batch.failures == {}
    assert batch.width == 2


def test_numeric_strings_are_converted_and_bad_values_fail_their_record() -> None:
    batch = rows_of({"a": "1.5", "b": 2}, {"a": "n/a", "b": 2}, {"a": None, "b": 1})
    assert batch.rows == [[1.5, 2]]
    assert batch.failures == {
        1: RecordFailure("value 'n/a' is not a number"),
        2: RecordFailure("value None is not a number"),
    }


def test_integer_datatypes_take_whole_floats_only() -> None:
    batch = rows_of({"a": 2.0}, {"a": 2.5}, {"a": "7"}, datatype="INT64")
    assert batch.rows == [[2], [7]]
    assert batch.failures == {1: RecordFailure("value 2.5 is not an integer")}


def test_bool_and_bytes_datatypes_check_their_types() -> None:
    assert rows_of({"a": True}, {"a": 1}, datatype="BOOL").failures == {
        1: RecordFailure("value 1 is not a boolean")
    }
    assert rows_of({"a": "x"}, {"a": 1}, datatype="BYTES").failures == {
        1: RecordFailure("value 1 is not a string")
    }


def test_long_values_are_shortened_in_reasons() -> None:
    batch = rows_of({"a": "x" * 100})
    assert len(batch.failures[0].reason) < 70


def test_empty_records_fail() -> None:
    assert rows_of({}).failures == {0: RecordFailure("record has no input values")}


def test_outcomes_put_answers_and_failures_back_in_record_order() -> None:
    batch = rows_of({"a": 1}, {"a": "x"}, {"a": 3})
    merged = batch.outcomes([Prediction("first"), Prediction("third")])
    assert merged == [
        Prediction("first"),
        RecordFailure("value 'x' is not a number"),
        Prediction("third"),
    ]


def test_bytes_tensors_round_trip() -> None:
    raw = tensors.encode([["a", "héllo"]], "BYTES")
    assert tensors.decode(raw, "BYTES", [1, 2]).tolist() == [["a", "héllo"]]


def test_numeric_tensors_round_trip() -> None:
    raw = tensors.encode([[1, 2], [3, 4]], "INT32")
    assert tensors.decode(raw, "INT32", [2, 2]).tolist() == [[1, 2], [3, 4]]


def test_decode_refuses_bytes_that_do_not_fit_the_shape() -> None:
    with pytest.raises(tensors.ShapeError, match="do not hold"):
        tensors.decode(b"\x00" * 12, "FP32", [2, 2])


@pytest.mark.parametrize(
    ("data", "shape", "expected"),
    [
        ([0, 1], [2], [0, 1]),
        ([0, 1], [2, 1], [[0], [1]]),
        ([[0], [1]], [2, 1], [[0], [1]]),
        ([1, 2, 3, 4, 5, 6, 7, 8], [2, 2, 2], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]),
        (np.arange(4).reshape(2, 2), [2, 2], [[0, 1], [2, 3]]),
    ],
)
def test_split_rows_gives_one_value_per_record(data: Any, shape: list[int], expected: Any) -> None:
    assert tensors.split_rows(data, shape, count=2) == expected


def test_split_rows_refuses_data_that_does_not_match_the_shape() -> None:
    with pytest.raises(tensors.ShapeError, match="3 values for shape"):
        tensors.split_rows([1, 2, 3], [2, 2], count=2)
