"""Tensor rows straight from Parquet columns (runners/models/columnrows.py) equal rows.py's.

Real: pyarrow writing a Parquet file in memory, runners/parquet.py reading it into records
that carry their row group's numeric columns, rows.py and columnrows.py. Faked: nothing.
Every test compares the column path with the record-by-record path over the same data
(plain InputRecords): values, bytes, which records are sent, and each failure's reason.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runners import parquet
from runners.api import InputRecord
from runners.columns import ColumnRecord
from runners.models import columnrows
from runners.models.rows import Rows


def read(columns: dict[str, Any], *, id_field: str | None = None) -> list[InputRecord]:
    out = pa.BufferOutputStream()
    pq.write_table(pa.table(columns), out, row_group_size=4)
    view = pa.BufferReader(out.getvalue())
    found = parquet.read_records(
        view, where="test", start=0, skip=0, id_field=id_field, record_field=None
    )
    return list(found)


def plain(records: list[InputRecord]) -> list[InputRecord]:
    return [InputRecord(r.position, r.id, r.data) for r in records]


def same(a: Rows, b: Rows) -> None:
    assert (a.values, a.width, list(a.indexes), a.failures) == (
        b.values,
        b.width,
        list(b.indexes),
        b.failures,
    )


COLUMNS = {
    "key": ["a", "b", "c", "d"],
    "x": [1.5, math.nan, 3.25, None],
    "y": [0.5, 1.0, math.inf, 2.0],
}


@pytest.mark.parametrize("datatype", ["FP32", "FP64"])
def test_a_float_batch_fails_exactly_its_null_nan_and_infinite_records(datatype: str) -> None:
    records = read(COLUMNS, id_field="key")
    assert all(isinstance(r, ColumnRecord) for r in records)
    kwargs: dict[str, Any] = {"fields": None, "datatype": datatype, "exclude": "key"}
    fast, fast_raw = Rows.packed(records, **kwargs)
    slow, slow_raw = Rows.packed(plain(records), **kwargs)
    same(fast, slow)
    assert fast_raw == slow_raw and list(fast.indexes) == [0]
    same(Rows(records, **kwargs), Rows(plain(records), **kwargs))


def test_the_column_path_is_taken_within_and_across_slices() -> None:
    records = read({"x": [float(i) for i in range(6)]})  # slices of 4 and 2 rows

    def take(batch: list[InputRecord]) -> object:
        return columnrows.column_rows(
            batch, ["x"], exact=True, datatype="FP32", exclude=None, explain=lambda r: None
        )

    assert take(records[:4]) is not None
    across = take(records[3:5])
    assert across is not None and across.values() == [3.0, 4.0]
    fast, fast_raw = Rows.packed(records[2:6], fields=None, datatype="FP32")
    slow, slow_raw = Rows.packed(plain(records[2:6]), fields=None, datatype="FP32")
    same(fast, slow)
    assert fast_raw == slow_raw
    same(
        Rows(records[3:5], fields=None, datatype="FP32"),
        Rows(plain(records[3:5]), fields=None, datatype="FP32"),
    )


@pytest.mark.parametrize("datatype", ["INT32", "INT64", "FP32"])
def test_integer_columns_give_the_same_rows_and_bytes(datatype: str) -> None:
    records = read({"a": pa.array([1, None, 3, 2**40], pa.int64()), "b": [4, 5, 6, 7]})
    fast, fast_raw = Rows.packed(records, fields=["b", "a"], datatype=datatype)
    slow, slow_raw = Rows.packed(plain(records), fields=["b", "a"], datatype=datatype)
    same(fast, slow)
    assert fast_raw == slow_raw


def test_batches_of_one_slice_give_the_same_rows_whatever_rows_and_ranges_they_hold() -> None:
    # One slice of 4 rows, one of them beyond INT32: the slice's rows are stacked once, and
    # its range known once; a batch without that row still takes the column path.
    records = read({"a": pa.array([1, 2**40, 3, 4], pa.int64()), "b": [5, 6, 7, 8]})

    def take(batch: list[InputRecord]) -> object:
        return columnrows.column_rows(
            batch, ["a", "b"], exact=True, datatype="INT32", exclude=None, explain=lambda r: None
        )

    assert take(records) is None and take(records[:2]) is None  # beyond INT32: rows.py's way
    inside = take(records[2:])
    assert inside is not None and inside.values() == [3, 7, 4, 8]
    apart = take([records[0], records[2], records[3]])  # not consecutive: picked out
    assert apart is not None and apart.values() == [1, 5, 3, 7, 4, 8]
    for batch in (records, records[:2], records[2:], [records[3], records[0]]):
        for datatype in ("INT32", "INT64", "FP64"):
            fast, fast_raw = Rows.packed(batch, fields=["a", "b"], datatype=datatype)
            slow, slow_raw = Rows.packed(plain(batch), fields=["a", "b"], datatype=datatype)
            same(fast, slow)
            assert fast_raw == slow_raw


def test_float_columns_for_an_integer_datatype_go_record_by_record() -> None:
    records = read({"a": [1.0, 2.5]})
    same(
        Rows(records, fields=None, datatype="INT64"),
        Rows(plain(records), fields=None, datatype="INT64"),
    )
    assert (
        columnrows.column_rows(
            records, ["a"], exact=True, datatype="INT64", exclude=None, explain=lambda r: None
        )
        is None
    )


def test_kserve_v1_rows_come_from_the_columns_without_making_the_records_dicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = read(COLUMNS, id_field="key")
    slow = Rows(plain(records), fields=None, datatype=None, exclude="key")  # dicts made here
    fresh = read(COLUMNS, id_field="key")
    made: list[int] = []
    rows = parquet._rows
    monkeypatch.setattr(parquet, "_rows", lambda *a: made.append(1) or rows(*a))
    # The run's field order comes from its first record, read once (rows.InputFields).
    fast = Rows(fresh[:1], fields=None, datatype=None, exclude="key", order=("x", "y"))
    assert made == [] and fast.values == [1.5, 0.5]  # the good record: no dict made
    same(Rows(fresh, fields=None, datatype=None, exclude="key"), slow)  # the bad ones explain


def test_kserve_v1_keeps_integers_as_integers_and_mixed_rows_go_record_by_record() -> None:
    ints = read({"a": [1, 2, 2**60], "b": [3, 4, 5]})
    fast = Rows(ints, fields=None, datatype=None)
    same(fast, Rows(plain(ints), fields=None, datatype=None))
    assert fast.rows == [[1, 3], [2, 4], [2**60, 5]] and type(fast.values[0]) is int
    mixed = read({"a": [1, 2], "b": [0.5, 1.5]})
    assert (
        columnrows.column_rows(
            mixed, ["a", "b"], exact=True, datatype=None, exclude=None, explain=lambda r: None
        )
        is None
    )
    kept = Rows(mixed, fields=None, datatype=None)
    assert kept.rows == [[1, 0.5], [2, 1.5]] and type(kept.values[0]) is int
