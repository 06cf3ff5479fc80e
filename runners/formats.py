"""CSV, JSONL and OpenAI batch files, read as streams and written per chunk; shared by the
storage backends.

Why here and not in one backend: files, S3 objects and anything else that is a
byte stream need the same rules, and backends must not import each other.

Rules:
- Positions count every non-blank line (JSONL) or data row (CSV) across the
  whole input, so the same input always gives the same positions.
- A line that does not parse is not a crash: it becomes an `UnreadableRecord`,
  which the pipeline sends to the error output like a model's RecordFailure.
- Output lines are one JSON object per record: `id`, `position`, `input` and
  `prediction` (or `reason` for the error output), and `usage` beside the prediction when
  an OpenAI answer had one; CSV output has the same columns with `input`/`prediction`/`usage`
  as JSON text. `openai-batch` reads request lines and writes OpenAI's batch output lines
  instead (runners/batchlines.py).
- JSON has no NaN or infinity, though Python's json module reads and writes
  them: every output writes a non-finite number as the string "NaN",
  "Infinity" or "-Infinity" (`json_safe`; the same rule for every sink, see
  docs/contract.md; runners/jsonvalues.py). Rows that hold one take a slower path; others
  pay nothing.
- `recordField` reads back what an earlier run wrote: the record is the row's `input`, its
  id the row's (`earlier_record`), so only the failed records of a run can be run again.
- A CSV header naming a column twice would make one field of two, silently:
  its rows are unreadable instead.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import orjson

from contracts.storage_fields import OPENAI_BATCH
from runners import batchlines, jsonio
from runners.api import ErrorRecord, InputRecord, OutputRecord
from runners.jsonvalues import NON_FINITE as NON_FINITE
from runners.jsonvalues import json_records as json_records
from runners.jsonvalues import json_safe as json_safe
from runners.jsonvalues import jsonable as jsonable
from runners.tokens import sum_usage

Row = dict[str, Any] | str | None
# How input text is read: UTF-8, a byte order mark at the start dropped (editors on Windows and
# spreadsheet exports write one; JSON and CSV parsers would take it for data).
TEXT_ENCODING = "utf-8-sig"


@dataclass(slots=True)
class UnreadableRecord(InputRecord):
    """An input row that could not be parsed: it goes to the error output, not the model."""

    reason: str = ""
    code: str | None = None  # openai-batch lines: which rule the line breaks (batchlines.py)


def extension(fmt: str) -> str:
    """The file name extension of chunks written in `fmt`."""
    return "jsonl" if fmt == OPENAI_BATCH else fmt


def guess_format(name: str, explicit: str | None) -> str:
    """The explicit format, else from the name's extension, else jsonl."""
    if explicit:
        return explicit
    lowered = name.lower()
    if lowered.endswith((".parquet", ".parq")):
        return "parquet"  # runners/parquet.py
    return "csv" if lowered.endswith((".csv", ".csv.gz")) else "jsonl"


def record_id(data: dict[str, Any], position: int, *, id_field: str | None) -> str:
    """The record's stable id: its id field when set and present, else its position."""
    if id_field is not None and data.get(id_field) is not None:
        return str(data[id_field])
    return str(position)


def key_or(key: object, fallback: str) -> str:
    """`record_id` given the id field's value (`key`) and the position's text (`fallback`):
    for readers that make ids a block at a time (`map(key_or, keys, positions)`)."""
    return fallback if key is None else str(key)


def parse_rows(lines: Iterable[str], *, fmt: str, skip: int = 0) -> Iterator[Row]:
    """One item per position: a parsed row, a failure reason, or None (skipped, unparsed)."""
    return _read_csv(lines) if fmt == "csv" else _read_jsonl(lines, skip=skip)


def count_positions(lines: Iterable[str], *, fmt: str) -> int:
    """How many positions `lines` hold in `fmt`, JSON left undecoded: CSV rows parsed (a
    quoted field may span lines); for the JSON line formats, the non-blank lines, counted in
    C loops (`map`, no Python step per line)."""
    if fmt == "csv":
        return sum(1 for _ in _read_csv(lines))
    return sum(map(bool, map(str.strip, lines)))


