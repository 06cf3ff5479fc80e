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
  at most `_CHUNK_QUEUE` finished-but-unwritten chunks; reading blocks otherwise.
- On stop (SIGTERM) nothing new is read or committed; in-flight work is
  abandoned; committed chunks stay.
- The counters start from the records of the committed chunks (output and
  error), so the error budget and the summary cover the whole run: a pod that
  resumes after a blown budget must not start again from zero failures.
- Ids are screened before the model sees them (runners/recordids.py): one an
  output cannot key a record by, or one an earlier record of the run had, makes
  a per-record error, the same on every sink. A resumed run first re-reads the
  ids of its committed chunks when ids come from a field.
- Every retry counts in `recordsRetried`: model requests, input reads, chunk writes.
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
import queue
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from contracts.config import OTHER_BATCH_SIZE, RunnerTuning
from runners.api import (
    ErrorRecord,
    InputRecord,
    ModelClient,
    OutputRecord,
    Sink,
    Source,
    TransientError,
)
from runners.budget import Budget, BudgetExceeded
from runners.formats import UnreadableRecord, json_records
from runners.modelcalls import ModelCalls, Part, Result
from runners.outcomes import Outcomes
from runners.progress import Progress
from runners.recordids import IdScreen
from runners.redact import redact
from runners.retry import Backoff, Contact, RateLimiter, Stopped, call_with_retry

T = TypeVar("T")
_CHUNK_QUEUE = 1
_POLL = 0.2
__all__ = ["BudgetExceeded", "Pipeline", "Stats"]


@dataclass
class Stats:
    """Counters of one execution, shared by the threads (guarded by `lock`)."""

    read: int = 0
    written: int = 0
    failed: int = 0
    retried: int = 0
    chunks: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        """Add to counters by name, atomically."""
        with self.lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)


