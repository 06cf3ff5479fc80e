"""Model calls: one batch in, one outcome per record out, whatever the model server does.

Why apart from the pipeline: what a failed request says about the model and about the records
is a policy of its own (issue 15 items 8, 9, 16), with a rule per kind of failure:

- A TransientError is retried with backoff (runners/retry.py). Until the model has answered
  once in this run, a batch gets FIRST_CONTACT_ATTEMPTS (4) attempts, so a model that is down
  from the start, or a wrong address, stops the run in seconds; once it has answered (in this
  pod, or an earlier pod committed chunks), `maxAttempts`, whose waits span about two minutes:
  long enough to ride out a restart.
- When the attempts are spent on unavailability (connection refused, timeouts, 429, 502-504),
  the records are not at fault: the run stops with ModelUnavailable (exit 1: the Job's next pod
  resumes after the committed chunks), and no record is failed for it.
- A refusal of the batch (BatchRejected: a 4xx) at once, and a server error (ServerFault: a 500)
  once the batch's attempts are spent, may be one record's fault: the batch is bisected (halves,
  then quarters, ...) until the records at fault are alone; they fail with the server's reason,
  the others are predicted. A part gets one attempt for a server error (the whole batch had its
  attempts) and the usual attempts for unavailability. One poison record in a batch of B costs
  2 x log2(B) more requests, where sending the batch one record per request cost B; a batch
  refused for its size alone (a Triton model's `max_batch_size`) is halved until it fits, and no
  record fails.
- With `concurrency: auto`, every request (each attempt, each part of a bisected batch) passes
  the gate of runners/pace.py, which counts its records and seconds, and an overload (429/503)
  that it answered, or that the client answered and retried itself (Outcomes.overloaded: the
  OpenAI clients retry each request); a retry's wait is spent outside the gate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from runners.api import (
    BatchRejected,
    ConfigError,
    InputRecord,
    ModelClient,
    Outcome,
    TransientError,
)
from runners.columns import ColumnRecord, TensorValues
from runners.outcomes import Outcomes
from runners.pace import AutoConcurrency
from runners.retry import (
    Backoff,
    Contact,
    RateLimiter,
    ServerFault,
    Stopped,
    Waiter,
    call_with_retry,
)

# What one model call gives the writer: the records and their outcomes, in one or more parts
# (more than one when a refused batch was bisected).
Part = tuple[list[InputRecord], Outcomes]
Result = list[Part]
T = TypeVar("T")


class ModelUnavailable(Exception):
    """The model did not answer within the attempts: the run stops (exit 1), no record fails."""


def _ignore() -> None:
    pass


def _untimed(call: Callable[[], T]) -> T:
    return call()


@dataclass
class ModelCalls:
    """Calls one model client for the pipeline's worker threads (thread-safe)."""

    client: ModelClient
    backoff: Backoff
    halt: Waiter  # set when the run stops (SIGTERM, or a failure elsewhere)
    limiter: RateLimiter | None = None
    contact: Contact = field(default_factory=Contact)
    on_retry: Callable[[], None] = _ignore
    # Wraps each request (runners/metrics.py RunnerMetrics.timed: latency, in flight).
    timed: Callable[[Callable[[], Sequence[Outcome]]], Sequence[Outcome]] = _untimed
    pace: AutoConcurrency | None = None  # concurrency: auto (runners/pace.py)

    def predict(self, batch: list[InputRecord]) -> Result:
        """The batch's records with their outcomes; raises ModelUnavailable or Stopped."""
        return self._predict(batch, part=False)

    def _predict(self, batch: list[InputRecord], *, part: bool) -> Result:
        tries: list[int] = []
        try:
            outcomes = self._call(batch, part=part, tries=tries)
        except BatchRejected as exc:
            return self._isolate(batch, f"rejected: {exc}")
        except ServerFault as exc:
            return self._isolate(batch, f"server error: {exc}")
        except TransientError as exc:
            raise self._unavailable(exc, attempts=len(tries)) from None
        if len(outcomes) != len(batch):
            raise RuntimeError(
                f"model client returned {len(outcomes)} outcomes for {len(batch)} records"
            )
        try:
            made = Outcomes.of(outcomes)
        except TypeError as exc:
            raise RuntimeError(f"model client: {exc}") from None
        if type(made.values) is TensorValues and type(batch[0]) is not ColumnRecord:
            made.values.values()  # made here, not by the writer: only a Parquet input's chunk
            # is written from the tensors (runners/commit.py)
        return [(batch, made)]

    def _isolate(self, batch: list[InputRecord], reason: str) -> Result:
        """`batch`, which the server failed: a single record fails for `reason`; a batch is
        bisected, each half sent on its own (a half that goes through is not split further).

        Both halves are always sent: a batch may be refused for its size (a Triton model's
        `max_batch_size`), and then both go through, where inferring "the left one went
        through, so the right one holds the fault" would split the right one to single records.
        """
        if len(batch) == 1:
            return [(batch, Outcomes.all_failed(1, reason))]
        half = len(batch) // 2
        return self._predict(batch[:half], part=True) + self._predict(batch[half:], part=True)

    def _call(self, batch: list[InputRecord], *, part: bool, tries: list[int]) -> Sequence[Outcome]:
        def attempt() -> Sequence[Outcome]:
            if self.halt.is_set():
                raise Stopped()
            if self.limiter is not None:
                self.limiter.acquire(self.halt)
            tries.append(1)
            return self._request(batch)

        return call_with_retry(
            attempt,
            backoff=self.backoff,
            stop=self.halt,
            on_retry=lambda _: self.on_retry(),
            attempts=lambda exc: self._attempts(exc, part=part),
        )

    def _request(self, batch: list[InputRecord]) -> Sequence[Outcome]:
        """One request, through the gate of `concurrency: auto` when there is one."""
        if self.pace is None:
            return self.timed(lambda: self.contact.call(lambda: self.client.predict(batch)))
        started = self.pace.acquire(self.halt)
        done, overloaded = 0, False
        try:
            outcomes = self.timed(lambda: self.contact.call(lambda: self.client.predict(batch)))
            done = len(batch)
            # 429s the client retried itself (the OpenAI ones): the server asked for less.
            overloaded = getattr(outcomes, "overloaded", 0) > 0
            return outcomes
        except TransientError as exc:
            overloaded = exc.overloaded
            raise
        except (BatchRejected, ConfigError):
            done = len(batch)  # the server answered: it did the work of reading them
            raise
        finally:
            self.pace.release(started, records=done, overloaded=overloaded)

    def _attempts(self, exc: TransientError, *, part: bool) -> int:
        if part and isinstance(exc, ServerFault):
            return 1  # the whole batch had its attempts: this asks which records are at fault
        return self.contact.attempts(self.backoff)

    def _unavailable(self, exc: TransientError, *, attempts: int) -> ModelUnavailable:
        if self.contact.answered:
            return ModelUnavailable(f"model unavailable: gave up after {attempts} attempts: {exc}")
        return ModelUnavailable(
            f"model unavailable: it never answered ({attempts} attempts): {exc}"
        )
