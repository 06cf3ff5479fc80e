"""The `gcs` test plug-in's backend: the second of the three places a storage plug-in takes.

A bucket is a `Bucket` in `BUCKETS` (standing in for the google-cloud-storage client): it
accepts writes only with its service-account key, so a test sees that the Secret the
controller mounted reached the backend. One object per chunk, replaced whole (the atomic,
idempotent commit the Sink contract asks for), and `_SUCCESS` at the end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from plugin_backend.settings import GcsStorage

from runners.api import (
    ConfigError,
    ErrorRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
)
from runners.formats import encode_chunk
from runners.secrets import read_secret


@dataclass
class Bucket:
    """Objects by name, writable with `key` only."""

    key: str
    objects: dict[str, bytes] = field(default_factory=dict)


BUCKETS: dict[str, Bucket] = {}


class GcsBackend(StorageBackend):
    """StorageBackend for kind `gcs` (output only)."""

    def open_source(self, settings: GcsStorage, ctx: RunContext) -> Source:
        raise ConfigError("gcs: input is not supported")

    def open_sink(self, settings: GcsStorage, ctx: RunContext, *, role: str) -> GcsSink:
        return GcsSink(settings, ctx)

    def error_settings(self, settings: GcsStorage) -> GcsStorage:
        """Default error output: the sibling prefix `<prefix>-errors`."""
        return settings.model_copy(update={"prefix": settings.prefix.rstrip("/") + "-errors"})


class GcsSink(Sink):
    """One object per chunk under the prefix; `committed_records` keeps its default."""

    def __init__(self, settings: GcsStorage, ctx: RunContext) -> None:
        ref = settings.credentials_secret_ref
        key = read_secret(ctx, name=ref.name, key=ref.key, field="credentialsSecretRef")
        bucket = BUCKETS.get(settings.bucket)
        if bucket is None or bucket.key != key:
            raise ConfigError(f"bucket: gs://{settings.bucket} does not exist or refuses the key")
        self.objects = bucket.objects
        self.prefix = ctx.execution_subpath(settings.prefix)
        self.location = f"gs://{settings.bucket}/{self.prefix}"

    def committed(self) -> set[int]:
        head = f"{self.prefix}/part-"
        return {int(name[len(head) :][:6]) for name in self.objects if name.startswith(head)}

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        self.objects[f"{self.prefix}/part-{index:06d}.jsonl"] = encode_chunk(records, fmt="jsonl")

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.objects[f"{self.prefix}/_SUCCESS"] = json.dumps(dict(summary)).encode()

    def close(self) -> None:
        pass
