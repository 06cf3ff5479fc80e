"""Values as JSON can carry them: the conversions every output shares (runners/formats.py).

JSON has no NaN or infinity, though Python's json module reads and writes them: every output
writes a non-finite number as the string "NaN", "Infinity" or "-Infinity" (`json_safe`; the
same rule for every sink, see docs/contract.md). Rows that hold one take a slower path;
others pay nothing. Database, CSV and numpy values become plain JSON values (`jsonable`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import numbers
from collections.abc import Sequence
from typing import Any

from runners.api import ErrorRecord, OutputRecord


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
            response = json_safe(record.response, strict=False)
            safe.append(ErrorRecord(record.id, record.position, data, value, record.code, response))
        else:
            safe.append(OutputRecord(record.id, record.position, data, value, record.usage))
    return (safe, refused) if changed else None


def _refusal(exc: BaseException) -> str:
    return f"the prediction is no JSON value: {exc}"[:300]
