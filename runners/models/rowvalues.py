"""The values of tensor rows (runners/models/rows.py): which a datatype takes, and how.

rows.py decides which fields of a record make its row, and in which order; this module decides
whether each value may go into a tensor of a datatype: the per-value checks and conversions of
the record-by-record path (`CHECKS`, raising RowError with the record's reason) and the cheap
whole-batch tests of the fast paths (`all_plain`, `finite_packed`). The rules are in rows.py's
docstring; they live apart from the field ordering because they change for other reasons (a
new datatype, a range) and so rows.py stays within the 400-line bar.
"""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Callable
from typing import Any

from runners.models import tensors


class RowError(ValueError):
    """One record cannot become a tensor row; the message is the record's failure reason."""


# Per float datatype, the least magnitude that rounds to infinity (its largest finite value
# plus half a unit in the last place): struct refuses to pack these, and so do rows.
_FLOAT_OVERFLOW = {"FP16": 65520, "FP32": 2**128 - 2**103, "FP64": 2**1024 - 2**970}
_INT_LIMITS = {"INT32": 2**31, "INT64": 2**63}


def _number(value: Any, datatype: str = "FP64") -> float | int:
    kind = type(value)
    if kind is bool:
        return int(value)
    if kind is str or kind is decimal.Decimal:
        try:
            number: float | int = float(value)
        except ValueError:
            raise RowError(f"value {_show(value)} is not a number") from None
    elif kind is float or kind is int:
        number = value
    else:
        raise RowError(f"value {_show(value)} is not a number")
    if number != number or number in (math.inf, -math.inf):
        raise RowError(f"value {_show(value)} is not a finite number")
    if abs(number) >= _FLOAT_OVERFLOW[datatype]:
        raise RowError(f"value {_show(value)} is beyond the range of {datatype}")
    return number


def _integer(value: Any, datatype: str = "INT64") -> int:
    kind = type(value)
    number: int | None = None
    if kind is int:
        number = value
    elif kind is bool:
        number = int(value)
    elif kind is decimal.Decimal and value.is_finite() and value == value.to_integral_value():
        number = int(value)  # exact, however many digits
    elif kind is float or kind is str:
        try:
            whole = float(value)
        except ValueError:
            whole = math.nan
        if whole.is_integer():
            number = int(whole)
    if number is None:
        raise RowError(f"value {_show(value)} is not an integer")
    limit = _INT_LIMITS[datatype]
    if not -limit <= number < limit:
        raise RowError(f"value {_show(value)} is beyond the range of {datatype}")
    return number


def _boolean(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise RowError(f"value {_show(value)} is not a boolean")


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    raise RowError(f"value {_show(value)} is not a string")


def _json_value(value: Any) -> Any:
    """KServe v1 (no datatype): any JSON value but NaN and the infinities, which JSON lacks."""
    if type(value) is float and (value != value or value in (math.inf, -math.inf)):
        raise RowError(f"value {_show(value)} is not a finite number")
    return value


CHECKS: dict[str | None, Callable[[Any], Any]] = {
    "FP16": functools.partial(_number, datatype="FP16"),
    "FP32": functools.partial(_number, datatype="FP32"),
    "FP64": functools.partial(_number, datatype="FP64"),
    "INT32": functools.partial(_integer, datatype="INT32"),
    "INT64": functools.partial(_integer, datatype="INT64"),
    "BOOL": _boolean,
    "BYTES": _text,
    None: _json_value,
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# Value types a row may hold as they are, per datatype (None: KServe v1, any JSON but lists).
# FP16 is not here: every value is range-checked on its own (struct cannot tell its range).
_PLAIN_TYPES: dict[str | None, frozenset[type]] = {
    **dict.fromkeys(("FP32", "FP64"), frozenset({float, int})),
    **dict.fromkeys(("INT32", "INT64"), frozenset({int})),
    "BOOL": frozenset({bool}),
    "BYTES": frozenset({str}),
}


def all_plain(values: list[Any], datatype: str | None) -> bool:
    """Whether a batch's flat `values` may be sent as they are: each of a type the datatype
    holds unconverted, and representable (else the caller converts record by record)."""
    types = set(map(type, values))
    allowed = _PLAIN_TYPES.get(datatype)
    # KServe v1 (no datatype) takes any JSON value but lists, which rows flatten.
    ok = list not in types if datatype is None else allowed is not None and types <= allowed
    return ok and _representable(values, types, datatype)


def _representable(values: list[Any], types: set[type], datatype: str | None) -> bool:
    """Whether a request can carry every value as it is: no NaN or infinity (JSON has none, and
    a model cannot be asked about one), nothing beyond the datatype's range (it would become
    infinity, or wrap). The common case costs a `sum` (and a `struct.pack` for JSON bodies)."""
    if datatype in tensors.STRUCT_CODES and tensors.pack_numbers(values, datatype) is None:
        return False  # out of the datatype's range: the record-by-record path says which
    return float not in types or _all_finite(values, types)


def _all_finite(values: list[Any], types: set[type]) -> bool:
    """No NaN and no infinity among the floats of `values` (a sum of finite numbers is finite
    unless it overflows, which only sends the batch the record-by-record way)."""
    if not types <= {float, int}:
        values = [value for value in values if type(value) is float]
    try:
        return math.isfinite(sum(values))
    except OverflowError:  # an int beyond a float's range
        return False


def finite_packed(values: list[Any], datatype: str) -> bool:
    """Whether packed values hold no NaN or infinity (struct packs them; integers have none)."""
    if datatype not in ("FP32", "FP64"):
        return True
    try:
        return math.isfinite(sum(values))
    except (OverflowError, TypeError):  # bools and ints only overflow; TypeError: not numbers
        return False
