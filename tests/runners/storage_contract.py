"""The storage contract suite every backend passes (fsspec `tests/abstract` idea).

A test class mixes in `StorageContract` and provides a `harness` fixture (an
object with the methods of `Harness`). The in-memory backend
(memory_backend.py) is the reference implementation it is checked against.
What is real and what is faked depends on the harness: see the test module
that uses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from runners.api import ErrorRecord, OutputRecord, RunContext, Sink, Source

CTX = RunContext(run_uid="uid-1", job_name="job-1", parameters={"p": "1"})


class Harness(Protocol):
    """How the suite drives one backend and looks at its store directly."""

    discovers_commits: bool
    has_manifest: bool

    def sink(self, role: str = "output") -> Sink: ...

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]: ...

    def manifest(self, role: str = "output") -> dict[str, Any] | None: ...

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source | None: ...


def outputs(index: int, count: int, *, size: int = 10) -> list[OutputRecord]:
    """`count` output records of chunk `index`."""
    start = index * size
    return [OutputRecord(f"id-{p}", p, {"x": p}, {"y": p * 2}) for p in range(start, start + count)]


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [str(row["id"]) for row in rows]


class StorageContract:
    """Behaviour every storage backend must have."""

    def test_written_chunk_reads_back_in_order(self, harness: Harness) -> None:
        with _closing(harness.sink()) as sink:
            sink.write_chunk(0, outputs(0, 3))
        assert ids(harness.read()[0]) == ["id-0", "id-1", "id-2"]

    def test_writing_same_chunk_twice_leaves_one_copy(self, harness: Harness) -> None:
        with _closing(harness.sink()) as sink:
            sink.write_chunk(1, outputs(1, 4))
            sink.write_chunk(1, outputs(1, 4))
        chunks = harness.read()
        assert list(chunks) == [1]
        assert ids(chunks[1]) == [f"id-{p}" for p in range(10, 14)]

    def test_new_sink_discovers_committed_chunks(self, harness: Harness) -> None:
        if not harness.discovers_commits:
            pytest.skip("this store cannot list committed chunks; receivers de-duplicate")
        with _closing(harness.sink()) as sink:
            assert sink.committed() == set()
            sink.write_chunk(0, outputs(0, 2))
            sink.write_chunk(2, outputs(2, 0))
        with _closing(harness.sink()) as again:
            assert again.committed() == {0, 2}

    def test_new_sink_counts_records_of_the_listed_chunks(self, harness: Harness) -> None:
        if not harness.discovers_commits:
            pytest.skip("this store cannot list committed chunks; a resumed run re-sends them")
        with _closing(harness.sink()) as sink:
            sink.write_chunk(0, outputs(0, 3))
            sink.write_chunk(2, outputs(2, 0))
            sink.write_chunk(4, outputs(4, 2))
        with _closing(harness.sink()) as again:
            assert again.committed_records({0, 2, 4}) == 5
            assert again.committed_records({0, 1, 2}) == 3

    def test_new_error_sink_counts_errors_with_multiline_values(self, harness: Harness) -> None:
        if not harness.discovers_commits:
            pytest.skip("this store cannot list committed chunks; a resumed run re-sends them")
        errors = [
            ErrorRecord("id-5", 5, {"x": 'a,"b"\nc'}, "bad\nrow"),
            ErrorRecord("id-6", 6, {"x": 6}, "worse"),
        ]
        with _closing(harness.sink("errors")) as sink:
            sink.write_chunk(0, errors)
            sink.write_chunk(1, errors[1:])
        with _closing(harness.sink("errors")) as again:
            assert again.committed_records({0}) == 2

    def test_failed_write_leaves_chunk_invisible(self, harness: Harness) -> None:
        bad = [*outputs(3, 2), OutputRecord("id-bad", 32, {}, object())]
        with _closing(harness.sink()) as sink:
            with pytest.raises((TypeError, ValueError)):
                sink.write_chunk(3, bad)
            assert 3 not in sink.committed()
        assert 3 not in harness.read()

    def test_manifest_appears_only_after_finish(self, harness: Harness) -> None:
        if not harness.has_manifest:
            pytest.skip("manifest is a request to the receiver")
        with _closing(harness.sink()) as sink:
            sink.write_chunk(0, outputs(0, 1))
            assert harness.manifest() is None
            sink.finish({"recordsWritten": 1, "recordsFailed": 0, "chunks": 1})
        manifest = harness.manifest()
        assert manifest is not None and manifest["recordsWritten"] == 1

    def test_error_sink_keeps_ids_and_reasons(self, harness: Harness) -> None:
        errors = [ErrorRecord("id-5", 5, {"x": 5}, "bad row")]
        with _closing(harness.sink("errors")) as sink:
            sink.write_chunk(0, errors)
        rows = harness.read("errors")[0]
        assert ids(rows) == ["id-5"] and rows[0]["reason"] == "bad row"

    def test_source_numbers_records_and_uses_id_field(self, harness: Harness) -> None:
        source = harness.source([{"key": f"k{i}", "v": i} for i in range(5)], "key")
        if source is None:
            pytest.skip("this backend reads no id field")
        with _closing(source):
            got = [(r.position, r.id) for r in source.records(0)]
        assert got == [(i, f"k{i}") for i in range(5)]

    def test_source_ids_default_to_positions_and_are_stable(self, harness: Harness) -> None:
        source = harness.source([{"v": i} for i in range(4)], None)
        assert source is not None
        with _closing(source):
            first = [r.id for r in source.records(0)]
            second = [r.id for r in source.records(0)]
        assert first == second == ["0", "1", "2", "3"]

    def test_source_skip_resumes_at_position(self, harness: Harness) -> None:
        source = harness.source([{"v": i} for i in range(7)], None)
        assert source is not None
        with _closing(source):
            got = [(r.position, r.data["v"]) for r in source.records(4)]
        assert [(p, int(v)) for p, v in got] == [(4, 4), (5, 5), (6, 6)]


class _closing:
    """Close a sink or source at the end of a with block."""

    def __init__(self, thing: Any) -> None:
        self.thing = thing

    def __enter__(self) -> Any:
        return self.thing

    def __exit__(self, *exc: object) -> None:
        self.thing.close()


def rows_by_chunk(rows: Iterator[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Group rows that carry a `chunk` key, ordered by position."""
    found: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(int(row["chunk"]), []).append(row)
    for chunk in found.values():
        chunk.sort(key=lambda r: int(r["position"]))
    return found
