"""Parquet output parts (`format: parquet`): one chunk as one Parquet file, and reading one
back (its rows, its record count, its token counts), for the file and s3 sinks
(runners/chunkcodec.py). Reading input is runners/parquet.py's.

Writing: one chunk is one Parquet file (a part), built in memory and stored by the backend
as it stores every chunk (`encode_part`). Columns: `id` (string), `position` (int64), `input`
(the record; output parts only with `includeInput`, error parts always), then `prediction`
and `usage` (only when some record has one) in output parts, or `reason`, `code` and
`response` in error parts. A column's Arrow type is inferred from its values (scalar, list
or struct); when no one type holds every value of the chunk as it is (a number in one row
and a string in another, objects with different keys, an empty object), the column is JSON
text instead, and the file's key-value metadata `longrun.json_columns` (a JSON list) names
it; `response` is always JSON text. Unlike the JSON formats, which write NaN and the
infinities as the strings "NaN", "Infinity" and "-Infinity", a float column holds them as
IEEE values (in a JSON text column they are those strings). A value that is neither an
Arrow nor a JSON value raises TypeError, as formats.encode_chunk does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, contains
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from runners.api import ErrorRecord, InputRecord, OutputRecord
from runners.columns import Array, ColumnAnswers, TensorValues
from runners.formats import json_safe
from runners.tokens import sum_usage

JSON_COLUMNS = b"longrun.json_columns"


# -- writing -----------------------------------------------------------------------------


def encode_part(
    records: Sequence[OutputRecord | ErrorRecord], *, errors: bool, include_input: bool
) -> bytes:
    """One chunk as one Parquet file (the module docstring says its columns); raises
    TypeError or ValueError for a value that is neither an Arrow nor a JSON value."""
    text: list[str] = []
    # Answers to Parquet records (runners/columns.py): their columns, no OutputRecord each.
    answers = records if type(records) is ColumnAnswers else None
    source: Sequence[InputRecord | OutputRecord | ErrorRecord] = (
        records if answers is None else answers.records
    )
    columns: dict[str, pa.Array] = {
        "id": pa.array(list(map(_ID, source)), pa.string()),
        "position": pa.array(list(map(_POSITION, source)), pa.int64()),
    }
    if errors or include_input:
        inputs = (
            [r.input for r in records] if answers is None else [r.data for r in answers.records]
        )
        columns["input"] = _column("input", inputs, text)
    if errors:
        failed = [r for r in records if isinstance(r, ErrorRecord)]
        columns["reason"] = pa.array([r.reason for r in failed], pa.string())
        columns["code"] = pa.array([r.code for r in failed], pa.string())
        text.append("response")
        columns["response"] = pa.array([_json_text(r.response) for r in failed], pa.string())
    else:  # an output part holds OutputRecords only (the committer's errors go apart)
        outputs: Sequence[OutputRecord] = records  # type: ignore[assignment]
        tensors = None if answers is None else _tensor_column(answers.values)
        if tensors is not None:
            columns["prediction"] = tensors
        else:
            predictions = (
                [r.prediction for r in outputs] if answers is None else answers.predictions()
            )
            columns["prediction"] = _column("prediction", predictions, text)
        usage = [] if answers is not None else [r.usage for r in outputs]
        if usage.count(None) != len(usage):
            columns["usage"] = _column("usage", usage, text)
    table = pa.table(columns).replace_schema_metadata({JSON_COLUMNS: json.dumps(text)})
    out = pa.BufferOutputStream()
    # Ids and positions are unique: a dictionary for them is built and thrown away.
    pq.write_table(table, out, use_dictionary=[n for n in columns if n not in _UNIQUE])
    return bytes(out.getvalue().to_pybytes())


_UNIQUE = ("id", "position")
_ID, _POSITION = attrgetter("id"), attrgetter("position")


def _column(name: str, values: list[Any], text: list[str]) -> pa.Array:
    """`values` as Arrow infers them when that keeps every value as it is, else JSON text
    (and `name` added to `text`)."""
    if values:
        try:
            array = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            array = None
        if array is not None and _exact(values, array.type):
            return array
        if array is not None and _storable(array.type):
            back = array.to_pylist()
            if back == values or _same(back, values):
                return array
    text.append(name)
    return pa.array([_json_text(value) for value in values], pa.string())


def _tensor_column(parts: Sequence[Sequence[Any]]) -> pa.Array | None:
    """The predictions of a chunk's batches straight from the model's output tensors: the
    array `_column` makes of their values, without them. None unless every batch's values are
    TensorValues of the same outputs (names, dtypes, dimensions after the batch) that
    `_from_tensors` takes; their tensors are joined first, so Arrow is called once a chunk."""
    batches = [part for part in parts if isinstance(part, TensorValues)]
    if not batches or len(batches) != len(parts):
        return None
    first = batches[0].outputs
    signature = [(name, tensor.dtype, tensor.shape[1:]) for name, tensor in first]
    for batch in batches[1:]:
        if [(name, tensor.dtype, tensor.shape[1:]) for name, tensor in batch.outputs] != signature:
            return None
    joined = [np.concatenate([b.outputs[i][1] for b in batches]) for i in range(len(first))]
    return _from_tensors([(name, tensor) for (name, _), tensor in zip(first, joined, strict=True)])


def _from_tensors(outputs: list[tuple[str, Array]]) -> pa.Array | None:
    """What `pa.array` makes of TensorValues' values, from the tensors: an integer tensor is
    int64, a float one float64 (NaN stays NaN), a bool one bool; each dimension after the
    batch a list; several outputs a struct of them, in their order. None where those values
    are no such array: a dimension of 0 (lists of no item), an integer beyond int64 (too big
    for Arrow: JSON text), two outputs of one name (one key); or 2**31 items or more (beyond
    a list array's offsets)."""
    if len({name for name, _ in outputs}) != len(outputs):
        return None
    columns = []
    for _, tensor in outputs:
        kind = tensor.dtype.kind
        if 0 in tensor.shape or kind not in _TENSOR_KINDS or tensor.size >= 2**31:
            return None
        if tensor.dtype == np.uint64 and tensor.max() > np.iinfo(np.int64).max:
            return None
        column = pa.array(tensor.astype(_TENSOR_KINDS[kind]).ravel())
        for width in reversed(tensor.shape[1:]):
            offsets = np.arange(0, len(column) + 1, width, dtype=np.int32)
            column = pa.ListArray.from_arrays(pa.array(offsets), column)
        columns.append(column)
    if len(columns) == 1:
        return columns[0]
    return pa.StructArray.from_arrays(columns, names=[name for name, _ in outputs])


_TENSOR_KINDS = {"i": np.int64, "u": np.int64, "f": np.float64, "b": np.bool_}


def _exact(values: list[Any], kind: pa.DataType) -> bool:
    """Whether Arrow holds `values` (as `kind`) exactly as they are without reading them
    back: every one an int (int64: a bigger one fails to convert), every one a float
    (float64, NaN too), every one a str or every one a bool (a map and a set in C); lists
    (a tensor output's rows) of int64, float64, string or bool, as reading back would find
    them: Arrow refuses an int that no float64 holds exactly, and an int or a bool beside
    floats reads back as the equal float; or objects (a tensor answer of several outputs)
    whose keys are exactly the struct's field names, each field such a scalar or list.
    Anything else (nested objects, a missing key, a key that is no str, a null in place of an
    object) is read back."""
    if pat.is_list(kind):
        return _list_of_items(kind)
    if pat.is_struct(kind):  # every object holds each field's name, and no other key
        fields = [kind.field(i) for i in range(kind.num_fields)]
        return (
            bool(fields)
            and all(f.type in _LIST_ITEMS or _list_of_items(f.type) for f in fields)
            and set(map(type, values)) == {dict}
            and set(map(len, values)) == {len(fields)}
            and all(all(map(contains, values, repeat(f.name))) for f in fields)
        )
    kinds = set(map(type, values))
    return len(kinds) == 1 and kinds <= _SCALARS


_LIST_ITEMS = (pa.int64(), pa.float64(), pa.string(), pa.bool_())


def _list_of_items(kind: pa.DataType) -> bool:
    return pat.is_list(kind) and kind.value_type in _LIST_ITEMS


_SCALARS = {int, float, str, bool}


def _storable(kind: pa.DataType) -> bool:
    """Whether Parquet can hold `kind` (a struct needs a field)."""
    if pat.is_struct(kind):
        fields = [kind.field(i).type for i in range(kind.num_fields)]
        return bool(fields) and all(_storable(field) for field in fields)
    if pat.is_list(kind) or pat.is_large_list(kind):
        return _storable(kind.value_type)
    return True


def _same(back: Any, value: Any) -> bool:
    """Whether Arrow gave `value` back unchanged: NaN as NaN, the same keys (a struct column
    gives missing keys as None; their order is the struct's), an integer as the equal float
    of a float column."""
    if isinstance(value, float) and math.isnan(value):
        return isinstance(back, float) and math.isnan(back)
    if isinstance(value, dict):
        return (
            isinstance(back, dict)
            and back.keys() == value.keys()
            and all(_same(back[key], item) for key, item in value.items())
        )
    if isinstance(value, list | tuple):
        return (
            isinstance(back, list)
            and len(back) == len(value)
            and all(_same(b, v) for b, v in zip(back, value, strict=True))
        )
    return bool(back == value) and isinstance(back, str) == isinstance(value, str)


def _json_text(value: Any) -> str | None:
    """`value` as JSON text (None stays a null), NaN and the infinities as JSON's strings."""
    if value is None:
        return None
    return json.dumps(json_safe(value), allow_nan=False)


# -- reading parts back ------------------------------------------------------------------


def part_rows(data: bytes) -> list[dict[str, Any]]:
    """The rows of a part written by `encode_part`, JSON text columns decoded."""
    table = pq.read_table(pa.BufferReader(data))
    text = _json_columns(table.schema)
    rows: list[dict[str, Any]] = table.to_pylist()
    for row in rows:
        for name in text:
            if row.get(name) is not None:
                row[name] = json.loads(row[name])
    return rows


def part_records(data: bytes) -> int:
    """How many records a part holds, from its footer (nothing decoded)."""
    return int(pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows)


def part_usage(data: bytes) -> dict[str, int]:
    """The token counts of the `usage` column of a part (only that column is read)."""
    parquet = pq.ParquetFile(pa.BufferReader(data))
    if "usage" not in parquet.schema_arrow.names:
        return {}
    usage = parquet.read(columns=["usage"]).column("usage").to_pylist()
    if "usage" in _json_columns(parquet.schema_arrow):
        usage = [None if u is None else json.loads(u) for u in usage]
    return sum_usage(usage)


def _json_columns(schema: pa.Schema) -> list[str]:
    found = json.loads((schema.metadata or {}).get(JSON_COLUMNS, b"[]"))
    return [str(name) for name in found]
