"""CSV and JSONL, read as streams and written per chunk; shared by the storage backends.

Why here and not in one backend: files, S3 objects and anything else that is a
byte stream need the same rules, and backends must not import each other.

Rules:
- Positions count every non-blank line (JSONL) or data row (CSV) across the
  whole input, so the same input always gives the same positions.
- A line that does not parse is not a crash: it becomes an `UnreadableRecord`,
  which the pipeline sends to the error output like a model's RecordFailure.
- Output lines are one JSON object per record: `id`, `position`, `input` and
  `prediction` (or `reason` for the error output); CSV output has the same
  columns with `input`/`prediction` as JSON text.
- JSON has no NaN or infinity, though Python's json module reads and writes
  them: every output writes a non-finite number as the string "NaN",
  "Infinity" or "-Infinity" (`json_safe`; the same rule for every sink, see
  docs/contract.md). Rows that hold one take a slower path; others pay nothing.
- `recordField` reads back what an earlier run wrote: the record is the row's `input`, its
  id the row's (`earlier_record`), so only the failed records of a run can be run again.
- A CSV header naming a column twice would make one field of two, silently:
  its rows are unreadable instead.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from runners.api import ErrorRecord, InputRecord, OutputRecord

Row = dict[str, Any] | str | None


@dataclass(slots=True)
class UnreadableRecord(InputRecord):
    """An input row that could not be parsed: it goes to the error output, not the model."""

    reason: str = ""


def guess_format(name: str, explicit: str | None) -> str:
    """The explicit format, else from the name's extension, else jsonl."""
    if explicit:
        return explicit
    lowered = name.lower()
    return "csv" if lowered.endswith((".csv", ".csv.gz")) else "jsonl"


def record_id(data: dict[str, Any], position: int, *, id_field: str | None) -> str:
    """The record's stable id: its id field when set and present, else its position."""
    if id_field is not None and data.get(id_field) is not None:
        return str(data[id_field])
    return str(position)


def jsonable(value: Any) -> Any:
    """A JSON-friendly version of a database, CSV or numpy value (else `value` itself)."""
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return math.nan if value.is_nan() else float(value)  # float() refuses sNaN
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, numbers.Integral) and not isinstance(value, int):
        return int(value)  # numpy's integers
    if isinstance(value, numbers.Real) and not isinstance(value, float):
        return float(value)  # numpy's floats but float64 (a float already)
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist) and not isinstance(value, list):
        return tolist()
    return value


# How JSON carries the numbers it has no literal for (docs/contract.md, "Values JSON cannot hold").
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def json_safe(value: Any, *, strict: bool = True) -> Any:
    """`value` as JSON can carry it, and `value` itself when it already can.

    NaN and the infinities become NON_FINITE's strings, wherever they are nested; decimals,
    dates, bytes and numpy values are converted as `jsonable` converts them. Anything else
    raises TypeError, or (not `strict`) becomes its `str()` text.
    """
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else NON_FINITE[repr(value)]
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if isinstance(value, dict):
        changed = {}
        for key, item in value.items():
            safe = json_safe(item, strict=strict)
            if safe is not item:
                changed[key] = safe
        return {**value, **changed} if changed else value
    if isinstance(value, list | tuple):
        items = [json_safe(item, strict=strict) for item in value]
        same = kind is list and all(a is b for a, b in zip(items, value, strict=True))
        return value if same else items
    converted = jsonable(value)
    if converted is not value:
        return json_safe(converted, strict=strict)
    if strict:
        raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")
    return str(value)


def json_records(
    records: Sequence[OutputRecord | ErrorRecord],
) -> tuple[list[OutputRecord | ErrorRecord], list[ErrorRecord]] | None:
    """`records` with every value as JSON can carry it (`json_safe`), and apart, as error
    records, the output records whose prediction JSON cannot carry at all; None when every
    record can be written as it is.

    For a sink that refused a chunk: one whose encoder refuses NaN (SQL, HTTP) writes the
    safe records, so that every sink writes the same strings; a prediction that is no JSON
    value at all (a plug-in's object) is a per-record error, not a run that cannot go on.
    """
    safe: list[OutputRecord | ErrorRecord] = []
    refused: list[ErrorRecord] = []
    changed = False
    for record in records:
        data = json_safe(record.input, strict=False)
        if isinstance(record, ErrorRecord):
            value: Any = record.reason
        else:
            try:
                value = json_safe(record.prediction)
            except (TypeError, ValueError, RecursionError) as exc:
                refused.append(ErrorRecord(record.id, record.position, data, _refusal(exc)))
                changed = True
                continue
            changed = changed or value is not record.prediction
        changed = changed or data is not record.input
        if isinstance(record, ErrorRecord):
            safe.append(ErrorRecord(record.id, record.position, data, value))
        else:
            safe.append(OutputRecord(record.id, record.position, data, value))
    return (safe, refused) if changed else None


