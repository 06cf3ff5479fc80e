"""Records from byte-stream files (CSV, JSONL, openai-batch) for the file and s3 sources: the
runner's per-record read path.

Why apart from runners/formats.py (which parses rows and writes chunks): this is the hot path,
and plain JSONL, the common case, takes its own loop (`_jsonl_records`) instead of a parsed row
and `make_record` per record; the positions and reasons are the same as formats' rules.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from itertools import islice, repeat
from operator import contains
from typing import TYPE_CHECKING, TypeVar

import orjson

from contracts.storage_fields import OPENAI_BATCH, PARQUET
from runners import jsonio
from runners.api import InputRecord
from runners.formats import UnreadableRecord, key_or, make_record, parse_rows

if TYPE_CHECKING:
    from runners.parquet import Readable

P = TypeVar("P")  # a file's path, an object's key


def read_part(
    part: P,
    fmt: str,
    *,
    lines: Callable[[P], Iterable[str]],
    binary: Callable[[P], Readable],
    where: str,
    start: int,
    skip: int,
    id_field: str | None,
    record_field: str | None,
) -> Generator[InputRecord, None, int]:
    """The records at positions >= `skip` of one file or object (`part`) of a file or s3
    source in format `fmt`, its first record at `start`: Parquet from `binary(part)` (a path
    or a seekable file), any other format from the text lines `lines(part)` gives (closed
    when done); returns how many positions it holds."""
    if fmt == PARQUET:
        from runners import parquet  # imports pyarrow (0.2 s of CPU): Parquet runs only

        return (
            yield from parquet.read_records(
                binary(part),
                where=where,
                start=start,
                skip=skip,
                id_field=id_field,
                record_field=record_field,
            )
        )
    text = lines(part)
    try:
        return (
            yield from read_records(
                text, fmt=fmt, start=start, skip=skip, id_field=id_field, record_field=record_field
            )
        )
    finally:
        close = getattr(text, "close", None)
        if close is not None:
            close()


def read_records(
    lines: Iterable[str],
    *,
    fmt: str,
    start: int,
    skip: int,
    id_field: str | None,
    record_field: str | None,
) -> Generator[InputRecord, None, int]:
    """The records at positions >= `skip` of one file (or object) whose first record is at
    `start`; returns how many positions the file holds, for the next file's `start`.

    Plain JSONL, the common case, takes `_jsonl_records`; other formats parse rows and make
    each record with `make_record`.
    """
    if fmt == "jsonl" and record_field is None:
        return (yield from _jsonl_records(lines, start=start, skip=skip, id_field=id_field))
    count = 0
    for offset, row in enumerate(parse_rows(lines, fmt=fmt, skip=skip - start)):
        count = offset + 1
        if start + offset >= skip and row is not None:
            batch = fmt == OPENAI_BATCH
            yield make_record(
                row, start + offset, id_field=id_field, record_field=record_field, batch=batch
            )
    return count


# Lines parsed together by `_jsonl_records`: at most _BLOCK, and about _BLOCK_BYTES of text
# (long lines, LLM prompts say, make short blocks: memory holds what the batches in flight do,
# and not much more); the first block is short, as nothing says yet how long lines are.
_BLOCK, _BLOCK_BYTES, _FIRST_BLOCK = 512, 1 << 20, 16


def _jsonl_records(
    lines: Iterable[str], *, start: int, skip: int, id_field: str | None
) -> Generator[InputRecord, None, int]:
    """`read_records` for plain JSONL. Lines come a block at a time: stripped, parsed with
    orjson and made InputRecords (each holding its line's text, which JSON outputs echo as it
    is, runners/jsonio.py) in C loops (`map`), with no Python step per line but the
    InputRecord's own. A block holding a line orjson refuses, one that is no object or one
    with a carriage return inside takes `_jsonl_lines`, line by line, as before. Blank lines
    hold no position; lines before `skip` are counted, not parsed."""
    texts = filter(None, map(str.strip, lines))  # the non-blank lines, stripped
    position = start + sum(map(bool, islice(texts, max(skip - start, 0))))
    loads, size = orjson.loads, _FIRST_BLOCK
    while block := list(islice(texts, size)):
        size = max(1, min(_BLOCK, _BLOCK_BYTES * len(block) // (sum(map(len, block)) or 1)))
        try:
            values = list(map(loads, block))
        except ValueError:  # NaN, say: the standard library's value, or its message
            values = None
        positions = range(position, position + len(block))
        position += len(block)
        if (
            values is None
            or set(map(type, values)) != {dict}
            or any(map(contains, block, repeat("\r")))
        ):
            yield from _jsonl_lines(block, positions, id_field=id_field)
            continue
        ids: Iterable[str] = map(str, positions)
        if id_field is not None:
            keys = list(map(dict.get, values, repeat(id_field)))
            ids = map(str, keys) if None not in keys else map(key_or, keys, ids)
        yield from map(InputRecord, positions, ids, values, block)
    return position - start


def _jsonl_lines(
    texts: list[str], positions: range, *, id_field: str | None
) -> Iterator[InputRecord]:
    """The records of stripped JSONL lines at `positions`, one line at a time: an unreadable
    line makes an UnreadableRecord in its place."""
    for position, text in zip(positions, texts, strict=True):
        try:
            value, echo = orjson.loads(text), text  # orjson parsed it: valid JSON as it stands
        except ValueError:  # NaN, say: the standard library's value, or its message
            try:
                value, echo = jsonio.stdlib_loads(text), None
            except ValueError as exc:
                yield UnreadableRecord(position, str(position), {}, reason=f"invalid JSON: {exc}")
                continue
        if type(value) is not dict:
            reason = f"not a JSON object: {text[:80]}"
            yield UnreadableRecord(position, str(position), {}, reason=reason)
            continue
        key = None if id_field is None else value.get(id_field)
        # A carriage return inside a line ends it for some readers: such text is not echoed.
        if echo is not None and "\r" in echo:
            echo = None
        yield InputRecord(position, str(position) if key is None else str(key), value, echo)
