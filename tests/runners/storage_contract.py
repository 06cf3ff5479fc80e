"""The storage contract suite every backend passes (fsspec `tests/abstract` idea).

A test class mixes in `StorageContract` and provides a `harness` fixture (an
object with the methods of `Harness`). The in-memory backend
(memory_backend.py) is the reference implementation it is checked against.
Besides each Sink/Source call, the suite runs the same scenarios through the
real pipeline into every backend (issue 15): a second run of a config, the
executions of a scheduled run, duplicate ids, an id too long for any output, a
run restarted after a crash, a NaN, a re-run of the failed records; and one run
shared by three pods (issue 28), run as threads of this process, each with its
own source and sinks as its pod would have, also killed midway and replaced. A harness
whose `feeds_pipeline` is true runs those scenarios from its own `source()` (the
records in its format: a JSONL, CSV or Parquet file, S3 objects); the others from
the in-memory reference source.
What is real and what is faked depends on the harness: see the test module
that uses it.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol

import pytest
from fakes import FakeModel
from memory_backend import MemoryBackend, MemoryStore

from contracts.config import RunnerTuning
from contracts.contract import CHUNK_RANGES, ROUND_ROBIN
from e2e.fixtures import eventually
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
from runners.shards import Shard

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
# Pods that commit side by side: a store may refuse one transaction of two that met (MariaDB's
# deadlock 1213, retried like any lock); two tries without a pause lost a pod once in six.
POD_TUNING = TUNING.model_copy(
    update={"max_attempts": 8, "initial_backoff_seconds": 0.05, "max_backoff_seconds": 0.5}
)


class Harness(Protocol):
    """How the suite drives one backend and looks at its store directly.

    `other_run` says what a sink does at a location that holds another run's output:
    "refused" (the location belongs to one run: ConfigError naming it and the other run) or
    "beside" (the store keys output by run and Job, so runs share the location).

    Optional, read with getattr: `feeds_pipeline` (the pipeline scenarios read `source()`
    with ids from `key`), `keeps_nan` (the output holds NaN as a float, not as the string
    "NaN" the JSON formats write), and `error_source()` with `elsewhere()`: the error output
    read back as input with `recordField: input`, and a harness of the same store at another
    location, for the re-run scenario.
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
                # Chunk 1's last batch is in flight beside this one (concurrency 2): the kill
                # comes once the writer has committed it, or a busy machine would see chunk 1
                # done again and the scenario would test less.
                eventually(lambda: len(harness.read()) == 2, timeout=30)
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

    def test_a_nan_goes_through_and_reads_back_as_the_sink_writes_it(
        self, harness: Harness
    ) -> None:
        if not getattr(harness, "feeds_pipeline", False):
            pytest.skip("this harness has no source of its own to hold a NaN")
        records = [{"key": k, "x": x} for k, x in (("a", 1.5), ("b", math.nan), ("c", 3.0))]

        def halves(batch: Any) -> list[Outcome]:
            return [Prediction({"half": float(r.data["x"]) / 2}) for r in batch]

        stats = run_pipeline(harness, records, model=FakeModel(halves))
        written = harness.read()[0]
        assert ids(written) == ["a", "b", "c"] and (stats.written, stats.failed) == (3, 0)
        nan = written[1]["prediction"]["half"]
        if getattr(harness, "keeps_nan", False):
            assert isinstance(nan, float) and math.isnan(nan)
        else:
            assert nan == "NaN"  # JSON has no NaN (docs/contract.md)
        assert [row["prediction"]["half"] for row in (written[0], written[2])] == [0.75, 1.5]

    def test_a_rerun_of_the_error_output_runs_only_the_failed_records(
        self, harness: Harness
    ) -> None:
        if not hasattr(harness, "error_source"):
            pytest.skip("this harness cannot read its error output back as input")
        records = [{"key": f"k{i}", "x": i} for i in range(10)]
        broken = {"k2", "k5", "k9"}

        def fails_broken(batch: Any) -> list[Outcome]:
            return [RecordFailure("overloaded") if r.id in broken else _echo(r) for r in batch]

        first = run_pipeline(harness, records, model=FakeModel(fails_broken))
        assert (first.written, first.failed) == (7, 3)
        model = FakeModel()
        again = harness.elsewhere()  # type: ignore[attr-defined]
        source = harness.error_source()  # type: ignore[attr-defined]
        stats = run_pipeline(again, records, model=model, source=source)
        assert sorted(r for batch in model.batches for r in batch) == sorted(broken)
        written = [row for chunk in again.read().values() for row in chunk]
        assert sorted(ids(written)) == sorted(broken)
        assert all(row["prediction"] == {"echo": row["id"]} for row in written)
        assert (stats.written, stats.failed) == (3, 0)

    # -- one run shared by three pods (runners/shards.py): chunk c is pod c mod 3's, or pod i
    # owns a contiguous range of chunks (chunkRanges) -----------------------------------------

    @pytest.mark.parametrize("rule", [ROUND_ROBIN, CHUNK_RANGES])
    def test_three_pods_write_what_one_pod_would_and_the_last_completes_it(
        self, harness: Harness, rule: str
    ) -> None:
        if not harness.discovers_commits:
            pytest.skip("this store cannot list committed chunks: a shared run needs it")
        _counts_up_front(harness, rule)
        # 22 records in 6 chunks of 4; k1 repeats in another pod's chunk, k9 in the same pod's.
        keys = [f"k{i}" for i in range(22)]
        keys[6], keys[21] = "k1", "k9"
        records = [{"key": k, "x": i} for i, k in enumerate(keys)]

        def fails_13(batch: Any) -> list[Outcome]:
            return [RecordFailure("bad") if r.position == 13 else _echo(r) for r in batch]

        done = run_pods(harness, records, lambda _: FakeModel(fails_13), rule=rule)
        assert _counted(done) == (22, 19, 3, 6)
        written = harness.read()
        assert sorted(written) == [0, 1, 2, 3, 4, 5]
        got = sorted(ids([row for chunk in written.values() for row in chunk]))
        assert got == sorted(keys[p] for p in range(22) if p not in (6, 13, 21))
        failed = [row for chunk in harness.read("errors").values() for row in chunk]
        reasons = {str(row["id"]): str(row["reason"]) for row in failed}
        assert sorted(ids(failed)) == ["k1", "k13", "k9"]  # k1 and k9 the second time
        assert "duplicate id 'k1'" in reasons["k1"] and "duplicate id 'k9'" in reasons["k9"]
        if harness.has_manifest:
            manifest = harness.manifest()
            assert manifest is not None
            assert (manifest["recordsWritten"], manifest["recordsFailed"]) == (19, 3)

    @pytest.mark.parametrize("rule", [ROUND_ROBIN, CHUNK_RANGES])
    def test_three_pods_killed_midway_and_replaced_commit_every_chunk_exactly_once(
        self, harness: Harness, rule: str
    ) -> None:
        if not harness.discovers_commits:
            pytest.skip("this store cannot list committed chunks: a shared run needs it")
        _counts_up_front(harness, rule)
        # 24 records in 6 chunks of 4. Pod i's chunks are i and i + 3 (round-robin), or 2i and
        # 2i + 1 (ranges); each is killed at its second, once its first is committed. k2
        # (chunk 0, pod 0's) comes again in chunk 5 (pod 2's): the replaced pod 2 must still
        # refuse it, though pod 0 committed it before pod 2 started again.
        firsts, seconds = ([0, 1, 2], [3, 4, 5]) if rule == ROUND_ROBIN else ([0, 2, 4], [1, 3, 5])
        keys = [f"k{i}" for i in range(24)]
        keys[20] = "k2"
        records = [{"key": k} for k in keys]

        def killed(index: int) -> FakeModel:
            def answer(batch: Any) -> list[Outcome]:
                if any(r.position // 4 in seconds for r in batch):
                    eventually(lambda: firsts[index] in harness.read(), timeout=30)
                    raise RuntimeError("pod killed")
                return [_echo(r) for r in batch]

            return FakeModel(answer)

        first = run_pods(harness, records, killed, rule=rule)
        assert all(isinstance(d, RuntimeError) and "pod killed" in str(d) for d in first), first
        assert sorted(harness.read()) == firsts
        if harness.has_manifest:
            assert harness.manifest() is None  # half a run is never presented as complete
        models = [FakeModel() for _ in range(3)]
        again = run_pods(harness, records, lambda i: models[i], rule=rule)
        sent = sorted(r for m in models for batch in m.batches for r in batch)
        # The second chunks, once each, but the repeated k2 (position 20).
        assert sent == sorted(k for p, k in enumerate(keys) if p // 4 in seconds and p != 20)
        # Each replaced pod counts its share of the whole run: the chunks it committed before.
        assert _counted(again) == (24, 23, 1, 6)
        written = ids([row for chunk in harness.read().values() for row in chunk])
        assert sorted(written) == sorted(keys[:20] + keys[21:])
        refused = [row for chunk in harness.read("errors").values() for row in chunk]
        assert ids(refused) == ["k2"]
        assert "duplicate id 'k2'" in str(refused[0]["reason"])
        if harness.has_manifest:
            manifest = harness.manifest()
            assert manifest is not None and manifest["recordsWritten"] == 23

    def test_a_shared_run_is_complete_only_once_its_last_pod_has_committed(
        self, harness: Harness
    ) -> None:
        if not harness.discovers_commits or not harness.has_manifest:
            pytest.skip("this store cannot list committed chunks or hold a manifest")
        records = [{"key": f"k{i}"} for i in range(10)]  # chunks 0, 1 and 2 (of 2 records)
        for index in (2, 0):
            stats = run_pipeline(harness, records, shard=Shard(index, 3))
            assert harness.manifest() is None
            assert stats.written == (4 if index == 0 else 2)
        run_pipeline(harness, records, shard=Shard(1, 3))
        manifest = harness.manifest()
        assert manifest is not None
        assert (manifest["recordsWritten"], manifest["chunks"]) == (10, 3)
        # A pod that comes back after the end finds nothing to do and completes it again.
        model = FakeModel()
        assert run_pipeline(harness, records, model=model, shard=Shard(2, 3)).written == 2
        assert model.batches == [] and harness.manifest() == manifest


def run_pipeline(
    harness: Harness,
    records: list[dict[str, Any]],
    *,
    model: FakeModel | None = None,
    source: Source | None = None,
    shard: Shard | None = None,
    tuning: RunnerTuning = TUNING,
) -> Stats:
    """Run the pipeline into the harness's sinks from `source`, else from the harness's own
    source when it `feeds_pipeline`, else from an in-memory input (ids from `key`); as the
    pod of `shard` when given."""
    source = source or _source(harness, records)
    shard = shard or Shard.one()
    ctx = replace(CTX, shard_index=shard.index, shard_count=shard.count)
    stats = Stats()
    with (
        _closing(harness.sink(ctx=ctx)) as sink,
        _closing(harness.sink("errors", ctx=ctx)) as errors,
    ):
        Pipeline(
            source=source,
            sink=sink,
            error_sink=errors,
            client=model or FakeModel(),
            tuning=tuning,
            stats=stats,
            ids_from_field=True,
            shard=shard,
        ).run()
    return stats


def run_pods(
    harness: Harness,
    records: list[dict[str, Any]],
    model: Callable[[int], FakeModel],
    *,
    pods: int = 3,
    rule: str = ROUND_ROBIN,
) -> list[Stats | BaseException]:
    """Run the pods of one run at once, each with its own source and sinks: what each pod
    counted, or what it raised."""
    sources = [_source(harness, records) for _ in range(pods)]  # made before any pod reads
    done: list[Stats | BaseException] = [RuntimeError("never ran")] * pods

    def pod(index: int) -> None:
        try:
            shard = Shard(index, pods, rule)
            done[index] = run_pipeline(
                harness,
                records,
                model=model(index),
                source=sources[index],
                shard=shard,
                tuning=POD_TUNING,
            )
        except BaseException as exc:
            done[index] = exc

    threads = [threading.Thread(target=pod, args=(i,), name=f"pod-{i}") for i in range(pods)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return done


def _counts_up_front(harness: Harness, rule: str) -> None:
    """Skip a chunkRanges scenario where the harness's source cannot count its records before
    reading (JSONL and CSV objects on S3: the controller picks chunkRanges for Parquet only)."""
    if rule == CHUNK_RANGES and _source(harness, [{"key": "k0"}]).total() is None:
        pytest.skip("this source cannot count its records up front: chunkRanges needs that")


def _source(harness: Harness, records: list[dict[str, Any]]) -> Source:
    source = harness.source(records, "key") if getattr(harness, "feeds_pipeline", False) else None
    if source is None:
        source = MemoryBackend(MemoryStore(inputs=records, id_field="key")).open_source({}, CTX)
    return source


def _counted(done: list[Stats | BaseException]) -> tuple[int, int, int, int]:
    """(read, written, failed, chunks) summed over pods that all finished."""
    stats = [d for d in done if isinstance(d, Stats)]
    assert len(stats) == len(done), done
    return (
        sum(s.read for s in stats),
        sum(s.written for s in stats),
        sum(s.failed for s in stats),
        sum(s.chunks for s in stats),
    )


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
