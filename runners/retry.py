"""Retries with exponential backoff and full jitter, and a request-rate limiter.

Why full jitter (AWS Architecture Blog, "Exponential Backoff and Jitter"): many
runner pods retrying a shared model server in lock-step would hammer it at the
same instants; a uniformly random delay in [0, min(cap, base * 2**attempt)]
spreads them out. A server's Retry-After wins over our own guess, capped by
`maxBackoffSeconds` so a bogus header cannot park a worker for hours.

Every wait goes through `stop.wait()`, so SIGTERM interrupts a sleeping retry.

`RequestPolicy` is the same machinery for a client that sends one request per record
within a batch (openai-chat, completions against llama.cpp): it retries and paces each
request, so that one 503 does not make the pipeline re-send the whole batch, records
already answered included, and a rate limit is not spent once per batch.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TypeVar

from contracts.config import RunnerTuning
from runners.api import TransientError

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
    stop: threading.Event,
    on_retry: Callable[[TransientError], None] | None = None,
) -> T:
    """`fn()`, retried on TransientError up to `backoff.max_attempts` attempts in all.

    The last TransientError propagates when attempts run out; Stopped is raised when
    `stop` is set while waiting.
    """
    attempt = 1
    while True:
        try:
            return fn()
        except TransientError as exc:
            if attempt >= backoff.max_attempts:
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

    def acquire(self, stop: threading.Event) -> None:
        """Block until a request may start; raise Stopped if `stop` is set meanwhile."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self._interval
        if start > now and stop.wait(start - now):
            raise Stopped()


@dataclass(frozen=True)
class RequestPolicy:
    """Retries with backoff and an optional rate limit, applied to one request at a time."""

    backoff: Backoff = field(default_factory=Backoff)
    limiter: RateLimiter | None = None
    stop: threading.Event = field(default_factory=threading.Event)

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
            return fn()

        return call_with_retry(attempt, backoff=self.backoff, stop=self.stop)
