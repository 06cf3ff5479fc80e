"""`concurrency: auto`: model requests in flight that follow the server's pace.

Why: the best number of requests in flight depends on what serves the model, and no fixed
default fits them all: llama.cpp serves `--parallel` slots and queues the rest, vLLM batches
whatever arrives, a deployment has several replicas, a tensor server on a small machine shares
its CPU with the runner. So the runner looks for the number itself, while it runs, from what it
sees of every request: how many records it carried, how long it took, and whether the server
said it was overloaded (429 or 503: TransientError.overloaded).

How (a hill climb on records/s, with latency and overload as brakes; the numbers are below):
- A gate lets at most `limit` requests in at once, 1 <= limit <= the maximum
  (`maxConcurrency`). The pipeline's worker threads (as many as the maximum) wait at the gate.
- Time is cut into windows. After each change of the limit, measuring waits until a request
  sent under the new limit has come back (requests sent before would blur the comparison);
  a window then closes when it holds `max(MIN_CALLS, limit)` requests and `MIN_SECONDS` have
  passed. Its rate is records/s by Little's law (requests in flight on average, times
  records per request second: see Window.rate); its latency, request seconds per record.
- Up: from the start (`initialConcurrency`; with a deploymentRef, the slots the deployment
  declares times its ready replicas), the limit doubles while each level's rate beats the level
  below it by `GAIN` (a window that shows more, but not `GAIN` more, gets a second one, and
  the two decide together). Down: when a doubling gains less, the server's knee is at or below
  the level below it, so from there the limit steps down by a quarter (at least one) while
  two windows' rate stays within `TRIM` of that level's, and settles on the lowest level that
  did: the same records/s with fewer requests waiting (a start past what the server needs
  comes down the same way). Missing a faster level costs records/s, a level too many costs
  only latency: so going down asks for more evidence than going up.
- Hold: every `REPROBE` windows the limit tries a quarter more (at least one) for
  `PROBE_WINDOWS` windows, and keeps it and climbs again when their rate beats the level's
  moving average by `GAIN`, else goes back (one noisy window does not move it up). When
  latency per record stays `LATENCY_RISE` times above what it was on reaching the level, for
  `RISE_WINDOWS` windows, and records/s did not grow, the server got slower or busier: the
  limit goes down as in Down, a quarter at a time while records/s hold, so that fewer requests
  wait in its queue; where the rate drops it goes back (a slower server with as many slots
  still needs them all). Rising latency alone never costs records/s.
- Overload: a 429 or 503 halves the limit at once. Where it happened becomes a ceiling: the
  limit no longer doubles, and probes (a quarter more at a time) start again only after
  `COOLDOWN` windows; a probe that reaches the ceiling without a refusal lifts it. Refusals of
  requests sent before the halving do not halve it again, nor do those sent after it until one
  of them has come back, unless `limit` of them were refused.

The decisions (`Climber`) are pure: windows in, a limit out. The gate (`AutoConcurrency`)
measures with an injected clock, so both are tested without threads or sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.config import RunnerTuning
from runners.retry import Stopped, Waiter

GAIN = 0.08  # records/s a level must add over the one below to count as faster
TRIM = 0.04  # records/s a level may lose against the one above and still be enough
LATENCY_RISE = 1.5  # latency per record, against the level's own on reaching it ...
RISE_WINDOWS = 2  # ... for this many windows in a row, lowers the limit by a quarter
BACKOFF = 0.5  # a 429/503 multiplies the limit by this
REPROBE = 8  # windows held between two probes above the level
PROBE_WINDOWS = 2  # a probe's windows, against the held level's moving average
SMOOTHING = 0.25  # weight of a new window in that average
COOLDOWN = 16  # windows after an overload without a probe back to where it happened
MIN_CALLS = 8  # and at least `limit`: every request in flight has turned over once
MIN_SECONDS = 1.0
_POLL = 0.2


@dataclass(frozen=True)
class Window:
    """What the requests that came back in one window did."""

    seconds: float
    calls: int
    records: int
    busy: float  # request seconds, summed
    overloaded: bool = False
    occupancy: float | None = None  # requests in flight, on average over the window

    @property
    def rate(self) -> float:
        """Records per second, by Little's law: requests in flight x records per request
        second. Counting the requests that came back within the window instead is off by up to
        a whole batch of them when a server answers several at once (vLLM, Triton's dynamic
        batcher) and the window ends within such a batch; every request's own latency is not."""
        if self.occupancy is not None and self.busy > 0:
            return self.occupancy * self.records / self.busy
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency(self) -> float:
        """Request seconds per record."""
        return self.busy / self.records if self.records else 0.0


