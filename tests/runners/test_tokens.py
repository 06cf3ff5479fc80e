"""Token usage and the tokens-per-minute cap (runners/tokens.py).

Real: TokenLimiter, usage reading and sharing. Faked: time, in a discrete-event simulation
of requests in flight (a clock the test moves; each request takes its own time and reports
its own usage), so that every 60-second window can be checked without waiting a minute.
"""

from __future__ import annotations

import math
import random
import threading

import pytest

from runners.retry import Stopped
from runners.tokens import (
    WINDOW_SECONDS,
    Reservation,
    TokenLimiter,
    add_usage,
    request_bound,
    split_usage,
    sum_usage,
    token_counts,
)

# One request in the simulation: (bound it reserves or None, tokens it uses, seconds it takes).
Request = tuple[int | None, int, float]


def simulate(limit: int, requests: list[Request], *, concurrency: int) -> list[tuple[float, int]]:
    """(start time, tokens) of each request, sent `concurrency` at a time under the cap."""
    now = 0.0
    limiter = TokenLimiter(limit, clock=lambda: now)
    pending = list(requests)
    flying: list[tuple[float, Reservation, int]] = []
    started: list[tuple[float, int]] = []
    while pending or flying:
        wait = float("inf")
        while pending and len(flying) < concurrency:
            bound, tokens, seconds = pending[0]
            got = limiter.try_acquire(bound)
            if not isinstance(got, Reservation):
                wait = got
                break
            pending.pop(0)
            flying.append((now + seconds, got, tokens))
            started.append((now, tokens))
        ends = [end for end, _, _ in flying]
        # At least one float step: a wait shorter than that would leave the clock where it is.
        now = min([*ends, max(now + wait, math.nextafter(now, math.inf))])
        for done in [f for f in flying if f[0] <= now]:
            flying.remove(done)
            limiter.settle(done[1], done[2])
    return started


def worst_window(started: list[tuple[float, int]]) -> int:
    """The most tokens started within any 60-second window."""
    return max(
        sum(tokens for at, tokens in started if begin <= at < begin + WINDOW_SECONDS)
        for begin, _ in started
    )


def bounded_requests(rng: random.Random, count: int) -> list[Request]:
    requests: list[Request] = []
    for _ in range(count):
        bound = rng.randint(50, 3000)
        requests.append((bound, rng.randint(1, bound), rng.uniform(0.5, 20)))
    return requests


@pytest.mark.parametrize("seed", range(6))
def test_bounded_requests_never_exceed_the_cap_in_any_minute(seed: int) -> None:
    rng = random.Random(seed)
    started = simulate(20_000, bounded_requests(rng, 400), concurrency=rng.choice([1, 4, 16]))
    assert len(started) == 400
    assert worst_window(started) <= 20_000


@pytest.mark.parametrize("seed", range(6))
def test_requests_without_a_bound_exceed_the_cap_by_one_request_at_most(seed: int) -> None:
    rng = random.Random(seed)
    requests = bounded_requests(rng, 200)
    for index in rng.sample(range(200), 40):  # no max_tokens: any size, even over the cap
        requests[index] = (None, rng.randint(100, 30_000), rng.uniform(0.5, 20))
    started = simulate(20_000, requests, concurrency=8)
    assert len(started) == 200
    biggest = max(tokens for _, tokens in started)
    assert worst_window(started) <= 20_000 + biggest


def test_a_request_bigger_than_the_cap_runs_alone_and_the_run_goes_on() -> None:
    requests: list[Request] = [(500, 500, 1.0), (50_000, 40_000, 5.0), (500, 500, 1.0)]
    started = simulate(10_000, requests, concurrency=4)
    assert [tokens for _, tokens in started] == [500, 40_000, 500]
    assert started[1][0] >= WINDOW_SECONDS  # it waited for the first one's minute to pass
    assert started[2][0] >= started[1][0] + WINDOW_SECONDS


def test_requests_within_the_cap_do_not_wait() -> None:
    started = simulate(10_000, [(1000, 900, 2.0)] * 9, concurrency=9)
    assert {at for at, _ in started} == {0.0}


def test_a_settled_answer_frees_what_its_bound_reserved_beyond_its_usage() -> None:
    # Bounds of 6000 fit one at a time under 10,000; each answer of 100 lets the next one in
    # as it comes, where keeping the bounds would hold the second for a minute.
    started = simulate(10_000, [(6000, 100, 1.0)] * 5, concurrency=5)
    assert [at for at, _ in started] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_acquire_stops_waiting_on_stop() -> None:
    limiter = TokenLimiter(100)
    limiter.try_acquire(100)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        limiter.acquire(10, stop)


def test_a_request_bound_is_its_body_size_plus_its_completion_cap() -> None:
    assert request_bound({"max_tokens": 50}, 200) == 250
    assert request_bound({"max_completion_tokens": 50, "n": 3}, 200) == 350
    assert request_bound({"max_output_tokens": 7}, 10) == 17  # /v1/responses
    assert request_bound({"prompt": ["a", "b", "c"], "max_tokens": 5}, 40) == 55  # a list
    assert request_bound({"prompt": [1, 2, 3], "max_tokens": 5}, 40) == 45  # one token list
    assert request_bound({"messages": []}, 200) is None  # no cap: no bound
    assert request_bound({"input": "x"}, 30, completes=False) == 30  # embeddings


def test_usage_counts_read_chat_and_responses_shapes() -> None:
    assert token_counts({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}) == (
        3,
        2,
        5,
    )
    assert token_counts({"input_tokens": 3, "output_tokens": 4}) == (3, 4, 7)
    assert token_counts({"prompt_tokens": 6, "total_tokens": 6}) == (6, 0, 6)  # embeddings
    tokens: dict[str, int] = {}
    add_usage(tokens, {"prompt_tokens": 1, "completion_tokens": 1})
    add_usage(tokens, None)
    assert tokens == {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


def test_one_usage_shared_by_several_records_sums_to_the_whole() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17, "x": {"y": 1}}
    shares = split_usage(usage, 3)
    assert sum_usage(shares) == {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}
    assert [share["prompt_tokens"] for share in shares] == [4, 3, 3]
    assert split_usage(None, 2) == [None, None] and split_usage(usage, 1) == [usage]
