"""The storage contract suite every backend passes (fsspec `tests/abstract` idea).

A test class mixes in `StorageContract` and provides a `harness` fixture (an
object with the methods of `Harness`). The in-memory backend
(memory_backend.py) is the reference implementation it is checked against.
Besides each Sink/Source call, the suite runs the same scenarios through the
real pipeline into every backend (issue 15): a second run of a config, the
executions of a scheduled run, duplicate ids, an id too long for any output, a
run restarted after a crash.
What is real and what is faked depends on the harness: see the test module
that uses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from fakes import FakeModel
from memory_backend import MemoryBackend, MemoryStore

from contracts.config import RunnerTuning
from runners.api import (
    ConfigError,
    ErrorRecord,
    InputRecord,
    Outcome,
    OutputRecord,
    Prediction,
    RecordFailure,
    RunContext,
    Sink,
    Source,
)
from runners.pipeline import Pipeline, Stats

CTX = RunContext(run_uid="uid-1", job_name="job-1", parameters={"p": "1"})
# A second run of the same config: a new InferenceRun (new UID), here under the same name.
OTHER_RUN = RunContext(run_uid="uid-2", job_name="job-1", parameters={"p": "2"})
# Two executions (Jobs) of one scheduled run.
NIGHTLY_1 = RunContext(run_uid="uid-1", job_name="nightly-1", scheduled=True)
NIGHTLY_2 = RunContext(run_uid="uid-1", job_name="nightly-2", scheduled=True)
# Chunks of 4 records, batches of 2: the scenarios below cross chunk and batch boundaries.
TUNING = RunnerTuning(
    chunk_size=4,
    batch_size=2,
    concurrency=2,
    max_attempts=2,
    initial_backoff_seconds=0,
    max_failed_records=100,
    progress_interval_seconds=3600,
)


class Harness(Protocol):
    """How the suite drives one backend and looks at its store directly.

    `other_run` says what a sink does at a location that holds another run's output:
    "refused" (the location belongs to one run: ConfigError naming it and the other run) or
    "beside" (the store keys output by run and Job, so runs share the location).
    """

    discovers_commits: bool
    has_manifest: bool
    other_run: str

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink: ...

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]: ...

    def manifest(self, role: str = "output") -> dict[str, Any] | None: ...

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source | None: ...


def outputs(index: int, count: int, *, size: int = 10, first_id: int = 0) -> list[OutputRecord]:
    """`count` output records of chunk `index` (ids counted from `first_id` + position)."""
    start = index * size
    return [
        OutputRecord(f"id-{first_id + p}", p, {"x": p}, {"y": p * 2})
        for p in range(start, start + count)
    ]


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

    # -- a run resumes only its own chunks (issue 15, item 2) ----------------------------

    def test_another_run_never_resumes_counts_or_overwrites_this_runs_output(
        self, harness: Harness
    ) -> None:
        with _closing(harness.sink()) as sink:
            sink.write_chunk(0, outputs(0, 3))
            sink.write_chunk(1, outputs(1, 2))
            sink.finish({"recordsWritten": 5, "recordsFailed": 0, "chunks": 2})
            location = sink.location
        if harness.other_run == "refused":
            harness.sink("errors").close()  # the first run claims its error output too
            for role in ("output", "errors"):
                with pytest.raises(ConfigError) as refused:
                    harness.sink(role, OTHER_RUN)
                message = str(refused.value)
                assert "uid-1" in message and "job-1" in message, message
            with pytest.raises(ConfigError, match=re.escape(location.rstrip("/"))):
                harness.sink(ctx=OTHER_RUN)
        else:
            with _closing(harness.sink(ctx=OTHER_RUN)) as second:
                assert second.committed() == set()
                assert second.committed_records({0, 1}) == 0
                second.write_chunk(0, outputs(0, 1, first_id=100))
                second.finish({"recordsWritten": 1, "recordsFailed": 0, "chunks": 1})
        if harness.discovers_commits:
            with _closing(harness.sink()) as again:
                assert again.committed() == {0, 1}
                assert again.committed_records({0, 1}) == 5
        if harness.has_manifest:
            manifest = harness.manifest()
            assert manifest is not None and manifest["recordsWritten"] == 5

    def test_each_execution_of_a_scheduled_run_keeps_its_own_chunks(self, harness: Harness) -> None:
        with _closing(harness.sink(ctx=NIGHTLY_1)) as first:
            first.write_chunk(0, outputs(0, 3))
        with _closing(harness.sink(ctx=NIGHTLY_2)) as second:
            if harness.discovers_commits:
                assert second.committed() == set()
                assert second.committed_records({0}) == 0
            second.write_chunk(0, outputs(0, 1, first_id=100))
        if harness.discovers_commits:
            with _closing(harness.sink(ctx=NIGHTLY_1)) as again:
                assert again.committed() == {0}
                assert again.committed_records({0}) == 3

    # -- the same scenarios through the pipeline, on every sink ---------------------------

    def test_duplicate_ids_are_per_record_errors_naming_the_id(self, harness: Harness) -> None:
        keys = ["a", "b", "c", "d", "e", "b", "f", "g", "h", "h"]  # across and within chunks
        stats = run_pipeline(harness, [{"key": k, "x": i} for i, k in enumerate(keys)])
        written = [row for chunk in harness.read().values() for row in chunk]
        assert sorted(ids(written)) == ["a", "b", "c", "d", "e", "f", "g", "h"]
        failed = [row for chunk in harness.read("errors").values() for row in chunk]
        assert sorted(ids(failed)) == ["b", "h"]
        reasons = sorted(str(row["reason"]) for row in failed)
        assert "duplicate id 'b'" in reasons[0] and "duplicate id 'h'" in reasons[1]
        assert (stats.read, stats.written, stats.failed) == (10, 8, 2)

    def test_an_id_too_long_for_any_output_is_a_per_record_error(self, harness: Harness) -> None:
        long_id = "k" * 300
        stats = run_pipeline(harness, [{"key": k} for k in ("a", long_id, "c")])
        assert ids(harness.read()[0]) == ["a", "c"]
        failed = harness.read("errors")[0]
        assert ids(failed) == [long_id]  # the error output carries it whole
        assert "longer than 255 characters" in str(failed[0]["reason"])
        assert (stats.written, stats.failed) == (2, 1)

    def test_a_restarted_run_sends_no_committed_chunk_again(self, harness: Harness) -> None:
        if not harness.discovers_commits:
            pytest.skip("this store cannot list committed chunks; a resumed run re-sends them")
        # The last record repeats an id of a chunk the first attempt committed: the resumed
        # run must still know it (it re-reads the committed chunks' ids).
        records = [{"key": f"k{i}"} for i in range(9)] + [{"key": "k1"}]

        def dies_at_chunk_2(batch: Any) -> list[Outcome]:
            if any(r.position >= 8 for r in batch):
                raise RuntimeError("pod killed")
            return [RecordFailure("bad") if r.position == 5 else _echo(r) for r in batch]

        with pytest.raises(RuntimeError, match="pod killed"):
            run_pipeline(harness, records, model=FakeModel(dies_at_chunk_2))
        model = FakeModel()
        stats = run_pipeline(harness, records, model=model)
        assert [r for batch in model.batches for r in batch] == ["k8"]
        assert "duplicate id 'k1'" in str(harness.read("errors")[2][0]["reason"])
        # The counts cover the whole run: the chunks the first attempt committed too.
        assert (stats.written, stats.failed, stats.chunks) == (8, 2, 3)


def run_pipeline(
    harness: Harness, records: list[dict[str, Any]], *, model: FakeModel | None = None
) -> Stats:
    """Run the pipeline from an in-memory input (ids from `key`) into the harness's sinks."""
    source = MemoryBackend(MemoryStore(inputs=records, id_field="key")).open_source({}, CTX)
    stats = Stats()
    with _closing(harness.sink()) as sink, _closing(harness.sink("errors")) as errors:
        Pipeline(
            source=source,
            sink=sink,
            error_sink=errors,
            client=model or FakeModel(),
            tuning=TUNING,
            stats=stats,
            ids_from_field=True,
        ).run()
    return stats


def _echo(record: InputRecord) -> Outcome:
    return Prediction({"echo": record.id})


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
