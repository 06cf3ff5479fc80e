"""Records that carry the numeric columns they were read from (a Parquet row-group slice).

Why a module of its own: a storage backend makes these records (runners/parquet.py), the
tensor protocols use them (runners/models/columnrows.py) and the committer answers them
(runners/commit.py), and backends and model clients must not import each other. Every record
has its `data` dict, so any other consumer sees a plain InputRecord; a tensor client may
build a batch's tensor from the columns instead.

The dicts are made when first asked for, a slice at a time (`SliceRows`): a Parquet run whose
tensors come from the columns and whose output parts leave the input out (`includeInput`
unset) makes none, which is most of what reading a row costs (0.5 us of 0.8). A chunk whose
records were all answered is `ColumnAnswers`: the records and their predictions, which a
Parquet part writes as columns (0.3 us a record less than an object each); any other sink
gets `ColumnOutput`s, whose `input` is the record's `data`, asked for only by a sink that
writes it.

The other way round, a tensor client's answer to a batch is `TensorValues`: the output
tensors as they came, and each record's value made from them only when one is read. A
Parquet part takes the tensors as its prediction column (runners/parquetparts.py), so a
record's prediction is never a Python object: no dicts and lists made, converted to Arrow
and freed (with the slice lookup of runners/models/columnrows.py, 6.9 -> 5.4 s of the
runner's CPU a million records on Triton's two outputs: bench/README.md, fifth pass).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, overload

import numpy as np

from runners.api import InputRecord, OutputRecord, Record

Array = np.ndarray[Any, Any]


@dataclass(frozen=True, slots=True, eq=False)
class NumericColumns:
    """The integer and float columns of one slice: `values` (int64 or float64, one per row;
    a null reads 0 or NaN) and `bad` (null, NaN or an infinity), and `names`, every column
    of the slice (numeric or not) in its order, which is the records' key order. `stacked`
    is for runners/models/columnrows.py: the slice's rows as one matrix, per field list."""

    names: tuple[str, ...]
    values: dict[str, Array]
    bad: dict[str, Array]
    stacked: dict[Any, Any] = field(default_factory=dict)


class SliceRows:
    """The rows of one slice as dicts, made by `make` when the first one is asked for (from
    whichever thread asks: a worker building a JSON tensor, the writer answering records)."""

    def __init__(self, make: Callable[[], list[Record]]) -> None:
        self._make: Callable[[], list[Record]] | None = make
        self._rows: list[Record] = []
        self._lock = threading.Lock()

    def row(self, index: int) -> Record:
        """Row `index` of the slice."""
        with self._lock:
            if self._make is not None:
                self._rows, self._make = self._make(), None
        return self._rows[index]


# The slots `data` and `input` live in: the properties below store there. They are set on the
# classes after the dataclass decorator, which drops class attributes named like fields.
_DATA: Any = InputRecord.__dict__["data"]
_INPUT: Any = OutputRecord.__dict__["input"]


@dataclass(slots=True)
class ColumnRecord(InputRecord):
    """An InputRecord that is row `row` of `columns`; its `data`, when made with None, is
    row `row` of `rows`, made on first use."""

    columns: NumericColumns | None = None
    row: int = 0
    rows: SliceRows | None = None


def _record_data(record: ColumnRecord) -> Record:
    """The record as a dict (made with the rest of its slice on first use)."""
    data: Record | None = _DATA.__get__(record)
    if data is None and record.rows is not None:
        data = record.rows.row(record.row)
        _DATA.__set__(record, data)
    return data if data is not None else {}


@dataclass(slots=True)
class ColumnOutput(OutputRecord):
    """The answer to a ColumnRecord: its `input` is the record's `data`, made only when a sink
    asks for it. Made with `input` None and the record as `source` (runners/commit.py)."""

    source: ColumnRecord | None = None


def _answer(record: InputRecord, prediction: Any) -> ColumnOutput:
    return ColumnOutput(record.id, record.position, None, prediction, None, None, record)  # type: ignore[arg-type]


class TensorValues(Sequence[Any]):
    """A batch's predictions held as the model's output tensors: `outputs`, (name, array)
    in the answer's order, each array's first dimension the batch. The values (one per record,
    as `make` gives them from the tensors) are made when first read."""

    def __init__(self, outputs: list[tuple[str, Array]], make: Callable[[], list[Any]]) -> None:
        self.outputs = outputs
        self._make: Callable[[], list[Any]] | None = make
        self._values: list[Any] = []

    def values(self) -> list[Any]:
        """One value per record."""
        if self._make is not None:
            self._values, self._make = self._make(), None
        return self._values

    def __len__(self) -> int:
        return len(self.outputs[0][1])

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self.values()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())


class ColumnAnswers(Sequence[OutputRecord]):
    """A chunk's answers to ColumnRecords, none failed and none with usage, kept as the
    records and their predictions, a batch's values at a time in `values` (lists, or
    TensorValues) (runners/commit.py). A Parquet part takes those columns as they are
    (runners/parquetparts.py); anyone else (a JSON or SQL sink) gets the ColumnOutputs, made
    once, when first asked for."""

    def __init__(self) -> None:
        self.records: list[InputRecord] = []
        self.values: list[Sequence[Any]] = []
        self._outputs: list[OutputRecord] | None = None

    def predictions(self) -> list[Any]:
        """One prediction per record, in order."""
        return list(chain.from_iterable(self.values))

    def outputs(self) -> list[OutputRecord]:
        """One ColumnOutput per record, in order."""
        if self._outputs is None:
            self._outputs = list(map(_answer, self.records, self.predictions()))
        return self._outputs

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> OutputRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[OutputRecord]: ...

    def __getitem__(self, index: int | slice) -> OutputRecord | list[OutputRecord]:
        return self.outputs()[index]

    def __iter__(self) -> Iterator[OutputRecord]:
        return iter(self.outputs())


def _output_input(output: ColumnOutput) -> Record:
    """The record answered."""
    value: Record | None = _INPUT.__get__(output)
    if value is None and output.source is not None:
        value = output.source.data
        _INPUT.__set__(output, value)
    return value if value is not None else {}


setattr(ColumnRecord, "data", property(_record_data, _DATA.__set__))  # noqa: B010
setattr(ColumnOutput, "input", property(_output_input, _INPUT.__set__))  # noqa: B010
