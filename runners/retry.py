"""Retries with exponential backoff and full jitter, and a request-rate limiter.

Why full jitter (AWS Architecture Blog, "Exponential Backoff and Jitter"): many
runner pods retrying a shared model server in lock-step would hammer it at the
same instants; a uniformly random delay in [0, min(cap, base * 2**attempt)]
spreads them out. A server's Retry-After wins over our own guess, capped by
`maxBackoffSeconds` so a bogus header cannot park a worker for hours.

Every wait goes through `stop.wait()`, so SIGTERM interrupts a sleeping retry.

How many attempts a failure allows may depend on what failed and on what is known of the
server (`call_with_retry(attempts=...)`): a server that never answered gets
`FIRST_CONTACT_ATTEMPTS` (a model that is down, or a wrong address, fails in seconds rather
than minutes), one that answered before gets `maxAttempts` (it may be restarting).

`RequestPolicy` is the same machinery for a client that sends one request per record
within a batch (openai-chat, completions against llama.cpp): it retries and paces each
request, so that one 503 does not make the pipeline re-send the whole batch, records
already answered included, and a rate limit is not spent once per batch. The pipeline then sees
the batch go through, so the policy counts the overloads (429, 503) it retried, per thread,
for the client to hand on with the batch's outcomes (`take_overloads`): `concurrency: auto`
lowers its limit on them as on a 429 the pipeline retries itself.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Protocol, TypeVar

from contracts.config import RunnerTuning
from runners.api import BatchRejected, InputRecord, Source, TransientError

T = TypeVar("T")


def retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; else None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Stopped(Exception):
    """The run is stopping (SIGTERM): abandon the current work without committing it."""


class ServerFault(TransientError):
    """The server failed inside while handling the request (HTTP 500, gRPC INTERNAL/UNKNOWN).

    Retried like any TransientError; but unlike unavailability (connection errors, timeouts,
    429, 502-504) it may be caused by a record of the batch, so when the attempts are spent
    the pipeline bisects the batch to find it (see runners/pipeline.py).
    """


# Attempts for a request to a server that has not answered once yet: 4 attempts wait at most
# 0.5 + 1 + 2 s with the default backoff (`initialBackoffSeconds` 0.5).
FIRST_CONTACT_ATTEMPTS = 4


class Waiter(Protocol):
    """What a retry waits on: a threading.Event, or anything that is set when work must stop."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


# The contract's defaults, so that a Backoff() and a run without tuning retry alike.
_TUNING = RunnerTuning()


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter."""

    initial: float = _TUNING.initial_backoff_seconds
    maximum: float = _TUNING.max_backoff_seconds
    max_attempts: int = _TUNING.max_attempts
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def from_tuning(cls, tuning: RunnerTuning) -> Backoff:
        """The backoff the run's `runner` tuning asks for."""
        return cls(tuning.initial_backoff_seconds, tuning.max_backoff_seconds, tuning.max_attempts)

    def delay(self, attempt: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.maximum)
        ceiling = min(self.maximum, self.initial * (2 ** (attempt - 1)))
        return self.rng.uniform(0, ceiling)


def call_with_retry(
    fn: Callable[[], T],
    *,
    backoff: Backoff,
    stop: Waiter,
    on_retry: Callable[[TransientError], None] | None = None,
    attempts: Callable[[TransientError], int] | None = None,
) -> T:
    """`fn()`, retried on TransientError up to `backoff.max_attempts` attempts in all.

    `attempts(error)`, when given, says instead how many attempts in all the error just raised
    allows (asked after each failure, so it may change as the server is seen to answer). The
    last TransientError propagates when attempts run out; Stopped is raised when `stop` is set
    while waiting.
    """
    attempt = 1
    while True:
        try:
            return fn()
        except TransientError as exc:
            allowed = backoff.max_attempts if attempts is None else attempts(exc)
            if attempt >= allowed:
                raise
            if on_retry is not None:
                on_retry(exc)
            if stop.wait(backoff.delay(attempt, retry_after=exc.retry_after)):
                raise Stopped() from exc
            attempt += 1


