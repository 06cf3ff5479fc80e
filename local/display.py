"""What a person sees during `longrun run`: a progress bar, the runner's log, the final status.

The runner reports progress as one JSON line `{"longrunProgress": {...}}` on stderr
(the line the controller reads into `status.progress`; runners before it printed
`progress: records=N rate=R/s [total=T eta=Es]`, still understood); here they become a
live bar on a terminal and one compact line each otherwise (CI logs, pipes). Every other
stderr line passes through unchanged. The final status is the controller's own
(`controller.core.status.one_shot_status`) computed from a Job and pods shaped like
the ones the cluster would hold, so local and cluster runs read the same.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from pydantic import ValidationError

from contracts.run import PROGRESS_KEY, InferenceRunStatus, ProgressReport

_PROGRESS = re.compile(r"^progress:((?:\s+\w+=\S+)+)\s*$")
BAR_WIDTH = 30


@dataclass(frozen=True)
class ProgressLine:
    """One parsed runner progress report."""

    records: int
    rate: float
    total: int | None = None
    eta: str | None = None
    tokens_rate: float | None = None  # OpenAI protocols: tokens per second


def parse_progress(line: str) -> ProgressLine | None:
    """The progress report in a runner stderr line, or None for any other line."""
    if line.lstrip().startswith('{"' + PROGRESS_KEY + '"'):
        return _parse_json(line)
    match = _PROGRESS.match(line.strip())
    if match is None:
        return None
    fields = dict(part.split("=", 1) for part in match.group(1).split())
    try:
        return ProgressLine(
            records=int(fields["records"]),
            rate=float(fields.get("rate", "0").removesuffix("/s")),
            total=int(fields["total"]) if "total" in fields else None,
            eta=fields.get("eta"),
        )
    except (KeyError, ValueError):
        return None


def _parse_json(line: str) -> ProgressLine | None:
    try:
        report = ProgressReport.model_validate(json.loads(line)[PROGRESS_KEY])
    except (ValueError, TypeError, KeyError, ValidationError):
        return None
    return ProgressLine(
        records=report.written + report.failed,
        rate=report.rate or 0.0,
        total=report.total,
        eta=None if report.eta is None else f"{report.eta}s",
        tokens_rate=report.tokens_rate,
    )


def describe(progress: ProgressLine) -> str:
    """`120/150 records (80%) 45.2/s 3100 tokens/s ETA 1s`, without the parts that are
    unknown."""
    if progress.total:
        pct = min(progress.records * 100 // progress.total, 100)
        text = f"{progress.records}/{progress.total} records ({pct}%)"
    else:
        text = f"{progress.records} records"
    text += f" {progress.rate:.1f}/s"
    if progress.tokens_rate is not None:
        text += f" {progress.tokens_rate:.0f} tokens/s"
    if progress.eta and progress.eta != "unknown":
        text += f" ETA {progress.eta}"
    return text


def bar(progress: ProgressLine, *, width: int = BAR_WIDTH) -> str:
    """`[#########.........] ` followed by `describe()`."""
    if not progress.total:
        return describe(progress)
    filled = min(progress.records * width // progress.total, width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {describe(progress)}"


class Console:
    """Runner output on a stream: a redrawn bar on a TTY, plain lines otherwise. Thread-safe."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self._lock = threading.Lock()
        self._bar = ""

    def on_line(self, name: str, line: str) -> None:
        """A line of container output (stdout is the summary JSON: left to the log)."""
        if name != "stderr":
            return
        progress = parse_progress(line)
        if progress is None:
            self.say(line)
        elif self.tty:
            self._draw(bar(progress))
        else:
            self.say(f"longrun: {describe(progress)}")

    def waiting(self) -> None:
        """On a TTY, an empty bar at once when a pod starts: the runner's first report
        replaces it (it comes within a second of the runner's start, runners/progress.py)."""
        if self.tty:
            self._draw(f"[{'.' * BAR_WIDTH}] starting the runner")

    def say(self, text: str) -> None:
        """Print a line above the bar."""
        with self._lock:
            self._clear()
            print(text, file=self.stream, flush=True)
            if self._bar:
                self.stream.write(self._bar)
                self.stream.flush()

    def done(self) -> None:
        """End the bar line (before the final status)."""
        with self._lock:
            if self._bar:
                self.stream.write("\n")
                self.stream.flush()
            self._bar = ""

    def _draw(self, text: str) -> None:
        columns = shutil.get_terminal_size((100, 20)).columns
        with self._lock:
            self._clear()
            self._bar = text[: columns - 1]
            self.stream.write(self._bar)
            self.stream.flush()

    def _clear(self) -> None:
        if self._bar:
            self.stream.write("\r" + " " * len(self._bar) + "\r")


def status_lines(status: InferenceRunStatus, *, name: str, namespace: str) -> list[str]:
    """The run's status as the controller reports it, one fact per line."""
    lines = [f"InferenceRun {namespace}/{name}: {status.phase}"]
    if status.message:
        lines.append(f"  message: {status.message}")
    if status.job_name:
        lines.append(f"  job: {status.job_name}")
    for cond in status.conditions:
        lines.append(f"  condition {cond.type}={cond.status} ({cond.reason})")
    lines.extend(_result_lines(status))
    if status.next_schedule_time:
        lines.append(f"  next scheduled run: {_when(status.next_schedule_time)}")
    return lines


def _result_lines(status: InferenceRunStatus) -> list[str]:
    result = status.result
    if result is None:
        return []
    lines = [
        f"  records: read={result.records_read} written={result.records_written} "
        f"failed={result.records_failed} retried={result.records_retried} "
        f"chunks={result.chunks} in {result.duration_seconds:.1f}s"
    ]
    if result.total_tokens is not None:
        lines.append(
            f"  tokens: prompt={result.prompt_tokens} completion={result.completion_tokens} "
            f"total={result.total_tokens}"
        )
    lines += [f"  {k}: {v}" for k, v in _locations(result.to_wire()).items()]
    return lines


def _locations(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("output", "errorOutput", "reason") if result.get(k)}


def _when(moment: datetime) -> str:
    return moment.isoformat()
