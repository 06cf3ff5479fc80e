"""What `longrun run` shows: the runner's progress lines as a bar on a TTY, plain lines otherwise.

Real: the runner's own progress reporter (`runners.progress.Progress`) produces the lines, so the
format the sides share (this display, and the controller reading it into `status.progress`)
is tested as it is. Faked: the terminal (a StringIO told it is a TTY)
and the runner's clock.
"""

from __future__ import annotations

import io

from contracts.run import ProgressReport
from controller.core.progress import parse_report
from local.display import Console, parse_progress
from runners.progress import Progress


def runner_line(*, done: int, total: int | None, seconds: float) -> str:
    """The line the runner prints (`Progress.report`, the JSON the controller reads too)."""
    times = iter([0.0, seconds])
    progress = Progress(total=total, interval=1.0, clock=lambda: next(times))
    progress.add(done)
    return progress.report()


def test_the_runners_progress_line_parses_with_total_rate_and_eta() -> None:
    parsed = parse_progress(runner_line(done=40, total=100, seconds=2.0))
    assert parsed is not None
    assert (parsed.records, parsed.total, parsed.rate, parsed.eta) == (40, 100, 20.0, "3s")


def test_the_text_line_of_older_runners_still_parses() -> None:
    times = iter([0.0, 2.0])
    progress = Progress(total=100, interval=1.0, clock=lambda: next(times))
    progress.add(40)
    parsed = parse_progress(progress.line())
    assert parsed is not None
    assert (parsed.records, parsed.total, parsed.rate, parsed.eta) == (40, 100, 20.0, "3s")


def test_an_llm_runs_line_shows_its_tokens_per_second() -> None:
    times = iter([0.0, 4.0])
    tokens = iter([0, 1000])
    progress = Progress(
        total=None, interval=1.0, clock=lambda: next(times), tokens=lambda: next(tokens)
    )
    progress.add(8)
    out = io.StringIO()
    Console(out, tty=False).on_line("stderr", progress.report())
    assert out.getvalue().splitlines() == ["longrun: 8 records 2.0/s 250 tokens/s"]


def test_a_broken_json_progress_line_is_shown_as_it_is() -> None:
    assert parse_progress('{"longrunProgress": {"written": -1}}') is None
    assert parse_progress('{"longrunProgress": ') is None


def test_a_tty_shows_a_redrawn_bar_with_done_total_rate_and_eta() -> None:
    out = io.StringIO()
    console = Console(out, tty=True)
    console.on_line("stderr", runner_line(done=50, total=100, seconds=5.0))
    console.on_line("stderr", runner_line(done=100, total=100, seconds=10.0))
    console.done()
    text = out.getvalue()
    assert "[###############...............] 50/100 records (50%) 10.0/s ETA 5s" in text
    assert "[##############################] 100/100 records (100%) 10.0/s" in text
    assert "\r" in text  # the bar is redrawn in place, not printed line after line
    assert text.endswith("\n")


def test_without_a_tty_each_report_is_one_plain_line() -> None:
    out = io.StringIO()
    console = Console(out, tty=False)
    console.on_line("stderr", runner_line(done=7, total=None, seconds=1.0))
    console.on_line("stderr", "longrun-runner: chunk 0 committed")
    assert out.getvalue().splitlines() == [
        "longrun: 7 records 7.0/s",
        "longrun-runner: chunk 0 committed",
    ]


def test_log_lines_above_the_bar_keep_the_bar_drawn() -> None:
    out = io.StringIO()
    console = Console(out, tty=True)
    console.on_line("stderr", runner_line(done=1, total=4, seconds=1.0))
    console.on_line("stderr", "a log line")
    assert out.getvalue().endswith("a log line\n[#######.......................] "
                                   "1/4 records (25%) 1.0/s ETA 3s")  # fmt: skip


def test_the_controller_reads_the_runners_line_with_whole_run_counts() -> None:
    # The same line reaches `status.progress` through the pod's log (controller.core.progress).
    times = iter([0.0, 10.0])
    progress = Progress(
        total=1000, interval=1.0, clock=lambda: next(times), counts=lambda: (450, 440, 10)
    )
    progress.add(100)  # this pod's share: the rate is this pod's, the counts the run's
    line = progress.report()
    assert len(line) < 120  # one short line every interval
    report = parse_report(f"longrun-runner: run=ns/x\n{line}\n")
    assert report == ProgressReport(read=450, written=440, failed=10, total=1000, rate=10.0, eta=55)


def test_a_tty_shows_an_empty_bar_at_once_that_the_first_report_replaces() -> None:
    out = io.StringIO()
    console = Console(out, tty=True)
    console.waiting()  # the pod started: no report yet
    assert out.getvalue() == "[..............................] starting the runner"
    console.on_line("stderr", runner_line(done=1, total=4, seconds=1.0))
    assert out.getvalue().endswith(
        "\r[#######.......................] 1/4 records (25%) 1.0/s ETA 3s"
    )


def test_without_a_tty_nothing_is_printed_before_the_first_report() -> None:
    out = io.StringIO()
    Console(out, tty=False).waiting()
    assert out.getvalue() == ""
