"""An in-memory storage backend: the reference the shared contract suite is checked against.

It implements the Sink/Source contracts in the most obvious way (a dict of
chunks per role, replaced whole under a lock), so a test that fails here is a
wrong test, and one that passes here but fails for a real backend is a bug in
that backend.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runners.api import (
    ErrorRecord,
    InputRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
)
from runners.formats import output_row, record_id


@dataclass
class MemoryStore:
    """What the memory backend holds: input records, chunks and manifests per location."""

    inputs: list[dict[str, Any]] = field(default_factory=list)
    id_field: str | None = None
    chunks: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryBackend(StorageBackend):
    """StorageBackend over a MemoryStore; settings are `{"name": <location>}`."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store or MemoryStore()

    def open_source(self, settings: Mapping[str, Any], ctx: RunContext) -> MemorySource:
        return MemorySource(self.store)

    def open_sink(self, settings: Mapping[str, Any], ctx: RunContext, *, role: str) -> MemorySink:
        return MemorySink(self.store, str(settings.get("name", role)))

    def error_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {"name": f"{settings.get('name', 'output')}-errors"}


class MemorySource(Source):
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        for position in range(skip, len(self.store.inputs)):
            data = self.store.inputs[position]
            yield InputRecord(
                position, record_id(data, position, id_field=self.store.id_field), data
            )

    def total(self) -> int | None:
        return len(self.store.inputs)

    def close(self) -> None:
        pass


class MemorySink(Sink):
    def __init__(self, store: MemoryStore, name: str) -> None:
        self.store = store
        self.location = f"memory://{name}"
        self.name = name

    def committed(self) -> set[int]:
        with self.store.lock:
            return set(self.store.chunks.get(self.name, {}))

    def committed_records(self, chunks: set[int]) -> int:
        with self.store.lock:
            held = self.store.chunks.get(self.name, {})
            return sum(len(rows) for index, rows in held.items() if index in chunks)

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        # Serialise first: a value that is not JSON fails before anything is visible.
        rows = [json.loads(json.dumps(output_row(r), allow_nan=False)) for r in records]
        with self.store.lock:
            self.store.chunks.setdefault(self.name, {})[index] = rows

    def finish(self, summary: Mapping[str, Any]) -> None:
        with self.store.lock:
            self.store.manifests[self.name] = dict(summary)

    def close(self) -> None:
        pass