def _refusal(exc: BaseException) -> str:
    return f"the prediction is no JSON value: {exc}"[:300]


def parse_rows(lines: Iterable[str], *, fmt: str, skip: int = 0) -> Iterator[Row]:
    """One item per position: a parsed row, a failure reason, or None (skipped, unparsed)."""
    return _read_csv(lines) if fmt == "csv" else _read_jsonl(lines, skip=skip)


def make_record(
    row: dict[str, Any] | str,
    position: int,
    *,
    id_field: str | None,
    record_field: str | None = None,
) -> InputRecord:
    """The InputRecord for a parsed row, or an UnreadableRecord for a failure reason; with
    `record_field`, the record an earlier run's error row holds (`earlier_record`)."""
    if isinstance(row, str):
        return UnreadableRecord(position, str(position), {}, reason=row)
    if record_field is not None:
        return earlier_record(row, position, id_field=id_field, record_field=record_field)
    return InputRecord(position, record_id(row, position, id_field=id_field), row)


def earlier_record(
    row: dict[str, Any], position: int, *, id_field: str | None, record_field: str
) -> InputRecord:
    """The record under `record_field` of a row an earlier run wrote (`recordField`).

    The row is an error (or output) row: `{"id", "position", "input", "reason"}` in JSONL,
    the same with `input` as JSON text in CSV and SQL (where the id is `record_id`). The
    record keeps the earlier run's id, so a re-run's results carry the ids the failures had;
    `id_field` names a field of the record instead. A row without a JSON object there, or
    with `{}` and a reason (a line the earlier run could not read: nothing to send), is
    unreadable, so it goes to the error output again rather than vanish.
    """
    earlier = row.get("id", row.get("record_id"))
    fallback = str(position) if earlier is None else str(earlier)
    data = row.get(record_field)
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            data = None
    if not isinstance(data, dict):
        reason = f"recordField: no JSON object under {record_field!r} in this row"
        return UnreadableRecord(position, fallback, {}, reason=reason)
    if not data and row.get("reason"):
        reason = f"the earlier run could not read this record: {row['reason']}"
        return UnreadableRecord(position, fallback, {}, reason=reason[:1000])
    if id_field is not None and data.get(id_field) is not None:
        return InputRecord(position, str(data[id_field]), data)
    return InputRecord(position, fallback, data)


# `raw_decode` of a stripped line is `json.loads` without its two whitespace scans: 40 % less
# CPU per line (2.1 -> 1.25 us for an iris record); parsing input is a fifth to a quarter of
# the runner's time holding the GIL (py-spy --gil, file -> Triton -> file).
_DECODE = json.JSONDecoder().raw_decode


def _read_jsonl(lines: Iterable[str], *, skip: int) -> Iterator[Row]:
    # Skipped lines are counted, not parsed: resuming far into a file stays cheap.
    for line in lines:
        text = line.strip()
        if not text:
            continue
        if skip > 0:
            skip -= 1
            yield None
            continue
        try:
            value, end = _DECODE(text)
            if end != len(text):  # more after the value: json.loads says what, or takes it
                value = json.loads(text)
        except ValueError as exc:
            yield f"invalid JSON: {exc}"
            continue
        yield value if isinstance(value, dict) else f"not a JSON object: {text[:80]}"


def _read_csv(lines: Iterable[str]) -> Iterator[Row]:
    reader = csv.reader(iter(lines))
    header: list[str] | None = None
    twice: str | None = None
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield f"invalid CSV: {exc}"
            continue
        if not row:
            continue
        if header is None:
            header = row
            twice = next((name for i, name in enumerate(row) if name in row[:i]), None)
        elif twice is not None:
            yield f"CSV header names column {twice!r} twice"
        elif len(row) != len(header):
            yield f"CSV row has {len(row)} fields, header has {len(header)}"
        else:
            yield dict(zip(header, row, strict=True))


