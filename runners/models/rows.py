"""Records to tensor rows for the tensor protocols (KServe v1/v2, Triton), the same for all.

- The fields of a row: those named by `inputFields`, in that order; else the fields of the
  input's first record (its id field left out) in its key order, for the whole run: a record
  whose producer wrote its keys in another order is sent in the run's order, and a record with
  other fields fails naming the difference (InputFields);
- a field whose value is a list contributes its elements, so `{"features": [5.1, 3.5, ...]}`
  is used as-is;
- for numeric datatypes every value must be a number; numeric strings ("5.1", as CSV sources
  produce) and decimals (SQL NUMERIC columns) are converted, bools count as 1 and 0 (as numpy
  and tritonclient take them), and an integer datatype takes whole numbers only. BOOL takes
  bools only, BYTES strings only. A value the request cannot carry fails its record: NaN and
  the infinities (JSON has none, and they are no question to ask a model), a number beyond
  the datatype's range (it would become infinity, or wrap).
  A record that fails this, or whose row length differs from the batch's usual length, becomes
  a RecordFailure instead of failing the batch.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain, repeat
from operator import contains, itemgetter
from typing import Any, Generic, TypeVar

from contracts.model import ModelEndpoint
from runners.api import InputRecord, Outcome, RecordFailure, RunContext
from runners.models import tensors
from runners.models.columnrows import ColumnRows, column_rows
from runners.models.rowvalues import CHECKS, RowError, all_plain, finite_packed
from runners.outcomes import Outcomes

T = TypeVar("T")


def _flatten(values: Any) -> list[Any]:
    row: list[Any] = []
    for value in values:
        if isinstance(value, list):
            row.extend(value)
        else:
            row.append(value)
    return row


def record_row(
    data: Any,
    fields: Sequence[str],
    *,
    datatype: str | None,
    exact: bool = False,
    exclude: str | None = None,
) -> list[Any]:
    """The row for one record's data: its `fields` in order; raises RowError naming what is
    wrong. With `exact`, the record must hold those fields and no others (but `exclude`)."""
    if isinstance(data, list):
        row = _flatten(data)
    else:
        if exact:
            _check_same_fields(data, fields, exclude)
        try:
            row = _flatten([data[name] for name in fields])
        except KeyError as exc:
            raise RowError(f"record has no field {exc.args[0]!r}") from None
    if not row:
        raise RowError("record has no input values")
    check = CHECKS[datatype]
    return [check(value) for value in row]


def _check_same_fields(data: dict[str, Any], fields: Sequence[str], exclude: str | None) -> None:
    known = set(fields)
    missing = [name for name in fields if name not in data]
    extra = [name for name in data if name not in known and name != exclude]
    parts = [f"missing {missing!r}"] if missing else []
    if extra:
        parts.append(f"extra {extra!r}")
    if parts:
        raise RowError(f"{DIFFERENT_FIELDS}: {', '.join(parts)}")


DIFFERENT_FIELDS = "record's fields differ from the input's first record (model.inputFields unset)"


def first_fields(data: Any, exclude: str | None) -> tuple[str, ...] | None:
    """The input fields a record holds, in its key order (`exclude`, the id field, left out)."""
    if not isinstance(data, dict):
        return None
    return tuple(name for name in data if name != exclude)


class InputFields:
    """Which fields of a record make its row, in which order: the same for the whole run.

    `model.inputFields` when set: those fields by name, in that order (other fields ignored, a
    missing one fails its record). Unset: the fields of the input's first record (its id field
    left out), in that record's key order, read once per pod through `RunContext.first_record`,
    so every pod of a run (resumed ones too) sends every record's values in one order, whatever
    order each record's producer wrote its keys in; a record with other fields fails naming
    the difference. Without `first_record` (a client built outside the runner) the first record
    the client is given decides.
    """

    def __init__(self, endpoint: ModelEndpoint, ctx: RunContext) -> None:
        self.named = endpoint.input_fields
        self.exclude = ctx.id_field  # an identity, not a feature, unless inputFields names it
        self._first: tuple[str, ...] | None = None
        self._lock = threading.Lock()
        if self.named is None and ctx.first_record is not None:
            self._first = first_fields(ctx.first_record(), self.exclude)

    def order(self, records: Sequence[InputRecord]) -> tuple[str, ...] | None:
        """The run's field order when `inputFields` is unset (None when it is set)."""
        if self.named is not None:
            return None
        if self._first is None and records:
            with self._lock:
                if self._first is None:
                    self._first = first_fields(records[0].data, self.exclude)
        return self._first


