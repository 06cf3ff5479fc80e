"""The streaming pipeline: read -> batch -> bounded concurrent model calls -> commit chunks.

Why this shape: a run may be millions of records and its pod may be killed at
any moment, so memory must not depend on the input size and a restart must
neither lose nor repeat a record.

Rules the code relies on:
- A chunk (`position // chunkSize`) is the unit of commit. The error chunk is
  written before the output chunk; the output chunk is the commit marker, so a
  chunk is committed exactly when `sink.committed()` lists it.
- Chunks are committed in index order by one writer thread, so after a kill the
  committed set is (at most) a prefix plus whatever an earlier attempt left;
  records of any committed chunk are skipped, and reading starts at the first
  uncommitted chunk (`Source.records(skip)` seeks when it can).
- The first uncommitted chunk may have a stale error chunk from the killed
  attempt, so its error chunk is always (re)written, even when empty.
- Memory is bounded by queues: at most 2 x concurrency batches in flight, and
  at most `_CHUNK_QUEUE` (runners/commit.py) finished-but-unwritten chunks;
  reading blocks otherwise.
- On stop (SIGTERM) nothing new is read or committed; in-flight work is
  abandoned; committed chunks stay.
- The counters start from the records of the committed chunks (output and
  error), so the error budget and the summary cover the whole run: a pod that
  resumes after a blown budget must not start again from zero failures.
- Ids are screened before the model sees them (runners/recordids.py): one an
  output cannot key a record by, or one an earlier record of the run had, makes
  a per-record error, the same on every sink. A resumed run first re-reads the
  ids of its committed chunks when ids come from a field.
- Every retry counts in `recordsRetried`: model requests, input reads, chunk writes. The
  Prometheus metrics read the same counters (runners/metrics.py), so they equal the summary.
- Model calls (retries, bisecting a refused batch, a model that does not answer) are
  runners/modelcalls.py's; the error budget's rules are runners/budget.py's. The chunk that
  crosses the budget is committed before the run stops, so every failed record is in the
  error output; the budget is judged again at the end, against the whole input.
- `recordsRead` counts the records of committed chunks, so on every exit the summary has
  recordsRead = recordsWritten + recordsFailed (records in flight when a run stops are read
  again by the next pod).
- A sink that refuses a chunk holding values JSON cannot carry as they are (NaN, a
  plug-in's object) gets it again with them as formats.json_records makes them: the same
  strings on every sink, and a per-record error for a prediction that is no JSON value.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from contracts.config import OTHER_BATCH_SIZE, RunnerTuning
from runners.api import ErrorRecord, InputRecord, ModelClient, Sink, Source, TransientError
from runners.budget import Budget, BudgetExceeded
from runners.commit import ChunkJob, Committer
from runners.formats import UnreadableRecord
from runners.metrics import RunnerMetrics, Stats
from runners.modelcalls import ModelCalls, Result
from runners.progress import Progress
from runners.recordids import IdScreen, refusal_code
from runners.retry import Backoff, Contact, RateLimiter, Stopped, call_with_retry

T = TypeVar("T")
_POLL = 0.2
__all__ = ["BudgetExceeded", "Pipeline", "Stats"]


class _Halt:
    """What in-flight work waits on: set on SIGTERM (`stop`) or when the run has failed."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.failed = threading.Event()

    def is_set(self) -> bool:
        return self.stop.is_set() or self.failed.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Like Event.wait, for either event (SIGTERM is seen within `_POLL` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = _POLL if deadline is None else min(_POLL, deadline - time.monotonic())
            if left <= 0:
                return False
            self.failed.wait(left)
        return True


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

    def __post_init__(self) -> None:
        t = self.tuning
        self.backoff = self.backoff or Backoff.from_tuning(t)
        rps = t.requests_per_second
        self._limiter = RateLimiter(rps) if rps else None
        self._slots = threading.Semaphore(2 * t.concurrency)
        self._ids = IdScreen(unique=self.ids_from_field)
        self._halt = _Halt(self.stop)
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
        self._budget = Budget.from_tuning(t)
        self._progress: Progress | None = None
        self._calls = self._model_calls(answered=False)
        self.metrics.watch(self.stats, total=self._total)

    def _total(self) -> int | None:
        return None if self._progress is None else self._progress.total

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
        )

    def run(self) -> None:
        """Process every uncommitted chunk, then mark the output complete.

        Raises Stopped on SIGTERM, BudgetExceeded when the error budget is spent, and
        whatever a source, sink or client raised that retries could not absorb. The metrics
        exporter starts first, when the pod names its port (runners/metrics.py).
        """
        self.metrics.serve_from_env(os.environ, log=self._log)
        committed = self._retrying(self.sink.committed)
        first = _first_missing(committed)
        written = self._retrying(lambda: self.sink.committed_records(committed)) if committed else 0
        failed = (
            self._retrying(lambda: self.error_sink.committed_records(committed)) if committed else 0
        )
        # Every record of a committed chunk was read once and written or failed once.
        self.stats.add(chunks=len(committed), written=written, failed=failed, read=written + failed)
        if committed and self.counts_tokens:
            self.stats.add(**self._retrying(lambda: self.sink.committed_usage(committed)))
        # Chunks committed by an earlier pod: the model answered in this run.
        self._calls = self._model_calls(answered=bool(committed))
        progress = self._progress = Progress(
            interval=self.tuning.progress_interval_seconds,
            total=self.source.total,  # counted on its own thread: the run does not wait
            done_before=first * self.tuning.chunk_size,
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
            with ThreadPoolExecutor(self.tuning.concurrency, thread_name_prefix="model") as pool:
                try:
                    self._read_all(pool, committed=committed, first=first)
                finally:
                    self._put(None)
                    writer.join()
        except Stopped:
            pass  # _finish says why: the writer's error, or SIGTERM
        finally:
            progress.stop()
        self._finish()

    # -- reading (main thread) -------------------------------------------------------

    def _read_all(self, pool: ThreadPoolExecutor, *, committed: set[int], first: int) -> None:
        # `batchSize` unset: the runner fills it in for the protocol (cli.load_contract).
        size, batch_size = self.tuning.chunk_size, self.tuning.batch_size or OTHER_BATCH_SIZE
        self._remember_ids(committed)
        job: ChunkJob | None = None
        batch: list[InputRecord] = []
        for record in self._records(first * size):
            index = record.position // size
            if index in committed:
                if self.stop.is_set():
                    raise Stopped()
                continue
            if job is None or index != job.index:
                self._flush(pool, job, batch)
                job, batch = ChunkJob(index), []
            if isinstance(record, UnreadableRecord):
                job.fail(record, record.reason, code=record.code)
                continue
            batch.append(record)
            if len(batch) >= batch_size:
                self._queue_batch(pool, job, batch)
                batch = []
        self._flush(pool, job, batch)

    def _remember_ids(self, committed: set[int]) -> None:
        """Feed the id screen the ids of the committed chunks: one pass over their input."""
        if not committed or not self._ids.remembers:
            return
        size, ids = self.tuning.chunk_size, []
        with contextlib.closing(self._records(0)) as records:
            for record in records:
                if record.position >= (max(committed) + 1) * size or self.stop.is_set():
                    break
                if record.position // size in committed and not isinstance(
                    record, UnreadableRecord
                ):
                    ids.append(record.id)
                if len(ids) >= 65536:
                    self._ids.remember(ids)
                    ids = []
        self._check_running()
        self._ids.remember(ids)

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
        """Source records from `skip`, reopening after a TransientError where it stopped.

        Attempts count the failures since the last record read. Nothing else is done per
        record here: SIGTERM is seen by the reader at the next batch or chunk.
        """
        assert self.backoff is not None
        attempt = 1
        while True:
            record: InputRecord | None = None
            try:
                records = self.source.records(skip)
                try:
                    for record in records:
                        yield record
                finally:
                    records.close()  # a generator (Source contract): its cursor or file goes now
                return
            except TransientError as exc:
                if record is not None:  # it got further: resume after it, attempts anew
                    skip, attempt = record.position + 1, 1
                if attempt >= self.backoff.max_attempts:
                    raise
                self.stats.add(retried=1)
                self._log(f"input: {exc}; retrying (attempt {attempt + 1})")
                if self.stop.wait(self.backoff.delay(attempt, retry_after=exc.retry_after)):
                    raise Stopped() from exc
                attempt += 1

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
            last = f"; last: {errors[-1].reason[:300]}" if errors else ""
            raise BudgetExceeded(excess + last)

    def _finish(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._committer.error is not None:
            raise self._committer.error
        if self.stop.is_set():
            raise Stopped()
        self._check_budget([], final=True)
        summary = {
            "recordsWritten": self.stats.written,
            "recordsFailed": self.stats.failed,
            "chunks": self.stats.chunks,
        }
        self.error_sink.finish(summary)
        self.sink.finish(summary)

    def _log(self, message: str) -> None:
        print(f"longrun-runner: {message}", file=self.log or sys.stderr, flush=True)


def _first_missing(committed: set[int]) -> int:
    index = 0
    while index in committed:
        index += 1
    return index
