"""Status derivation: observed children in, the run's whole status out.

Status is rebuilt from the Job/CronJob/Pods on every pass (never accumulated
from events), so a restarted controller converges to the same answer. The only
things carried over are what the children can no longer tell us: condition
transition times, a finished run's result after its pods are gone, and the
history of executions whose Jobs were removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from contracts.run import (
    HISTORY_LIMIT,
    Execution,
    InferenceRunSpec,
    InferenceRunStatus,
    RunResult,
)
from controller.core import conditions as cond
from controller.core.conditions import Want
from controller.core.jobs import (
    JobState,
    Obj,
    RunnerExit,
    failure_message,
    is_finished,
    job_state,
    parse_time,
    runner_exit,
    with_runner_reason,
)
from controller.core.kueue.policy import QUEUE_LABEL
from controller.core.shards import pod_index
from controller.core.validation import Problem

SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
FINISHED = ("Succeeded", "Failed", "Cancelled")  # a one-shot run's final phases


@dataclass(frozen=True)
class RunnerLog:
    """The tail of a running runner's log, read this pass for `status.progress`: `text` of
    the one pod of a run, or `shards`, the tail of each index's running pod by index, for a
    run over several pods."""

    job_name: str
    text: str = ""
    shards: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    """Everything one reconcile read about a run, as one frozen value.

    `problem` is an unreadable spec; `answer` is what the API server answered when a
    child was written, when only the user can fix it (a refusal, a name taken).
    """

    run: Obj
    spec: InferenceRunSpec
    previous: InferenceRunStatus
    config: Obj | None = None
    deployment: Obj | None = None  # the ModelDeployment the config's model.deploymentRef names
    config_map: Obj | None = None
    job: Obj | None = None
    cron_job: Obj | None = None
    jobs: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()
    stopped_pods: Sequence[Obj] = ()  # deleted after their runner ended (ports.Children)
    workload: Obj | None = None  # Kueue's Workload of the one-shot run's Job, if any
    problem: Problem | None = None
    answer: Problem | None = None
    runner_log: RunnerLog | None = None  # None: not read this pass

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(self.jobs))
        object.__setattr__(self, "pods", tuple(self.pods))
        object.__setattr__(self, "stopped_pods", tuple(self.stopped_pods))

    @property
    def generation(self) -> int:
        """The run's metadata.generation."""
        return int((self.run.get("metadata") or {}).get("generation") or 0)

    @property
    def is_job_lost(self) -> bool:
        """A one-shot run whose status names a Job that no longer exists."""
        return not self.spec.is_scheduled and self.job is None and bool(self.previous.job_name)

    @property
    def is_started(self) -> bool:
        """A one-shot run whose Job exists or existed: it is frozen from then on (config
        changes never touch it, and a deleted Job is never re-created)."""
        return not self.spec.is_scheduled and (self.job is not None or self.is_job_lost)


def accepted_want(problem: Problem | None) -> Want:
    """The Accepted condition for a validation outcome."""
    if problem is None:
        return Want("Accepted", True, "Accepted", "")
    return Want("Accepted", False, problem.reason, f"{problem.field}: {problem.message}")


def finish_wants(state: JobState | None, message: str) -> list[Want]:
    """Running, Complete and Failed for an execution state (None: nothing started)."""
    phase = state.phase if state else "Pending"
    reason = state.reason if state else "NotStarted"
    return [
        Want("Running", phase == "Running", "JobRunning" if phase == "Running" else reason),
        Want("Complete", phase == "Succeeded", "Succeeded" if phase == "Succeeded" else reason),
        Want("Failed", phase == "Failed", reason, message if phase == "Failed" else ""),
    ]


def one_shot_phase(obs: Observed, state: JobState | None) -> str:
    """The run's phase from its Job: the Job's, except that a cancelled run is Cancelled once
    its Job is suspended (or when it never had one), unless the Job finished first."""
    if state is not None and is_finished(state):
        return state.phase
    if obs.spec.cancel and (state is None or state.phase == "Suspended"):
        return "Cancelled"
    return state.phase if state else "Pending"


def one_shot_status(obs: Observed, *, problem: Problem | None, now: datetime) -> InferenceRunStatus:
    """Status of a one-shot run from its Job and pods."""
    job_name = (obs.job or {}).get("metadata", {}).get("name")
    exit_ = _runner_exit(obs, job_name)
    state = with_runner_reason(job_state(obs.job), exit_, obs.job) if obs.job is not None else None
    phase = one_shot_phase(obs, state)
    failed_msg = failure_message(state, exit_) if state and state.phase == "Failed" else ""
    note = exit_.note if exit_ else None
    prev = obs.previous
    start = _earliest(prev.start_time if state else None, state.start_time if state else None)
    if phase == "Cancelled":
        done = prev.completion_time if prev.phase == "Cancelled" else None
        state = JobState("Cancelled", "Cancelled", "", start, done or now)
    wants = [accepted_want(problem), *finish_wants(state, failed_msg)]
    return InferenceRunStatus(
        phase=phase,
        message=_message(problem, failed_msg, note),
        observed_generation=obs.generation,
        conditions=cond.resolve(prev.conditions, wants, now=now, generation=obs.generation),
        config_map_name=(obs.config_map or {}).get("metadata", {}).get("name"),
        job_name=job_name,
        start_time=start,
        completion_time=state.finish_time if state and phase in FINISHED else None,
        result=_final_result(phase, exit_, prev, stopped=_stopped_exit(obs, job_name)),
    )


