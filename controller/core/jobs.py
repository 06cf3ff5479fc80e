"""Read what the Job controller and the kubelet report, as plain dicts.

Only terminal Job conditions (`Complete`, `Failed`) end an execution: newer
Kubernetes adds `SuccessCriteriaMet`/`FailureTarget` first while pods are still
terminating. The runner's summary comes from its termination message, which is
user-controlled text: it is parsed as a `RunResult` with unknown keys dropped, so
no raw upstream body ever reaches the status. A Job over several pods (Indexed) has one
summary per index, each on its own part of the input; they add up (controller/core/shards.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from contracts.contract import EXIT_BAD_CONTRACT, EXIT_INFERENCE, EXIT_INPUT, EXIT_OUTPUT
from contracts.run import RunResult
from controller.core import names
from controller.core.shards import pod_index, summed_result

Obj = dict[str, Any]
# The runner's exit code when SIGTERM stopped it (128 + 15; runners/cli.py EXIT_SIGTERM).
EXIT_SIGTERM = 143
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
EXIT_MEANINGS = {
    EXIT_BAD_CONTRACT: (
        "a permanent error, not retried: an invalid contract or config, or the error budget spent"
    ),
    EXIT_INPUT: "reading the input failed",
    EXIT_INFERENCE: "calling the model failed",
    EXIT_OUTPUT: "writing the output failed",
}
FAILURE_REASONS = {"PodFailurePolicy": "BadContract"}
BUDGET_REASON_PREFIX = "error budget exceeded"  # how the runner's summary reason starts
_RESULT_KEYS = frozenset(RunResult.model_json_schema(by_alias=True)["properties"])


@dataclass(frozen=True)
class JobState:
    """Where one execution (a Job) stands."""

    phase: str  # Pending, Running, Suspended, Succeeded, Failed
    reason: str
    message: str = ""
    start_time: datetime | None = None
    finish_time: datetime | None = None  # Suspended: since when


@dataclass(frozen=True)
class RunnerExit:
    """The runner container's last termination: exit code, parsed summary, why it was ignored."""

    exit_code: int | None
    result: RunResult | None
    note: str | None = None
    indexes: int = 1  # of a run over several pods: how many indexes' summaries this adds up


def parse_time(value: Any) -> datetime | None:
    """A metav1.Time string as an aware datetime (second precision)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).replace(microsecond=0)


def true_condition(obj: Obj, type_: str) -> Obj | None:
    """The condition `type_` with status True in an object's status, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def job_state(job: Obj) -> JobState:
    """The phase of a Job from its status.

    Only `Complete` and `Failed` end an execution. A started Job never goes back to
    Pending: it has `active: 0` between a failed pod and its replacement (the back-off),
    and from Kubernetes 1.31 on it has `SuccessCriteriaMet` or `FailureTarget` while its
    pods terminate, before `Complete` or `Failed`. Both mean Running (finishing). A
    suspended Job (`spec.suspend`, condition `Suspended`) has deleted its pods and may have
    lost its `startTime`: it is Suspended, never Pending; resumed, it runs again.
    """
    status = job.get("status") or {}
    started = parse_time(status.get("startTime"))
    if done := true_condition(job, "Complete"):
        finished = parse_time(status.get("completionTime")) or parse_time(
            done.get("lastTransitionTime")
        )
        return JobState("Succeeded", "Succeeded", "", started, finished)
    if failed := true_condition(job, "Failed"):
        reason = str(failed.get("reason") or "JobFailed")
        return JobState(
            "Failed",
            FAILURE_REASONS.get(reason, reason),
            str(failed.get("message") or ""),
            started,
            parse_time(failed.get("lastTransitionTime")),
        )
    for finishing in ("SuccessCriteriaMet", "FailureTarget"):
        if true_condition(job, finishing):
            return JobState("Running", finishing, "", started)
    if suspended := true_condition(job, "Suspended"):
        since = parse_time(suspended.get("lastTransitionTime"))
        return JobState("Suspended", "JobSuspended", "", started, since)
    if int(status.get("active") or 0) > 0:
        return JobState("Running", "JobRunning", "", started)
    if started is not None or int(status.get("failed") or 0) > 0:
        return JobState(
            "Running", "JobRetrying" if status.get("failed") else "JobRunning", "", started
        )
    return JobState("Pending", "JobPending", "", started)


def is_finished(state: JobState) -> bool:
    """True for Succeeded or Failed."""
    return state.phase in ("Succeeded", "Failed")


def pod_job_name(pod: Obj) -> str | None:
    """The Job a pod belongs to, from the labels the Job controller sets."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return next((labels[k] for k in JOB_NAME_LABELS if labels.get(k)), None)


def runner_ended(pod: Obj) -> bool:
    """Whether the pod's runner container has terminated (its summary is in its state)."""
    return _terminated(pod) is not None


def _terminated(pod: Obj) -> Obj | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == names.CONTAINER_NAME:
            state = (status.get("state") or {}).get("terminated")
            return dict(state) if state else None
    return None


