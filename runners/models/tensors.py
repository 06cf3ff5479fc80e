"""Open Inference Protocol tensors: raw bytes in and out, and output tensors split per record.

Shared by the KServe v2 REST client (binary tensor extension) and the Triton gRPC client (raw
contents), which carry tensors the same way: little-endian, row-major, and BYTES elements each
prefixed by a 4-byte little-endian length.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from runners.columns import TensorValues

DTYPES: dict[str, str] = {
    "BOOL": "?",
    "UINT8": "u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}


class ShapeError(ValueError):
    """An output tensor cannot be mapped back to the batch's records."""


def encode(rows: Sequence[Sequence[Any]], datatype: str) -> bytes:
    """The raw bytes of a [len(rows), width] tensor."""
    return encode_values(list(itertools.chain.from_iterable(rows)), datatype)


# struct packs a list of Python numbers in about half numpy's time. What struct refuses (a float
# beyond FP32's range, an integer beyond the type's) goes to numpy, whose rules then apply as
# before (inf, OverflowError), so the bytes and errors are numpy's either way.
STRUCT_CODES = {"FP32": "f", "FP64": "d", "INT32": "i", "INT64": "q"}


def pack_numbers(values: Sequence[Any], datatype: str) -> bytes | None:
    """`values` packed by struct (a datatype of STRUCT_CODES), or None when it refuses them.

    struct takes ints, floats and bools (and objects that convert themselves, like numpy
    scalars) and refuses strings, None, lists and dicts, numbers out of the type's range, and
    floats for the integer types.
    """
    try:
        return struct.pack(f"<{len(values)}{STRUCT_CODES[datatype]}", *values)
    except (struct.error, OverflowError, TypeError):
        return None


def encode_values(values: Sequence[Any], datatype: str) -> bytes:
    """The raw bytes of a tensor holding `values` (flat, row-major)."""
    if datatype in STRUCT_CODES:
        packed = pack_numbers(values, datatype)
        if packed is not None:
            return packed
    if datatype == "BYTES":
        parts = []
        for value in values:
            data = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(struct.pack("<I", len(data)) + data)
        return b"".join(parts)
    if datatype == "BOOL":
        return np.asarray(values, dtype="?").tobytes()
    return np.fromiter(values, dtype=DTYPES[datatype], count=len(values)).tobytes()


def decode(raw: bytes, datatype: str, shape: Sequence[int]) -> np.ndarray[Any, Any]:
    """The tensor held in `raw`; BYTES elements become str (bytes when not UTF-8)."""
    if datatype == "BYTES":
        return np.array(_split_bytes(raw), dtype=object).reshape(shape)
    dtype = DTYPES.get(datatype)
    if dtype is None:
        raise ShapeError(f"unsupported output datatype {datatype}")
    try:
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    except ValueError as exc:
        raise ShapeError(f"{len(raw)} bytes do not hold a {datatype}{list(shape)}: {exc}") from None


def _split_bytes(raw: bytes) -> list[str | bytes]:
    items: list[str | bytes] = []
    offset = 0
    while offset + 4 <= len(raw):
        (size,) = struct.unpack_from("<I", raw, offset)
        chunk = raw[offset + 4 : offset + 4 + size]
        offset += 4 + size
        try:
            items.append(chunk.decode())
        except UnicodeDecodeError:
            items.append(chunk)
    return items


def split_rows(data: Any, shape: Sequence[int], *, count: int) -> list[Any]:
    """One value per record from an output tensor whose first dimension is the batch.

    `data` is a numpy array or the JSON `data` list (flat row-major, or already nested). A
    [batch] tensor gives scalars; [batch, k, ...] gives nested lists.
    """
    if isinstance(data, np.ndarray):
        return _batch_tensor(data, shape, count=count).tolist()  # type: ignore[no-any-return]
    _check_batch(shape, count=count)
    if not isinstance(data, list):
        raise ShapeError("output data is not a list")
    if len(data) == count and (len(shape) == 1 or isinstance(data[0], list)):
        return data  # scalars per record, or already nested per record
    if len(data) != math.prod(shape):
        raise ShapeError(f"output has {len(data)} values for shape {list(shape)}")
    if len(shape) == 2:
        width = shape[1]
        return [data[i * width : (i + 1) * width] for i in range(count)]
    return np.asarray(data, dtype=object).reshape(shape).tolist()  # type: ignore[no-any-return]


def _check_batch(shape: Sequence[int], *, count: int) -> None:
    if not shape or shape[0] != count:
        raise ShapeError(f"output shape {list(shape)} does not start with the batch size {count}")


def _batch_tensor(data: np.ndarray[Any, Any], shape: Sequence[int], *, count: int) -> Any:
    _check_batch(shape, count=count)
    return data.reshape(shape)


def batch_values(outputs: Sequence[tuple[str, Any, Sequence[int]]], *, count: int) -> Sequence[Any]:
    """The value for each record (`per_record`) from the output tensors: (name, data, shape),
    `data` as `split_rows` takes it. Numeric tensors (numpy, not BYTES) are kept as they
    are, and the values made from them when first read (TensorValues)."""
    if not outputs:
        raise ShapeError("the response has no outputs")
    if all(isinstance(data, np.ndarray) and data.dtype.kind in "biuf" for _, data, _ in outputs):
        kept = [(name, _batch_tensor(data, shape, count=count)) for name, data, shape in outputs]
        return TensorValues(
            kept, lambda: per_record([(name, data.tolist()) for name, data in kept], count=count)
        )
    rows = [(name, split_rows(data, shape, count=count)) for name, data, shape in outputs]
    return per_record(rows, count=count)


def per_record(outputs: Sequence[tuple[str, list[Any]]], *, count: int) -> list[Any]:
    """The value for each record: the single output's row, or {output name: row}.

    The dicts are filled a column at a time: a third of the CPU of zipping names and values
    into a new dict per record, which shows at a few hundred records per batch.
    """
    if len(outputs) == 1:
        return outputs[0][1]
    (name, column), *others = outputs
    records = [{name: value} for value in column]
    for name, column in others:
        for record, value in zip(records, column, strict=True):
            record[name] = value
    return records
