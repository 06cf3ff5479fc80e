"""The runner's first progress line comes at once, whatever `progressIntervalSeconds` says.

Real: `runners.progress` (its schedule of reports, its reporter thread, the JSON line the
controller reads) and `local.display` parsing that line into the bar `longrun run` draws.
Faked: the stream the lines go to (a list that signals each write).
"""

from __future__ import annotations

import itertools
import json
import threading

from contracts.run import PROGRESS_KEY
from local.display import bar, parse_progress
from runners.progress import FIRST_REPORT_SECONDS, Progress, report_delays


class Lines:
    """A text stream that keeps its lines and signals the first one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.first = threading.Event()

    def write(self, text: str) -> int:
        self.lines += [line for line in text.splitlines() if line]
        if self.lines:
            self.first.set()
        return len(text)

    def flush(self) -> None:
        pass


def test_the_first_report_waits_a_moment_then_every_interval() -> None:
    assert FIRST_REPORT_SECONDS <= 1.0  # `longrun run` draws within 2 s of the start
    assert list(itertools.islice(report_delays(3600), 4)) == [
        FIRST_REPORT_SECONDS,
        3600,
        3600,
        3600,
    ]
    assert list(itertools.islice(report_delays(0.2), 3)) == [0.2, 0.2, 0.2]  # never later


def test_a_run_with_an_hour_interval_reports_long_before_the_hour_is_over() -> None:
    stream = Lines()
    progress = Progress(interval=3600, total=100, stream=stream)  # type: ignore[arg-type]
    progress.add(40)
    progress.start()
    try:
        # An hour-long interval would leave this waiting; the first report ends it.
        assert stream.first.wait(timeout=120)
    finally:
        progress.stop()
    assert len(stream.lines) == 1
    report = json.loads(stream.lines[0])[PROGRESS_KEY]
    assert report["written"] == 40 and report["total"] == 100


def test_the_first_report_is_a_line_the_local_bar_draws() -> None:
    stream = Lines()
    progress = Progress(interval=3600, total=100, stream=stream)  # type: ignore[arg-type]
    progress.add(25)
    progress.start()
    try:
        assert stream.first.wait(timeout=120)
    finally:
        progress.stop()
    parsed = parse_progress(stream.lines[0])
    assert parsed is not None and parsed.records == 25 and parsed.total == 100
    assert bar(parsed).startswith("[#######.")