def parse_result(message: str) -> tuple[RunResult | None, str | None]:
    """A RunResult from a termination message, or None and why it was ignored."""
    if not message.strip():
        return None, None
    try:
        data = json.loads(message)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return RunResult.model_validate({k: v for k, v in data.items() if k in _RESULT_KEYS}), None
    except (ValueError, ValidationError):
        return None, "the runner's termination message is not a valid summary; ignored"


def runner_exit(pods: Sequence[Obj], job_name: str) -> RunnerExit | None:
    """The latest terminated runner container among the Job's pods; of a Job over several
    pods, the latest of each index added up (`combined`)."""
    exits = runner_exits(pods, job_name)
    if not exits:
        return None
    if list(exits) == [None]:  # one pod at a time: no index
        return exits[None]
    return combined([exits[i] for i in sorted(i for i in exits if i is not None)])


def runner_exits(pods: Sequence[Obj], job_name: str) -> dict[int | None, RunnerExit]:
    """The latest terminated runner container of each completion index among the Job's pods
    (one entry, None, for a Job that is not Indexed)."""
    latest: dict[int | None, Obj] = {}
    for pod in pods:
        if pod_job_name(pod) != job_name or not _terminated(pod):
            continue
        index = pod_index(pod)
        if index not in latest or _created(pod) > _created(latest[index]):
            latest[index] = pod
    return {index: _exit_of(pod) for index, pod in latest.items()}


def _created(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp", ""))


def _exit_of(pod: Obj) -> RunnerExit:
    state = _terminated(pod) or {}
    result, note = parse_result(str(state.get("message") or ""))
    code = state.get("exitCode")
    return RunnerExit(code if isinstance(code, int) else None, result, note)


def combined(exits: Sequence[RunnerExit]) -> RunnerExit:
    """One exit for the indexes of a run over several pods: the exit code and reason of the
    first index that failed (not one stopped by SIGTERM when another failed), the summaries
    added up."""
    failed = [e for e in exits if e.exit_code not in (None, 0, EXIT_SIGTERM)]
    lead = next(iter(failed or [e for e in exits if e.exit_code] or exits))
    results = [e.result for e in exits if e.result is not None]
    reason = lead.result.reason if lead.result is not None else None
    result = summed_result(results, reason=reason) if results else None
    note = next((e.note for e in exits if e.note), None)
    return RunnerExit(lead.exit_code, result, note, len(results))


def job_indexes(job: Obj) -> int:
    """How many indexes (pods that must succeed) a Job has: its completions when Indexed."""
    spec = job.get("spec") or {}
    if spec.get("completionMode") != "Indexed":
        return 1
    return max(int(spec.get("completions") or 1), 1)


def with_runner_reason(state: JobState, exit_: RunnerExit | None, job: Obj) -> JobState:
    """The Job's state, with `ErrorBudgetExceeded` instead of `BadContract` when the runner's
    summary says exit code 2 came from a spent error budget (both are final), and Failed
    (`OutputIncomplete`) for a Job over several pods that succeeded though none of its pods
    completed the run (`incomplete`)."""
    result = exit_.result if exit_ is not None else None
    reason = (result.reason or "") if result is not None else ""
    if state.reason == "BadContract" and reason.startswith(BUDGET_REASON_PREFIX):
        return replace(state, reason="ErrorBudgetExceeded")
    if state.phase == "Succeeded" and exit_ is not None and incomplete(exit_, job_indexes(job)):
        return replace(state, phase="Failed", reason="OutputIncomplete", message=INCOMPLETE)
    return state


INCOMPLETE = (
    "every pod of the run ended well, but none found every chunk of the run committed, so "
    "the output is not marked complete and some records were never sent: the input changed "
    "while the run ran (a pod that read it later saw more records). Delete the output (or "
    "give the run a new one) and run again, leaving the input as it is until the run ends: "
    "the committed chunks hold records of the input as it was"
)


def incomplete(exit_: RunnerExit, indexes: int) -> bool:
    """Of a run over `indexes` pods: every index's summary is known, each says whether its pod
    completed the run, and none did. The pod that finds every chunk committed completes it,
    and the last to commit always finds it (runners/shards.py), unless the pods read
    different inputs: then chunks past what one pod read are no pod's, and the Job succeeds
    with records never sent. Unknown (a summary lost, a runner too old to say): not judged."""
    result = exit_.result
    return (
        indexes > 1
        and exit_.indexes == indexes
        and result is not None
        and result.run_completed is False
    )


def failure_message(state: JobState, exit_: RunnerExit | None) -> str:
    """A sentence on why an execution failed, with the runner's exit code meaning."""
    parts = [state.message or f"the Job failed ({state.reason})"]
    if exit_ is not None and exit_.exit_code not in (None, 0):
        meaning = EXIT_MEANINGS.get(exit_.exit_code or 0, "the runner failed")
        parts.append(f"runner exit code {exit_.exit_code}: {meaning}")
    if exit_ is not None and exit_.result is not None and exit_.result.reason:
        parts.append(exit_.result.reason)
    return "; ".join(parts)
