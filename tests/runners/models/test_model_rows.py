"""Records to tensor rows (runners.models.common) and tensors back to per-record values.

Nothing is faked: these are pure functions over InputRecords, lists and numpy arrays.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from model_fakes import records

from runners.api import Prediction, RecordFailure
from runners.models import tensors
from runners.models.rows import Rows
from runners.outcomes import Outcomes


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


def test_integer_datatypes_take_whole_numbers_only() -> None:
    batch = rows_of(
        {"a": 2.0}, {"a": 2.5}, {"a": "7"}, {"a": "2.5"}, {"a": "n/a"}, datatype="INT64"
    )
    assert batch.rows == [[2], [7]]
    assert batch.failures == {
        1: RecordFailure("value 2.5 is not an integer"),
        3: RecordFailure("value '2.5' is not an integer"),
        4: RecordFailure("value 'n/a' is not an integer"),
    }


def test_bools_count_as_one_and_zero_for_numeric_datatypes() -> None:
    assert rows_of({"a": True, "b": 2.5}, {"a": "1", "b": False}).rows == [[1, 2.5], [1.0, 0]]
    assert rows_of({"a": True}, {"a": "3"}, datatype="INT32").rows == [[1], [3]]


def test_decimals_from_sql_numeric_columns_are_numbers_on_both_paths() -> None:
    data = ({"a": Decimal("5.1"), "b": 2}, {"a": "x", "b": 1})
    checked = rows_of(*data)
    assert checked.rows == [[5.1, 2]]
    rows, raw = packed_of(*data)
    assert (rows.values, rows.failures) == (checked.values, checked.failures)
    assert raw == tensors.encode_values(checked.values, "FP32")
    big = Decimal("1234567890123456789")
    assert rows_of({"a": big}, {"a": Decimal("2.5")}, datatype="INT64").values == [int(big)]
    beyond = rows_of({"a": big * 10}, datatype="INT64")
    assert beyond.failures == {
        0: RecordFailure("value Decimal('12345678901234567890') is beyond the range of INT64")
    }


def packed_of(*data: Any, datatype: str = "FP32") -> tuple[Rows, bytes]:
    return Rows.packed(records(*data), fields=None, datatype=datatype)


def test_packed_plain_records_are_the_checked_rows_and_their_bytes() -> None:
    data = ({"a": 1.5, "b": 2}, {"a": True, "b": -3.25})
    rows, raw = packed_of(*data)
    checked = rows_of(*data)
    assert (rows.values, rows.width, list(rows.indexes), rows.failures) == (
        [1.5, 2, True, -3.25],
        2,
        list(checked.indexes),
        {},
    )
    assert raw == tensors.encode_values(checked.values, "FP32")
    assert np.frombuffer(raw, dtype="<f4").tolist() == [1.5, 2.0, 1.0, -3.25]


@pytest.mark.parametrize(
    ("data", "datatype", "failures"),
    [
        (({"a": "2.5"}, {"a": "x"}), "FP32", {1: "value 'x' is not a number"}),
        (({"a": None}, {"a": 1}), "FP64", {0: "value None is not a number"}),
        (({"a": 2.0}, {"a": 2.5}), "INT64", {1: "value 2.5 is not an integer"}),
        (({"a": [1, 2]}, {"a": 1}), "INT32", {1: "record has 1 input values, the batch has 2"}),
    ],
)
def test_packed_batches_struct_refuses_are_converted_record_by_record(
    data: tuple[dict[str, Any], ...], datatype: str, failures: dict[int, str]
) -> None:
    rows, raw = packed_of(*data, datatype=datatype)
    checked = rows_of(*data, datatype=datatype)
    assert rows.failures == {i: RecordFailure(reason) for i, reason in failures.items()}
    assert (rows.values, rows.failures) == (checked.values, checked.failures)
    assert raw == tensors.encode_values(checked.values, datatype)


def test_packed_datatypes_struct_cannot_pack_take_the_checked_path() -> None:
    rows, raw = packed_of({"a": "x"}, {"a": "yz"}, datatype="BYTES")
    assert rows.values == ["x", "yz"]
    assert raw == tensors.encode_values(["x", "yz"], "BYTES")


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


def test_predicted_values_keep_row_failures_in_place_without_a_prediction_object() -> None:
    batch = rows_of({"a": 1}, {"a": "x"}, {"a": 3})
    merged = batch.predicted(["first", "third"])
    assert merged.values == ["first", None, "third"]
    assert merged.failures == {1: RecordFailure("value 'x' is not a number")}
    assert list(merged) == [
        Prediction("first"),
        RecordFailure("value 'x' is not a number"),
        Prediction("third"),
    ]


def test_predicted_values_of_a_clean_batch_are_the_answer_list_itself() -> None:
    answer = [0, 1]
    merged = rows_of({"a": 1}, {"a": 2}).predicted(answer)
    assert merged.values is answer and merged.failures == {}


def test_outcomes_map_a_sent_records_failure_to_its_place_in_the_batch() -> None:
    batch = rows_of({"a": "x"}, {"a": 2}, {"a": 3})
    merged = batch.outcomes([RecordFailure("too long"), Prediction("third")])
    assert merged == [
        RecordFailure("value 'x' is not a number"),
        RecordFailure("too long"),
        Prediction("third"),
    ]


def test_fail_all_fails_sent_records_and_keeps_row_failures() -> None:
    batch = rows_of({"a": 1}, {"a": "x"})
    assert batch.fail_all("bad answer") == Outcomes(
        [None, None],
        {0: RecordFailure("bad answer"), 1: RecordFailure("value 'x' is not a number")},
    )


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


def test_named_fields_become_rows_in_the_order_named() -> None:
    data = ({"a": 1.0, "b": 2.0, "c": 3.0}, {"c": 6.0, "b": 5.0, "a": 4.0})
    assert rows_of(*data, fields=["c", "a"]).rows == [[3.0, 1.0], [6.0, 4.0]]
    assert rows_of(*data, fields=["b"]).rows == [[2.0], [5.0]]


def test_the_id_field_is_left_out_whether_every_record_or_only_some_have_it() -> None:
    every = Rows(
        records({"id": "a", "x": 1.0}, {"x": 2.0, "id": "b"}),
        fields=None,
        datatype="FP32",
        exclude="id",
    )
    some = Rows(
        records({"id": "a", "x": 1.0}, {"x": 2.0}), fields=None, datatype="FP32", exclude="id"
    )
    assert every.rows == some.rows == [[1.0], [2.0]]
    assert every.failures == some.failures == {}


def test_rows_keep_the_tensor_flat_and_row_major() -> None:
    batch = rows_of({"a": 1.0, "b": 2}, {"a": "x", "b": 2}, {"a": 3.0, "b": 4})
    assert (batch.values, batch.width, batch.count) == ([1.0, 2, 3.0, 4], 2, 2)
    assert list(batch.indexes) == [0, 2]


def test_list_values_and_list_records_are_flattened_into_their_row() -> None:
    batch = rows_of({"f": [1.0, 2.0], "g": 3.0}, {"f": [4.0, 5.0], "g": 6.0})
    assert batch.rows == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert Rows(records([5.0, [6.0]]), fields=None, datatype="FP32").rows == [[5.0, 6.0]]


@pytest.mark.parametrize(
    ("values", "datatype"),
    [
        ([5.1, 3, -0.0, float("nan"), float("inf"), 1e-46, 2**60 + 1], "FP32"),
        ([5.1, 3, 2**60 + 1, 1e300], "FP64"),
        ([-(2**31), 2**31 - 1, 0], "INT32"),
        ([-(2**63), 2**63 - 1, 7], "INT64"),
        ([1.5, 60000.0, 2], "FP16"),
    ],
)
def test_numbers_encode_to_the_bytes_numpy_gives(values: list[Any], datatype: str) -> None:
    expected = np.fromiter(values, dtype=tensors.DTYPES[datatype], count=len(values))
    assert tensors.encode_values(values, datatype) == expected.tobytes()


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_floats_beyond_the_fp32_range_encode_as_infinity() -> None:
    raw = tensors.encode_values([1e300, -1e39, 1.0], "FP32")
    assert np.frombuffer(raw, dtype="<f4").tolist() == [float("inf"), float("-inf"), 1.0]


@pytest.mark.parametrize(("value", "datatype"), [(2**31, "INT32"), (2**63, "INT64")])
def test_integers_out_of_range_raise_overflow_error(value: int, datatype: str) -> None:
    with pytest.raises(OverflowError):
        tensors.encode_values([1, value], datatype)


def test_several_outputs_give_one_dict_per_record_in_output_order() -> None:
    outputs = [("label", [[0], [2]]), ("proba", [[0.9, 0.1], [0.2, 0.8]]), ("id", ["a", "b"])]
    assert tensors.per_record(outputs, count=2) == [
        {"label": [0], "proba": [0.9, 0.1], "id": "a"},
        {"label": [2], "proba": [0.2, 0.8], "id": "b"},
    ]
    assert list(tensors.per_record(outputs, count=2)[0]) == ["label", "proba", "id"]


def test_outputs_of_different_lengths_cannot_be_mapped_to_records() -> None:
    with pytest.raises(ValueError):
        tensors.per_record([("a", [1, 2]), ("b", [1])], count=2)


# -- issue 15 item 1: one feature order for the whole run, whatever each record's key order ----


def test_without_input_fields_every_row_follows_the_first_records_key_order() -> None:
    batch = rows_of({"a": 1.0, "b": 2.0}, {"b": 3.0, "a": 4.0}, {"a": 5.0, "b": 6.0})
    assert batch.rows == [[1.0, 2.0], [4.0, 3.0], [5.0, 6.0]]
    _, raw = packed_of({"a": 1.0, "b": 2.0}, {"b": 3.0, "a": 4.0})
    assert np.frombuffer(raw, dtype="<f4").tolist() == [1.0, 2.0, 4.0, 3.0]


def test_a_run_wide_order_wins_over_the_batchs_first_record() -> None:
    # A batch far into the input whose first record's producer wrote the keys the other way.
    data = ({"b": 3.0, "a": 4.0}, {"a": 5.0, "b": 6.0})
    for order in (["a", "b"], ("a", "b")):
        assert Rows(records(*data), fields=None, order=order, datatype="FP32").rows == [
            [4.0, 3.0],
            [5.0, 6.0],
        ]


@pytest.mark.parametrize("packed", [False, True])
def test_a_record_with_other_fields_than_the_runs_first_fails_naming_the_difference(
    packed: bool,
) -> None:
    data = ({"a": 1.0, "b": 2.0}, {"a": 1.0, "c": 2.0}, {"a": 1.0}, {"b": 1.0, "a": 2.0, "z": 3.0})
    batch = packed_of(*data)[0] if packed else rows_of(*data)
    assert batch.rows == [[1.0, 2.0]]
    assert batch.failures == {
        1: RecordFailure(
            "record's fields differ from the input's first record "
            "(model.inputFields unset): missing ['b'], extra ['c']"
        ),
        2: RecordFailure(
            "record's fields differ from the input's first record "
            "(model.inputFields unset): missing ['b']"
        ),
        3: RecordFailure(
            "record's fields differ from the input's first record "
            "(model.inputFields unset): extra ['z']"
        ),
    }


def test_the_id_field_is_no_difference_between_records() -> None:
    data = ({"id": "a", "x": 1.0, "y": 2.0}, {"y": 4.0, "x": 3.0}, {"x": 5.0, "id": "c", "y": 6.0})
    rows = Rows(records(*data), fields=None, datatype="FP32", exclude="id")
    assert (rows.rows, rows.failures) == ([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], {})


# -- issue 15 item 4: a model request cannot carry NaN or Infinity -------------------------------


@pytest.mark.parametrize(
    ("datatype", "packed"),
    # KServe v1 (no datatype) sends JSON, never packed tensors.
    [("FP32", False), ("FP64", False), (None, False), ("FP32", True), ("FP64", True)],
)
def test_values_that_are_not_finite_numbers_fail_their_record(
    datatype: str | None, packed: bool
) -> None:
    data = (
        {"a": 1.0},
        {"a": float("nan")},
        {"a": float("-inf")},
        {"a": "NaN"},
        {"a": "Infinity"},
        {"a": [2.0]},
    )
    if packed:
        assert datatype is not None
        batch = packed_of(*data, datatype=datatype)[0]
    else:
        batch = rows_of(*data, datatype=datatype)
    expected = {
        1: "value nan is not a finite number",
        2: "value -inf is not a finite number",
        3: "value 'NaN' is not a finite number",
        4: "value 'Infinity' is not a finite number",
    }
    if datatype is None:  # KServe v1 sends strings as they are
        del expected[3], expected[4]
    assert batch.failures == {i: RecordFailure(reason) for i, reason in expected.items()}
    assert batch.rows[0] == [1.0] and batch.rows[-1] == [2.0]


@pytest.mark.parametrize("packed", [False, True])
def test_floats_beyond_the_fp32_range_fail_their_record_instead_of_becoming_infinity(
    packed: bool,
) -> None:
    data = ({"a": 1.0}, {"a": 1e39}, {"a": "-1e300"})
    batch = packed_of(*data)[0] if packed else rows_of(*data)
    assert batch.failures == {
        1: RecordFailure("value 1e+39 is beyond the range of FP32"),
        2: RecordFailure("value '-1e300' is beyond the range of FP32"),
    }
    assert batch.rows == [[1.0]]