class Parts:
    """Which records of a batch are sent (`indexes`, in order) and why the others fail."""

    size: int
    indexes: Sequence[int]
    failures: dict[int, RecordFailure]

    def predicted(self, values: Sequence[Any]) -> Outcomes:
        """One plain value per sent record, merged with the failures back in record order."""
        if not self.failures and len(values) == self.size:
            return Outcomes(values)
        merged: list[Any] = [None] * self.size
        for index, value in zip(self.indexes, values, strict=True):
            merged[index] = value
        return Outcomes(merged, dict(self.failures))

    def outcomes(self, answers: Sequence[Outcome]) -> Outcomes:
        """One Outcome per sent record, merged with the failures back in record order."""
        sent = Outcomes.of(answers)
        merged = self.predicted(sent.values)
        if not sent.failures:
            return merged
        failures = dict(merged.failures)
        for index, failure in sent.failures.items():
            failures[self.indexes[index]] = failure
        return Outcomes(merged.values, failures)

    def fail_all(self, reason: str) -> Outcomes:
        """Every sent record fails with `reason` (a response we cannot map back to records)."""
        failures = {**self.failures, **dict.fromkeys(self.indexes, RecordFailure(reason))}
        return Outcomes([None] * self.size, failures)


class Batch(Parts, Generic[T]):
    """A batch split into the items made from good records and failures for the others.

    `convert` turns one record into an item or raises RowError with the record's reason.
    """

    def __init__(self, records: Sequence[InputRecord], convert: Callable[[InputRecord], T]) -> None:
        self.size = len(records)
        self.items: list[T] = []
        self.indexes: list[int] = []
        self.failures = {}
        for index, record in enumerate(records):
            try:
                self.items.append(convert(record))
                self.indexes.append(index)
            except RowError as exc:
                self.failures[index] = RecordFailure(str(exc))


def _plain_values(
    records: Sequence[InputRecord],
    fields: Sequence[str],
    *,
    exact: bool,
    datatype: str | None,
    exclude: str | None,
) -> tuple[list[Any], int] | None:
    """(flat row-major values, row width) when every record is plain, else None.

    The common case (dicts of JSON numbers holding the same fields) done with C-level loops
    (`itemgetter`, `chain`, `map`) and without a list per row: about ten times cheaper than
    converting record by record, which the caller falls back to, and one allocation per batch
    instead of one per record (fewer objects for the garbage collector to track).
    """
    found = _flat_values(records, fields, exact=exact, exclude=exclude)
    if found is None:
        return None
    return found if all_plain(found[0], datatype) else None


def _flat_values(
    records: Sequence[InputRecord], fields: Sequence[str], *, exact: bool, exclude: str | None
) -> tuple[list[Any], int] | None:
    """(flat row-major values, row width) when every record holds `fields` (and, with `exact`,
    no other field but `exclude`), else None. The values are not checked: lists, strings and
    None may be among them."""
    datas = [record.data for record in records]
    if not fields or not datas:
        return None
    pick = itemgetter(*fields)
    try:
        if len(fields) == 1:  # itemgetter of one name gives the value, not a tuple
            values = list(map(pick, datas))
        else:
            values = list(chain.from_iterable(map(pick, datas)))
    except (KeyError, TypeError):  # a missing field, or data that is not a dict
        return None
    if exact and not _hold_only(datas, len(fields), exclude):
        return None
    return values, len(fields)


def _hold_only(datas: list[dict[str, Any]], width: int, exclude: str | None) -> bool:
    """Whether records that hold all of `width` fields hold no others but `exclude`."""
    lengths = set(map(len, datas))
    if lengths == {width}:
        return True
    if exclude is None or not lengths <= {width, width + 1}:
        return False
    # A record of `width + 1` fields must hold `exclude` (one of `width` cannot: it has them all).
    wide = sum(1 for length in map(len, datas) if length > width)
    return sum(map(contains, datas, repeat(exclude))) == wide