@dataclass
class Climber:
    """The decisions: one window in, the next limit out (see the module docstring)."""

    limit: int
    maximum: int
    phase: str = "up"  # up, down, hold, probe
    base: tuple[int, float] | None = None  # (level, records/s) to beat, or to keep within
    held: tuple[float, float] | None = None  # (records/s, latency) on reaching the level
    mean_rate: float = 0.0  # records/s while held, a moving average
    probed: list[Window] = field(default_factory=list)  # the probe's windows so far
    windows: int = 0  # windows held since the last probe
    rises: int = 0  # windows in a row with latency risen
    cooldown: int = 0  # windows left without a probe to the ceiling
    ceiling: int = 0  # where the server last said it was overloaded (0: never)

    def decide(self, window: Window) -> int:
        """The limit after `window`."""
        self.cooldown = max(0, self.cooldown - 1)
        if window.overloaded:
            self._overloaded()
        elif window.records:
            {"up": self._up, "down": self._down, "hold": self._hold, "probe": self._probe}[
                self.phase
            ](window)
        return self.limit

    def _up(self, w: Window) -> None:
        if self.base is None:
            self._climb(w.rate)
            return
        rate = self._pooled(w)
        if rate >= self.base[1] * (1 + GAIN):
            self._climb(rate)
        elif rate < self.base[1] or len(self.probed) >= PROBE_WINDOWS:
            self._trim(*self.base)  # the doubling did not pay: the knee is at or below the base
        # else: more, but not clearly enough: the next window decides, on both

    def _climb(self, rate: float) -> None:
        """This level pays (`rate`): on to twice as many."""
        self.base, self.probed = (self.limit, rate), []
        higher = self._bounded(2 * self.limit)
        if higher > self.limit:
            self.limit = higher
        else:
            self._hold_at(self.limit)

    def _trim(self, level: int, rate: float) -> None:
        """From `level` (making `rate`), look for the fewest requests that make as much."""
        self.base, self.probed = (level, rate), []
        if level == 1:
            self._hold_at(1)
        else:
            self.phase, self.limit = "down", _lower(level)

    def _down(self, w: Window) -> None:
        assert self.base is not None
        rate = self._pooled(w)
        if rate < self.base[1] * (1 - GAIN):  # clearly fewer: back to the last level that held
            self._hold_at(self.base[0])
        elif len(self.probed) < PROBE_WINDOWS:
            return  # one window is not enough to give up requests on
        elif rate < self.base[1] * (1 - TRIM):
            self._hold_at(self.base[0])
        elif self.limit == 1:
            self._hold_at(1)
        else:  # as many records/s with fewer requests waiting: keep going down
            self.base, self.probed = (self.limit, self.base[1]), []
            self.limit = _lower(self.limit)

    def _pooled(self, w: Window) -> float:
        """Records/s of the windows at this level so far, `w` included (their rates weighed
        by their lengths)."""
        self.probed.append(w)
        seconds = sum(p.seconds for p in self.probed)
        if seconds <= 0:
            return w.rate
        return sum(p.rate * p.seconds for p in self.probed) / seconds

    def _hold(self, w: Window) -> None:
        if self.held is None:
            self.held, self.mean_rate = (w.rate, w.latency), w.rate
            return
        rate, latency = self.held
        self.mean_rate += (w.rate - self.mean_rate) * SMOOTHING
        slower = w.latency > latency * LATENCY_RISE and w.rate < rate * (1 + GAIN)
        self.rises = self.rises + 1 if slower else 0
        if self.rises >= RISE_WINDOWS and self.limit > 1:
            self._trim(self.limit, w.rate)  # fewer, if they make as many records/s as now
            return
        self.windows += 1
        above = self._bounded(self.limit + max(1, self.limit // 4), probe=True)
        if self.windows >= REPROBE and above > self.limit:
            self.phase, self.base, self.limit = "probe", (self.limit, self.mean_rate), above

    def _probe(self, w: Window) -> None:
        assert self.base is not None
        rate = self._pooled(w)
        if len(self.probed) < PROBE_WINDOWS:
            return
        if rate < self.base[1] * (1 + GAIN):
            self.phase, self.limit, self.windows = "hold", self.base[0], 0
            return
        if self.limit >= self.ceiling:
            self.ceiling = 0  # past where the server refused before, without a refusal
        self.phase = "up"
        self._climb(rate)

    def _overloaded(self) -> None:
        self.ceiling, self.cooldown = self.limit, COOLDOWN
        self._hold_at(max(1, int(self.limit * BACKOFF)))

    def _bounded(self, level: int, *, probe: bool = False) -> int:
        """`level` within the maximum, and the way up after an overload: no doubling while
        its ceiling stands, no probe while cooling down."""
        if self.ceiling and (not probe or self.cooldown):
            return self.limit
        return min(self.maximum, level)

    def _hold_at(self, level: int) -> None:
        self.phase, self.limit = "hold", level
        self.held, self.windows, self.rises, self.probed = None, 0, 0, []


def _lower(level: int) -> int:
    """The next level down: a quarter fewer, at least one fewer."""
    return max(1, level - max(1, level // 4))


@dataclass
class _Meter:
    """The window being measured (under AutoConcurrency's lock)."""

    changed_at: float
    since: float | None = None  # when measuring began: a request sent after the change is back
    calls: int = 0
    records: int = 0
    busy: float = 0.0
    in_flight: int = 0  # of the requests sent since the change
    area: float = 0.0  # those requests in flight x seconds, since measuring began
    refused: int = 0  # requests sent after the change and refused before measuring began


@dataclass
class AutoConcurrency:
    """The gate of `concurrency: auto`: `acquire` before a request, `release` after it."""

    start: int
    maximum: int
    clock: Callable[[], float] = time.monotonic
    # Called with (old limit, the climber after the change, the window that decided).
    on_change: Callable[[int, Climber, Window], None] | None = None
    climber: Climber = field(init=False)

    def __post_init__(self) -> None:
        self.climber = Climber(limit=max(1, min(self.start, self.maximum)), maximum=self.maximum)
        self._cond = threading.Condition()
        self._in_flight = 0
        self._marked = self.clock()
        self._peak = self.climber.limit
        self._meter = _Meter(changed_at=self.clock())

    @property
    def limit(self) -> int:
        """Requests allowed in flight now."""
        return self.climber.limit

    def describe(self) -> str:
        """Where it is and how high it went, for the runner's last log line."""
        return f"{self.climber.limit} requests in flight at the end (most: {self._peak})"

    def acquire(self, halt: Waiter) -> float:
        """Wait for a free slot (Stopped when `halt` is set meanwhile); returns the start time."""
        with self._cond:
            while self._in_flight >= self.climber.limit:
                if halt.is_set():
                    raise Stopped()
                self._cond.wait(_POLL)
            now = self.clock()
            self._occupy(now, +1, counted=True)
            return now

    def release(self, started: float, *, records: int, overloaded: bool = False) -> None:
        """A request sent at `started` came back with `records` done, or overloaded."""
        now = self.clock()
        with self._cond:
            self._occupy(now, -1, counted=started >= self._meter.changed_at)
            self._count(started, now, records=records, overloaded=overloaded)
            self._cond.notify_all()

    def _occupy(self, now: float, change: int, *, counted: bool) -> None:
        """Requests in flight change by `change` at `now`; the window's area (of the requests
        sent since the last change, the only ones it counts) grows first."""
        meter = self._meter
        if meter.since is not None:
            meter.area += meter.in_flight * max(0.0, now - self._marked)
        self._marked, self._in_flight = now, self._in_flight + change
        if counted:
            meter.in_flight += change

    def _count(self, started: float, now: float, *, records: int, overloaded: bool) -> None:
        meter = self._meter
        if overloaded:  # the server asks for less: at once, unless it may be the old limit's echo
            if started < meter.changed_at:
                return
            meter.refused += 1
            if meter.since is not None or meter.refused >= self.climber.limit:
                self._close(now, overloaded=True)
            return
        if started < meter.changed_at:
            return  # sent under the old limit
        if meter.since is None:
            meter.since = now  # the new limit's requests are flowing: measure from here
            return
        meter.calls += 1
        meter.records += records
        meter.busy += now - started
        if meter.calls >= max(MIN_CALLS, self.climber.limit) and (now - meter.since >= MIN_SECONDS):
            self._close(now, overloaded=False)

    def _close(self, now: float, *, overloaded: bool) -> None:
        meter = self._meter
        since = meter.since if meter.since is not None else meter.changed_at
        seconds = now - since
        occupancy = meter.area / seconds if seconds > 0 else None
        window = Window(seconds, meter.calls, meter.records, meter.busy, overloaded, occupancy)
        old = self.climber.limit
        new = self.climber.decide(window)
        if new != old:
            self._peak = max(self._peak, new)
            self._meter = _Meter(changed_at=now)  # what is in flight now was sent before it
            if self.on_change is not None:
                self.on_change(old, self.climber, window)
        else:
            self._meter = _Meter(meter.changed_at, since=now, in_flight=meter.in_flight)


def auto_concurrency(tuning: RunnerTuning, *, log: Callable[[str], None]) -> AutoConcurrency | None:
    """The gate for the run's tuning (None when the concurrency is a number). It logs where it
    settles and every overload, not each probe: a line per level held."""
    if not tuning.is_auto:
        return None
    settled = [tuning.concurrency_start]

    def report(old: int, climber: Climber, window: Window) -> None:
        if window.overloaded:
            log(f"concurrency auto: the server is overloaded (429/503): {old} -> {climber.limit}")
        elif climber.phase == "hold" and climber.limit != settled[0]:
            log(
                f"concurrency auto: {climber.limit} requests in flight "
                f"({window.rate:,.0f} records/s at {old})"
            )
        if climber.phase == "hold":
            settled[0] = climber.limit

    log(
        f"concurrency auto: starting at {tuning.concurrency_start} requests in flight, "
        f"at most {tuning.concurrency_cap}"
    )
    return AutoConcurrency(tuning.concurrency_start, tuning.concurrency_cap, on_change=report)
