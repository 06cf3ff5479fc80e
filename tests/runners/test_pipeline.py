"""The streaming pipeline with a fake model client and the in-memory backend.

Real: runners.pipeline (threads, queues, retries, chunk commits) and the
memory backend (the storage reference). Faked: the model (a handler function
in FakeModel) and time (backoff delays are recorded, not slept).
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import pytest
from fakes import FakeModel, echo
from memory_backend import MemoryBackend, MemorySink, MemorySource, MemoryStore

from contracts.config import RunnerTuning
from runners.api import (
    BatchRejected,
    ConfigError,
    ErrorRecord,
    InputRecord,
    Outcome,
    OutputRecord,
    Prediction,
    RecordFailure,
    RunContext,
    Sink,
    TransientError,
)
from runners.budget import BUDGET_MIN_RECORDS
from runners.formats import UnreadableRecord
from runners.modelcalls import ModelUnavailable
from runners.outcomes import Outcomes
from runners.pipeline import BudgetExceeded, Pipeline, Stats
from runners.retry import Backoff, Stopped

CTX = RunContext("uid-1", "job-1")


class RecordingBackoff(Backoff):
    """Backoff that records the delays it would wait and waits none."""

    def __init__(self, max_attempts: int = 5) -> None:
        super().__init__(initial=1.0, maximum=30.0, max_attempts=max_attempts)
        object.__setattr__(self, "delays", [])

    def delay(self, attempt: int, *, retry_after: float | None = None) -> float:
        self.delays.append(super().delay(attempt, retry_after=retry_after))  # type: ignore[attr-defined]
        return 0.0


def run(
    model: FakeModel,
    *,
    records: int,
    store: MemoryStore | None = None,
    backoff: Backoff | None = None,
    stop: threading.Event | None = None,
    **tuning: Any,
) -> tuple[MemoryStore, Stats]:
    store = store or MemoryStore()
    store.inputs = [{"n": i, **({"poison": True} if i == 13 else {})} for i in range(records)]
    backend = MemoryBackend(store)
    stats = Stats()
    pipeline = Pipeline(
        backend.open_source({}, CTX),
        backend.open_sink({"name": "out"}, CTX, role="output"),
        backend.open_sink({"name": "err"}, CTX, role="errors"),
        model,
        RunnerTuning.model_validate({"progressIntervalSeconds": 60, **tuning}),
        stats,
        backoff=backoff or RecordingBackoff(),
    )
    if stop is not None:
        pipeline.stop = stop
    pipeline.run()
    return store, stats


def written_ids(store: MemoryStore, name: str = "out") -> list[str]:
    chunks = store.chunks.get(name, {})
    return [row["id"] for index in sorted(chunks) for row in chunks[index]]


def test_writes_every_record_once_in_chunks() -> None:
    store, stats = run(FakeModel(), records=95, chunkSize=10, batchSize=4)
    assert written_ids(store) == [str(i) for i in range(95)]
    assert sorted(store.chunks["out"]) == list(range(10))
    assert (stats.read, stats.written, stats.chunks) == (95, 95, 10)
    assert store.manifests["out"]["recordsWritten"] == 95


def test_batches_respect_batch_size_and_chunk_boundaries() -> None:
    model = FakeModel()
    run(model, records=50, chunkSize=10, batchSize=4)
    assert max(len(b) for b in model.batches) == 4
    for batch in model.batches:
        assert len({int(i) // 10 for i in batch}) == 1


def test_batches_fill_within_a_chunk_around_unreadable_records() -> None:
    # Records come a batch's worth at a time; a block holding an unreadable record, or one
    # that crosses a chunk, is placed record by record: the batches are as if read one by one.
    class WithUnreadable(MemorySource):
        def records(self, skip: int) -> Generator[InputRecord, None, None]:
            for record in super().records(skip):
                if record.position in (5, 13):
                    yield UnreadableRecord(record.position, record.id, {}, reason="bad line")
                else:
                    yield record

    store = MemoryStore(inputs=[{"n": i} for i in range(23)])
    backend, model = MemoryBackend(store), FakeModel()
    Pipeline(
        WithUnreadable(store),
        backend.open_sink({"name": "out"}, CTX, role="output"),
        backend.open_sink({"name": "err"}, CTX, role="errors"),
        model,
        RunnerTuning(
            chunk_size=10, batch_size=4, max_failed_records=10, progress_interval_seconds=60
        ),
        Stats(),
        backoff=RecordingBackoff(),
    ).run()
    assert [[int(i) for i in batch] for batch in model.batches] == [
        [0, 1, 2, 3],
        [4, 6, 7, 8],
        [9],
        [10, 11, 12, 14],
        [15, 16, 17, 18],
        [19],
        [20, 21, 22],
    ]
    assert [row["id"] for row in store.chunks["err"][0]] == ["5"]
    assert [row["id"] for row in store.chunks["err"][1]] == ["13"]


def test_requests_in_flight_never_exceed_concurrency() -> None:
    gate = threading.Semaphore(0)

    def slow(records: Sequence[InputRecord]) -> list[Outcome]:
        gate.acquire(timeout=0.01)  # overlap requests without relying on timing
        return echo(records)

    model = FakeModel(slow)
    run(model, records=400, chunkSize=50, batchSize=5, concurrency=3)
    assert 1 <= model.peak <= 3


def test_retries_transient_errors_honouring_retry_after() -> None:
    calls: list[int] = []

    def flaky(records: Sequence[InputRecord]) -> list[Outcome]:
        calls.append(1)
        if len(calls) <= 2:
            raise TransientError("HTTP 429", retry_after=7.0)
        return echo(records)

    backoff = RecordingBackoff()
    store, stats = run(FakeModel(flaky), records=3, batchSize=10, concurrency=1, backoff=backoff)
    assert written_ids(store) == ["0", "1", "2"]
    assert backoff.delays == [7.0, 7.0]  # type: ignore[attr-defined]
    assert stats.retried == 2


def test_transient_errors_beyond_max_attempts_stop_the_run_without_failing_records() -> None:
    # The model is unavailable, the records are not at fault: the next pod resumes them.
    def down(records: Sequence[InputRecord]) -> list[Outcome]:
        raise TransientError("HTTP 503")

    store = MemoryStore()
    with pytest.raises(ModelUnavailable, match="never answered \\(3 attempts\\): HTTP 503"):
        run(FakeModel(down), records=2, store=store, backoff=RecordingBackoff(max_attempts=3))
    assert store.chunks == {}


def test_poison_record_is_isolated_and_the_rest_written() -> None:
    def picky(records: Sequence[InputRecord]) -> list[Outcome]:
        if any(r.data.get("poison") for r in records):
            raise BatchRejected("HTTP 400: bad input")
        return echo(records)

    store, stats = run(FakeModel(picky), records=30, chunkSize=10, batchSize=8, maxFailedRecords=1)
    assert written_ids(store) == [str(i) for i in range(30) if i != 13]
    errors = [row for chunk in store.chunks["err"].values() for row in chunk]
    assert [(e["id"], e["reason"]) for e in errors] == [("13", "rejected: HTTP 400: bad input")]
    assert (stats.written, stats.failed) == (29, 1)


def test_record_failures_count_against_budget() -> None:
    def half(records: Sequence[InputRecord]) -> list[Outcome]:
        return [RecordFailure("nope") if int(r.id) % 2 else Prediction(1) for r in records]

    with pytest.raises(BudgetExceeded, match="maxFailedRecords=3"):
        run(FakeModel(half), records=20, chunkSize=4, maxFailedRecords=3)


def test_failed_ratio_within_budget_passes() -> None:
    def tenth(records: Sequence[InputRecord]) -> list[Outcome]:
        return [RecordFailure("nope") if int(r.id) % 10 == 0 else Prediction(1) for r in records]

    store, stats = run(FakeModel(tenth), records=100, chunkSize=10, maxFailedRatio=0.1)
    assert (stats.written, stats.failed) == (90, 10)
    assert "out" in store.manifests


def test_the_chunk_that_crosses_the_budget_is_committed_with_its_failures_and_no_more() -> None:
    # Issue 15 item 10: its failed records were saved nowhere.
    def bad_third_chunk(records: Sequence[InputRecord]) -> list[Outcome]:
        return [RecordFailure("x") if 20 <= int(r.id) < 30 else Prediction(1) for r in records]

    store = MemoryStore()
    with pytest.raises(BudgetExceeded, match="10 failed records of 30"):
        run(FakeModel(bad_third_chunk), records=50, chunkSize=10, concurrency=1, store=store)
    assert sorted(store.chunks["out"]) == [0, 1, 2]
    assert [row["id"] for row in store.chunks["err"][2]] == [str(i) for i in range(20, 30)]
    assert "out" not in store.manifests


def old_rows(count: int) -> list[dict[str, Any]]:
    """Rows of a chunk an earlier pod committed."""
    return [{"id": "old"}] * count


def test_resume_skips_committed_chunks() -> None:
    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(10), 1: old_rows(10)}
    model = FakeModel()
    store, stats = run(model, records=35, chunkSize=10, store=store)
    seen = sorted(int(i) for batch in model.batches for i in batch)
    assert seen == list(range(20, 35))
    assert sorted(store.chunks["out"]) == [0, 1, 2, 3]
    assert stats.chunks == 4


def test_resumed_counts_include_records_read_written_and_failed_in_committed_chunks() -> None:
    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(9), 1: old_rows(10)}
    store.chunks["err"] = {0: old_rows(1)}
    store, stats = run(FakeModel(), records=35, chunkSize=10, store=store, maxFailedRecords=1)
    assert (stats.read, stats.written, stats.failed) == (35, 34, 1)
    assert store.manifests["out"]["recordsWritten"] == 34
    assert store.manifests["out"]["recordsFailed"] == 1


def test_budget_counts_failures_committed_before_a_restart() -> None:
    def fail_25(records: Sequence[InputRecord]) -> list[Outcome]:
        return [RecordFailure("x") if r.id == "25" else Prediction(1) for r in records]

    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(9), 1: old_rows(9)}
    store.chunks["err"] = {0: old_rows(1), 1: old_rows(1)}
    with pytest.raises(BudgetExceeded, match="3 failed records of 30"):
        run(FakeModel(fail_25), records=50, chunkSize=10, store=store, maxFailedRecords=2)
    assert sorted(store.chunks["out"]) == [0, 1, 2]


def test_resume_rewrites_stale_error_chunk_of_first_uncommitted_chunk() -> None:
    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(10)}
    store.chunks["err"] = {1: [{"id": "stale", "reason": "from the killed attempt"}]}
    store, stats = run(FakeModel(), records=20, chunkSize=10, store=store)
    assert store.chunks["err"][1] == []
    assert stats.failed == 0  # the stale chunk is not counted, though the error sink holds it


def test_a_resumed_run_whose_input_grew_past_its_last_committed_chunk_never_completes() -> None:
    # An earlier attempt read 25 records to the end and committed chunk 2 with 5 of them;
    # 8 records came since. Resumed at chunk 3 the run would send 30-32 and never 25-29.
    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(10), 1: old_rows(10), 2: old_rows(5)}
    with pytest.raises(ConfigError, match="input changed while the run ran") as caught:
        run(FakeModel(), records=33, chunkSize=10, store=store)
    assert "committed chunks hold 28 records and the input has 33 now" in str(caught.value)
    assert "out" not in store.manifests  # never presented as complete


def test_a_resumed_run_with_nothing_left_to_read_probes_the_input_past_what_it_holds() -> None:
    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(10), 1: old_rows(10), 2: old_rows(5)}
    with pytest.raises(ConfigError, match="hold 25 records and the input has more than 25 now"):
        run(FakeModel(), records=29, chunkSize=10, store=store)  # 25-28: in chunk 2, unsent
    assert "out" not in store.manifests
    store, stats = run(FakeModel(), records=25, chunkSize=10, store=store)
    assert store.manifests["out"]["recordsWritten"] == 25 and stats.written == 25


class UncountingSink(Sink):
    """A sink that keeps the Sink protocol's default `committed_records` (a store that cannot
    count what it holds)."""

    def __init__(self, sink: MemorySink) -> None:
        self.inner = sink
        self.location = sink.location

    def committed(self) -> set[int]:
        return self.inner.committed()

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        self.inner.write_chunk(index, records)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.inner.finish(summary)

    def close(self) -> None:
        pass


def test_sink_that_cannot_count_committed_records_still_resumes() -> None:
    store = MemoryStore(inputs=[{"n": i} for i in range(30)])
    store.chunks["out"] = {0: old_rows(10)}
    backend, stats = MemoryBackend(store), Stats()
    Pipeline(
        backend.open_source({}, CTX),
        UncountingSink(backend.open_sink({"name": "out"}, CTX, role="output")),
        UncountingSink(backend.open_sink({"name": "err"}, CTX, role="errors")),
        FakeModel(),
        RunnerTuning(chunk_size=10, progress_interval_seconds=60),
        stats,
        backoff=RecordingBackoff(),
    ).run()
    assert (stats.written, stats.chunks) == (20, 3)  # counts of this pod only
    assert sorted(store.chunks["out"]) == [0, 1, 2]


def test_stop_abandons_in_flight_chunk_and_keeps_committed_ones() -> None:
    stop = threading.Event()

    def stopping(records: Sequence[InputRecord]) -> list[Outcome]:
        if int(records[0].id) >= 30:
            stop.set()
        return echo(records)

    store = MemoryStore()
    with pytest.raises(Stopped):
        run(FakeModel(stopping), records=100, chunkSize=10, concurrency=1, store=store, stop=stop)
    committed = sorted(store.chunks["out"])
    assert committed == list(range(len(committed))) and 3 not in committed
    assert all(len(store.chunks["out"][i]) == 10 for i in committed)
    assert "out" not in store.manifests


def test_unexpected_client_error_propagates() -> None:
    def broken(records: Sequence[InputRecord]) -> list[Outcome]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run(FakeModel(broken), records=5)


def test_wrong_number_of_outcomes_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="returned 0 outcomes"):
        run(FakeModel(lambda records: []), records=3)


def test_outcomes_from_a_client_split_into_outputs_and_errors_in_input_order() -> None:
    def plain(records: Sequence[InputRecord]) -> Outcomes:
        failures = {i: RecordFailure("odd") for i, r in enumerate(records) if r.data["n"] % 2}
        return Outcomes([r.data["n"] * 10 for r in records], failures)

    store, stats = run(FakeModel(plain), records=25, chunkSize=10, batchSize=4, maxFailedRecords=20)
    outputs = [row for i in sorted(store.chunks["out"]) for row in store.chunks["out"][i]]
    errors = [row for i in sorted(store.chunks["err"]) for row in store.chunks["err"][i]]
    assert [(row["id"], row["prediction"]) for row in outputs] == [
        (str(n), n * 10) for n in range(0, 25, 2)
    ]
    assert [(row["id"], row["reason"]) for row in errors] == [
        (str(n), "odd") for n in range(1, 25, 2)
    ]
    assert (stats.written, stats.failed) == (13, 12)


def test_a_client_returning_something_else_than_outcomes_is_an_error_naming_it() -> None:
    with pytest.raises(RuntimeError, match="outcome 0 is a str, not a Prediction"):
        run(FakeModel(lambda records: ["oops"] * len(records)), records=3)


class CountingSource:
    """A source that measures how far reading runs ahead of the model and of the sink."""

    def __init__(self, count: int, model: FakeModel, store: MemoryStore) -> None:
        self.count, self.model, self.store = count, model, store
        self.ahead_of_model = 0
        self.ahead_of_sink = 0

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        for position in range(skip, self.count):
            predicted = self.model.sent
            with self.store.lock:
                written = sum(len(rows) for rows in self.store.chunks.get("out", {}).values())
            self.ahead_of_model = max(self.ahead_of_model, position - predicted)
            self.ahead_of_sink = max(self.ahead_of_sink, position - written)
            yield InputRecord(position, str(position), {"n": position})

    def total(self) -> int:
        return self.count

    def close(self) -> None:
        pass


def test_reading_stays_a_bounded_distance_ahead_of_model_and_sink() -> None:
    store, model = MemoryStore(), FakeModel()
    source = CountingSource(5_000, model, store)
    backend = MemoryBackend(store)
    tuning = RunnerTuning(chunk_size=100, batch_size=10, concurrency=2)
    Pipeline(
        source=source,
        sink=backend.open_sink({"name": "out"}, CTX, role="output"),
        error_sink=backend.open_sink({"name": "err"}, CTX, role="errors"),
        client=model,
        tuning=tuning,
        stats=Stats(),
        backoff=RecordingBackoff(),
    ).run()
    assert len(written_ids(store)) == 5_000
    # Batches in flight (2 x concurrency) plus the one being filled, plus queued chunks.
    assert source.ahead_of_model <= (2 * 2 + 1) * 10 + 100
    assert source.ahead_of_sink <= 4 * 100 + (2 * 2 + 1) * 10


class DroppingSource:
    """Yields `count` records; the stream drops (TransientError) at the positions in `drops`
    (each drop once, before the record at that position), or on open while `failing_opens`."""

    def __init__(self, count: int, drops: set[int], *, failing_opens: int = 0) -> None:
        self.count, self.drops, self.failing_opens = count, set(drops), failing_opens
        self.opened_at: list[int] = []

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        self.opened_at.append(skip)
        if self.failing_opens:
            self.failing_opens -= 1
            raise TransientError("connection refused")
        for position in range(skip, self.count):
            if position in self.drops:
                self.drops.discard(position)
                raise TransientError(f"stream dropped at {position}")
            yield InputRecord(position, str(position), {"n": position})

    def total(self) -> int:
        return self.count

    def close(self) -> None:
        pass


def run_source(source: DroppingSource, backoff: RecordingBackoff) -> MemoryStore:
    store = MemoryStore()
    backend = MemoryBackend(store)
    Pipeline(
        source=source,
        sink=backend.open_sink({"name": "out"}, CTX, role="output"),
        error_sink=backend.open_sink({"name": "err"}, CTX, role="errors"),
        client=FakeModel(),
        tuning=RunnerTuning(chunk_size=10, batch_size=4, concurrency=2),
        stats=Stats(),
        backoff=backoff,
    ).run()
    return store


def test_a_dropped_input_stream_is_reopened_after_the_last_record_read() -> None:
    source = DroppingSource(30, {7, 8, 21})
    store = run_source(source, RecordingBackoff(max_attempts=2))
    assert written_ids(store) == [str(n) for n in range(30)]
    assert source.opened_at == [0, 7, 8, 21]


def test_attempts_count_only_failures_in_a_row_without_a_record_between() -> None:
    # Four drops but never two in a row without progress: two attempts suffice.
    source = DroppingSource(20, {3, 6, 9, 12})
    assert len(written_ids(run_source(source, RecordingBackoff(max_attempts=2)))) == 20
    # Failing to open twice in a row is two attempts: the third open succeeds.
    source = DroppingSource(5, set(), failing_opens=2)
    backoff = RecordingBackoff(max_attempts=3)
    assert len(written_ids(run_source(source, backoff))) == 5
    assert source.opened_at == [0, 0, 0] and len(backoff.delays) == 2  # type: ignore[attr-defined]


def test_an_input_that_keeps_failing_fails_the_run_after_max_attempts() -> None:
    source = DroppingSource(5, set(), failing_opens=10)
    with pytest.raises(TransientError, match="connection refused"):
        run_source(source, RecordingBackoff(max_attempts=3))
    assert source.opened_at == [0, 0, 0]


# -- issue 15 ---------------------------------------------------------------------------------


def poison_rejecting(status: str) -> Any:
    """A model that refuses any batch holding the record with field `poison`, as the server does:
    `rejected` is a 4xx (BatchRejected), `server` a 500 (a TransientError)."""

    def handler(records: Sequence[InputRecord]) -> list[Outcome]:
        if any(r.data.get("poison") for r in records):
            if status == "rejected":
                raise BatchRejected("HTTP 400: bad input")
            raise server_error("HTTP 500: Internal Server Error: float division by zero")
        return echo(records)

    return handler


def server_error(message: str) -> TransientError:
    """A 500 as the built-in clients raise it (a ServerFault where it exists: the fixed code)."""
    try:
        from runners.retry import ServerFault
    except ImportError:  # today's code: a plain TransientError
        return TransientError(message)
    return ServerFault(message)


def test_a_500_caused_by_one_record_fails_only_that_record_after_the_batchs_attempts() -> None:
    # Item 8: after the attempts on the whole batch are spent, the batch is bisected.
    model = FakeModel(poison_rejecting("server"))
    store, stats = run(model, records=40, chunkSize=40, batchSize=32, maxFailedRecords=1)
    assert written_ids(store) == [str(i) for i in range(40) if i != 13]
    errors = [row for chunk in store.chunks["err"].values() for row in chunk]
    assert [e["id"] for e in errors] == ["13"]
    assert "HTTP 500" in errors[0]["reason"]
    # 5 attempts on the whole batch (RecordingBackoff), then one request per part holding the
    # poison record: halves, quarters, ... down to it alone.
    with_poison = [len(batch) for batch in model.batches if "13" in batch]
    assert with_poison == [32] * 5 + [16, 8, 4, 2, 1]
    assert (stats.written, stats.failed) == (39, 1)


@pytest.mark.parametrize("status", ["rejected", "server"])
def test_isolating_a_poison_record_bisects_instead_of_resending_one_by_one(status: str) -> None:
    # Item 9: one poison record (13) in a batch of 64 costs 2 requests per halving, not 64.
    model = FakeModel(poison_rejecting(status))
    _, stats = run(model, records=64, chunkSize=64, batchSize=64, maxFailedRecords=1)
    attempts = 5 if status == "server" else 1
    parts = [(int(batch[0]), len(batch)) for batch in model.batches[attempts:]]
    assert parts == [
        *((0, 32), (0, 16), (0, 8), (8, 8), (8, 4), (12, 4), (12, 2), (12, 1), (13, 1), (14, 2)),
        *((16, 16), (32, 32)),
    ]
    assert (stats.written, stats.failed) == (63, 1)


def test_a_model_that_never_answered_fails_the_run_after_few_attempts() -> None:
    # Item 16: a model down from the start is given 4 attempts per batch, not `maxAttempts`,
    # and the run stops (exit 1, retried by the Job) without failing any record.
    def down(records: Sequence[InputRecord]) -> list[Outcome]:
        raise TransientError("connection refused")

    model = FakeModel(down)
    store = MemoryStore()
    with pytest.raises(ModelUnavailable, match=r"never answered.*connection refused"):
        run(
            model,
            records=40,
            store=store,
            batchSize=10,
            concurrency=1,
            maxAttempts=10,
            backoff=RecordingBackoff(max_attempts=10),
        )
    assert len(model.batches) == 4
    assert store.chunks == {}


def test_a_model_that_answered_and_went_away_keeps_every_attempt() -> None:
    def gone_after_first(records: Sequence[InputRecord]) -> list[Outcome]:
        if records[0].position >= 10:
            raise TransientError("HTTP 503")
        return echo(records)

    model = FakeModel(gone_after_first)
    with pytest.raises(ModelUnavailable, match="gave up after 10 attempts: HTTP 503"):
        run(
            model,
            records=20,
            chunkSize=10,
            batchSize=10,
            concurrency=1,
            maxAttempts=10,
            backoff=RecordingBackoff(max_attempts=10),
        )
    assert len(model.batches) == 1 + 10


def test_a_resumed_run_counts_as_answered_before() -> None:
    # Chunks committed by an earlier pod show that the model answered in this run.
    store = MemoryStore()
    store.chunks["out"] = {0: old_rows(10)}

    def down(records: Sequence[InputRecord]) -> list[Outcome]:
        raise TransientError("HTTP 503")

    model = FakeModel(down)
    with pytest.raises(ModelUnavailable, match="gave up after 6 attempts"):
        run(
            model,
            records=20,
            store=store,
            chunkSize=10,
            batchSize=10,
            maxAttempts=6,
            backoff=RecordingBackoff(max_attempts=6),
        )
    assert len(model.batches) == 6


class UncountedSource(MemorySource):
    """The memory source of a store that cannot say how many records it holds."""

    def total(self) -> int | None:
        return None


def run_unknown_total(
    model: FakeModel, *, records: int, **tuning: Any
) -> tuple[MemoryStore, Stats]:
    store = MemoryStore(inputs=[{"n": i} for i in range(records)])
    backend, stats = MemoryBackend(store), Stats()
    Pipeline(
        UncountedSource(store),
        backend.open_sink({"name": "out"}, CTX, role="output"),
        backend.open_sink({"name": "err"}, CTX, role="errors"),
        model,
        RunnerTuning.model_validate({"progressIntervalSeconds": 60, **tuning}),
        stats,
        backoff=RecordingBackoff(),
    ).run()
    return store, stats


def fail_first(count: int) -> FakeModel:
    return FakeModel(
        lambda records: [
            RecordFailure("bad") if r.position < count else Prediction(1) for r in records
        ]
    )


def test_without_a_total_the_ratio_waits_for_the_documented_minimum_then_the_end() -> None:
    # Item 10: 30 failures in the first 1,000 records; 1 % of 5,000 allows 50.
    _, stats = run_unknown_total(fail_first(30), records=5000, chunkSize=500, maxFailedRatio=0.01)
    assert (stats.written, stats.failed) == (4970, 30)
    with pytest.raises(BudgetExceeded, match="60 failed records of 5000"):
        run_unknown_total(fail_first(60), records=5000, chunkSize=500, maxFailedRatio=0.01)


def test_without_a_total_the_ratio_is_judged_once_the_minimum_is_done() -> None:
    records = BUDGET_MIN_RECORDS * 3
    model = fail_first(BUDGET_MIN_RECORDS // 10)
    with pytest.raises(BudgetExceeded) as info:
        run_unknown_total(
            model, records=records, chunkSize=1000, batchSize=500, maxFailedRatio=0.05
        )
    assert f"of {BUDGET_MIN_RECORDS} " in str(info.value)


def test_a_batch_refused_for_its_size_is_halved_until_it_fits_and_no_record_fails() -> None:
    # A Triton model whose max_batch_size is below the batch size refuses every batch whole.
    def at_most_16(records: Sequence[InputRecord]) -> list[Outcome]:
        if len(records) > 16:
            raise BatchRejected("inference request batch-size must be <= 16")
        return echo(records)

    model = FakeModel(at_most_16)
    store, stats = run(model, records=256, chunkSize=256, batchSize=256)
    assert len(written_ids(store)) == 256 and stats.failed == 0
    assert len(model.batches) == 15 + 16  # refused: 256, 128 x 2, 64 x 4, 32 x 8
