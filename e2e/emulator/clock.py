"""An injectable clock and a clock-driven timer thread.

CronJob schedules, Job deadlines, TTLs and scripted pod durations are all
measured on this clock, so a test advances it instead of sleeping for a real
minute. By default it runs with wall time plus an offset that `advance()` grows;
`frozen=True` stops it so only `advance()` moves time.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

log = logging.getLogger(__name__)


def rfc3339(when: datetime) -> str:
    """metav1.Time serialisation: second precision, UTC, 'Z'."""
    return _rfc3339_second(int(when.timestamp() // 1))


@functools.lru_cache(maxsize=256)
def _rfc3339_second(second: int) -> str:
    """Every write stamps "now": the text is formatted once per second, not per call."""
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Clock:
    """Wall clock plus an adjustable offset (or a frozen instant)."""

    def __init__(self, *, start: datetime | None = None, frozen: bool = False) -> None:
        self._lock = threading.Lock()
        self._frozen = frozen
        base = start or datetime.now(UTC)
        self._offset = (base - datetime.now(UTC)).total_seconds()
        self._instant = base
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> datetime:
        with self._lock:
            if self._frozen:
                return self._instant
            return datetime.now(UTC) + timedelta(seconds=self._offset)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake everything waiting on this clock."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        with self._lock:
            self._offset += seconds
            self._instant += timedelta(seconds=seconds)
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def advance_to(self, when: datetime) -> None:
        self.advance(max(0.0, (when - self.now()).total_seconds()))

    def on_advance(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)


class Timers:
    """Runs callbacks when the clock reaches a time; callbacks must be quick."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[datetime, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="emulator-timers", daemon=True)
        clock.on_advance(self._wake)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def call_at(self, when: datetime, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            self._cond.notify_all()

    def call_later(self, seconds: float, fn: Callable[[], None]) -> None:
        self.call_at(self._clock.now() + timedelta(seconds=seconds), fn)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            due: list[Callable[[], None]] = []
            with self._cond:
                if self._stopped:
                    return
                now = self._clock.now()
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
                if not due:
                    wait = (self._heap[0][0] - now).total_seconds() if self._heap else 1.0
                    self._cond.wait(timeout=min(max(wait, 0.001), 1.0))
                    continue
            for fn in due:
                try:
                    fn()
                except Exception:  # one bad callback must not stop the clock for everyone
                    log.exception("timer callback failed")
