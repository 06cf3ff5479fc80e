"""Status derivation and event selection from observed children. Pure: nothing is faked."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.run import Execution, InferenceRunSpec, InferenceRunStatus
from controller.core.events import transition_events
from controller.core.jobs import parse_result
from controller.core.status import Observed, merge_history, next_schedule, one_shot_status
from controller.core.validation import Problem
from tests.controller.unit.objects import finished, pod, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
SUMMARY = '{"recordsRead": 5, "recordsWritten": 5, "rawBody": "<html>upstream</html>"}'


def observed(
    job: dict | None = None, pods: list | None = None, previous: InferenceRunStatus | None = None
) -> Observed:  # type: ignore[type-arg]
    obj = run()
    return Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=previous or InferenceRunStatus(),
        job=job,
        pods=pods or [],
    )


def job(status: dict) -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": "run", "namespace": "team"}, "status": status}


def test_pending_without_a_job() -> None:
    status = one_shot_status(observed(), problem=None, now=NOW)
    assert status.phase == "Pending"
    assert [c.status for c in status.conditions] == ["True", "False", "False", "False"]


def test_user_error_sets_accepted_false_with_reason() -> None:
    problem = Problem("spec.configRef", "ConfigNotFound", "create it")
    status = one_shot_status(observed(), problem=problem, now=NOW)
    accepted = status.conditions[0]
    assert (accepted.status, accepted.reason) == ("False", "ConfigNotFound")
    assert status.message == "create it"


def test_running_when_the_job_has_active_pods() -> None:
    status = one_shot_status(
        observed(job({"active": 1, "startTime": "2026-01-01T00:00:00Z"})), problem=None, now=NOW
    )
    assert status.phase == "Running" and status.start_time is not None


def test_succeeded_copies_only_known_result_fields() -> None:
    pods = [pod("run", exit_code=0, message=SUMMARY)]
    status = one_shot_status(observed(job(finished("Complete")), pods), problem=None, now=NOW)
    assert status.phase == "Succeeded"
    assert status.result is not None and status.result.records_written == 5
    assert "upstream" not in str(status.to_wire())


def test_failed_names_the_job_reason_and_the_exit_code_meaning() -> None:
    pods = [pod("run", exit_code=4, message='{"reason": "model 503"}')]
    failed = finished("Failed", reason="BackoffLimitExceeded", message="Job has reached the limit")
    status = one_shot_status(observed(job(failed), pods), problem=None, now=NOW)
    assert status.phase == "Failed"
    cond = next(c for c in status.conditions if c.type == "Failed")
    assert cond.reason == "BackoffLimitExceeded"
    assert "exit code 4: calling the model failed" in cond.message and "model 503" in cond.message


def test_pod_failure_policy_is_reported_as_bad_contract() -> None:
    failed = finished("Failed", reason="PodFailurePolicy")
    status = one_shot_status(observed(job(failed)), problem=None, now=NOW)
    assert next(c for c in status.conditions if c.type == "Failed").reason == "BadContract"


def test_garbage_termination_message_is_ignored_with_a_reason() -> None:
    assert parse_result("Traceback: boom") == (
        None,
        "the runner's termination message is not a valid summary; ignored",
    )
    assert parse_result('{"recordsRead": -1}')[0] is None
    assert parse_result("") == (None, None)


def test_transition_time_moves_only_when_status_flips() -> None:
    first = one_shot_status(observed(), problem=None, now=NOW)
    later = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    again = one_shot_status(observed(previous=first), problem=Problem("f", "X", "m"), now=later)
    flipped = one_shot_status(observed(previous=first), problem=None, now=later)
    assert again.conditions[0].last_transition_time == later  # True -> False
    assert flipped.conditions[0].last_transition_time == NOW  # unchanged status


def test_result_survives_after_pods_are_gone() -> None:
    pods = [pod("run", exit_code=0, message=SUMMARY)]
    done = one_shot_status(observed(job(finished("Complete")), pods), problem=None, now=NOW)
    later = one_shot_status(
        observed(job(finished("Complete")), [], previous=done), problem=None, now=NOW
    )
    assert later.result == done.result


def test_next_schedule_is_computed_in_the_run_time_zone() -> None:
    spec = InferenceRunSpec.model_validate(
        {"configRef": {"name": "c"}, "schedule": "0 9 * * *", "timeZone": "Europe/Rome"}
    )
    nxt = next_schedule(spec, after=datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
    assert nxt == datetime(2026, 1, 2, 8, 0, tzinfo=UTC)  # 09:00 in Rome is 08:00 UTC in winter


def test_history_keeps_the_newest_executions_and_remembered_results() -> None:
    def ex(i: int, **kw: object) -> Execution:
        return Execution.model_validate(
            {
                "jobName": f"j-{i:02d}",
                "phase": "Succeeded",
                "scheduleTime": f"2026-01-01T00:{i:02d}:00Z",
                **kw,
            }
        )

    previous = [ex(i, result={"recordsRead": i}) for i in range(12)][:10]
    merged = merge_history(previous, [ex(3), ex(20)])
    assert len(merged) == 10 and merged[0].job_name == "j-20"
    assert next(e for e in merged if e.job_name == "j-03").result is not None


def test_events_only_on_transitions() -> None:
    pending = one_shot_status(observed(), problem=None, now=NOW)
    assert [e.reason for e in transition_events(InferenceRunStatus(), pending)] == ["Pending"]
    assert transition_events(pending, pending) == []
    broken = one_shot_status(observed(), problem=Problem("f", "ConfigNotFound", "m"), now=NOW)
    events = transition_events(pending, broken)
    assert [(e.type, e.reason) for e in events] == [("Warning", "ConfigNotFound")]
    assert transition_events(broken, broken) == []


# Kubernetes >= 1.31: what a real Job controller reports for a failing Job with
# backoffLimit 2, in order (acceptance testing on v1.36 saw each of these).
FAILING_JOB_SEQUENCE = [
    {},  # created, not yet seen by the Job controller
    {"startTime": "2026-01-01T00:00:00Z", "active": 1},
    {"startTime": "2026-01-01T00:00:00Z", "active": 0, "failed": 1},  # back-off
    {"startTime": "2026-01-01T00:00:00Z", "active": 1, "failed": 1},
    {"startTime": "2026-01-01T00:00:00Z", "active": 0, "failed": 2},  # back-off
    {
        "startTime": "2026-01-01T00:00:00Z",
        "active": 0,
        "failed": 3,
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}
        ],
    },
    {
        "startTime": "2026-01-01T00:00:00Z",
        "failed": 3,
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
        ],
    },
]


def test_started_job_never_goes_back_to_pending() -> None:
    phases = [one_shot_status(observed(job=job(s)), problem=None, now=NOW).phase
              for s in FAILING_JOB_SEQUENCE]  # fmt: skip
    assert phases == ["Pending", "Running", "Running", "Running", "Running", "Running", "Failed"]


def test_success_criteria_met_is_running_until_complete() -> None:
    met = {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"}
    finishing = {"startTime": "2026-01-01T00:00:00Z", "active": 0, "succeeded": 1,
                 "conditions": [met]}  # fmt: skip
    assert one_shot_status(observed(job=job(finishing)), problem=None, now=NOW).phase == "Running"
    done = {**finishing, "conditions": [met, {"type": "Complete", "status": "True"}]}
    assert one_shot_status(observed(job=job(done)), problem=None, now=NOW).phase == "Succeeded"


def test_a_failing_job_with_retries_records_one_event_per_phase() -> None:
    previous, reasons = InferenceRunStatus(), []
    for s in FAILING_JOB_SEQUENCE:
        status = one_shot_status(observed(job=job(s), previous=previous), problem=None, now=NOW)
        reasons += [e.reason for e in transition_events(previous, status)]
        previous = status
    assert reasons == ["Pending", "Running", "BackoffLimitExceeded"]


def test_spent_error_budget_is_reported_as_such_not_as_a_bad_contract() -> None:
    failed = finished("Failed", reason="PodFailurePolicy")
    summary = (
        '{"recordsRead": 1000, "recordsWritten": 980, "recordsFailed": 20, '
        '"reason": "error budget exceeded: 20 failed records of 1000 (maxFailedRecords=0)"}'
    )
    status = one_shot_status(
        observed(job=job(failed), pods=[pod("run", exit_code=2, message=summary)]),
        problem=None,
        now=NOW,
    )
    failed_condition = next(c for c in status.conditions if c.type == "Failed")
    assert failed_condition.reason == "ErrorBudgetExceeded"
    assert "error budget spent" in (status.message or "")
