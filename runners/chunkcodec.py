"""How a sink that stores one file or object per chunk (file, s3) turns a chunk into bytes in
its format and reads those bytes back.

Why a module of its own: the byte-stream formats (CSV, JSONL, openai-batch) are
runners/formats.py's and Parquet parts are runners/parquetparts.py's; both backends pick
between them the same way, and backends must not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.storage_fields import PARQUET
from runners import formats
from runners.api import ErrorRecord, OutputRecord, RunContext


@dataclass(frozen=True, slots=True)
class ChunkCodec:
    """A sink's format: `errors` for the error output (whose Parquet parts always carry the
    input), `salt` for openai-batch line ids."""

    fmt: str
    salt: str = ""
    errors: bool = False
    include_input: bool = False

    @classmethod
    def of(cls, settings: Any, ctx: RunContext, *, role: str) -> ChunkCodec:
        """The codec of a FileStorage or S3Storage sink in `role`."""
        return cls(
            fmt=settings.format or "jsonl",
            salt=f"{ctx.run_uid}/{ctx.job_name}",
            errors=role == "errors",
            include_input=bool(settings.include_input),
        )

    @property
    def extension(self) -> str:
        """The file name extension of the chunks."""
        return formats.extension(self.fmt)

    def encode(self, records: Sequence[OutputRecord | ErrorRecord]) -> bytes:
        """One chunk as bytes; TypeError or ValueError for a value no format can hold."""
        if self.fmt == PARQUET:
            from runners import parquetparts as parquet  # pyarrow (0.2 s of CPU): Parquet only

            return parquet.encode_part(
                records, errors=self.errors, include_input=self.include_input
            )
        return formats.encode_chunk(records, fmt=self.fmt, salt=self.salt)

    def count(self, data: bytes) -> int:
        """How many records a chunk holds."""
        if self.fmt == PARQUET:
            from runners import parquetparts as parquet

            return parquet.part_records(data)
        return formats.count_records(data, fmt=self.fmt)

    def usage(self, data: bytes) -> dict[str, int]:
        """The token counts of the usage a chunk holds."""
        if self.fmt == PARQUET:
            from runners import parquetparts as parquet

            return parquet.part_usage(data)
        return formats.chunk_usage(data, fmt=self.fmt)

    def decode(self, data: bytes) -> list[dict[str, Any]]:
        """The rows of a chunk (to verify one written before, and for tests)."""
        if self.fmt == PARQUET:
            from runners import parquetparts as parquet

            return parquet.part_rows(data)
        return formats.decode_chunk(data, fmt=self.fmt)
