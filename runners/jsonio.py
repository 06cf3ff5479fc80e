"""The runner's JSON codec: reading input lines and writing output rows, with orjson.

Why orjson: parsing input lines and encoding output rows were a third of the runner's GIL time
(py-spy --gil, file -> KServe v2 -> file, 150,000 iris records). Per iris record on the 2-core
machine: parsing 1.25 -> 0.45 us; encoding a chunk's rows 2.4 -> 0.75 us (`dump_lines`; ad hoc,
the other core busy; bench/README.md has the whole runner's figures). The standard library stays
as the fallback for what orjson refuses, so every rule of the JSON outputs holds as before:

- JSON has no NaN or infinity. Python's json module reads them (an input line holding NaN is
  parsed as before); orjson writes them as null, so a row whose bytes hold `null` is checked
  for a non-finite number (`has_non_finite`, a walk over that row only) and then written with
  NON_FINITE's strings (`json_safe`), the same strings as before.
- Integers beyond 64 bits, nesting deeper than orjson's 255 levels and an input line orjson
  refuses (NaN, a lone surrogate) take the standard library's path, with its results and
  messages. A value that is no JSON value still raises TypeError (the committer then makes a
  per-record error of it, runners/commit.py).
- Output is compact (no spaces after `,` and `:`) and UTF-8, not ASCII with escapes: the
  bytes changed with this module (docs/contract.md), the values did not. U+2028, U+2029 and
  U+0085, which JSON allows unescaped in strings but Python's `str.splitlines()` takes for
  line ends, are written escaped, so a line stays a line for every reader.
- An input line orjson parsed is valid JSON as it stands: its text (`InputRecord.text`) is
  echoed into the output row unchanged (`orjson.Fragment`) instead of encoding the parsed
  object again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson

from runners.jsonvalues import json_safe, jsonable

# Datetimes and dataclasses go through `default` as with the standard library: ISO text for
# dates (jsonable), TypeError for a dataclass (no JSON value). Dict keys that are no strings
# (ints) become their text, as the standard library writes them.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_OPTIONS |= orjson.OPT_NON_STR_KEYS
_LINE_END_BYTES = tuple((chr(c).encode(), f"\\u{c:04x}".encode()) for c in (0x2028, 0x2029, 0x85))

LINE_OPTIONS = _OPTIONS | orjson.OPT_APPEND_NEWLINE  # dump_lines' options: a newline after each
Fragment = orjson.Fragment
EncodeError = orjson.JSONEncodeError
T = TypeVar("T")


def default(value: Any) -> Any:
    """Both encoders' `default`: jsonable's conversions, TypeError for anything else."""
    converted = jsonable(value)
    if converted is value:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return converted


# The fallback: the same compact, UTF-8 text as orjson's; it refuses NaN (ValueError) so that
# json_safe can spell it.
_STDLIB = json.JSONEncoder(
    default=default, allow_nan=False, ensure_ascii=False, separators=(",", ":")
)


def loads(text: str | bytes) -> Any:
    """The value of one JSON text: orjson's, else (NaN, a lone surrogate) the standard
    library's; ValueError with json's message when it is no JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return stdlib_loads(text)


def stdlib_loads(text: str | bytes) -> Any:
    """What the standard library reads in `text` (NaN too), or ValueError with its message."""
    stdlib = text.decode("utf-8", "surrogatepass") if isinstance(text, bytes) else text
    value, end = _RAW_DECODE(stdlib)
    if end != len(stdlib):  # more after the value: json.loads says what, or takes it
        value = json.loads(stdlib)
    return value


_RAW_DECODE = json.JSONDecoder().raw_decode


def dumps(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON (see the module doc for NaN and the fallbacks)."""
    try:
        data = orjson.dumps(value, default=default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _stdlib_dumps(value).encode()
    if b"null" in data and has_non_finite(value):
        return orjson.dumps(json_safe(value), default=default, option=_OPTIONS)
    return data


def dump_lines(
    items: Sequence[T],
    *,
    row: Callable[[T], Any],
    plain: Callable[[T], Any] | None = None,
) -> bytes:
    """One line of JSON per item (`row(item)`), each ended by a newline.

    `plain(item)`: the row without Fragments, for the fallbacks (default: `row`). Per item:
    the row and one orjson call, 0.3 us for an iris row: each line is added to one buffer at
    once (keeping 10,000 separate bytes objects made each call five times dearer). NaN is
    looked for once per chunk (`null` in its bytes), and only then row by row.
    """
    plain = plain or row
    encode, options = orjson.dumps, LINE_OPTIONS
    buffer, ends = bytearray(), []
    for item in items:
        try:
            buffer += encode(row(item), default=default, option=options)
        except orjson.JSONEncodeError:
            buffer += _stdlib_dumps(plain(item)).encode() + b"\n"
        ends.append(len(buffer))
    if b"null" in buffer:
        buffer = _spell_non_finite(items, buffer, ends, row=row, plain=plain)
    return escape_line_ends(bytes(buffer))


def _spell_non_finite(
    items: Sequence[T],
    buffer: bytearray,
    ends: list[int],
    *,
    row: Callable[[T], Any],
    plain: Callable[[T], Any],
) -> bytearray:
    """`buffer` with each line whose row holds NaN or an infinity (orjson wrote null) written
    again with NON_FINITE's strings (json_safe)."""
    lines, start = [], 0
    for item, end in zip(items, ends, strict=True):
        line = buffer[start:end]
        if b"null" in line and has_non_finite(row(item)):
            line = bytearray(dumps(json_safe(plain(item))) + b"\n")
        lines.append(line)
        start = end
    return bytearray().join(lines)


def dumps_text(value: Any) -> str:
    """`dumps` as text, for CSV cells; line ends as in `escape_line_ends`."""
    return escape_line_ends(dumps(value)).decode()


def _stdlib_dumps(value: Any) -> str:
    try:
        return _STDLIB.encode(value)
    except ValueError:  # NaN or an infinity: refused, json_safe spells them
        return _STDLIB.encode(json_safe(value))


def escape_line_ends(data: bytes) -> bytes:
    """`data` (JSON) with U+2028, U+2029 and U+0085 escaped: they can only be inside strings."""
    if data.isascii():  # the common case: one fast pass
        return data
    for raw, escaped in _LINE_END_BYTES:
        if raw in data:
            data = data.replace(raw, escaped)
    return data


def has_non_finite(value: Any) -> bool:
    """True when `value` holds NaN or an infinity anywhere (numpy and decimal ones too)."""
    kind = type(value)
    if kind is float:
        return not math.isfinite(value)
    if kind is str or kind is int or kind is bool or value is None or kind is Fragment:
        return False
    if isinstance(value, dict):
        return any(map(has_non_finite, value.values()))
    if isinstance(value, list | tuple):
        return any(map(has_non_finite, value))
    try:
        converted = jsonable(value)
    except (TypeError, ValueError):
        return False  # the encoder says what is wrong with it
    return converted is not value and has_non_finite(converted)
