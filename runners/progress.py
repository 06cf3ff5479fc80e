"""Progress lines on stderr: records done, rate, ETA and (OpenAI protocols) tokens and
tokens/s, every `progressIntervalSeconds`
(the first one a quarter of a second after the start).

A background thread wakes on a timer rather than on chunk boundaries, so a run
whose chunks take minutes still says it is alive. One line per report, one short JSON
object `{"longrunProgress": {...}}` (contracts.run.ProgressReport): the controller reads
the last one from the pod's log into the run's `status.progress` (the pod holds no API
credentials to write it), `longrun run` draws it as a bar, and `kubectl logs` greps it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from contracts.run import PROGRESS_KEY

# The input's record count: known, unknown (None), or a function that counts it.
Total = int | None | Callable[[], int | None]
# The first report comes this soon after the start whatever the interval, so `longrun run`
# draws its bar at once; the controller still reads at most one line per interval (it reads
# the last line), so an early one costs it nothing.
FIRST_REPORT_SECONDS = 0.25


def report_delays(interval: float) -> Iterator[float]:
    """Seconds to wait before each report: a short first wait, then every `interval`."""
    yield min(interval, FIRST_REPORT_SECONDS)
    while True:
        yield interval


class Progress:
    """Thread-safe counters and a reporter thread.

    A `total` given as a function (a source's `total`) is called once on a thread of its own
    when reporting starts, so a count that takes a pass over the input delays neither the run
    nor the progress lines; the ETA appears once it is known. A count that fails leaves the
    total unknown: the ETA is a convenience, never a reason to stop a run.
    """

    def __init__(
        self,
        *,
        interval: float,
        total: Total,
        done_before: int = 0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        counts: Callable[[], tuple[int, int, int]] | None = None,
        tokens: Callable[[], int] | None = None,
    ) -> None:
        self.interval = interval
        self._counts = counts  # whole-run (read, written, failed), when the caller has them
        self._tokens = tokens  # whole-run total tokens (OpenAI protocols), else None
        self._tokens_before = tokens() if tokens is not None else 0
        self.total = None if callable(total) else total
        self._count = total if callable(total) else None
        self.counted = threading.Event()  # set once a total function returned or raised
        self.done_before = done_before
        self.done = 0
        self._stream = stream
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, count: int) -> None:
        """Count `count` more records as finished (written or failed)."""
        with self._lock:
            self.done += count

    def line(self) -> str:
        """The current progress line."""
        elapsed = max(self._clock() - self._started, 1e-9)
        with self._lock:
            done, total = self.done, self.total
        rate = done / elapsed
        text = f"progress: records={self.done_before + done} rate={rate:.1f}/s"
        if total is not None:
            remaining = max(total - self.done_before - done, 0)
            eta = f"{remaining / rate:.0f}s" if rate > 0 else "unknown"
            text += f" total={total} eta={eta}"
        return text

    def report(self) -> str:
        """The current progress as the JSON line the controller and `longrun run` read."""
        elapsed = max(self._clock() - self._started, 1e-9)
        with self._lock:
            done, total = self.done, self.total
        read, written, failed = (
            self._counts() if self._counts else (self.done_before + done,) * 2 + (0,)
        )
        rate = done / elapsed
        fields: dict[str, float] = {"read": read, "written": written, "failed": failed}
        fields["rate"] = round(rate, 1)
        if total is not None:
            fields["total"] = total
            if rate > 0:
                fields["eta"] = round(max(total - written - failed, 0) / rate)
        if self._tokens is not None:
            tokens = self._tokens()
            fields["tokens"] = tokens
            fields["tokenRate"] = round((tokens - self._tokens_before) / elapsed, 1)
        return json.dumps({PROGRESS_KEY: fields}, separators=(",", ":"))

    def start(self) -> None:
        """Start reporting in the background (and counting the total, if it is a function)."""
        if self._count is not None:
            counter = threading.Thread(target=self._count_total, name="count", daemon=True)
            counter.start()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()

    def _count_total(self) -> None:
        assert self._count is not None
        try:
            total = self._count()
        except Exception:  # the ETA is optional; the run reports its own errors
            total = None
        with self._lock:
            self.total = total
        self.counted.set()

    def stop(self) -> None:
        """Stop reporting (safe to repeat)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        for delay in report_delays(self.interval):
            if self._stop.wait(delay):
                return
            print(self.report(), file=self._stream or sys.stderr, flush=True)
