"""Scheduled runs on one machine: the occurrence to run now, or each one at its time.

In the cluster a CronJob starts the run's Jobs at their scheduled times. Locally
there is no daemon to wait for them, so `longrun run` runs one occurrence at
once, named after the latest scheduled time as the CronJob controller would name
its Job, and reports the next time; with --follow-schedule it instead waits for
each scheduled time in turn and runs that occurrence, until Ctrl-C. The times
are the controller's own (`next_schedule`, in the run's time zone).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from controller.core import names
from controller.core.status import next_schedule
from local.occurrence import (
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    LocalRun,
    finish,
    run_occurrence,
)


def scheduled_job_name(local: LocalRun, when: datetime) -> str:
    """`<cronjob>-<minutes since epoch>`, as the CronJob controller names its Jobs."""
    return f"{names.cron_job_name(local.resolved.run.name)}-{int(when.timestamp()) // 60}"


def previous_fire(local: LocalRun, *, now: datetime) -> datetime:
    """The latest scheduled time not after `now` (names the occurrence run now)."""
    spec = local.resolved.spec
    zone = ZoneInfo(spec.time_zone or "UTC")
    at: datetime = croniter(spec.schedule, now.astimezone(zone)).get_prev(datetime)
    return at


def run_scheduled(local: LocalRun, *, follow: bool) -> int:
    """One occurrence now, or (follow) every occurrence at its time until Ctrl-C."""
    spec = local.resolved.spec
    now = datetime.now(UTC)
    upcoming = next_schedule(spec, after=now)
    if not follow:
        try:
            when = previous_fire(local, now=now)
        except ValueError:  # croniter found no such time: validation refuses these first
            local.console.say(f"longrun run: spec.schedule: {spec.schedule!r} never fires")
            return EXIT_INVALID
        local.console.say(
            f"longrun: scheduled run ({spec.schedule}, {spec.time_zone or 'UTC'}): running one "
            f"occurrence now; next scheduled time {_text(upcoming)} "
            "(--follow-schedule keeps running them)"
        )
        occurrence = run_occurrence(local, job_name=scheduled_job_name(local, when))
        return finish(local, occurrence, next_time=upcoming)
    return follow_schedule(local, first=upcoming)


def follow_schedule(local: LocalRun, *, first: datetime | None) -> int:
    """Run occurrences at their scheduled times, one at a time, until Ctrl-C."""
    when, code = first, EXIT_OK
    while when is not None:
        local.console.say(f"longrun: next occurrence at {_text(when)} (Ctrl-C to stop)")
        if local.stop.wait(max((when - datetime.now(UTC)).total_seconds(), 0)):
            return EXIT_INTERRUPTED
        occurrence = run_occurrence(local, job_name=scheduled_job_name(local, when))
        after = max(when, datetime.now(UTC))
        upcoming = next_schedule(local.resolved.spec, after=after)
        code = finish(local, occurrence, next_time=upcoming)
        if code in (EXIT_INTERRUPTED, EXIT_INVALID):
            return code
        when = upcoming
    return code


def _text(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "none"
