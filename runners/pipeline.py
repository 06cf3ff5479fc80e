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
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO

from contracts.config import RunnerTuning
from runners.api import (
    BatchRejected,
    ErrorRecord,
    InputRecord,
    ModelClient,
    Outcome,
    OutputRecord,
    Sink,
    Source,
    TransientError,
)
from runners.formats import UnreadableRecord
from runners.outcomes import Outcomes
from runners.progress import Progress
from runners.retry import Backoff, RateLimiter, Stopped, call_with_retry

_CHUNK_QUEUE = 1
_POLL = 0.2
# What one model call gives the writer: the records and their outcomes, in one or more parts
# (more than one when a rejected batch was retried record by record).
Part = tuple[list[InputRecord], Outcomes]
Result = list[Part]


class BudgetExceeded(Exception):
    """More records failed than the error budget allows; the message says by how much."""


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
    read: int = 0
    unreadable: int = 0  # parts queued ahead of the batch that holds earlier records


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

    def __post_init__(self) -> None:
        t = self.tuning
        self.backoff = self.backoff or Backoff.from_tuning(t)
        rps = t.requests_per_second
        self._limiter = RateLimiter(rps) if rps else None
        self._slots = threading.Semaphore(2 * t.concurrency)
        self._chunks: queue.Queue[_ChunkJob | None] = queue.Queue(maxsize=_CHUNK_QUEUE)
        self._writer_error: BaseException | None = None
        self._writer_done = threading.Event()

    def run(self) -> None:
        """Process every uncommitted chunk, then mark the output complete.

        Raises Stopped on SIGTERM, BudgetExceeded when the error budget is spent, and
        whatever a source, sink or client raised that retries could not absorb.
        """
        committed = self.sink.committed()
        first = _first_missing(committed)
        written = self.sink.committed_records(committed) if committed else 0
        failed = self.error_sink.committed_records(committed) if committed else 0
        # Every record of a committed chunk was read once and written or failed once.
        self.stats.add(chunks=len(committed), written=written, failed=failed, read=written + failed)
        progress = Progress(
            interval=self.tuning.progress_interval_seconds,
            total=self.source.total,  # counted on its own thread: the run does not wait
            done_before=first * self.tuning.chunk_size,
            stream=self.log,
        )
        writer = threading.Thread(target=self._write_all, args=(first, progress), name="writer")
        progress.start()
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
        size, batch_size = self.tuning.chunk_size, self.tuning.batch_size
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
            job.read += 1
            if isinstance(record, UnreadableRecord):
                job.parts.append(_done([_failed([record], record.reason)]))
                job.unreadable += 1
                continue
            batch.append(record)
            if len(batch) >= batch_size:
                job.parts.append(self._submit(pool, batch))
                batch = []
        self._flush(pool, job, batch)

    def _records(self, skip: int) -> Iterator[InputRecord]:
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
                self._log(f"input: {exc}; retrying (attempt {attempt + 1})")
                if self.stop.wait(self.backoff.delay(attempt, retry_after=exc.retry_after)):
                    raise Stopped() from exc
                attempt += 1

    def _flush(
        self, pool: ThreadPoolExecutor, job: _ChunkJob | None, batch: list[InputRecord]
    ) -> None:
        if job is None:
            return
        self.stats.add(read=job.read)
        if batch:
            job.parts.append(self._submit(pool, batch))
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
        if self.stop.is_set():
            raise Stopped()

    # -- model calls (worker threads) ------------------------------------------------

    def _predict(self, batch: list[InputRecord]) -> Result:
        try:
            outcomes = self._call(batch)
        except BatchRejected as exc:
            if len(batch) == 1:
                return [_failed(batch, f"rejected: {exc}")]
            # Isolate poison records: one request per record.
            return [part for record in batch for part in self._predict([record])]
        except TransientError as exc:
            return [_failed(batch, f"gave up after {self.tuning.max_attempts} attempts: {exc}")]
        if len(outcomes) != len(batch):
            raise RuntimeError(
                f"model client returned {len(outcomes)} outcomes for {len(batch)} records"
            )
        try:
            return [(batch, Outcomes.of(outcomes))]
        except TypeError as exc:
            raise RuntimeError(f"model client: {exc}") from None

    def _call(self, batch: list[InputRecord]) -> Sequence[Outcome]:
        assert self.backoff is not None

        def attempt() -> Sequence[Outcome]:
            if self.stop.is_set():
                raise Stopped()
            if self._limiter is not None:
                self._limiter.acquire(self.stop)
            return self.client.predict(batch)

        return call_with_retry(
            attempt,
            backoff=self.backoff,
            stop=self.stop,
            on_retry=lambda _: self.stats.add(retried=1),
        )

    # -- writing (writer thread) -----------------------------------------------------

    def _write_all(self, first: int, progress: Progress) -> None:
        try:
            while (job := self._chunks.get()) is not None:
                self._commit(job, progress, always_errors=job.index == first)
        except BaseException as exc:  # handed to the main thread, which re-raises it
            self._writer_error = exc
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
        outputs, errors = _split(part for future in job.parts for part in future.result())
        if job.unreadable:  # queued as they were read, ahead of the batch before them
            errors.sort(key=lambda error: error.position)
        self._check_budget(errors, len(outputs) + len(errors))
        if self.stop.is_set():
            raise Stopped()
        if errors or always_errors:
            self._write(self.error_sink, job.index, errors)
        self._write(self.sink, job.index, outputs)
        self.stats.add(written=len(outputs), failed=len(errors), chunks=1)
        progress.add(len(outputs) + len(errors))

    def _write(
        self, sink: Sink, index: int, records: list[OutputRecord] | list[ErrorRecord]
    ) -> None:
        assert self.backoff is not None
        call_with_retry(
            lambda: sink.write_chunk(index, records),
            backoff=self.backoff,
            stop=self.stop,
        )

    def _check_budget(self, new_errors: list[ErrorRecord], new_done: int) -> None:
        t = self.tuning
        with self.stats.lock:
            failed = self.stats.failed + len(new_errors)
            done = self.stats.written + self.stats.failed + new_done
        if failed <= t.max_failed_records:
            return
        if t.max_failed_ratio is not None and failed / max(done, 1) <= t.max_failed_ratio:
            return
        limit = f"maxFailedRecords={t.max_failed_records}"
        if t.max_failed_ratio is not None:
            limit += f" and maxFailedRatio={t.max_failed_ratio}"
        last = f"; last: {new_errors[-1].reason[:300]}" if new_errors else ""
        raise BudgetExceeded(
            f"error budget exceeded: {failed} failed records of {done} ({limit}){last}"
        )

    def _finish(self) -> None:
        if self._writer_error is not None:
            raise self._writer_error
        if self.stop.is_set():
            raise Stopped()
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
                errors.append(ErrorRecord(r.id, r.position, r.data, failure.reason))
    return outputs, errors
