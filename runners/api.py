"""The runner's plug points: storage backends and model protocol clients.

Each Protocol's docstring is its contract, and lists every hook the pipeline
calls: nothing is looked up by name at run time. Where a hook is optional the
Protocol gives its default, which a backend gets by deriving from it. Built-in
backends and protocols implement these Protocols and are found through the same
registry as third-party ones (registry.py), so a custom runner image adds one
with `pip install`, without forking.

Threading model: the pipeline calls `ModelClient.predict` from up to
`runner.concurrency` worker threads at once; everything else (sources, sinks)
is called from one thread at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contracts.config import RunnerTuning

Record = dict[str, Any]


# The per-record types below are immutable by convention, not frozen: a frozen dataclass's
# `__init__` (through `object.__setattr__`) costs twice as much, and the runner builds one of
# each per record (~0.2 us each on a small node, where that CPU is the model server's).


@dataclass(slots=True)
class InputRecord:
    """One input record with its stable id and its position in the input (0-based).

    Immutable by convention: nothing may assign to its fields."""

    position: int
    id: str
    data: Record
    # The record's JSON text as read, when it is valid JSON as it stands (runners/jsonio.py):
    # JSON outputs echo it instead of encoding `data` again. None: encode `data`.
    text: str | None = None


@dataclass(slots=True)
class Prediction:
    """The model's answer for one record: any JSON-serialisable value.

    Immutable by convention (see above): nothing may assign to `value`.
    """

    value: Any


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """Why one record could not be predicted (goes to the error output, counts against budget).

    `code` and `response` are optional, for outputs that write failures in a structured shape
    (OpenAI batch error lines, runners/batchlines.py): a short machine-readable code, and the
    server's answer when it gave one (`{"status_code", "request_id", "body"}`).
    """

    reason: str
    code: str | None = None
    response: Any = None


Outcome = Prediction | RecordFailure


@dataclass(slots=True)
class OutputRecord:
    """What a sink writes for one record. Immutable by convention."""

    id: str
    position: int
    input: Record
    prediction: Any
    usage: Any = None  # OpenAI protocols: the answer's token usage (prompt, completion, total)
    input_text: str | None = None  # `input` as JSON text (InputRecord.text), or None


@dataclass(slots=True)
class ErrorRecord:
    """What an error sink writes for one failed record. Immutable by convention.

    `code` and `response` as in RecordFailure (None unless a client gave them)."""

    id: str
    position: int
    input: Record
    reason: str
    code: str | None = None
    response: Any = None
    input_text: str | None = None  # `input` as JSON text (InputRecord.text), or None


@dataclass(frozen=True, slots=True)
class RunContext:
    """Identity of this execution; sinks key idempotent writes by it."""

    run_uid: str
    job_name: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    secrets_dir: str = "/var/run/longrun/secrets"
    # A scheduled run has one contract and many Jobs: each execution writes its own output.
    scheduled: bool = False
    # The input's id field: an identity, not a feature, so tensor clients leave it out of
    # the model input unless `model.inputFields` names it.
    id_field: str | None = None
    # The run's `runner` tuning and the SIGTERM event, for clients that send several
    # requests per batch and retry or pace each one themselves (openai chat).
    tuning: RunnerTuning | None = None
    stop: threading.Event | None = field(default=None, compare=False)
    # Networks no connection may reach (contract `network.deniedCidrs`): runners/netguard.py.
    denied_cidrs: tuple[str, ...] = ()
    # The data of the input's first readable record (None for an empty input), read on demand
    # by the runner, the same in every pod of the run: a client that builds a model input
    # from a record's key order takes that order from it (see runners/models/rows.py).
    first_record: Callable[[], Record | None] | None = field(default=None, compare=False)
    # The input's `format` (e.g. "openai-batch": each record is a whole OpenAI request).
    input_format: str | None = None
    # This pod's index among the run's pods (contract `partitioning`, runners/shards.py).
    shard_index: int = 0
    shard_count: int = 1
    shard_rule: str = "chunkRoundRobin"  # or "chunkRanges"

    def execution_subpath(self, base: str) -> str:
        """`base` for a one-shot run; `base/<job name>` for one execution of a scheduled run."""
        return f"{base.rstrip('/')}/{self.job_name}" if self.scheduled else base


class ConfigError(Exception):
    """Bad contract or configuration: exit code 2, do not retry. The message names the field."""


class TransientError(Exception):
    """A failure worth retrying (connection error, timeout, 429, 5xx).

    `overloaded` says the server asked for fewer requests (gRPC RESOURCE_EXHAUSTED, or
    HTTP 429 or 503 in a subclass that carries the response's `status`): `concurrency: auto`
    then lowers the requests in flight at once.
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, overloaded: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self._overloaded = overloaded

    @property
    def overloaded(self) -> bool:
        """Whether the server asked for fewer requests (see the class docstring)."""
        return self._overloaded or getattr(self, "status", None) in (429, 503)


class BatchRejected(Exception):
    """The server refused a whole batch for a non-transient reason (e.g. HTTP 400).

    The pipeline then bisects the batch (halves, quarters, ...) to isolate the bad ones;
    it does the same for a `runners.retry.ServerFault` (HTTP 500) once its attempts are spent.
    """


@runtime_checkable
class Source(Protocol):
    """Streams input records in a stable order.

    - `records(skip)` is a generator (written with `yield`) of every record with
      position >= `skip`, in position order, with ids that are the same on every call
      (key field, else the position). Memory must not grow with the input size. The
      pipeline closes the generator as soon as it stops reading, so a cursor or file it
      holds is released at once.
    - `total()` is the number of records, or None when it cannot be known without reading
      the input twice (for the progress ETA only). It is called once, on a thread of its own
      while `records()` runs, so it may take a pass over the input (the run does not wait),
      and must not share unsynchronised state with `records()`; if it raises, the ETA is
      left out.
    - Raise ConfigError for bad settings, TransientError for retryable I/O failures.
    """

    def records(self, skip: int) -> Generator[InputRecord, None, None]: ...

    def total(self) -> int | None: ...

    def close(self) -> None: ...


@runtime_checkable
class Sink(Protocol):
    """Writes results one chunk at a time, atomically and idempotently.

    Derive from it: `committed_records` and `committed_usage` have defaults.
    - `committed()` returns the indexes of chunks already fully written for this run
      (discovered from the store itself), so a restarted pod resumes after them.
    - `committed_records(chunks)` returns how many records this sink holds in the chunks
      listed in `chunks` (the output's committed chunks: an error chunk outside them is a
      killed attempt's leftover and must not count; a listed chunk may be absent).
      Called once at start, after `committed()` and only when it found chunks, so the
      error budget and the summary cover the whole run, not just this pod. Default: 0
      (a store that cannot count: a resumed run's counts restart from zero).
    - `committed_usage(chunks)` returns the token counts (`prompt_tokens`,
      `completion_tokens`, `total_tokens`) of the `usage` its records in `chunks` hold, so a
      resumed OpenAI run's token totals cover the whole run as its record counts do. Called
      once at start, like `committed_records`, for OpenAI protocols only. Default: {}.
    - `write_chunk(index, records)` makes the chunk visible all at once or not at all;
      writing the same index twice leaves exactly one copy.
    - `finish(summary)` marks the output complete (e.g. a manifest); called once at the end.
    - `location` is a human-readable address of the output (s3://..., table name, path).
    - `counts_committed` says that `committed()` and `committed_records` report all this
      sink holds; then the runner checks, before `finish`, that the committed chunks hold
      the whole input (runners/shards.py `held`). True for the file, s3 and SQL stores;
      False (the default) for the pod log, HTTP and Krateo receivers (whose counts are
      theirs to say) and plug-ins unless they set it.
    """

    location: str
    counts_committed: bool = False

    def committed(self) -> set[int]: ...

    def committed_records(self, chunks: set[int]) -> int:
        return 0

    def committed_usage(self, chunks: set[int]) -> Mapping[str, int]:
        return {}

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None: ...

    def finish(self, summary: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ModelClient(Protocol):
    """Calls one model endpoint; safe to call from several threads at once.

    `predict(records)` returns one Outcome per record, in order: a list of Prediction and
    RecordFailure. A malformed answer for one record is a RecordFailure; raise
    TransientError for retryable failures (the pipeline retries with backoff, honouring
    `retry_after`) and BatchRejected when the server refuses the batch as a whole.
    """

    def predict(self, records: Sequence[InputRecord]) -> Sequence[Outcome]: ...

    def close(self) -> None: ...


class StorageBackend(Protocol):
    """A storage kind (`http`, `s3`, ... or a plug-in's), implemented for the runner.

    Derive from it: `error_settings` has a default. Named by the kind's settings model
    (`contracts.plugins.StorageSettings.backend`) and instantiated with no arguments.
    `settings` is that model, validated, or the raw mapping for a kind without one.
    - `open_source(settings, ctx)` and `open_sink(settings, ctx, role=...)` open the input
      and an output; `role` is "output" or "errors".
    - `error_settings(settings)` turns the output's settings into those of the default error
      output ("next to the output": a sibling table, prefix, directory), used when the
      contract has no `errors` block. Default: the output's own settings, opened with
      `role="errors"`.
    """

    def open_source(self, settings: Any, ctx: RunContext) -> Source: ...

    def open_sink(self, settings: Any, ctx: RunContext, *, role: str) -> Sink: ...

    def error_settings(self, settings: Any) -> Any:
        return settings


class ModelClientFactory(Protocol):
    """A model protocol, registered under `longrun.protocols`: called with the endpoint
    (`contracts.ModelEndpoint`) and the run context, returns a ModelClient."""

    def __call__(self, endpoint: Any, ctx: RunContext) -> ModelClient: ...
