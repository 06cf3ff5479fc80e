"""Committing chunks: the writer thread's side of the pipeline (runners/pipeline.py).

Why a module of its own: the reader and the model workers only produce a chunk's
parts (futures of model results); everything that turns those parts into output and
error records and commits them lives here, behind one bounded queue: chunks in index
order on one thread, the error chunk before the output chunk (the output chunk is the
commit marker), and the JSON fallback for a sink that refuses values JSON cannot carry
as they are (formats.json_records). The rules themselves are in the pipeline's docstring.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from runners.api import (
    ErrorRecord,
    InputRecord,
    OutputRecord,
    RecordFailure,
    Sink,
    TransientError,
)
from runners.columns import ColumnAnswers, ColumnRecord
from runners.formats import json_records
from runners.modelcalls import Part, Result
from runners.outcomes import Outcomes
from runners.progress import Progress
from runners.redact import redact, redact_value
from runners.retry import Stopped
from runners.tokens import add_usage

_CHUNK_QUEUE = 1


@dataclass
class ChunkJob:
    """One chunk between reading and commit: its parts, in the order they were queued."""

    index: int
    parts: list[Future[Result]] = field(default_factory=list)
    unreadable: int = 0  # parts queued ahead of the batch that holds earlier records

    def fail(self, record: InputRecord, reason: str, *, code: str | None = None) -> None:
        """Fail `record` now (unreadable, or its id refused), ahead of the batch before it."""
        self.parts.append(_done([([record], Outcomes.all_failed(1, reason, code=code))]))
        self.unreadable += 1


class Committer:
    """The writer thread: commits the chunks put on `chunks`, in order, until None.

    `error` is why it stopped (for the main thread to re-raise), `done` that it did.
    """

    def __init__(
        self,
        *,
        sink: Sink,
        error_sink: Sink,
        count: Callable[..., None],
        stopped: Callable[[], bool],
        failed: threading.Event,
        retrying: Callable[[Callable[[], None]], None],
        check_budget: Callable[[list[ErrorRecord]], None],
    ) -> None:
        self.sink = sink
        self.error_sink = error_sink
        self._count = count  # Stats.add
        self._stopped = stopped  # read at each commit: the pipeline's `stop` may be replaced
        self._failed = failed  # set when the run has failed: the workers' retries stop
        self._retrying = retrying
        self._check_budget = check_budget
        self.chunks: queue.Queue[ChunkJob | None] = queue.Queue(maxsize=_CHUNK_QUEUE)
        self.error: BaseException | None = None
        self.done = threading.Event()

    def write_all(self, first: int, progress: Progress) -> None:
        try:
            while (job := self.chunks.get()) is not None:
                self._commit(job, progress, always_errors=job.index == first)
        except BaseException as exc:  # handed to the main thread, which re-raises it
            self.error = exc
            self._failed.set()
        finally:
            self.done.set()
            self._drain()

    def _drain(self) -> None:
        # Unblock the reader: it may be waiting to put a job nobody will take.
        while True:
            try:
                self.chunks.get_nowait()
            except queue.Empty:
                return

    def _commit(self, job: ChunkJob, progress: Progress, *, always_errors: bool) -> None:
        """Write the chunk (errors first), count it, then judge the budget: the chunk that
        crosses it is committed, so its failed records are in the error output."""
        outputs, errors, tokens = _split(part for future in job.parts for part in future.result())
        if job.unreadable:  # queued as they were read, ahead of the batch before them
            errors.sort(key=lambda error: error.position)
        if self._stopped():
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
        self._count(read=done, written=len(outputs), failed=len(errors), chunks=1, **tokens)
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


def committed_counts(
    sink: Sink,
    error_sink: Sink,
    chunks: set[int],
    *,
    retrying: Callable[[Callable[[], Any]], Any],
    tokens: bool = False,
) -> dict[str, int]:
    """What the committed `chunks` hold, as Stats.add counts: every record of a committed chunk
    was read once and written or failed once; token counts too when `tokens`."""
    if not chunks:
        return {}
    written: int = retrying(lambda: sink.committed_records(chunks))
    failed: int = retrying(lambda: error_sink.committed_records(chunks))
    counts = {"chunks": len(chunks), "written": written, "failed": failed}
    counts["read"] = written + failed
    if tokens:
        counts.update(retrying(lambda: sink.committed_usage(chunks)))
    return counts


def _done(result: Result) -> Future[Result]:
    future: Future[Result] = Future()
    future.set_result(result)
    return future


def _split(
    parts: Iterable[Part],
) -> tuple[Sequence[OutputRecord], list[ErrorRecord], dict[str, int]]:
    """The output and error records of a chunk's parts, each in input order, and the token
    counts of the outputs' usage (runners/tokens.py; empty when no part carries usage). Read
    from Parquet and all answered: the records and predictions as they are (ColumnAnswers)."""
    parts = list(parts)
    if parts and all(map(_answered_columns, parts)):
        answers = ColumnAnswers()
        for records, outcomes in parts:
            answers.records += records
            answers.values.append(outcomes.values)
        return answers, [], {}
    outputs: list[OutputRecord] = []
    errors: list[ErrorRecord] = []
    tokens: dict[str, int] = {}
    for records, outcomes in parts:
        failures, usage = outcomes.failures, outcomes.usage
        if not failures and usage is None:  # the common case: one object per record
            outputs += [
                OutputRecord(r.id, r.position, r.data, value, None, r.text)
                for r, value in zip(records, outcomes.values, strict=True)
            ]
            continue
        for index, (r, value) in enumerate(zip(records, outcomes.values, strict=True)):
            failure = failures.get(index)
            if failure is None:
                used = None if usage is None else usage[index]
                outputs.append(OutputRecord(r.id, r.position, r.data, value, used, r.text))
                if used is not None:
                    add_usage(tokens, used)
            else:
                errors.append(_error(r, failure))
    return outputs, errors, tokens


def _answered_columns(part: Part) -> bool:
    """Whether a part is ColumnRecords (read from Parquet), each answered without usage."""
    records, outcomes = part
    return (
        bool(records)
        and type(records[0]) is ColumnRecord
        and not outcomes.failures
        and outcomes.usage is None
    )


def _error(record: InputRecord, failure: RecordFailure) -> ErrorRecord:
    # A reason (or the server's answer) may quote a server that echoed a Secret (a refused
    # key): not kept.
    response = failure.response
    if response is not None:
        response = redact_value(response)
    reason = redact(failure.reason)
    return ErrorRecord(
        record.id, record.position, record.data, reason, failure.code, response, record.text
    )
