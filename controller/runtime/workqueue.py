"""A small de-duplicating, rate-limited work queue (client-go's workqueue, minus the rest).

Guarantees the reconciler relies on:
- a key is queued at most once however many events arrive (de-duplication);
- a key is processed by at most one worker at a time; a key added while it is
  being processed is queued again when that worker calls `done` (exclusivity);
- failures are retried after an exponential per-key delay, reset by `forget`;
- `add_after` schedules a key for later without blocking a worker;
- keys added as `urgent` are handed out before the others, in the order they came
  (controller-runtime's priority queue does the same): a run nobody has reconciled
  yet gets its Job before status updates of runs already going. Under sustained
  overload the other keys wait; the resync re-adds anything that was missed;
- keys added as `batched` are queued `batch_period` seconds later, and every other
  batched add of the key until then joins that one (the Kubernetes Job controller
  batches its pods' events the same way, `syncJobBatchPeriod`): a burst of a child's
  updates (a pod scheduled, started, finished; a Job finishing) costs one pass, which
  reads them all, instead of one pass per update. A plain add of the key meanwhile
  queues it at once, and the batch is then already served.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from controller.runtime.metrics import Metrics


class WorkQueue:
    """Keys to reconcile, handed to workers one at a time."""

    def __init__(
        self,
        *,
        metrics: Metrics | None = None,
        base_delay: float = 0.05,
        max_delay: float = 300.0,
        batch_period: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cond = threading.Condition()
        # Two FIFOs; `_queued` maps each queued key to its priority. A key raised from
        # normal to urgent stays behind in `_queue` as a stale entry, skipped when taken.
        self._urgent: deque[str] = deque()
        self._queue: deque[str] = deque()
        self._queued: dict[str, bool] = {}
        self._processing: set[str] = set()
        self._dirty: dict[str, bool] = {}
        self._failures: dict[str, int] = {}
        # (when, seq, key, batched); a batched entry counts while `_batched` has its time.
        self._delayed: list[tuple[float, int, str, bool]] = []
        self._batched: dict[str, float] = {}
        self._batch_period = batch_period
        self._seq = itertools.count()
        self._shutdown = False
        self._metrics = metrics
        self._base = base_delay
        self._max = max_delay
        self._clock = monotonic

    def add(self, key: str, *, urgent: bool = False, batched: bool = False) -> None:
        """Queue `key` now (no-op when already queued, except to make it urgent); `batched`:
        after the batch period, with the other batched adds of it until then."""
        with self._cond:
            if batched and self._batch_period > 0:
                self._add_batched_locked(key)
                return
            self._batched.pop(key, None)  # served by this add
            self._add_locked(key, urgent=urgent)

    def _add_batched_locked(self, key: str) -> None:
        if self._shutdown or key in self._batched or key in self._queued:
            return  # a pass is coming that reads what this add is about
        due = self._clock() + self._batch_period
        self._batched[key] = due
        self._schedule_locked(due, key, batched=True)

    def _schedule_locked(self, due: float, key: str, *, batched: bool) -> None:
        # Idle workers wait until the earliest entry is due: one of them must look again
        # when a new entry comes first (one, not all: the others have nothing new to do).
        seq = next(self._seq)
        heapq.heappush(self._delayed, (due, seq, key, batched))
        if self._delayed[0][1] == seq:
            self._cond.notify()

    def _add_locked(self, key: str, *, urgent: bool = False) -> None:
        if self._shutdown:
            return
        if self._metrics is not None:
            self._metrics.workqueue_adds.inc()
        if key in self._processing:
            self._dirty[key] = urgent or self._dirty.get(key, False)
            return
        queued = self._queued.get(key)
        if queued is None or (urgent and not queued):
            self._queued[key] = urgent
            (self._urgent if urgent else self._queue).append(key)
            self._set_depth()
            self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        """Queue `key` after `delay` seconds."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            self._schedule_locked(self._clock() + delay, key, batched=False)

    def add_rate_limited(self, key: str) -> None:
        """Queue `key` after its exponential backoff delay (a retry)."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        if self._metrics is not None:
            self._metrics.workqueue_retries.inc()
        self.add_after(key, min(self._base * (2**failures), self._max))

    def forget(self, key: str) -> None:
        """Reset the backoff of `key` (after a success)."""
        with self._cond:
            self._failures.pop(key, None)

    def retries(self, key: str) -> int:
        """How many times `key` failed in a row."""
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> str | None:
        """The next key to process (None on shutdown or timeout); call `done` after."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_due()
                if self._shutdown:
                    return None
                if self._queued:
                    return self._take()
                if deadline is not None and self._clock() >= deadline:
                    return None
                self._cond.wait(timeout=self._wait_time(deadline))

    def _take(self) -> str:
        while True:
            urgent = bool(self._urgent)
            key = (self._urgent if urgent else self._queue).popleft()
            if self._queued.get(key) == urgent:  # else a stale entry of a raised key
                break
        del self._queued[key]
        self._processing.add(key)
        self._set_depth()
        if self._delayed:  # this worker may have been the one waiting for the next due entry
            self._cond.notify()
        return key

    def _wait_time(self, deadline: float | None) -> float | None:
        now = self._clock()
        waits = [t - now for t in (deadline,) if t is not None]
        if self._delayed:
            waits.append(self._delayed[0][0] - now)
        return max(min(waits), 0.0) if waits else None

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key, batched = heapq.heappop(self._delayed)
            if batched and self._batched.get(key) != due:
                continue  # served meanwhile by a plain add
            self._batched.pop(key, None)  # served by this one
            self._add_locked(key)

    def done(self, key: str) -> None:
        """Mark `key` processed; re-queue it if it was added meanwhile."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._add_locked(key, urgent=self._dirty.pop(key))

    def __len__(self) -> int:
        with self._cond:
            return len(self._queued)

    def shutdown(self) -> None:
        """Wake every waiting worker; `get` returns None from now on."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def _set_depth(self) -> None:
        if self._metrics is not None:
            self._metrics.workqueue_depth.set(len(self._queued))