@dataclass
class _ChunkJob:
    index: int
    parts: list[Future[Result]] = field(default_factory=list)
    unreadable: int = 0  # parts queued ahead of the batch that holds earlier records


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

    def __post_init__(self) -> None:
        t = self.tuning
        self.backoff = self.backoff or Backoff.from_tuning(t)
        rps = t.requests_per_second
        self._limiter = RateLimiter(rps) if rps else None
        self._slots = threading.Semaphore(2 * t.concurrency)
        self._chunks: queue.Queue[_ChunkJob | None] = queue.Queue(maxsize=_CHUNK_QUEUE)
        self._writer_error: BaseException | None = None
        self._writer_done = threading.Event()
        self._ids = IdScreen(unique=self.ids_from_field)
        self._halt = _Halt(self.stop)
        self._fatal: BaseException | None = None  # why the run stopped, when a worker knew first
        self._budget = Budget.from_tuning(t)
        self._progress: Progress | None = None
        self._calls = self._model_calls(answered=False)

    def _model_calls(self, *, answered: bool) -> ModelCalls:
        assert self.backoff is not None
        return ModelCalls(
            self.client,
            self.backoff,
            self._halt,
            limiter=self._limiter,
            contact=Contact(answered=answered),
            on_retry=lambda: self.stats.add(retried=1),
        )

    def run(self) -> None:
        """Process every uncommitted chunk, then mark the output complete.

        Raises Stopped on SIGTERM, BudgetExceeded when the error budget is spent, and
        whatever a source, sink or client raised that retries could not absorb.
        """
        committed = self._retrying(self.sink.committed)
        first = _first_missing(committed)
        written = self._retrying(lambda: self.sink.committed_records(committed)) if committed else 0
        failed = (
            self._retrying(lambda: self.error_sink.committed_records(committed)) if committed else 0
        )
        # Every record of a committed chunk was read once and written or failed once.
        self.stats.add(chunks=len(committed), written=written, failed=failed, read=written + failed)
        # Chunks committed by an earlier pod: the model answered in this run.
        self._calls = self._model_calls(answered=bool(committed))
        progress = self._progress = Progress(
            interval=self.tuning.progress_interval_seconds,
            total=self.source.total,  # counted on its own thread: the run does not wait
            done_before=first * self.tuning.chunk_size,
            stream=self.log,
            counts=lambda: (self.stats.read, self.stats.written, self.stats.failed),
        )
        writer = threading.Thread(target=self._write_all, args=(first, progress), name="writer")
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
        job: _ChunkJob | None = None
        batch: list[InputRecord] = []
        for record in self._records(first * size):
            index = record.position // size
            if index in committed:
                if self.stop.is_set():
                    raise Stopped()
                continue
            if job is None or index != job.index:
                self._flush(pool, job, batch)
                job, batch = _ChunkJob(index), []
            if isinstance(record, UnreadableRecord):
                job.parts.append(_done([_failed([record], record.reason)]))
                job.unreadable += 1
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
        self, pool: ThreadPoolExecutor, job: _ChunkJob, batch: list[InputRecord]
    ) -> None:
        """Send `batch` to the model, but for records whose ids were refused: they fail now."""
        batch, refused = self._ids.screen(batch)
        for record, reason in refused:  # queued ahead of the batch before them, as unreadable
            job.parts.append(_done([_failed([record], reason)]))
        job.unreadable += len(refused)
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
        self, pool: ThreadPoolExecutor, job: _ChunkJob | None, batch: list[InputRecord]
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

    def _put(self, job: _ChunkJob | None) -> None:
        while True:
            if job is not None:
                self._check_running()
            elif self._writer_done.is_set():
                return
            try:
                self._chunks.put(job, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _check_running(self) -> None:
        if self._writer_error is not None or self._writer_done.is_set():
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

    # -- writing (writer thread) -----------------------------------------------------

    def _write_all(self, first: int, progress: Progress) -> None:
        try:
            while (job := self._chunks.get()) is not None:
                self._commit(job, progress, always_errors=job.index == first)
        except BaseException as exc:  # handed to the main thread, which re-raises it
            self._writer_error = exc
            self._halt.failed.set()
        finally:
            self._writer_done.set()
            self._drain()

    def _drain(self) -> None:
        # Unblock the reader: it may be waiting to put a job nobody will take.
        while True:
            try:
                self._chunks.get_nowait()
            except queue.Empty:
                return

    def _commit(self, job: _ChunkJob, progress: Progress, *, always_errors: bool) -> None:
        """Write the chunk (errors first), count it, then judge the budget: the chunk that
        crosses it is committed, so its failed records are in the error output."""
        outputs, errors = _split(part for future in job.parts for part in future.result())
        if job.unreadable:  # queued as they were read, ahead of the batch before them
            errors.sort(key=lambda error: error.position)
        if self.stop.is_set():
            raise Stopped()
        if errors or always_errors:
            self._write(self.error_sink, job.index, errors)
        refused = self._write(self.sink, job.index, outputs)
        if refused:  # predictions no JSON can hold: per-record errors, written first
            gone = {record.position for record in refused}
            outputs = [record for record in outputs if record.position not in gone]
            errors = sorted([*errors, *refused], key=lambda error: error.position)
            self._write(self.error_sink, job.index, errors)
            self._write(self.sink, job.index, outputs)
        done = len(outputs) + len(errors)
        self.stats.add(read=done, written=len(outputs), failed=len(errors), chunks=1)
        progress.add(done)
        self._check_budget(errors)

    def _write(
        self, sink: Sink, index: int, records: Sequence[OutputRecord | ErrorRecord]
    ) -> list[ErrorRecord]:
        """Write one chunk. If the sink refuses it, and it holds values JSON cannot carry as
        they are, write it as formats.json_records makes it; but return, unwritten, the
        output records whose prediction is no JSON value, as error records."""
        try:
            self._retrying(lambda: sink.write_chunk(index, records))
            return []
        except (Stopped, TransientError):
            raise
        except Exception:
            carried = json_records(records)
            if carried is None:
                raise  # nothing JSON could not carry: the sink's own error
        safe, refused = carried
        if not refused:
            self._retrying(lambda: sink.write_chunk(index, safe))
        return refused

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
        if self._writer_error is not None:
            raise self._writer_error
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


def _done(result: Result) -> Future[Result]:
    future: Future[Result] = Future()
    future.set_result(result)
    return future


def _failed(batch: list[InputRecord], reason: str) -> Part:
    """The batch with every record failed for `reason`."""
    return batch, Outcomes.all_failed(len(batch), reason)


def _split(parts: Iterable[Part]) -> tuple[list[OutputRecord], list[ErrorRecord]]:
    """The output and error records of a chunk's parts, each in input order."""
    outputs: list[OutputRecord] = []
    errors: list[ErrorRecord] = []
    for records, outcomes in parts:
        failures = outcomes.failures
        if not failures:  # the common case: one object per record, the output itself
            outputs += [
                OutputRecord(r.id, r.position, r.data, value)
                for r, value in zip(records, outcomes.values, strict=True)
            ]
            continue
        for index, (r, value) in enumerate(zip(records, outcomes.values, strict=True)):
            failure = failures.get(index)
            if failure is None:
                outputs.append(OutputRecord(r.id, r.position, r.data, value))
            else:
                # A reason may quote a server that echoed a Secret (a refused key): not kept.
                errors.append(ErrorRecord(r.id, r.position, r.data, redact(failure.reason)))
    return outputs, errors
