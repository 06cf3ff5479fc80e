"""Parquet input and output (`format: parquet`), shared by the file and s3 backends.

Why here and not in a backend: both backends read and write Parquet the same way, and
backends must not import each other. The byte-stream formats (CSV, JSONL) are
runners/formats.py's; runners/chunkcodec.py picks one of the two per sink.

Reading:
- A file is streamed by row group (`ParquetFile.iter_batches`, its first row group 1,024
  rows at a time, the others in slices of about 256 KiB, 64 to 65,536 rows): memory holds
  the few slices whose records are in flight, never the whole file. Positions count rows
  across the whole input (every file of a directory or prefix), as for JSONL.
- Resuming at `skip` reads none of a row group that ends before `skip` (the footer's
  `num_rows` says where each one ends) and slices the first one it reads.
- Each row is a dict of its columns; nulls stay None. Column types are checked up front,
  from the schema: booleans, integers, floats, strings, decimals (Python `Decimal`, as a SQL
  NUMERIC column gives), lists and structs of those, dictionary-encoded columns (their
  values), and timestamps, dates and times, which become ISO 8601 text
  (`2024-05-01T10:00:00.000000Z`; nested in a list or struct, with a space for the `T`, as
  Arrow writes it). Binary, duration, interval, map and union columns are a ConfigError
  naming the column and its type; so is a column name used twice. A value that cannot be
  converted (a date out of Python's range) makes its row an `UnreadableRecord`.
- A file that is not Parquet is a ConfigError naming it.
- Records of a slice with integer or float columns are `ColumnRecord`s carrying those columns
  as numpy arrays (runners/columns.py), from which the tensor protocols build a batch's raw
  tensor (runners/models/columnrows.py); their `data` is the same dict as any record's.

Writing and reading parts back: runners/parquetparts.py.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Generator, Iterable, Iterator
from itertools import repeat
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

from runners.api import ConfigError, InputRecord
from runners.columns import ColumnRecord, NumericColumns, SliceRows
from runners.formats import key_or, make_record

# A path, or a seekable binary file (an S3 object's RangeFile).
Readable = str | Path | IO[bytes] | io.RawIOBase
# A slice is about this much Arrow data, within these rows (`_slices`): short rows take fewer
# Arrow and numpy calls a record than in 1,024-row slices (read at the same speed as a MiB, with
# 6 MB less peak RSS at a million rows), and a slice of long texts stays small.
_SLICE_BYTES = 1 << 18
_SLICE_ROWS = (64, 65_536)
_FIRST_SLICE = 1024
_PLAIN = (pat.is_null, pat.is_boolean, pat.is_integer, pat.is_floating, pat.is_decimal)
_TEXT = (pat.is_string, pat.is_large_string, pat.is_string_view)
_TEMPORAL = (pat.is_timestamp, pat.is_date, pat.is_time)


# -- reading ---------------------------------------------------------------------------


def open_file(source: Readable, *, where: str) -> pq.ParquetFile:
    """The Parquet file at `source` (a path or a seekable binary file); ConfigError naming
    `where` (e.g. `path: /data/in.parquet`) when it is no Parquet file."""
    try:
        return pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise ConfigError(f"{where} does not exist") from None
        raise ConfigError(f"{where} is not a Parquet file: {exc}") from None


def count_rows(source: Readable, *, where: str) -> int:
    """How many rows (positions) a Parquet file holds, from its footer."""
    with open_file(source, where=where) as parquet:
        return int(parquet.metadata.num_rows)


def read_records(
    source: Readable,
    *,
    where: str,
    start: int,
    skip: int,
    id_field: str | None,
    record_field: str | None,
) -> Generator[InputRecord, None, int]:
    """The records of one Parquet file with position >= `skip`, its first row at `start`;
    returns how many positions the file holds. Row groups that end before `skip` are not
    read. Per record: one dict per row, built column-wise (a `to_pylist` per column)."""
    with open_file(source, where=where) as parquet:
        targets = _targets(parquet.schema_arrow, where=where)
        position, learned = start, [0.0]
        for group in range(parquet.num_row_groups):
            rows = parquet.metadata.row_group(group).num_rows
            if position + rows <= skip:
                position += rows
                continue
            for batch in _slices(parquet, group, learned):
                first = max(skip - position, 0)
                if first < batch.num_rows:
                    part = batch.slice(first)
                    columns = _numeric(part) if record_field is None else None
                    base = position + first
                    if columns is not None and _as_stored(part, targets):
                        yield from _lazy_records(part, targets, columns, base, id_field)
                        position += batch.num_rows
                        continue
                    for offset, row in enumerate(_rows(part, targets)):
                        if columns is None or type(row) is not dict:
                            at = base + offset
                            yield make_record(row, at, id_field=id_field, record_field=record_field)
                            continue
                        key = None if id_field is None else row.get(id_field)
                        at_id = str(base + offset) if key is None else str(key)
                        yield ColumnRecord(base + offset, at_id, row, None, columns, offset)
                position += batch.num_rows
        return int(parquet.metadata.num_rows)


def _slices(parquet: pq.ParquetFile, group: int, learned: list[float]) -> Iterator[pa.RecordBatch]:
    """Row group `group` in slices of about `_SLICE_BYTES` of Arrow data (`_SLICE_ROWS`). How
    long rows are is learnt from the slices read (`learned[0]`: the most Arrow bytes a row so
    far), not from the footer, whose sizes are encoded ones (a text repeated on every row is
    a few bytes, dictionary-encoded): a file's first row group comes in `_FIRST_SLICE`-row
    slices. Never read twice: an S3 object's row group is fetched once."""
    size = _slice_rows(learned[0])
    for batch in parquet.iter_batches(batch_size=size, row_groups=[group], use_threads=False):
        learned[0] = max(learned[0], batch.nbytes / max(batch.num_rows, 1))
        yield batch


