"""An in-memory storage backend: the reference the shared contract suite is checked against.

It implements the Sink/Source contracts in the most obvious way (a dict of
chunks per location, replaced whole under a lock; a location belongs to the run
and Job that opened it first, like a file or S3 output), so a test that fails
here is a wrong test, and one that passes here but fails for a real backend is a
bug in that backend.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runners.api import (
    ConfigError,
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
    owners: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # run UID, Job, role
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryBackend(StorageBackend):
    """StorageBackend over a MemoryStore; settings are `{"name": <location>}`."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store or MemoryStore()

    def open_source(self, settings: Mapping[str, Any], ctx: RunContext) -> MemorySource:
        return MemorySource(self.store)

    def open_sink(self, settings: Mapping[str, Any], ctx: RunContext, *, role: str) -> MemorySink:
        name = ctx.execution_subpath(str(settings.get("name", role)))
        return MemorySink(self.store, name, owner=(ctx.run_uid, ctx.job_name, role))

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
    counts_committed = True

    def __init__(self, store: MemoryStore, name: str, *, owner: tuple[str, str, str]) -> None:
        self.store = store
        self.location = f"memory://{name}"
        self.name = name
        with store.lock:
            holder = store.owners.setdefault(name, owner)
        if holder != owner:
            uid, job, role = holder
            raise ConfigError(
                f"{self.location} holds the {role} of run {uid} (Job {job}); "
                "a run only writes where no other run has"
            )

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
