"""Which Kubernetes Events a status change deserves: one per transition, one per user error.

Events are derived from the difference between the stored and the new status,
so a resync that changes nothing records nothing, and a restarted controller
does not repeat the events of transitions it already published.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.run import InferenceRunStatus
from controller.core.conditions import find
from controller.core.ports import EventType


@dataclass(frozen=True)
class EventSpec:
    """A Kubernetes Event to record about a run."""

    type: EventType
    reason: str
    message: str


def transition_events(old: InferenceRunStatus, new: InferenceRunStatus) -> list[EventSpec]:
    """Events for what changed between two statuses."""
    events: list[EventSpec] = []
    accepted = find(new.conditions, "Accepted")
    was = find(old.conditions, "Accepted")
    if (
        accepted is not None
        and accepted.status == "False"
        and (was is None or (was.status, was.reason) != (accepted.status, accepted.reason))
    ):
        events.append(EventSpec("Warning", accepted.reason, accepted.message))
    current, was_current = (
        find(new.conditions, "ConfigCurrent"),
        find(old.conditions, "ConfigCurrent"),
    )
    if (
        current is not None
        and current.status == "False"
        and (was_current is None or was_current.status != "False")
    ):
        events.append(EventSpec("Warning", current.reason, current.message))
    if new.phase != old.phase and new.phase not in (None, "Queued"):  # Queued: _queue_events
        events.append(_phase_event(new, was=old.phase))
    events.extend(_queue_events(old, new))
    events.extend(_execution_events(old, new))
    return events


def _phase_event(new: InferenceRunStatus, *, was: str | None) -> EventSpec:
    phase = new.phase
    if phase == "Running" and was == "Suspended" and new.job_name:
        return EventSpec("Normal", "Resumed", f"Job {new.job_name} resumed")
    if phase == "Suspended" and new.job_name:
        return EventSpec("Normal", "Suspended", f"Job {new.job_name} is suspended")
    if phase == "Suspended" and not new.cron_job_name:  # held before its Job was queued
        return EventSpec("Normal", "Suspended", new.message or "suspended before it started")
    if phase == "Cancelled":
        return EventSpec("Normal", "Cancelled", _cancelled_text(new))
    if phase == "Pending":
        what = new.job_name or new.cron_job_name
        text = f"created Job {what}" if what else "waiting to start"
        return EventSpec("Normal", "Pending", text)
    if phase == "Failed":
        failed = find(new.conditions, "Failed")
        reason = failed.reason if failed and failed.reason else "Failed"
        return EventSpec("Warning", reason, new.message or "the run failed")
    messages = {
        "Running": f"Job {new.job_name} is running",
        "Succeeded": f"Job {new.job_name} succeeded{counts_text(new)}",
        "Scheduled": f"CronJob {new.cron_job_name} is scheduled",
        "Suspended": f"CronJob {new.cron_job_name} is suspended",
    }
    return EventSpec("Normal", phase or "Unknown", messages.get(phase or "", ""))


# Queued reasons without an event of their own: a Workload Kueue makes within moments; a
# preemption, which has its `Preempted` event.
QUIET_QUEUED = ("WaitingForWorkload", "Preempted")


def _queue_events(old: InferenceRunStatus, new: InferenceRunStatus) -> list[EventSpec]:
    """Kueue's say about the run's Job (controller/core/kueue/): `Queued` each time why it
    waits changes, with Kueue's words; `Preempted` when Kueue preempts it."""
    events = []
    queued, was = find(new.conditions, "Queued"), find(old.conditions, "Queued")
    if (
        queued is not None
        and queued.status == "True"
        and queued.reason not in QUIET_QUEUED
        and (was is None or (was.status, was.reason) != ("True", queued.reason))
    ):
        events.append(
            EventSpec("Normal", "Queued", f"Job {new.job_name} is queued: {queued.message}")
        )
    now, before = find(new.conditions, "Preempted"), find(old.conditions, "Preempted")
    if now is not None and now.status == "True" and (before is None or before.status != "True"):
        text = f"Kueue preempted Job {new.job_name} ({now.reason}): {now.message}"
        events.append(EventSpec("Normal", "Preempted", text))
    return events


def _execution_events(old: InferenceRunStatus, new: InferenceRunStatus) -> list[EventSpec]:
    before = {e.job_name: e.phase for e in old.history}
    events = []
    for execution in new.history:
        if execution.phase == before.get(execution.job_name):
            continue
        if execution.phase == "Succeeded":
            events.append(
                EventSpec("Normal", "ExecutionSucceeded", f"Job {execution.job_name} succeeded")
            )
        elif execution.phase == "Failed":
            events.append(
                EventSpec("Warning", "ExecutionFailed", f"Job {execution.job_name} failed")
            )
    return events


def _cancelled_text(new: InferenceRunStatus) -> str:
    if not new.job_name:
        return "cancelled before it started"
    return f"Job {new.job_name} cancelled; the committed output is kept{counts_text(new)}"


def counts_text(status: InferenceRunStatus) -> str:
    """`: 120 written, 3 failed of 200 read` from the result, or nothing without one."""
    result = status.result
    if result is None:
        return ""
    return (
        f": {result.records_written} written, {result.records_failed} failed "
        f"of {result.records_read} read"
    )
