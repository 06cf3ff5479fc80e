"""The streaming pipeline: read -> batch -> bounded concurrent model calls -> commit chunks.

Why this shape: a run may be millions of records and its pod may be killed at any moment, so
memory must not depend on the input size and a restart must neither lose nor repeat a record.

Rules the code relies on:
- A chunk (`position // chunkSize`) is the unit of commit: its error chunk is written first, its
  output chunk is the commit marker (committed exactly when `sink.committed()` lists it).
- Chunks are committed in index order by one writer thread, so after a kill the committed set is
  (at most) a prefix plus whatever an earlier attempt left; records of committed chunks are
  skipped, and reading starts at the first uncommitted chunk (`Source.records(skip)` seeks).
- The first uncommitted chunk's error chunk is always (re)written, even empty: the killed
  attempt may have left a stale one.
- Memory is bounded by queues: at most 2 x concurrency batches in flight (`concurrency: auto`:
  2 x its maximum) and `_CHUNK_QUEUE` (runners/commit.py) unwritten chunks; reading blocks.
- On stop (SIGTERM) nothing new is read or committed; in-flight work is abandoned.
- The counters start from the records of the committed chunks (output and error), so the error
  budget and the summary cover the whole run, also after a resume.
- Ids are screened before the model sees them (runners/recordids.py): one an output cannot key a
  record by, or one an earlier record of the run had, makes a per-record error, the same on every
  sink. A resumed run first re-reads the ids of its committed chunks when ids come from a field.
- Every retry counts in `recordsRetried` (model requests, input reads, chunk writes); the
  Prometheus metrics read the same counters (runners/metrics.py).
- Model calls (retries, bisection, silence) are runners/modelcalls.py's; the error budget's rules
  runners/budget.py's. The chunk that crosses the budget is committed before the run stops, and
  the budget is judged again at the end, on the whole input.
- `recordsRead` counts the records of committed chunks: on every exit it is recordsWritten +
  recordsFailed (records in flight when a run stops are read again later).
- A chunk a sink refuses for values JSON cannot carry (NaN, a plug-in's object) goes again with
  them as formats.json_records makes them, the same strings on every sink (a prediction that is
  no JSON value fails its record).
- A run shared by several pods (runners/shards.py): each does the above for its own chunks (past
  the others' or within its range), and counts, judges and reports its own; the one that finds
  every chunk committed completes the output and judges the whole run.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from typing import TextIO, TypeVar

from contracts.config import OTHER_BATCH_SIZE, RunnerTuning
from runners.api import ErrorRecord, InputRecord, ModelClient, Sink, Source
from runners.budget import Budget, BudgetExceeded
from runners.commit import ChunkJob, Committer, committed_counts
from runners.formats import UnreadableRecord
from runners.metrics import RunnerMetrics, Stats
from runners.modelcalls import ModelCalls, Result
from runners.pace import auto_concurrency
from runners.progress import Progress
from runners.recordids import IdScreen, refusal_code
from runners.retry import (
    Backoff,
    Contact,
    Halt,
    RateLimiter,
    Stopped,
    call_with_retry,
    source_records,
)
from runners.shards import Shard, early_excess, held, whole_run

T = TypeVar("T")
_POLL = 0.2  # seconds: how soon a blocked reader sees SIGTERM or a failed run
__all__ = ["BudgetExceeded", "Pipeline", "Stats"]


@dataclass
class Pipeline:
    """One execution: wire a source, a model client and two sinks together."""

    source: Source
    sink: Sink
    error_sink: Sink
    client: ModelClient
    tuning: RunnerTuning
    stats: Stats
    stop: threading.Event = field(default_factory=threading.Event)
    log: TextIO | None = None
    backoff: Backoff | None = None
    # Ids come from an input field (`idField`), so two records may share one (recordids.py).
    ids_from_field: bool = False
    metrics: RunnerMetrics = field(default_factory=RunnerMetrics)  # runners/metrics.py
    # The protocol answers with token usage (OpenAI): progress lines say tokens and tokens/s.
    counts_tokens: bool = False
    shard: Shard = field(default_factory=Shard.one)  # its chunks (runners/shards.py)

    def __post_init__(self) -> None:
        t = self.tuning
        self.backoff = self.backoff or Backoff.from_tuning(t)
        rps = t.requests_per_second
        self._limiter = RateLimiter(rps) if rps else None
        self._slots = threading.Semaphore(2 * t.concurrency_cap)
        self._pace = auto_concurrency(t, log=self._log)
        self._ids = IdScreen(unique=self.ids_from_field)
        self._halt = Halt(self.stop)
        self._committer = Committer(  # the writer thread (runners/commit.py)
            sink=self.sink,
            error_sink=self.error_sink,
            count=self.stats.add,
            stopped=lambda: self.stop.is_set(),
            failed=self._halt.failed,
            retrying=self._retrying,
            check_budget=self._check_budget,
        )
        self._fatal: BaseException | None = None  # why the run stopped, when a worker knew first
        self._run_total: int | None = None  # the input's records, once counted
        self._input_end: int | None = None  # past the input's last position, once read there
        self._budget = Budget.from_tuning(t)
        self._progress: Progress | None = None
        self._job: ChunkJob | None = None  # the chunk being read, and its batch (_read_all)
        self._batch: list[InputRecord] = []
        self._calls = self._model_calls(answered=False)
        self.metrics.watch(self.stats, total=self._total)

    def _total(self) -> int | None:
        return None if self._progress is None else self._progress.total

    def _share(self) -> int | None:
        """The input's records in this pod's chunks (all of them for a one-pod run)."""
        self._run_total = self._run_total if self.shard.ranged else self.source.total()
        return self.shard.share(self._run_total, self.tuning.chunk_size)

    def _model_calls(self, *, answered: bool) -> ModelCalls:
        assert self.backoff is not None
        return ModelCalls(
            self.client,
            self.backoff,
            self._halt,
            limiter=self._limiter,
            contact=Contact(answered=answered),
            on_retry=lambda: self.stats.add(retried=1),
            timed=self.metrics.timed,
            pace=self._pace,
        )

    def run(self) -> None:
        """Process every uncommitted chunk, then mark the output complete. Raises Stopped
        (SIGTERM), BudgetExceeded, or what retries could not absorb. Metrics serve first."""
        self.metrics.serve_from_env(os.environ, log=self._log)
        if self.shard.ranged:  # its range comes from the input's count (runners/shards.py)
            self._run_total = self._retrying(self.source.total)
            self.shard = self.shard.bound(self._run_total, self.tuning.chunk_size, log=self._log)
        shard, size = self.shard, self.tuning.chunk_size
        committed = {c for c in self._retrying(self.sink.committed) if shard.owns(c)}
        first = shard.first_missing(committed)
        sinks, tokens = (self.sink, self.error_sink), self.counts_tokens
        self.stats.add(
            **committed_counts(*sinks, committed, retrying=self._retrying, tokens=tokens)
        )
        # Chunks committed by an earlier pod: the model answered in this run.
        self._calls = self._model_calls(answered=bool(committed))
        progress = self._progress = Progress(
            interval=self.tuning.progress_interval_seconds,
            total=self._share,  # counted on its own thread: the run does not wait
            done_before=shard.before(first) * size,
            stream=self.log,
            counts=lambda: (self.stats.read, self.stats.written, self.stats.failed),
            tokens=(lambda: self.stats.total_tokens) if self.counts_tokens else None,
        )
        writer = threading.Thread(
            target=self._committer.write_all, args=(first, progress), name="writer"
        )
        progress.start()
        try:
            self._check_budget([])  # an earlier pod's failures may have spent it already
        except BaseException:
            progress.stop()
            raise
        writer.start()
        try:
            threads = self.tuning.concurrency_cap
            with ThreadPoolExecutor(threads, thread_name_prefix="model") as pool:
                try:
                    self._read_all(pool, committed=committed, first=first)
                finally:
                    self._put(None)
                    writer.join()
        except Stopped:
            pass  # _finish says why: the writer's error, or SIGTERM
        finally:
            progress.stop()
            if self._pace is not None:
                self._log(f"concurrency auto: {self._pace.describe()}")
        self._finish()

    # -- reading (main thread) -------------------------------------------------------

    def _read_all(self, pool: ThreadPoolExecutor, *, committed: set[int], first: int) -> None:
        """Read, cut batches (at most `batchSize` records, never across chunks) and chunk jobs,
        and queue them. Records come a batch's worth at a time, at most what the chunk can still
        hold: all readable and in one uncommitted chunk (the common case), they join its batch
        at once; else `_take` places them one by one. Per record: only the source's work."""
        # `batchSize` unset: the runner fills it in for the protocol (cli.load_contract).
        size, batch_size = self.tuning.chunk_size, self.tuning.batch_size or OTHER_BATCH_SIZE
        self._remember_ids(committed, before=first * size)
        self._job, self._batch = None, []
        records, end = self._records(first * size), first * size  # end: past the last read
        stop_at = self.shard.end(size)  # a chunkRanges pod's range ends there
        while stop_at is None or end < stop_at:
            block = list(islice(records, _room(end, size, batch_size - len(self._batch))))
            if not block:  # the source ran out (past the last record read, if any)
                self._input_end = end if end > first * size else None
                break
            index, end = block[0].position // size, block[-1].position + 1
            if not self.shard.owns(index) and (end - 1) // size == index:
                self._pass_over(block)  # another pod's chunk
                continue
            if (
                (end - 1) // size != index
                or index in committed
                or UnreadableRecord in map(type, block)
            ):
                for record in block:
                    self._take(pool, record, committed=committed)
                continue
            if self._job is None or self._job.index != index:
                self._flush(pool, self._job, self._batch)
                self._job, self._batch = ChunkJob(index), []
            self._batch += block
            if len(self._batch) >= batch_size:
                self._queue_batch(pool, self._job, self._batch)
                self._batch = []
        records.close()
        self._flush(pool, self._job, self._batch)

    def _pass_over(self, block: list[InputRecord]) -> None:
        """Records of a committed chunk or another pod's: their ids, which others may repeat."""
        self._check_running()
        if self._ids.remembers:
            self._ids.remember([r.id for r in block if not isinstance(r, UnreadableRecord)])

    def _take(self, pool: ThreadPoolExecutor, record: InputRecord, *, committed: set[int]) -> None:
        """Place one record: skip it (committed chunk), or fail it (unreadable) or batch it in
        its chunk's job."""
        size, batch_size = self.tuning.chunk_size, self.tuning.batch_size or OTHER_BATCH_SIZE
        index = record.position // size
        if index in committed or not self.shard.owns(index):
            self._pass_over([record])
            return
        job = self._job
        if job is None or index != job.index:
            self._flush(pool, job, self._batch)
            job = self._job = ChunkJob(index)
            self._batch = []
        if isinstance(record, UnreadableRecord):
            job.fail(record, record.reason, code=record.code)
            return
        self._batch.append(record)
        if len(self._batch) >= batch_size:
            self._queue_batch(pool, job, self._batch)
            self._batch = []

    def _remember_ids(self, committed: set[int], *, before: int) -> None:
        """Feed the id screen the ids before `before` and of the committed chunks."""
        if self._ids.remembers and (before or committed):
            with contextlib.closing(self._records(0)) as rs:
                size = self.tuning.chunk_size
                self._ids.remember_read(rs, before, committed=committed, size=size, stop=self.stop)
            self._check_running()

    def _queue_batch(
        self, pool: ThreadPoolExecutor, job: ChunkJob, batch: list[InputRecord]
    ) -> None:
        """Send `batch` to the model, but for records whose ids were refused: they fail now."""
        batch, refused = self._ids.screen(batch)
        for record, reason in refused:  # queued ahead of the batch before them, as unreadable
            job.fail(record, reason, code=refusal_code(reason))
        if batch:
            job.parts.append(self._submit(pool, batch))

    def _records(self, skip: int) -> Generator[InputRecord, None, None]:
        """Source records from `skip`, reopening after a TransientError where it stopped."""
        assert self.backoff is not None
        on_retry = lambda: self.stats.add(retried=1)  # noqa: E731
        return source_records(self.source, skip, self.backoff, self.stop, on_retry, self._log)

    def _flush(
        self, pool: ThreadPoolExecutor, job: ChunkJob | None, batch: list[InputRecord]
    ) -> None:
        if job is None:
            return
        if batch:
            self._queue_batch(pool, job, batch)
        self._put(job)

    def _submit(self, pool: ThreadPoolExecutor, batch: list[InputRecord]) -> Future[Result]:
        self._check_running()
        while not self._slots.acquire(timeout=_POLL):
            self._check_running()
        future = pool.submit(self._predict, batch)
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def _put(self, job: ChunkJob | None) -> None:
        while True:
            if job is not None:
                self._check_running()
            elif self._committer.done.is_set():
                return
            try:
                self._committer.chunks.put(job, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _check_running(self) -> None:
        if self._committer.error is not None or self._committer.done.is_set():
            raise Stopped()
        if self._halt.is_set():
            raise Stopped()

    # -- model calls (worker threads) ------------------------------------------------

    def _predict(self, batch: list[InputRecord]) -> Result:
        try:
            return self._calls.predict(batch)
        except Stopped:
            raise
        except BaseException as exc:  # the run cannot go on: stop the other workers' retries now
            if self._fatal is None:
                self._fatal = exc
            self._halt.failed.set()
            raise

    # -- sinks and the error budget (the writer thread uses them too) ---------------

    def _retrying(self, fn: Callable[[], T]) -> T:
        """`fn()` (a sink call), retried on TransientError; each retry counts in the summary."""
        assert self.backoff is not None
        return call_with_retry(
            fn, backoff=self.backoff, stop=self.stop, on_retry=lambda _: self.stats.add(retried=1)
        )

    def _check_budget(self, errors: list[ErrorRecord], *, final: bool = False) -> None:
        """Raise BudgetExceeded when the committed chunks' failures are over budget
        (runners/budget.py); `errors` are the last chunk's, `final` says every record is done."""
        with self.stats.lock:
            failed, done = self.stats.failed, self.stats.written + self.stats.failed
        if not self.shard.whole:  # the whole run is judged by the pod that completes it
            if not final and (excess := early_excess(self._budget, failed, run=self._run_total)):
                raise BudgetExceeded(excess + _last(errors))
            return
        progress = self._progress
        total = None if progress is None else progress.total
        excess = self._budget.excess(failed, done, total=total, final=final)
        if excess and total is None and not final and progress is not None:
            # The input's total, still being counted, may show them within budget.
            while not progress.counted.wait(_POLL):
                if self._halt.is_set():
                    raise Stopped()
            excess = self._budget.excess(failed, done, total=progress.total, final=final)
        if excess:
            raise BudgetExceeded(excess + _last(errors))

    def _finish(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._committer.error is not None:
            raise self._committer.error
        if self.stop.is_set():
            raise Stopped()
        self._check_budget([], final=True)
        s = self.stats
        counts: tuple[int, int, int] | None = (s.written, s.failed, s.chunks)
        if self.shard.whole:
            held((self.sink, self.error_sink), self._input_end, s.written + s.failed, self._records)
        else:  # the pod that finds every chunk committed completes the run
            self.shard.check_count(self._run_total, lambda: self._retrying(self.source.total))
            counts = whole_run(self.sink, self.error_sink, size=self.tuning.chunk_size,
                               input_end=self._input_end, records=self._records,
                               retrying=self._retrying, budget=self._budget)  # fmt: skip
            self.stats.run_completed = counts is not None  # the controller checks one did
            self._log(f"{self.shard.describe()}: {'completing' if counts else 'done'}")
        if counts is None:
            return
        summary = dict(zip(("recordsWritten", "recordsFailed", "chunks"), counts, strict=True))
        for sink in (self.error_sink, self.sink):
            self._retrying(lambda: sink.finish(summary))  # noqa: B023 (called at once)

    def _log(self, message: str) -> None:
        print(f"longrun-runner: {message}", file=self.log or sys.stderr, flush=True)


def _room(end: int, size: int, wanted: int) -> int:
    """`wanted`, but no more than the chunk of position `end` (the next record's at the
    earliest: positions only grow) can still hold."""
    return min(wanted, size - end % size)


def _last(errors: list[ErrorRecord]) -> str:
    return f"; last: {errors[-1].reason[:300]}" if errors else ""