class RateLimiter:
    """At most `rate` acquisitions per second across threads (a token bucket of size 1)."""

    def __init__(self, rate: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = 1.0 / rate
        self._clock = clock
        self._next = clock()
        self._lock = threading.Lock()

    def acquire(self, stop: Waiter) -> None:
        """Block until a request may start; raise Stopped if `stop` is set meanwhile."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self._interval
        if start > now and stop.wait(start - now):
            raise Stopped()


class Contact:
    """Whether a server has answered once (thread-safe), and the attempts a failure allows.

    Anything from the server itself counts as an answer: a result, a refusal (4xx) or an
    internal error (500): the address is right and the server is up. Unavailability (a
    connection refused, a timeout, 429, 502-504) does not.
    """

    def __init__(self, *, answered: bool = False) -> None:
        self._answered = threading.Event()
        if answered:
            self._answered.set()

    @property
    def answered(self) -> bool:
        """Whether the server has answered once."""
        return self._answered.is_set()

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` (one request), noting whether the server answered it."""
        try:
            result = fn()
        except (BatchRejected, ServerFault):
            self._answered.set()
            raise
        self._answered.set()
        return result

    def attempts(self, backoff: Backoff) -> int:
        """Attempts in all for a request: `FIRST_CONTACT_ATTEMPTS` until the first answer."""
        if self.answered:
            return backoff.max_attempts
        return min(backoff.max_attempts, FIRST_CONTACT_ATTEMPTS)


@dataclass(frozen=True)
class RequestPolicy:
    """Retries with backoff and an optional rate limit, applied to one request at a time.

    Until the server has answered once, a request gets `FIRST_CONTACT_ATTEMPTS` at most.
    Shared by a client's threads; the overloads it retried are counted per thread (a batch's
    requests are sent by one thread).
    """

    backoff: Backoff = field(default_factory=Backoff)
    limiter: RateLimiter | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    contact: Contact = field(default_factory=Contact)
    _seen: threading.local = field(default_factory=threading.local, repr=False, compare=False)

    @classmethod
    def from_tuning(
        cls, tuning: RunnerTuning, *, stop: threading.Event | None = None
    ) -> RequestPolicy:
        """The policy the run's `runner` tuning asks for (attempts, backoff, requests/s)."""
        rate = tuning.requests_per_second
        limiter = RateLimiter(rate) if rate else None
        return cls(Backoff.from_tuning(tuning), limiter, stop or threading.Event())

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()`, each attempt waiting for the rate limiter, retried as by call_with_retry."""

        def attempt() -> T:
            if self.limiter is not None:
                self.limiter.acquire(self.stop)
            return self.contact.call(fn)

        return call_with_retry(
            attempt,
            backoff=self.backoff,
            stop=self.stop,
            on_retry=self._retrying,
            attempts=lambda _: self.contact.attempts(self.backoff),
        )

    def _retrying(self, exc: TransientError) -> None:
        if exc.overloaded:
            self._seen.overloads = getattr(self._seen, "overloads", 0) + 1

    def take_overloads(self) -> int:
        """The 429/503 answers this thread's requests got and were retried for since the last
        call (then 0 again)."""
        count: int = getattr(self._seen, "overloads", 0)
        self._seen.overloads = 0
        return count


_HALT_POLL = 0.2  # seconds: how soon `Halt.wait` sees SIGTERM


class Halt:
    """What in-flight work waits on: set on SIGTERM (`stop`) or when the run has failed
    (the pipeline's model calls, runners/modelcalls.py)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.failed = threading.Event()

    def is_set(self) -> bool:
        return self.stop.is_set() or self.failed.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Like Event.wait, for either event (SIGTERM is seen within `_HALT_POLL` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = _HALT_POLL if deadline is None else min(_HALT_POLL, deadline - time.monotonic())
            if left <= 0:
                return False
            self.failed.wait(left)
        return True


def source_records(
    source: Source,
    skip: int,
    backoff: Backoff,
    stop: threading.Event,
    retried: Callable[[], None],
    log: Callable[[str], None],
) -> Generator[InputRecord, None, None]:
    """`source`'s records from `skip`, reopening after a TransientError where it stopped.

    Attempts count the failures since the last record read; `retried()` counts each retry,
    and `log` says why. Nothing else is done per record here: SIGTERM is seen by the reader at the
    next batch or chunk.
    """
    attempt = 1
    while True:
        record: InputRecord | None = None
        try:
            records = source.records(skip)
            try:
                for record in records:
                    yield record
            finally:
                records.close()  # a generator (Source contract): its cursor or file goes now
            return
        except TransientError as exc:
            if record is not None:  # it got further: resume after it, attempts anew
                skip, attempt = record.position + 1, 1
            if attempt >= backoff.max_attempts:
                raise
            retried()
            log(f"input: {exc}; retrying (attempt {attempt + 1})")
            if stop.wait(backoff.delay(attempt, retry_after=exc.retry_after)):
                raise Stopped() from exc
            attempt += 1