def iter_text_lines(chunks: Iterable[bytes], *, encoding: str = "utf-8") -> Iterator[str]:
    """Text lines (with their line endings) from a stream of byte chunks."""
    decoder = io.IncrementalNewlineDecoder(None, translate=False)
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk.decode(encoding, "replace"))
        *complete, pending = pending.split("\n")
        for line in complete:
            yield line + "\n"
    if pending:
        yield pending


def _json_default(value: Any) -> Any:
    """The encoder's `default`: jsonable's conversions, TypeError for anything else."""
    converted = jsonable(value)
    if converted is value:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return converted


# json.dumps with options builds a new encoder per call; one shared encoder writes the same text.
_ENCODER = json.JSONEncoder(default=_json_default, allow_nan=False)


def _one_shot_encoder() -> Callable[[Any], str]:
    """`_ENCODER.encode` for the objects output rows hold, a third cheaper per row.

    `JSONEncoder.encode` makes a new C encoder on every call (stdlib json.encoder.iterencode);
    this makes the same one (the same arguments as `_ENCODER`'s) once. One difference: no
    circular-reference bookkeeping, so a cyclic value (which JSON from sources and models
    cannot hold) fails with RecursionError instead of ValueError. Without the C accelerator
    (another Python implementation), `_ENCODER.encode` itself.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    chunks = make(
        None,
        _json_default,
        json.encoder.encode_basestring_ascii,
        None,
        ": ",
        ", ",
        False,
        False,
        False,
    )

    def encode(value: Any) -> str:
        if isinstance(value, str):
            return json.encoder.encode_basestring_ascii(value)
        return "".join(chunks(value, 0))

    return encode


_encode = _one_shot_encoder()


def output_row(record: OutputRecord | ErrorRecord) -> dict[str, Any]:
    """The JSON object written for one record."""
    row: dict[str, Any] = {
        "id": record.id,
        "position": record.position,
        "input": record.input,
    }
    if isinstance(record, ErrorRecord):
        row["reason"] = record.reason
    else:
        row["prediction"] = record.prediction
    return row


def encode_chunk(records: Sequence[OutputRecord | ErrorRecord], *, fmt: str) -> bytes:
    """One chunk as bytes in `fmt`, non-finite numbers as NON_FINITE's strings; raises
    TypeError if a value is no JSON value at all."""
    if fmt == "csv":
        return _encode_csv(records)
    if not records:
        return b""
    lines = [_dumps(output_row(r)) for r in records]
    lines.append("")  # a newline after the last line too
    return "\n".join(lines).encode()


def _encode_csv(records: Sequence[OutputRecord | ErrorRecord]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    is_error = bool(records) and isinstance(records[0], ErrorRecord)
    writer.writerow(["id", "position", "input", "reason" if is_error else "prediction"])
    for record in records:
        row = output_row(record)
        last = row.get("reason", row.get("prediction"))
        writer.writerow(
            [
                row["id"],
                row["position"],
                _dumps(row["input"]),
                _dumps(last, text=is_error),
            ]
        )
    return out.getvalue().encode()


def _dumps(value: Any, *, text: bool = False) -> str:
    if text and isinstance(value, str):
        return value
    try:
        return _encode(value)
    except ValueError:  # NaN or an infinity: the C encoder refuses them, json_safe spells them
        return _encode(json_safe(value))


def count_records(data: bytes, *, fmt: str) -> int:
    """How many records a chunk written by `encode_chunk` holds, without decoding them."""
    if fmt == "csv":  # a quoted field may span lines: let the csv module find the rows
        rows = sum(1 for row in csv.reader(io.StringIO(data.decode())) if row)
        return max(rows - 1, 0)  # minus the header
    return sum(1 for line in data.split(b"\n") if line.strip())


def decode_chunk(data: bytes, *, fmt: str) -> list[dict[str, Any]]:
    """The rows of a chunk written by `encode_chunk` (used to verify and by tests)."""
    text = data.decode()
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        for row in rows:
            row["input"] = json.loads(row["input"])
            if "prediction" in row:
                row["prediction"] = json.loads(row["prediction"])
            row["position"] = int(row["position"])
        return rows
    return [json.loads(line) for line in text.splitlines() if line.strip()]
