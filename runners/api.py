"""The runner's plug points: storage backends and model protocol clients.

Each Protocol's docstring is its contract. Built-in backends and protocols are
registered exactly like third-party ones (entry points, see registry.py), so a
custom runner image adds one with `pip install`, without forking.

Threading model: the pipeline calls `ModelClient.predict` from up to
`runner.concurrency` worker threads at once; everything else (sources, sinks)
is called from one thread at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload, runtime_checkable

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


@dataclass(slots=True)
class Prediction:
    """The model's answer for one record: any JSON-serialisable value.

    Immutable by convention (see above): nothing may assign to `value`.
    """

    value: Any


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """Why one record could not be predicted (goes to the error output, counts against budget)."""

    reason: str


Outcome = Prediction | RecordFailure


class Outcomes(Sequence[Outcome]):
    """One batch's outcomes held as plain values: a Prediction is made only when one is read.

    Record i's prediction is `values[i]` unless `failures` holds i (its value is then
    meaningless). Reads like a `list[Outcome]` (index, iterate, compare equal to a list of the
    same outcomes), but costs one list per batch instead of one object per record: a sixth
    of a tensor client's CPU at 256 records per batch (bench/runner_client_cpu.py). Built-in clients
    return it and the pipeline reads `values` and `failures` directly; a client may return a
    plain list of Outcomes instead (`Outcomes.of` turns one into the other).
    Immutable by convention, like the per-record types.
    """

    __slots__ = ("failures", "values")

    def __init__(self, values: list[Any], failures: Mapping[int, RecordFailure] | None = None):
        self.values = values
        self.failures: Mapping[int, RecordFailure] = failures or {}

    @classmethod
    def of(cls, outcomes: Iterable[Outcome]) -> Outcomes:
        """The Outcomes holding `outcomes`; raises TypeError for anything else in it."""
        if isinstance(outcomes, Outcomes):
            return outcomes
        values: list[Any] = []
        failures: dict[int, RecordFailure] = {}
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, Prediction):
                values.append(outcome.value)
            elif isinstance(outcome, RecordFailure):
                values.append(None)
                failures[index] = outcome
            else:
                raise TypeError(
                    f"outcome {index} is a {type(outcome).__name__}, "
                    "not a Prediction or a RecordFailure"
                )
        return cls(values, failures)

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Outcome: ...

    @overload
    def __getitem__(self, index: slice) -> list[Outcome]: ...

    def __getitem__(self, index: int | slice) -> Outcome | list[Outcome]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.values)))]
        value = self.values[index]  # IndexError as a list's
        failure = self.failures.get(index % len(self.values))
        return failure if failure is not None else Prediction(value)

    def __iter__(self) -> Iterator[Outcome]:
        failures = self.failures
        for index, value in enumerate(self.values):
            failure = failures.get(index)
            yield failure if failure is not None else Prediction(value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Outcomes, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, mutable like them

    def __repr__(self) -> str:
        return f"Outcomes({list(self)!r})"


@dataclass(slots=True)
class OutputRecord:
    """What a sink writes for one record. Immutable by convention."""

    id: str
    position: int
    input: Record
    prediction: Any


@dataclass(slots=True)
class ErrorRecord:
    """What an error sink writes for one failed record. Immutable by convention."""

    id: str
    position: int
    input: Record
    reason: str


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

    def execution_subpath(self, base: str) -> str:
        """`base` for a one-shot run; `base/<job name>` for one execution of a scheduled run."""
        return f"{base.rstrip('/')}/{self.job_name}" if self.scheduled else base


class ConfigError(Exception):
    """Bad contract or configuration: exit code 2, do not retry. The message names the field."""


class TransientError(Exception):
    """A failure worth retrying (connection error, timeout, 429, 5xx)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BatchRejected(Exception):
    """The server refused a whole batch for a non-transient reason (e.g. HTTP 400).

    The pipeline then retries the records one by one to isolate the bad ones.
    """


@runtime_checkable
class Source(Protocol):
    """Streams input records in a stable order.

    - `records(skip)` yields every record with position >= `skip`, in position order,
      with ids that are the same on every call (key field, else the position).
      Memory must not grow with the input size.
    - `total()` is the number of records, or None when it cannot be known without reading
      the input twice (for the progress ETA only). It is called once, on a thread of its own
      while `records()` runs, so it may take a pass over the input (the run does not wait),
      and must not share unsynchronised state with `records()`; if it raises, the ETA is
      left out.
    - Raise ConfigError for bad settings, TransientError for retryable I/O failures.
    """

    def records(self, skip: int) -> Iterator[InputRecord]: ...

    def total(self) -> int | None: ...

    def close(self) -> None: ...


@runtime_checkable
class Sink(Protocol):
    """Writes results one chunk at a time, atomically and idempotently.

    - `committed()` returns the indexes of chunks already fully written for this run
      (discovered from the store itself), so a restarted pod resumes after them.
    - `committed_records(chunks)` returns how many records this sink holds in the chunks
      listed in `chunks` (the output's committed chunks: an error chunk outside them is a
      killed attempt's leftover and must not count; a listed chunk may be absent).
      Called once at start, after `committed()`, so the error budget and the summary
      cover the whole run, not just this pod. Optional: a sink without it counts as 0.
    - `write_chunk(index, records)` makes the chunk visible all at once or not at all;
      writing the same index twice leaves exactly one copy.
    - `finish(summary)` marks the output complete (e.g. a manifest); called once at the end.
    - `location` is a human-readable address of the output (s3://..., table name, path).
    """

    location: str

    def committed(self) -> set[int]: ...

    def committed_records(self, chunks: set[int]) -> int: ...

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None: ...

    def finish(self, summary: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ModelClient(Protocol):
    """Calls one model endpoint; safe to call from several threads at once.

    `predict(records)` returns one Outcome per record, in order: a list of Prediction and
    RecordFailure, or an `Outcomes` (plain values, no object per record; what the built-in
    clients return). A malformed answer for one record is a RecordFailure; raise
    TransientError for retryable failures (the pipeline retries with backoff, honouring
    `retry_after`) and BatchRejected when the server refuses the batch as a whole.
    """

    def predict(self, records: Sequence[InputRecord]) -> Sequence[Outcome]: ...

    def close(self) -> None: ...


class StorageBackend(Protocol):
    """A storage kind (`http`, `s3`, ... or a custom one), registered under `longrun.storage`.

    Instantiated with no arguments. `settings` is the kind's validated contracts model for
    built-in kinds, or the raw mapping for custom kinds. `role` is "output" or "errors".
    """

    def open_source(self, settings: Any, ctx: RunContext) -> Source: ...

    def open_sink(self, settings: Any, ctx: RunContext, *, role: str) -> Sink: ...


class ModelClientFactory(Protocol):
    """A model protocol, registered under `longrun.protocols`: called with the endpoint
    (`contracts.ModelEndpoint`) and the run context, returns a ModelClient."""

    def __call__(self, endpoint: Any, ctx: RunContext) -> ModelClient: ...