def _slice_rows(per_row: float) -> int:
    """Rows a slice of rows of `per_row` Arrow bytes holds (`_FIRST_SLICE` before any is read)."""
    if not per_row:
        return _FIRST_SLICE
    low, high = _SLICE_ROWS
    return int(min(max(_SLICE_BYTES // per_row, low), high))


def _as_stored(part: pa.RecordBatch, targets: list[pa.DataType]) -> bool:
    """Whether every column becomes Python values as it is stored (no cast, so no value can
    fail to convert): its rows can then be made later, all or none (`_lazy_records`)."""
    return all(field.type == target for field, target in zip(part.schema, targets, strict=True))


def _lazy_records(
    part: pa.RecordBatch,
    targets: list[pa.DataType],
    columns: NumericColumns,
    base: int,
    id_field: str | None,
) -> Iterator[ColumnRecord]:
    """The slice's records with their dicts made on first use (runners/columns.py): per
    record, its id (from the id column alone) and one ColumnRecord, made in C loops (`map`)."""
    rows = SliceRows(lambda: [row for row in _rows(part, targets) if isinstance(row, dict)])
    index = part.schema.get_field_index(id_field) if id_field is not None else -1
    positions = range(base, base + part.num_rows)
    ids: Iterable[str] = map(str, positions)
    if index >= 0:
        keys = part.column(index).to_pylist()
        ids = map(str, keys) if None not in keys else map(key_or, keys, ids)
    none, slice_rows = repeat(None), range(len(positions))
    yield from map(
        ColumnRecord, positions, ids, none, none, repeat(columns), slice_rows, repeat(rows)
    )


def _targets(schema: pa.Schema, *, where: str) -> list[pa.DataType]:
    """The type each column is cast to before it becomes Python values."""
    names = schema.names
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ConfigError(f"{where}: column {twice!r} appears twice; rename one")
    return [_target(field.type, column=field.name, where=where) for field in schema]


def _target(kind: pa.DataType, *, column: str, where: str) -> pa.DataType:
    """`kind` with temporal types as strings and dictionaries as their values; ConfigError
    for a type that has no JSON-like value."""
    if any(test(kind) for test in _PLAIN + _TEXT):
        return kind
    if any(test(kind) for test in _TEMPORAL):
        return pa.string()
    if pat.is_dictionary(kind):
        return _target(kind.value_type, column=column, where=where)
    if pat.is_list(kind) or pat.is_large_list(kind) or pat.is_fixed_size_list(kind):
        inner = _target(kind.value_type, column=column, where=where)
        if pat.is_large_list(kind):
            return pa.large_list(inner)
        return pa.list_(inner, kind.list_size if pat.is_fixed_size_list(kind) else -1)
    if pat.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        names = [field.name for field in fields]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: column {column!r} is a struct naming a field twice")
        return pa.struct(
            [pa.field(f.name, _target(f.type, column=column, where=where)) for f in fields]
        )
    raise ConfigError(
        f"{where}: column {column!r} has type {kind}, which has no JSON value; cast it (binary "
        "to string, a duration to an integer, a map to a struct) or leave the column out"
    )


def _numeric(batch: pa.RecordBatch) -> NumericColumns | None:
    """The integer and float columns of a slice as numpy arrays (runners/columns.py), for the
    tensor protocols; None when it has none. Costs a copy of those columns per slice."""
    values, bad = {}, {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        kind = column.type
        if pat.is_floating(kind):  # a null reads NaN, so the finite test finds it too
            values[name] = column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
            bad[name] = ~np.isfinite(values[name])
        elif pat.is_integer(kind) and kind != pa.uint64():  # uint64 may not fit int64
            if column.null_count:
                bad[name] = column.is_null().to_numpy(zero_copy_only=False)
                column = column.fill_null(0)
            else:
                bad[name] = np.zeros(len(column), dtype=bool)
            values[name] = column.to_numpy().astype(np.int64, copy=False)
    return NumericColumns(tuple(batch.schema.names), values, bad) if values else None


class _Unconvertible:
    """A value of a row that could not become a Python value: the row is unreadable."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _rows(batch: pa.RecordBatch, targets: list[pa.DataType]) -> list[dict[str, Any] | str]:
    """One dict per row of `batch` (or a reason, for a row with an unconvertible value)."""
    names = batch.schema.names
    columns = [_values(batch.column(i), targets[i]) for i in range(batch.num_columns)]
    if not columns:
        return [{} for _ in range(batch.num_rows)]
    if not any(_Unconvertible in map(type, column) for column in columns):  # the common case
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    rows: list[dict[str, Any] | str] = []
    for values in zip(*columns, strict=True):
        bad = next((v for v in values if isinstance(v, _Unconvertible)), None)
        rows.append(dict(zip(names, values, strict=True)) if bad is None else bad.reason)
    return rows


def _values(column: pa.Array, target: pa.DataType) -> list[Any]:
    """The column's Python values; one at a time when the whole column fails, so that only
    the rows whose value cannot be converted become unreadable."""
    try:
        values: list[Any] = _convert(column, target).to_pylist()
        return values
    except (pa.ArrowException, ValueError, OverflowError):
        found: list[Any] = []
        for i in range(len(column)):
            try:
                found.extend(_convert(column.slice(i, 1), target).to_pylist())
            except (pa.ArrowException, ValueError, OverflowError) as exc:
                found.append(_Unconvertible(f"Parquet column {column.type}: {exc}"[:500]))
        return found


def _convert(column: pa.Array, target: pa.DataType) -> pa.Array:
    if column.type == target:
        return column
    text = any(test(column.type) for test in _TEMPORAL)
    column = column.cast(target)
    # Arrow writes `2024-05-01 10:00:00`; ISO 8601 puts a T between date and time.
    return pc.replace_substring(column, " ", "T", max_replacements=1) if text else column


# -- S3 objects --------------------------------------------------------------------------


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of `size` bytes that `fetch(first, last)` returns by range
    (inclusive, as an HTTP Range): an S3 object read with ranged GETs, so a Parquet file is
    read footer first and then one row group's column chunks at a time, never whole."""

    def __init__(self, size: int, fetch: Callable[[int, int], bytes]) -> None:
        super().__init__()
        self.size, self.fetch, self.offset = size, fetch, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.offset

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.offset, io.SEEK_END: self.size}[whence]
        self.offset = max(base + offset, 0)
        return self.offset

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        last = min(self.offset + len(view), self.size) - 1
        if last < self.offset:
            return 0
        data = self.fetch(self.offset, last)
        view[: len(data)] = data
        self.offset += len(data)
        return len(data)
