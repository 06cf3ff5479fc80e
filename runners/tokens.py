"""Token usage: read from OpenAI answers, summed for the run, and capped per minute.

Counting: every OpenAI answer's `usage` goes with its record in the output (as the server
wrote it), and the writer adds it up per committed chunk (`add_usage`), so the summary's and
the metrics' totals are the sum of `usage` over the output. `/v1/responses` says
input/output tokens where the others say prompt/completion: both count the same. An answer
for several records at once (a completions or embeddings list request) has one usage for
all: `split_usage` shares it out, the remainder to the first records, so sums stay exact
while a record's own share is an even split, not a measurement.

Capping (`runner.tokensPerMinute`, `TokenLimiter`): providers count a request's tokens when
it starts, from an estimate; the runner cannot know a request's tokens before its answer, so
each request reserves an upper bound before it is sent (`request_bound`): the size of its
JSON body in bytes (no tokenizer makes more text tokens than bytes) plus its completion cap
(`max_tokens`, `max_completion_tokens` or `max_output_tokens`, times `n`, times the prompts
of a completions list). When the answer
comes, the reservation is replaced by the answer's `usage.total_tokens`. A request starts
only when the reservations and charges of the requests started in the last 60 seconds plus
its own bound fit under the cap, or when nothing else started within the window (a request
bigger than the cap runs alone). A request with no completion cap has no bound: it reserves
what is left of the window, and only one such request is in flight at a time (a bounded one
may start beside it when an answer frees room). Over any 60-second window the tokens of the
requests started in it stay under the cap, but for that lone request's overshoot: never more
than one request's tokens over. A request the server refused (4xx, 429, 5xx) is charged
nothing; one without an answer (a timeout), or an answer without usage, keeps its
reservation (for a request without a cap: the rest of the window). Prompts that are not
text (images) may hold more tokens than bytes: their bound is then no bound.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runners.retry import Stopped, Waiter

COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
WINDOW_SECONDS = 60.0
_POLL = 0.2
# Body keys that cap a request's completion tokens, per endpoint family.
_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_of(answer: Any) -> dict[str, Any] | None:
    """The `usage` object of an answer, as the server wrote it; None without one."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    return usage if isinstance(usage, dict) else None


def token_counts(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """(prompt, completion, total) tokens of a usage object."""
    prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    completion = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    total = _count(usage.get("total_tokens")) or prompt + completion
    return prompt, completion, total


def add_usage(tokens: dict[str, int], usage: Any) -> None:
    """Add a usage object's counts into `tokens` (keys: COUNTS)."""
    if not isinstance(usage, Mapping):
        return
    for key, value in zip(COUNTS, token_counts(usage), strict=True):
        tokens[key] = tokens.get(key, 0) + value


def sum_usage(usages: Any) -> dict[str, int]:
    """The counts of several usage objects together (keys: COUNTS)."""
    tokens: dict[str, int] = {}
    for usage in usages:
        add_usage(tokens, usage)
    return tokens


def split_usage(usage: dict[str, Any] | None, count: int) -> list[Any]:
    """One request's usage shared by its `count` records (see module doc)."""
    if usage is None or count <= 1:
        return [usage] * count
    counts = [(key, _count(value)) for key, value in usage.items() if _count(value)]
    shares: list[Any] = []
    for index in range(count):
        shares.append({key: value // count + (index < value % count) for key, value in counts})
    return shares


def request_bound(body: Mapping[str, Any], size: int, *, completes: bool = True) -> int | None:
    """An upper bound of a request's tokens: `size` (its JSON body in bytes) plus its
    completion cap; None when it completes text and has no cap (embeddings complete none)."""
    if not completes:
        return size
    cap = next((body[key] for key in _CAPS if key in body), None)
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
        return None
    choices = body.get("n", 1)
    choices = choices if isinstance(choices, int) and choices > 0 else 1
    return size + cap * choices * _prompts(body.get("prompt"))


def _prompts(prompt: Any) -> int:
    """How many prompts a completions request holds: a list of texts (or of token lists) is
    one prompt each; a text, or one list of token ids, is one."""
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        return len(prompt)
    return 1


@dataclass(eq=False)
class Reservation:
    """One request's place in the window: until when, and its tokens (bound, then charge)."""

    expires: float  # when it leaves the window: its start + WINDOW_SECONDS
    tokens: int
    bounded: bool
    live: bool = True  # False once out of the window
    settled: bool = False


class TokenLimiter:
    """At most `per_minute` tokens started in any 60-second window, across threads."""

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = per_minute
        self._clock = clock
        self._window: deque[Reservation] = deque()
        self._used = 0  # the tokens of the window's reservations, kept as they change
        self._unbounded = 0  # requests without a bound in flight: one at most
        self._cond = threading.Condition()

    @property
    def used(self) -> int:
        """The tokens the window holds now (reservations and charges)."""
        with self._cond:
            return self._used

    def try_acquire(self, bound: int | None) -> Reservation | float:
        """A reservation for a request with at most `bound` tokens (None: unknown), or the
        seconds to wait before asking again (a settled request may free room sooner)."""
        with self._cond:
            now = self._clock()
            window = self._window
            while window and window[0].expires <= now:
                gone = window.popleft()
                gone.live = False
                self._used -= gone.tokens
            need = bound if bound is not None else self.limit - self._used
            fits = need > 0 and self._used + need <= self.limit
            if not window or (fits and (bound is not None or not self._unbounded)):
                entry = Reservation(now + WINDOW_SECONDS, max(need, 0), bound is not None)
                window.append(entry)
                self._used += entry.tokens
                self._unbounded += bound is None
                return entry
            return window[0].expires - now

    def acquire(self, bound: int | None, stop: Waiter) -> Reservation:
        """Block until a request may start (see try_acquire); Stopped when `stop` is set."""
        while True:
            got = self.try_acquire(bound)
            if isinstance(got, Reservation):
                return got
            with self._cond:
                self._cond.wait(min(got, _POLL))
            if stop.is_set():
                raise Stopped()

    def settle(self, entry: Reservation, tokens: int | None) -> None:
        """The request is over: charge it `tokens` (its answer's total) in place of its
        reservation; None (no answer, or one without usage) keeps the reservation."""
        with self._cond:
            if entry.settled:
                return
            entry.settled = True
            self._unbounded -= not entry.bounded
            if tokens is not None:
                if entry.live:  # an entry out of the window counts no more
                    self._used += tokens - entry.tokens
                entry.tokens = tokens
            self._cond.notify_all()
