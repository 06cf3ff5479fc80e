"""Suspend, resume and cancel of a one-shot run, from plain data: the Job patch `decide` plans,
the phase and result `one_shot_status` derives, the events of each transition. Pure: nothing
is faked and nothing is read; each test builds an `Observed`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.run import InferenceRunSpec, InferenceRunStatus, RunProgress
from controller.core import names
from controller.core.decide import Create, Delete, Patch, decide
from controller.core.events import transition_events
from controller.core.jobs import job_state
from controller.core.settings import Settings
from controller.core.status import Observed, one_shot_status
from tests.controller.unit.objects import NS, config, pod, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
STARTED = "2026-01-01T00:00:00Z"
SETTINGS = Settings()
CANCELLED_SUMMARY = (
    '{"recordsRead": 300, "recordsWritten": 290, "recordsFailed": 10, '
    '"reason": "stopped by SIGTERM"}'
)


def job(*, suspend: bool = False, status: dict[str, Any] | None = None, **meta: Any) -> Any:
    owner = {"kind": "InferenceRun", "name": "run", "uid": "run-uid", "controller": True}
    return {
        "kind": "Job",
        "metadata": {
            "name": "run",
            "namespace": NS,
            "uid": "job-uid",
            "ownerReferences": [owner],
            "annotations": {names.RUN_ANNOTATION: "run", **meta.get("annotations", {})},
        },
        "spec": {"suspend": suspend, "backoffLimit": 2},
        "status": status if status is not None else {"active": 1, "startTime": STARTED},
    }


def suspended(*, since: str = "2026-01-01T00:01:00Z", start: str | None = None) -> Any:
    """A Job's status once the Job controller suspended it (no pods, maybe no startTime)."""
    cond = {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
    cond["lastTransitionTime"] = since
    return {"conditions": [cond], **({"startTime": start} if start else {})}


def observed(spec: dict[str, Any] | None = None, **fields: Any) -> Observed:
    obj = run(**(spec or {}))
    fields.setdefault("config", config())
    return Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=fields.pop("previous", None) or InferenceRunStatus(),
        **fields,
    )


def test_suspending_a_running_run_patches_exactly_the_jobs_suspend() -> None:
    decision = decide(observed({"suspend": True}, job=job()), SETTINGS, now=NOW)
    assert decision.writes == (Patch("Job", NS, "run", {"spec": {"suspend": True}}),)
    assert decision.status.phase == "Running"  # until the Job controller stops the pods