class Rows(Parts):
    """A batch as one tensor: the good records' values, flat and row-major, `width` per row.

    The fields of a row: `fields` (`model.inputFields`) by name, else `order` (the run's, from
    `InputFields.order`), else the batch's first record's; with `order` a record with other
    fields fails (see InputFields). Records that cannot become a row of that width, or hold a
    value the request cannot carry, fail on their own (see the module doc).
    """

    def __init__(
        self,
        records: Sequence[InputRecord],
        *,
        fields: Sequence[str] | None,
        datatype: str | None,
        exclude: str | None = None,
        order: Sequence[str] | None = None,
    ) -> None:
        self.size = len(records)
        names, exact = _names(records, fields, order, exclude)
        # Read from Parquet: the values from its columns (runners/models/columnrows.py), so
        # that the records' dicts are made only if something else asks for them; a record
        # holding a null, NaN or infinity fails, the others are sent.
        columns = _from_columns(records, names, exact, datatype, exclude)
        plain = (
            None
            if columns is not None
            else _plain_values(records, names, exact=exact, datatype=datatype, exclude=exclude)
        )
        if columns is not None:
            self.values, self.width = columns.values(), columns.width
            self.indexes, self.failures = columns.indexes, columns.failures
        elif plain is None:  # something to convert, flatten or refuse: record by record
            batch = Batch(
                records,
                lambda r: record_row(
                    r.data, names, datatype=datatype, exact=exact, exclude=exclude
                ),
            )
            rows = _drop_ragged(batch)
            self.width = len(rows[0]) if rows else 0
            self.values = list(chain.from_iterable(rows))
            self.indexes, self.failures = batch.indexes, batch.failures
        else:
            self.values, self.width = plain
            self.indexes, self.failures = range(self.size), {}

    @classmethod
    def packed(
        cls,
        records: Sequence[InputRecord],
        *,
        fields: Sequence[str] | None,
        datatype: str,
        exclude: str | None = None,
        order: Sequence[str] | None = None,
    ) -> tuple[Rows, bytes]:
        """The rows and their raw tensor bytes (binary REST tensors, gRPC raw contents).

        For the datatypes `struct` packs (FP32, FP64, INT32, INT64), a batch of records holding
        the same fields is packed before any type check: struct takes numbers only (bools as 1
        and 0, the module's rule) within the type's range and refuses anything else, so it is
        the check (with a `sum` for NaN and infinity, which it packs), and the batch it refuses
        is converted record by record as usual. A type check of its own costs a tenth of the
        Triton client's CPU at 256 records per batch.
        """
        if datatype in tensors.STRUCT_CODES:
            names, exact = _names(records, fields, order, exclude)
            columns = _from_columns(records, names, exact, datatype, exclude)
            if columns is not None:  # read from Parquet: the tensor straight from its columns
                rows = cls.__new__(cls)
                rows.size, rows.width, rows._columns = len(records), columns.width, columns
                rows.indexes, rows.failures = columns.indexes, columns.failures
                return rows, columns.raw(datatype)
            found = _flat_values(records, names, exact=exact, exclude=exclude)
            raw = None if found is None else tensors.pack_numbers(found[0], datatype)
            if found is not None and raw is not None and finite_packed(found[0], datatype):
                rows = cls.__new__(cls)
                rows.size, (rows.values, rows.width) = len(records), found
                rows.indexes, rows.failures = range(rows.size), {}
                return rows, raw
        rows = cls(records, fields=fields, datatype=datatype, exclude=exclude, order=order)
        return rows, tensors.encode_values(rows.values, datatype)

    _values: list[Any] | None = None
    _columns: ColumnRows | None = None  # `packed` from Parquet columns: values made on demand

    @property
    def values(self) -> list[Any]:
        """The good records' values, flat and row-major."""
        if self._values is None:
            assert self._columns is not None
            self._values = self._columns.values()
        return self._values

    @values.setter
    def values(self, values: list[Any]) -> None:
        self._values = values

    @property
    def count(self) -> int:
        """How many rows (records sent)."""
        return len(self.indexes)

    @property
    def rows(self) -> list[list[Any]]:
        """The rows as lists (KServe v1 sends them so)."""
        width, values = self.width, self.values
        return [values[i : i + width] for i in range(0, len(values), width)] if width else []


def _from_columns(
    records: Sequence[InputRecord],
    names: Sequence[str],
    exact: bool,
    datatype: str | None,
    exclude: str | None,
) -> ColumnRows | None:
    """The batch's rows from the columns its records were read from, when that path applies."""
    return column_rows(
        records,
        names,
        exact=exact,
        datatype=datatype,
        exclude=exclude,
        explain=lambda r: record_row(
            r.data, names, datatype=datatype, exact=exact, exclude=exclude
        ),
    )


def _names(
    records: Sequence[InputRecord],
    fields: Sequence[str] | None,
    order: Sequence[str] | None,
    exclude: str | None,
) -> tuple[Sequence[str], bool]:
    """(the fields of a row, whether a record must hold exactly those) for a batch."""
    if fields is not None:
        return fields, False
    if order is None and records:
        order = first_fields(records[0].data, exclude)
    return (order or ()), True


def _drop_ragged(batch: Batch[list[Any]]) -> list[list[Any]]:
    """The batch's rows of its most common length; the others fail (a tensor is square)."""
    lengths = Counter(len(row) for row in batch.items)
    if len(lengths) <= 1:
        return batch.items
    width = lengths.most_common(1)[0][0]
    keep = []
    for i, row in enumerate(batch.items):
        if len(row) == width:
            keep.append(i)
        else:
            reason = f"record has {len(row)} input values, the batch has {width}"
            batch.failures[batch.indexes[i]] = RecordFailure(reason)
    batch.indexes = [batch.indexes[i] for i in keep]
    return [batch.items[i] for i in keep]
