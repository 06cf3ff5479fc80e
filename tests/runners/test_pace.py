"""`concurrency: auto` (runners/pace.py): where the gate settles against model servers of known
shape, and how it reacts to 429s and to a server that slows down or grows.

Real: the gate (`AutoConcurrency`) and its decisions (`Climber`), unchanged, and ModelCalls with
the HTTP client's 429 error. Faked: the server, the model client and the clock. A small
discrete-event simulation stands for the runner's worker threads and the server: requests are
sent whenever the gate has room (the pipeline always has batches waiting), and the server
shares itself among the requests it holds, so that `k` requests in flight make `rate(k)`
records/s, the server's shape. No threads, no sleeps: every run is
deterministic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from runners.api import InputRecord, Prediction
from runners.modelcalls import ModelCalls
from runners.models.http import HttpUnavailable
from runners.pace import COOLDOWN, AutoConcurrency, Climber, Window
from runners.retry import Backoff, Stopped

BATCH = 32


def slots(count: int, *, per_slot: float = 100.0) -> Callable[[int], float]:
    """A server with `count` slots: records/s grow with requests in flight up to `count`."""
    return lambda k: per_slot * min(k, count)


@dataclass
class _Request:
    started: float
    left: float  # records still to process; a refused request: the time it is answered at
    refused: bool = False


@dataclass
class Simulation:
    """The runner's workers and a server of shape `rate(in flight)`, on a fake clock.

    The server shares itself equally among the requests it holds (processor sharing): with `k`
    in flight each gets `rate(k) / k` records/s, so a change of `k` speeds up or slows down the
    requests already there, as on a real server. Beyond `overloaded_above` in flight it answers
    429 at once (5 ms) and does no work."""

    gate: AutoConcurrency
    rate: Callable[[int], float]
    overloaded_above: int | None = None
    now: float = 0.0
    limits: list[int] = field(default_factory=list)  # the limit after every request
    _held: list[_Request] = field(default_factory=list)

    def run(self, seconds: float) -> None:
        """Send and complete requests until the clock has moved `seconds` on."""
        end = self.now + seconds
        while self.now < end:
            self._fill()
            working = [r for r in self._held if not r.refused]
            each = self.rate(len(working)) / len(working) if working else 0.0
            finish = [r.left / each for r in working] if each else []
            finish += [r.left - self.now for r in self._held if r.refused]
            step = min(finish)
            self.now += step
            for r in working:
                r.left -= each * step
            done = [
                r for r in self._held if (r.left <= 1e-9 if not r.refused else r.left <= self.now)
            ]
            for r in done:
                self._held.remove(r)
                self.gate.release(
                    r.started, records=0 if r.refused else BATCH, overloaded=r.refused
                )
                self.limits.append(self.gate.limit)

    def _fill(self) -> None:
        while len(self._held) < self.gate.limit:
            started = self.gate.acquire(threading.Event())
            k = len(self._held) + 1
            if self.overloaded_above is not None and k > self.overloaded_above:
                self._held.append(_Request(started, started + 0.005, refused=True))
            else:
                self._held.append(_Request(started, float(BATCH)))

    def settled(self) -> set[int]:
        """The limits of the last quarter of the run (probes included)."""
        return set(self.limits[-len(self.limits) // 4 :])


def simulate(rate: Callable[[int], float], *, start: int, maximum: int = 64) -> Simulation:
    sim = Simulation(gate=None, rate=rate)  # type: ignore[arg-type]  # set just below
    sim.gate = AutoConcurrency(start, maximum, clock=lambda: sim.now)
    return sim


def test_climbs_to_the_slots_of_a_server_that_serves_eight_at_once() -> None:
    sim = simulate(slots(8), start=2)
    sim.run(120)
    assert sim.gate.climber.phase in ("hold", "probe")
    assert min(sim.settled()) == 8  # held at 8, probing 10 now and then
    assert max(sim.settled()) <= 10


def test_comes_down_from_a_start_past_what_the_server_needs() -> None:
    sim = simulate(slots(2), start=16)
    sim.run(120)
    assert min(sim.settled()) == 2
    assert max(sim.settled()) <= 3


def test_stays_at_one_for_a_server_that_serialises_requests() -> None:
    sim = simulate(slots(1), start=4)
    sim.run(120)
    assert min(sim.settled()) == 1
    assert max(sim.settled()) <= 2


def test_never_goes_past_the_maximum() -> None:
    sim = simulate(slots(1000), start=4, maximum=24)
    sim.run(60)
    assert max(sim.limits) == 24
    assert sim.gate.limit == 24


def test_halves_on_429_and_climbs_back_only_by_probes() -> None:
    sim = simulate(slots(64), start=8)
    sim.overloaded_above = 12  # a gateway that refuses more than 12 at once
    sim.run(120)
    first = sim.limits.index(16)  # it doubled to 16 and got 429s ...
    assert next(limit for limit in sim.limits[first:] if limit != 16) == 8  # ... halved ...
    after = sim.limits[sim.limits.index(8, first) :]
    assert max(after) <= 15  # ... and never doubled again: probes only
    assert sum(1 for limit in after if limit > 12) / len(after) < 0.02  # the edge, seldom
    assert sum(after) / len(after) >= 8


def test_comes_down_when_latency_rises_because_the_server_lost_slots() -> None:
    sim = simulate(slots(8), start=8)
    sim.run(30)
    assert sim.gate.climber.phase in ("hold", "probe")
    held = min(sim.settled())
    assert held == 8
    sim.rate = slots(4)  # a replica went away: half the slots, twice the latency at 8
    sim.run(120)
    assert max(sim.settled()) <= 5  # 4, probing 5 now and then
    assert min(sim.settled()) == 4  # not below: fewer would make fewer records/s


def test_keeps_its_requests_when_latency_rises_and_it_needs_them_all() -> None:
    sim = simulate(slots(8), start=8)
    sim.run(30)
    sim.rate = slots(8, per_slot=25.0)  # 4x slower, as many slots (another tenant, a hot node)
    sim.run(120)
    assert min(sim.settled()) == 8  # going down was tried and did not pay


def test_follows_a_deployment_that_grows() -> None:
    sim = simulate(slots(4), start=4)
    sim.run(60)
    assert min(sim.settled()) == 4
    sim.rate = slots(16)  # three more replicas became ready
    sim.run(240)
    assert min(sim.settled()) >= 15  # 16, or a level making records/s within GAIN of it


def test_requests_sent_before_a_change_are_not_measured() -> None:
    now, windows = [0.0], []
    gate = AutoConcurrency(2, 64, clock=lambda: now[0], on_change=lambda *c: windows.append(c[2]))
    halt = threading.Event()

    def request(seconds: float, records: int = BATCH) -> None:
        started = gate.acquire(halt)
        now[0] += seconds
        gate.release(started, records=records)

    straggler = gate.acquire(halt)  # sent under the first limit, back only after the change
    while gate.limit == 2:  # the first opens the window, the others close it: 2 -> 4
        request(0.1)
    assert gate.limit == 4
    gate.release(straggler, records=10_000)  # would make a huge rate, were it counted
    while gate.limit == 4:  # faster: 4 -> 8
        request(0.04)
    assert gate.limit == 8
    assert all(w.records % BATCH == 0 for w in windows)  # the straggler's 10,000 are in none


def test_acquire_gives_up_when_the_run_stops() -> None:
    gate = AutoConcurrency(1, 4)
    gate.acquire(threading.Event())
    halt = threading.Event()
    halt.set()
    with pytest.raises(Stopped):
        gate.acquire(halt)


def test_an_overload_while_holding_starts_the_cooldown() -> None:
    climber = Climber(limit=8, maximum=64, phase="hold")
    assert climber.decide(Window(1.0, 10, 0, 1.0, overloaded=True)) == 4
    assert (climber.ceiling, climber.cooldown, climber.phase) == (8, COOLDOWN, "hold")


def test_empty_windows_change_nothing() -> None:
    climber = Climber(limit=8, maximum=64)
    assert climber.decide(Window(1.0, 3, 0, 0.0)) == 8
    assert climber.phase == "up"


class BusyOnce:
    """A model client whose server answers 429 to its first request, then predicts."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, batch: list[InputRecord]) -> list[Prediction]:
        self.calls += 1
        if self.calls == 1:
            raise HttpUnavailable("POST /infer: HTTP 429", status=429, retry_after=None)
        return [Prediction(1) for _ in batch]

    def close(self) -> None:
        pass


def test_a_429_through_the_model_calls_reaches_the_gate() -> None:
    gate = AutoConcurrency(1, 8)
    client = BusyOnce()
    calls = ModelCalls(client, Backoff(0, 0), threading.Event(), pace=gate)  # type: ignore[arg-type]
    records = [InputRecord(id=str(i), position=i, data={"x": i}) for i in range(4)]
    result = calls.predict(records)
    assert [len(part[0]) for part in result] == [4]  # retried, then predicted
    assert (client.calls, gate.climber.ceiling, gate.climber.cooldown) == (2, 1, COOLDOWN)