def test_a_suspended_job_makes_the_run_suspended_never_pending() -> None:
    obs = observed({"suspend": True}, job=job(suspend=True, status=suspended()))
    decision = decide(obs, SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Suspended"
    assert job_state(obs.job or {}).phase == "Suspended"  # startTime gone: still not Pending
    running = {c.type: c for c in decision.status.conditions}["Running"]
    assert (running.status, running.reason) == ("False", "JobSuspended")


def test_resuming_patches_suspend_false_and_keeps_the_first_start_time() -> None:
    previous = InferenceRunStatus(phase="Suspended", job_name="run", start_time=STARTED)
    obs = observed(job=job(suspend=True, status=suspended()), previous=previous)
    decision = decide(obs, SETTINGS, now=NOW)
    assert decision.writes == (Patch("Job", NS, "run", {"spec": {"suspend": False}}),)
    resumed = {"active": 1, "startTime": "2026-01-01T00:05:00Z"}  # the Job restarts its clock
    obs = observed(job=job(status=resumed), previous=previous)
    status = one_shot_status(obs, problem=None, now=NOW)
    assert status.phase == "Running"
    assert status.start_time == datetime(2026, 1, 1, tzinfo=UTC)


def test_a_job_that_finished_is_never_patched() -> None:
    done = {"startTime": STARTED, "conditions": [{"type": "Complete", "status": "True"}]}
    decision = decide(observed({"suspend": True}, job=job(status=done)), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Succeeded"


def test_a_job_we_do_not_own_is_not_patched() -> None:
    stranger = job()
    stranger["metadata"]["ownerReferences"] = []
    assert decide(observed({"suspend": True}, job=stranger), SETTINGS, now=NOW).writes == ()


def test_a_run_created_suspended_gets_a_suspended_job() -> None:
    decision = decide(observed({"suspend": True}), SETTINGS, now=NOW)
    created = [w for w in decision.writes if isinstance(w, Create) and w.kind == "Job"]
    assert created[0].body["spec"]["suspend"] is True
    plain = decide(observed(), SETTINGS, now=NOW).writes
    jobs = [w.body for w in plain if isinstance(w, Create) and w.kind == "Job"]
    assert jobs[0]["spec"]["suspend"] is False


def test_cancelling_suspends_the_job_and_the_run_is_cancelled_once_it_is() -> None:
    asked = decide(observed({"cancel": True}, job=job()), SETTINGS, now=NOW)
    assert asked.writes == (Patch("Job", NS, "run", {"spec": {"suspend": True}}),)
    assert asked.status.phase == "Running"
    done = decide(
        observed({"cancel": True}, job=job(suspend=True, status=suspended(start=STARTED))),
        SETTINGS,
        now=NOW,
    )
    assert done.writes == ()
    assert done.status.phase == "Cancelled" and done.status.completion_time == NOW
    conditions = {c.type: (c.status, c.reason) for c in done.status.conditions}
    assert conditions["Failed"] == ("False", "Cancelled")  # cancelled is not failed
    assert conditions["Complete"] == ("False", "Cancelled")


def test_cancelling_a_suspended_run_keeps_its_job_suspended() -> None:
    obs = observed({"suspend": True, "cancel": True}, job=job(suspend=True, status=suspended()))
    decision = decide(obs, SETTINGS, now=NOW)
    assert decision.writes == () and decision.status.phase == "Cancelled"


def test_a_run_cancelled_before_it_started_makes_nothing() -> None:
    decision = decide(observed({"cancel": True}), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Cancelled" and decision.status.result is None
    events = transition_events(InferenceRunStatus(), decision.status)
    assert [(e.reason, e.message) for e in events] == [("Cancelled", "cancelled before it started")]


def test_cancelled_result_is_the_runners_sigterm_summary() -> None:
    stopped = pod("run", exit_code=143, message=CANCELLED_SUMMARY)
    obs = observed({"cancel": True}, job=job(suspend=True, status=suspended()), pods=[stopped])
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.result is not None
    assert (status.result.records_written, status.result.records_failed) == (290, 10)
    assert status.progress is not None and status.progress.text == "300"


def test_cancelled_result_falls_back_to_the_last_progress_report() -> None:
    progress = RunProgress(
        job_name="run",
        records_read=120,
        records_written=118,
        records_failed=2,
        records_total=1000,
        updated_at=NOW,
    )
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=progress)
    obs = observed({"cancel": True}, job=job(suspend=True, status=suspended()), previous=previous)
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.result is not None
    assert (status.result.records_read, status.result.records_written) == (120, 118)
    assert status.progress is not None
    assert (status.progress.text, status.progress.rate_text) == ("120/1k (12%)", None)


def test_the_summary_wins_over_an_older_progress_report() -> None:
    progress = RunProgress(job_name="run", records_read=100, records_written=100, updated_at=NOW)
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=progress)
    stopped = pod("run", exit_code=143, message=CANCELLED_SUMMARY)
    cancelled = job(suspend=True, status=suspended())
    obs = observed({"cancel": True}, job=cancelled, pods=[stopped], previous=previous)
    result = decide(obs, SETTINGS, now=NOW).status.result
    assert result is not None and result.records_written == 290


def test_the_summary_of_a_pod_deleted_before_the_pass_wins_over_the_progress_report() -> None:
    # The Job controller deletes a suspended Job's pods as soon as the runner ends: its
    # SIGTERM summary reaches the pass only as the deleted pod's last state.
    progress = RunProgress(job_name="run", records_read=230, records_written=230, updated_at=NOW)
    previous = InferenceRunStatus(phase="Cancelled", job_name="run", progress=progress)
    gone = pod("run", exit_code=143, message=CANCELLED_SUMMARY)
    cancelled = job(suspend=True, status=suspended())
    obs = observed({"cancel": True}, job=cancelled, stopped_pods=[gone], previous=previous)
    result = decide(obs, SETTINGS, now=NOW).status.result
    assert result is not None and (result.records_written, result.records_failed) == (290, 10)


def test_a_deleted_pods_summary_is_not_the_result_of_a_run_that_was_not_cancelled() -> None:
    # A suspended (not cancelled) run is not finished: no result, whatever its pods said.
    gone = pod("run", exit_code=143, message=CANCELLED_SUMMARY)
    obs = observed(
        {"suspend": True}, job=job(suspend=True, status=suspended()), stopped_pods=[gone]
    )
    assert decide(obs, SETTINGS, now=NOW).status.result is None


def test_a_cancelled_run_is_deleted_by_delete_on_completion_not_on_success() -> None:
    policy = {names.POLICY_ANNOTATION: "DeleteOnCompletion", names.DELAY_ANNOTATION: "0"}
    cancelled = job(suspend=True, status=suspended(), annotations=policy)
    decision = decide(observed({"cancel": True}, job=cancelled), SETTINGS, now=NOW)
    assert decision.deletions == (Delete("InferenceRun", NS, "run", "run-uid"),)
    assert decision.deletions[0].why == "autoDeletePolicy=DeleteOnCompletion"
    policy[names.POLICY_ANNOTATION] = "DeleteOnSuccess"
    kept = job(suspend=True, status=suspended(), annotations=policy)
    assert decide(observed({"cancel": True}, job=kept), SETTINGS, now=NOW).deletions == ()


def test_events_say_suspended_resumed_and_cancelled() -> None:
    running = InferenceRunStatus(phase="Running", job_name="run")
    paused = InferenceRunStatus(phase="Suspended", job_name="run")
    counts = {"recordsRead": 3, "recordsWritten": 2, "recordsFailed": 1}
    cancelled = InferenceRunStatus.model_validate(
        {"phase": "Cancelled", "jobName": "run", "result": counts}
    )
    assert [(e.reason, e.message) for e in transition_events(running, paused)] == [
        ("Suspended", "Job run is suspended")
    ]
    assert [(e.reason, e.message) for e in transition_events(paused, running)] == [
        ("Resumed", "Job run resumed")
    ]
    assert [(e.type, e.reason, e.message) for e in transition_events(running, cancelled)] == [
        (
            "Normal",
            "Cancelled",
            "Job run cancelled; the committed output is kept: 2 written, 1 failed of 3 read",
        )
    ]


def test_a_finished_run_stays_finished_when_cancel_comes_late() -> None:
    gave_up = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    failed = {"startTime": STARTED, "conditions": [gave_up]}
    decision = decide(observed({"cancel": True}, job=job(status=failed)), SETTINGS, now=NOW)
    assert decision.writes == () and decision.status.phase == "Failed"