def make_record(
    row: dict[str, Any] | str,
    position: int,
    *,
    id_field: str | None,
    record_field: str | None = None,
    batch: bool = False,
) -> InputRecord:
    """The InputRecord for a parsed row, or an UnreadableRecord for a failure reason; with
    `record_field`, the record an earlier run's error row holds (`earlier_record`); with
    `batch`, an OpenAI batch request line keyed by its custom_id (`batch_record`)."""
    if isinstance(row, str):
        if batch:
            reason = f"input position {position}: {row}"
            return UnreadableRecord(position, "", {}, reason=reason, code="invalid_json_line")
        return UnreadableRecord(position, str(position), {}, reason=row)
    if record_field is not None:
        record = earlier_record(row, position, id_field=id_field, record_field=record_field)
        if not batch or isinstance(record, UnreadableRecord):
            return record
        row = record.data
    return (
        batch_record(row, position)
        if batch
        else InputRecord(position, record_id(row, position, id_field=id_field), row)
    )


def batch_record(line: dict[str, Any], position: int) -> InputRecord:
    """The record of an OpenAI batch request line: its custom_id and the line, or an
    UnreadableRecord naming the rule it breaks (runners/batchlines.py)."""
    if isinstance(line.get("body"), str):  # a SQL text column or a CSV cell holds JSON text
        line = {**line, "body": batchlines.json_object(line["body"])}
    problem = batchlines.line_problem(line, position)
    if problem is not None:
        code, reason = problem
        custom_id = line.get("custom_id")
        usable = custom_id if isinstance(custom_id, str) else ""  # "": no custom_id to name
        return UnreadableRecord(position, usable, line, reason=reason, code=code)
    return InputRecord(position, line["custom_id"], line)


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
            value = jsonio.loads(text)
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


def iter_text_lines(chunks: Iterable[bytes], *, encoding: str = TEXT_ENCODING) -> Iterator[str]:
    """Text lines (with their line endings) from a stream of byte chunks.

    The decoder is incremental: a character whose bytes a chunk boundary splits is read whole
    (decoding each chunk on its own made two replacement characters of it). A UTF-8 byte
    order mark at the start is dropped, as files are read (`TEXT_ENCODING`)."""
    text = codecs.getincrementaldecoder(encoding)(errors="replace")
    decoder = io.IncrementalNewlineDecoder(None, translate=False)
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(text.decode(chunk))
        *complete, pending = pending.split("\n")
        for line in complete:
            yield line + "\n"
    pending += decoder.decode(text.decode(b"", final=True), final=True)
    if pending:
        yield pending


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
        if record.usage is not None:  # OpenAI protocols: the answer's token usage
            row["usage"] = record.usage
    return row


def encode_chunk(
    records: Sequence[OutputRecord | ErrorRecord], *, fmt: str, salt: str = ""
) -> bytes:
    """One chunk as bytes in `fmt`, non-finite numbers as NON_FINITE's strings; raises
    TypeError if a value is no JSON value at all. `salt` (the run and Job) makes the ids
    of openai-batch lines."""
    if fmt == "csv":
        return _encode_csv(records)
    if fmt == OPENAI_BATCH:
        return batchlines.encode_chunk(records, salt=salt)
    if not records:
        return b""
    lines = _answer_lines(records)
    if lines is not None:
        return lines
    return jsonio.dump_lines(records, row=_echoing_row, plain=output_row)