def _earliest(*times: datetime | None) -> datetime | None:
    """The first of the known times: a resumed Job restarts its `startTime`, the run does not."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _final_result(
    phase: str,
    exit_: RunnerExit | None,
    prev: InferenceRunStatus,
    *,
    stopped: RunnerExit | None = None,
) -> RunResult | None:
    """The runner's summary once the run finished (none before: a stopped or retried pod's
    summary is not the run's). Cancelled: the summary the runner wrote on SIGTERM (from its
    pod, or from the pod's last state when the Job controller deleted it before this pass),
    or the last progress it reported, whichever counted more (all are whole-run counts; a run
    over several pods adds its indexes' up: `_runner_exit`)."""
    if phase not in FINISHED:
        return None
    found = exit_.result if exit_ and exit_.result else prev.result
    if phase != "Cancelled":
        return found
    summaries = (found, stopped.result if stopped else None, _progress_result(prev))
    return max(
        (r for r in summaries if r is not None),
        key=lambda r: r.records_written + r.records_failed,
        default=None,
    )


def _stopped_exit(obs: Observed, job_name: str | None) -> RunnerExit | None:
    """The runner's exit from the Job's pods deleted after it ended (a cancelled Job's)."""
    return runner_exit(obs.stopped_pods, job_name) if job_name and obs.stopped_pods else None


def _runner_exit(obs: Observed, job_name: str | None) -> RunnerExit | None:
    """The runner's exit from the Job's pods. Of a run over several pods, each index's newest
    pod counts, deleted or not: when one index fails, or the run is cancelled, the Job
    controller deletes the others' pods, whose summaries then reach us only as they were."""
    if not job_name:
        return None
    pods = obs.pods
    if obs.stopped_pods and any(pod_index(p) is not None for p in obs.stopped_pods):
        pods = (*obs.pods, *obs.stopped_pods)
    return runner_exit(pods, job_name)


def _progress_result(prev: InferenceRunStatus) -> RunResult | None:
    progress = prev.progress
    if progress is None or progress.records_read is None:
        return None
    return RunResult(
        records_read=progress.records_read,
        records_written=progress.records_written or 0,
        records_failed=progress.records_failed or 0,
        reason="cancelled (counts from the last progress report)",
    )


def lost_job_status(obs: Observed, *, now: datetime) -> InferenceRunStatus:
    """A one-shot run whose Job was deleted by someone else: it is never run a second time.

    A finished run keeps its record as it was; an unfinished one fails with `JobDeleted`.
    """
    prev = obs.previous
    if prev.phase in FINISHED:
        return prev
    message = (
        f'Job "{prev.job_name}" was deleted before it finished; a one-shot run never runs '
        "twice: delete and re-create the InferenceRun to run it again"
    )
    state = JobState("Failed", "JobDeleted", message, prev.start_time, now)
    wants = [accepted_want(None), *finish_wants(state, message)]
    return InferenceRunStatus(
        phase="Failed",
        message=message,
        observed_generation=obs.generation,
        conditions=cond.resolve(prev.conditions, wants, now=now, generation=obs.generation),
        model_deployment=prev.model_deployment,
        config_map_name=prev.config_map_name,
        job_name=prev.job_name,
        start_time=prev.start_time,
        completion_time=now,
        result=prev.result,
    )


def _message(problem: Problem | None, failure: str, note: str | None) -> str | None:
    parts = [p for p in (problem and problem.message, failure, note) if p]
    return "; ".join(parts) if parts else None


def next_schedule(spec: InferenceRunSpec, *, after: datetime) -> datetime | None:
    """The next time the schedule fires after `after`, in the run's time zone."""
    if spec.schedule is None:
        return None
    zone = ZoneInfo(spec.time_zone or "UTC")
    try:
        nxt = croniter(spec.schedule, after.astimezone(zone)).get_next(datetime)
    except (ValueError, KeyError):
        return None
    return nxt.astimezone(after.tzinfo).replace(microsecond=0)  # type: ignore[no-any-return]


def execution_of(job: Obj, pods: Sequence[Obj]) -> Execution:
    """One history entry from a Job spawned by the CronJob."""
    meta = job.get("metadata") or {}
    state = job_state(job)
    exit_ = runner_exit(pods, meta["name"]) if is_finished(state) else None
    state = with_runner_reason(state, exit_, job)
    scheduled = parse_time((meta.get("annotations") or {}).get(SCHEDULED_ANNOTATION))
    return Execution(
        job_name=meta["name"],
        phase=_execution_phase(job, state),
        schedule_time=scheduled or parse_time(meta.get("creationTimestamp")),
        start_time=state.start_time,
        completion_time=state.finish_time if is_finished(state) else None,
        result=exit_.result if exit_ else None,
    )


def _execution_phase(job: Obj, state: JobState) -> str:
    """A suspended execution is Pending while Kueue holds it in its queue; Running otherwise
    (someone suspended a CronJob's Job by hand: it started, so it never shows as Pending)."""
    if state.phase != "Suspended":
        return state.phase
    labels = (job.get("metadata") or {}).get("labels") or {}
    return "Pending" if QUEUE_LABEL in labels else "Running"


def merge_history(previous: list[Execution], observed: list[Execution]) -> list[Execution]:
    """Observed executions over remembered ones, newest first, bounded."""
    by_name = {e.job_name: e for e in previous}
    for execution in observed:
        old = by_name.get(execution.job_name)
        if old is not None and execution.result is None and old.result is not None:
            execution = execution.model_copy(update={"result": old.result})
        by_name[execution.job_name] = execution
    ordered = sorted(by_name.values(), key=_sort_key, reverse=True)
    return ordered[:HISTORY_LIMIT]


def _sort_key(execution: Execution) -> tuple[str, str]:
    when = execution.schedule_time or execution.start_time
    return (when.isoformat() if when else "", execution.job_name)


def scheduled_status(
    obs: Observed, *, problem: Problem | None, now: datetime
) -> InferenceRunStatus:
    """Status of a scheduled run from its CronJob and the Jobs it spawned."""
    observed = [execution_of(job, obs.pods) for job in obs.jobs]
    history = merge_history(obs.previous.history, observed)
    active = any(e.phase in ("Pending", "Running") for e in observed)
    last_done = next((e for e in history if e.phase in ("Succeeded", "Failed")), None)
    cron_status = (obs.cron_job or {}).get("status") or {}
    last = parse_time(cron_status.get("lastScheduleTime"))
    wants = [accepted_want(problem), *_scheduled_wants(active, last_done)]
    return InferenceRunStatus(
        phase=_scheduled_phase(obs),
        message=_message(problem, "", None),
        observed_generation=obs.generation,
        conditions=cond.resolve(obs.previous.conditions, wants, now=now, generation=obs.generation),
        config_map_name=(obs.config_map or {}).get("metadata", {}).get("name"),
        cron_job_name=(obs.cron_job or {}).get("metadata", {}).get("name"),
        start_time=history[0].start_time if history else None,
        completion_time=last_done.completion_time if last_done else None,
        last_schedule_time=last,
        next_schedule_time=_next(obs, last=last, now=now),
        result=last_done.result if last_done else None,
        history=history,
    )


def _scheduled_phase(obs: Observed) -> str:
    if obs.cron_job is None:
        return "Pending"
    return "Suspended" if obs.spec.suspend else "Scheduled"


def _next(obs: Observed, *, last: datetime | None, now: datetime) -> datetime | None:
    if obs.cron_job is None or obs.spec.suspend:
        return None
    after = max(last, now) if last else now
    return next_schedule(obs.spec, after=after - timedelta(microseconds=0))


def _scheduled_wants(active: bool, last_done: Execution | None) -> list[Want]:
    done_phase = last_done.phase if last_done else None
    failed_reason = "ExecutionFailed" if done_phase == "Failed" else "NoFailure"
    return [
        Want("Running", active, "JobRunning" if active else "Idle"),
        Want(
            "Complete",
            done_phase == "Succeeded",
            "LastExecutionSucceeded" if done_phase == "Succeeded" else "NoCompletedExecution",
        ),
        Want(
            "Failed",
            done_phase == "Failed",
            failed_reason,
            f"execution {last_done.job_name} failed"
            if last_done and done_phase == "Failed"
            else "",
        ),
    ]


def normalize(status: Any) -> dict[str, Any]:
    """A status as wire JSON, so stored and computed statuses compare equal when they match."""
    if isinstance(status, InferenceRunStatus):
        return status.to_wire()
    try:
        return InferenceRunStatus.model_validate(status or {}).to_wire()
    except ValueError:
        return {"invalid": True}


def previous_status(run: Obj) -> InferenceRunStatus:
    """The run's stored status, or an empty one when absent or unreadable."""
    try:
        return InferenceRunStatus.model_validate(run.get("status") or {})
    except ValueError:
        return InferenceRunStatus()