def _answer_lines(records: Sequence[OutputRecord | ErrorRecord]) -> bytes | None:
    """The lines `dump_lines` writes of the common chunk, a plain answer per record with its
    input's text and no usage, built in one loop with no call per record but orjson's (0.61
    -> 0.48 us a record); None for any other chunk (an error record has no `usage`, and
    `Fragment(None)` raises TypeError), or when a line holds what the general path must
    spell (a non-finite prediction) or fall back for (a value orjson refuses)."""
    outputs: Sequence[OutputRecord] = records  # type: ignore[assignment]
    encode, option, default = orjson.dumps, jsonio.LINE_OPTIONS, jsonio.default
    text: Any = jsonio.Fragment  # raises TypeError for None
    buffer = bytearray()
    try:
        if [*map(_USAGE, outputs)].count(None) != len(outputs):
            return None
        for r in outputs:
            buffer += encode(
                {
                    "id": r.id,
                    "position": r.position,
                    "input": text(r.input_text),
                    "prediction": r.prediction,
                },
                default=default,
                option=option,
            )
    except (jsonio.EncodeError, TypeError, AttributeError):
        return None
    # orjson writes NaN as null (echoed input texts hold none: orjson read them): only a
    # prediction of another type than these may hold one (scanning the bytes costs more).
    predictions = [*map(_PREDICTION, outputs)]
    unsure = not set(map(type, predictions)) <= _FINITE and b"null" in buffer
    if unsure and any(map(jsonio.has_non_finite, predictions)):
        return None
    return jsonio.escape_line_ends(bytes(buffer))


_USAGE, _PREDICTION = attrgetter("usage"), attrgetter("prediction")
_FINITE = {int, str, bool, type(None)}  # types whose values hold no NaN or infinity


def _echoing_row(record: OutputRecord | ErrorRecord) -> dict[str, Any]:
    """`output_row` with the input's text in place of its object, when it has one: the input
    is not encoded again (runners/jsonio.py). The common chunk does not come here
    (`_answer_lines`)."""
    row = output_row(record)
    if record.input_text is not None:
        row["input"] = jsonio.Fragment(record.input_text)
    return row


def _encode_csv(records: Sequence[OutputRecord | ErrorRecord]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    is_error = bool(records) and isinstance(records[0], ErrorRecord)
    usage = not is_error and any(getattr(r, "usage", None) is not None for r in records)
    header = ["id", "position", "input", "reason" if is_error else "prediction"]
    writer.writerow([*header, "usage"] if usage else header)
    dumps = jsonio.dumps_text
    for record in records:
        row = output_row(record)
        last = row.get("reason", row.get("prediction"))
        text = record.input_text
        cells = [
            row["id"],
            row["position"],
            dumps(row["input"]) if text is None else text,
            last if is_error and isinstance(last, str) else dumps(last),
        ]
        writer.writerow([*cells, dumps(row.get("usage"))] if usage else cells)
    return out.getvalue().encode()


def count_records(data: bytes, *, fmt: str) -> int:
    """How many records a chunk written by `encode_chunk` holds, without decoding them."""
    if fmt == "csv":  # a quoted field may span lines: let the csv module find the rows
        rows = sum(1 for row in csv.reader(io.StringIO(data.decode())) if row)
        return max(rows - 1, 0)  # minus the header
    return sum(1 for line in data.split(b"\n") if line.strip())


def chunk_usage(data: bytes, *, fmt: str) -> dict[str, int]:
    """The token counts of the usage a chunk written by `encode_chunk` holds."""
    rows = decode_chunk(data, fmt=fmt)
    if fmt == OPENAI_BATCH:
        bodies = [(row.get("response") or {}).get("body") for row in rows]
        return sum_usage(body.get("usage") for body in bodies if isinstance(body, dict))
    return sum_usage(row.get("usage") for row in rows)


def decode_chunk(data: bytes, *, fmt: str) -> list[dict[str, Any]]:
    """The rows of a chunk written by `encode_chunk` (used to verify and by tests)."""
    text = data.decode()
    if fmt == OPENAI_BATCH:
        return batchlines.decode_rows(text)
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        for row in rows:
            row["input"] = json.loads(row["input"])
            if "prediction" in row:
                row["prediction"] = json.loads(row["prediction"])
            if "usage" in row:
                row["usage"] = json.loads(row["usage"])
            row["position"] = int(row["position"])
        return rows
    return [json.loads(line) for line in text.split("\n") if line.strip()]
