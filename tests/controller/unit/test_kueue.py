"""Kueue from plain data: the labels and suspension of a queued run's Job, the allow-lists of
priorities, and the decisions and status while Kueue holds the Job (Queued, preempted,
suspended through the Workload's spec.active, never through the Job's spec.suspend).

Pure: nothing is faked and nothing is read; each test builds an `Observed` holding the Job
and the Workload as Kueue v0.13 writes them (pkg/workload, pkg/controller/jobframework).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from contracts.run import InferenceRunSpec, InferenceRunStatus, RunProgress
from controller.core import builders, names
from controller.core.decide import Create, Patch, decide
from controller.core.events import transition_events
from controller.core.kueue import policy, workload
from controller.core.serving import uses
from controller.core.settings import Settings, SettingsError, settings_from_env
from controller.core.status import Observed, execution_of
from tests.controller.unit.objects import NS, config, resolved, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
SETTINGS = Settings()
QUEUE = {"queueName": "team-a"}
INSUFFICIENT = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
    "default, 1 more needed"
)
Obj = dict[str, Any]


def job(*, suspend: bool = True, labels: Obj | None = None, status: Obj | None = None) -> Obj:
    """The run's Job as Kueue holds it: suspended, in queue team-a."""
    owner = {"kind": "InferenceRun", "name": "run", "uid": "run-uid", "controller": True}
    return {
        "kind": "Job",
        "metadata": {
            "name": "run",
            "namespace": NS,
            "uid": "job-uid",
            "ownerReferences": [owner],
            "annotations": {names.RUN_ANNOTATION: "run"},
            "labels": {policy.QUEUE_LABEL: "team-a"} if labels is None else labels,
        },
        "spec": {"suspend": suspend},
        "status": status if status is not None else _suspended_status(),
    }


def _suspended_status() -> Obj:
    cond = {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
    return {"conditions": [{**cond, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


RUNNING = {"active": 1, "startTime": "2026-01-01T00:01:00Z"}


def condition(type_: str, status: bool, reason: str, message: str = "") -> Obj:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:01:00Z",
    }


def wl(
    *conditions: Obj, active: bool = True, owner_uid: str = "job-uid", **annotations: str
) -> Obj:
    """Kueue's Workload of the Job (`job-<name>-<hash>`, the Job its controller owner)."""
    owner = {"kind": "Job", "name": "run", "uid": owner_uid, "controller": True}
    return {
        "metadata": {
            "name": "job-run-3f2a1",
            "namespace": NS,
            "uid": "wl-uid",
            "ownerReferences": [owner],
            "annotations": dict(annotations),
        },
        "spec": {"active": active},
        "status": {"conditions": list(conditions)},
    }


PENDING = condition("QuotaReserved", False, "Pending", INSUFFICIENT)
ADMITTED = (
    condition("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue gpu"),
    condition("Admitted", True, "Admitted", "The workload is admitted"),
)
PREEMPTED_TEXT = (
    "Preempted to accommodate a workload (UID: u2, JobUID: j2) due to prioritization in the "
    "ClusterQueue"
)
PREEMPTED = (
    condition("Evicted", True, "Preempted", PREEMPTED_TEXT),
    condition("Preempted", True, "InClusterQueue", PREEMPTED_TEXT),
    condition("QuotaReserved", False, "Pending", PREEMPTED_TEXT),
)


def observed(spec: Obj | None = None, **fields: Any) -> Observed:
    obj = run(**{**QUEUE, **(spec or {})})
    fields.setdefault("config", config())
    return Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=fields.pop("previous", None) or InferenceRunStatus(),
        **fields,
    )


def cond_of(status: InferenceRunStatus, type_: str) -> Any:
    return next((c for c in status.conditions if c.type == type_), None)


# -- what a queued run's Job carries ---------------------------------------------------------


def test_a_run_in_a_queue_creates_its_job_suspended_with_the_queue_label() -> None:
    decision = decide(observed(), SETTINGS, now=NOW)
    jobs = [w.body for w in decision.writes if isinstance(w, Create) and w.kind == "Job"]
    assert len(jobs) == 1
    assert jobs[0]["spec"]["suspend"] is True
    assert jobs[0]["metadata"]["labels"][policy.QUEUE_LABEL] == "team-a"
    assert names.MANAGED_BY in jobs[0]["metadata"]["labels"]  # still selected by the informers


def test_a_run_outside_any_queue_creates_its_job_running_without_kueue_labels() -> None:
    body = builders.build_job(resolved(), SETTINGS)
    assert body["spec"]["suspend"] is False
    assert not any(k.startswith("kueue.x-k8s.io/") for k in body["metadata"]["labels"])


def test_the_controllers_default_queue_applies_to_runs_that_name_none() -> None:
    settings = replace(SETTINGS, default_queue_name="shared")
    body = builders.build_job(resolved(), settings)
    assert body["metadata"]["labels"][policy.QUEUE_LABEL] == "shared"
    assert body["spec"]["suspend"] is True
    own = builders.build_job(resolved(QUEUE), settings)
    assert own["metadata"]["labels"][policy.QUEUE_LABEL] == "team-a"


def test_kueue_managing_jobs_without_a_queue_name_makes_every_job_start_suspended() -> None:
    settings = replace(SETTINGS, kueue_manages_jobs_without_queue_name=True)
    body = builders.build_job(resolved(), settings)
    assert body["spec"]["suspend"] is True
    assert policy.QUEUE_LABEL not in body["metadata"]["labels"]
    assert policy.is_managed(body, settings) and not policy.is_managed(body, SETTINGS)


def test_a_scheduled_runs_executions_wait_in_the_queue_suspended() -> None:
    spec = {**QUEUE, "schedule": "@hourly", "workloadPriorityClassName": "batch-low"}
    template = builders.build_cron_job(resolved(spec), SETTINGS)["spec"]["jobTemplate"]
    assert template["metadata"]["labels"][policy.QUEUE_LABEL] == "team-a"
    assert template["metadata"]["labels"][policy.PRIORITY_LABEL] == "batch-low"
    assert template["spec"]["suspend"] is True
    plain = builders.build_cron_job(resolved({"schedule": "@hourly"}), SETTINGS)
    assert "suspend" not in plain["spec"]["jobTemplate"]["spec"]


def test_priorities_reach_the_job_label_and_the_pod_spec() -> None:
    spec = {**QUEUE, "priorityClassName": "batch-high", "workloadPriorityClassName": "urgent"}
    body = builders.build_job(resolved(spec), SETTINGS)
    assert body["metadata"]["labels"][policy.PRIORITY_LABEL] == "urgent"
    assert body["spec"]["template"]["spec"]["priorityClassName"] == "batch-high"
    assert (
        "priorityClassName"
        not in builders.build_job(resolved(), SETTINGS)["spec"]["template"]["spec"]
    )


# -- who may name a priority -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "setting"),
    [
        ("priorityClassName", "ALLOWED_PRIORITY_CLASSES (chart: runner.allowedPriorityClasses)"),
        (
            "workloadPriorityClassName",
            "ALLOWED_WORKLOAD_PRIORITY_CLASSES (chart: kueue.allowedWorkloadPriorityClasses)",
        ),
    ],
)
def test_a_priority_outside_the_allow_list_is_refused_naming_field_and_setting(
    field: str, setting: str
) -> None:
    decision = decide(observed({field: "top"}), SETTINGS, now=NOW)
    assert decision.writes == ()
    accepted = cond_of(decision.status, "Accepted")
    assert accepted.status == "False" and accepted.reason.endswith("NotAllowed")
    assert accepted.message.startswith(f"spec.{field}: ")
    assert setting in accepted.message and "which is empty" in accepted.message


def test_allowed_priorities_pass_by_glob() -> None:
    settings = replace(
        SETTINGS, allowed_priority_classes=("batch-*",), allowed_workload_priority_classes=("*",)
    )
    spec = InferenceRunSpec.model_validate(
        {"configRef": {"name": "c"}, "priorityClassName": "batch-high",
         "workloadPriorityClassName": "urgent"}
    )  # fmt: skip
    assert list(policy.priority_problems(spec, settings)) == []
    other = spec.model_copy(update={"priority_class_name": "system-node-critical"})
    assert [p.field for p in policy.priority_problems(other, settings)] == [
        "spec.priorityClassName"
    ]


def test_the_default_queue_setting_must_be_a_queue_name() -> None:
    assert settings_from_env({"DEFAULT_QUEUE_NAME": " team-a "}).default_queue_name == "team-a"
    assert settings_from_env({}).default_queue_name is None
    with pytest.raises(SettingsError, match="DEFAULT_QUEUE_NAME='Team A'"):
        settings_from_env({"DEFAULT_QUEUE_NAME": "Team A"})
    env = {"KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME": "true", "ALLOWED_PRIORITY_CLASSES": "a,b"}
    got = settings_from_env(env)
    assert got.kueue_manages_jobs_without_queue_name and got.allowed_priority_classes == ("a", "b")


# -- never fight the queue: no spec.suspend writes, the Workload's spec.active instead -------


def test_a_job_kueue_started_is_left_running_never_suspended_again() -> None:
    obs = observed(job=job(suspend=False, status=RUNNING), workload=wl(*ADMITTED))
    decision = decide(obs, SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Running"
    assert (
        cond_of(decision.status, "Queued").status,
        cond_of(decision.status, "Queued").reason,
    ) == (
        "False",
        "Admitted",
    )


def test_a_job_kueue_holds_is_never_resumed_by_longrun() -> None:
    decision = decide(observed(job=job(), workload=wl(PENDING)), SETTINGS, now=NOW)
    assert decision.writes == ()


def test_a_queue_label_kueue_added_makes_the_job_kueues() -> None:
    # Kueue's LocalQueue defaulting labels a Job created without a queue: it is Kueue's now.
    obs = observed({"queueName": None}, job=job(labels={policy.QUEUE_LABEL: "default"}))
    assert decide(obs, SETTINGS, now=NOW).writes == ()
    plain = observed({"queueName": None}, job=job(labels={}))
    assert decide(plain, SETTINGS, now=NOW).writes == (
        Patch("Job", NS, "run", {"spec": {"suspend": False}}),
    )


def test_suspending_a_queued_run_deactivates_its_workload_and_marks_it() -> None:
    obs = observed(
        {"suspend": True}, job=job(suspend=False, status=RUNNING), workload=wl(*ADMITTED)
    )
    decision = decide(obs, SETTINGS, now=NOW)
    body = {"metadata": {"annotations": {workload.DEACTIVATED_ANNOTATION: "true"}},
            "spec": {"active": False}}  # fmt: skip
    assert decision.writes == (Patch("Workload", NS, "job-run-3f2a1", body),)
    assert decision.status.phase == "Running"  # until Kueue evicts it and suspends the Job


def test_a_queued_run_suspended_once_kueue_took_its_job_back_is_suspended() -> None:
    inactive = wl(condition("Evicted", True, "Deactivated", "The workload is deactivated"),
                  active=False, **{workload.DEACTIVATED_ANNOTATION: "true"})  # fmt: skip
    decision = decide(observed({"suspend": True}, job=job(), workload=inactive), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Suspended"
    assert cond_of(decision.status, "Queued").status == "False"


def test_resuming_reactivates_the_workload_longrun_deactivated() -> None:
    inactive = wl(active=False, **{workload.DEACTIVATED_ANNOTATION: "true"})
    previous = InferenceRunStatus(phase="Suspended", job_name="run")
    decision = decide(observed(job=job(), workload=inactive, previous=previous), SETTINGS, now=NOW)
    body = {"metadata": {"annotations": {workload.DEACTIVATED_ANNOTATION: None}},
            "spec": {"active": True}}  # fmt: skip
    assert decision.writes == (Patch("Workload", NS, "job-run-3f2a1", body),)


def test_a_workload_kueue_deactivated_is_not_reactivated_but_explained() -> None:
    why = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    evicted = condition("Evicted", True, "DeactivatedDueToRequeuingLimitExceeded", why)
    decision = decide(observed(job=job(), workload=wl(evicted, active=False)), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Queued"
    queued = cond_of(decision.status, "Queued")
    assert queued.reason == "Evicted"
    assert why in queued.message and "suspend and resume the run" in queued.message
    # ... and suspending then resuming the run claims it, so the resume queues it again.
    claimed = decide(observed({"suspend": True}, job=job(), workload=wl(evicted, active=False)),
                     SETTINGS, now=NOW)  # fmt: skip
    assert claimed.writes[0].kind == "Workload"
    assert claimed.writes[0].body["metadata"]["annotations"] == {
        workload.DEACTIVATED_ANNOTATION: "true"
    }


def test_a_workload_another_job_owns_is_ignored() -> None:
    obs = observed({"suspend": True}, job=job(), workload=wl(PENDING, owner_uid="other"))
    decision = decide(obs, SETTINGS, now=NOW)
    assert decision.writes == ()  # no Workload of ours yet: nothing to deactivate
    assert decision.status.workload_name is None


def test_cancelling_a_queued_run_deactivates_the_workload_and_cancels() -> None:
    decision = decide(
        observed({"cancel": True}, job=job(), workload=wl(PENDING)), SETTINGS, now=NOW
    )
    assert [w.kind for w in decision.writes] == ["Workload"]
    assert decision.status.phase == "Cancelled"


# -- a run suspended before it was ever queued -----------------------------------------------


def test_a_queued_run_suspended_before_its_job_exists_is_held_back() -> None:
    decision = decide(observed({"suspend": True}), SETTINGS, now=NOW)
    assert [w.kind for w in decision.writes] == ["ConfigMap"]  # no Job: nothing enters the queue
    assert decision.status.phase == "Suspended"
    assert 'LocalQueue "team-a"' in (decision.status.message or "")
    events = transition_events(InferenceRunStatus(), decision.status)
    assert [e.reason for e in events] == ["Suspended"]
    resumed = decide(observed(config_map=_contract()), SETTINGS, now=NOW)
    assert [w.kind for w in resumed.writes] == ["Job"]


def _contract() -> Obj:
    body = builders.build_config_map(resolved(QUEUE), SETTINGS)
    body["metadata"]["ownerReferences"][0]["uid"] = "run-uid"
    return body


# -- Queued, with Kueue's reason; preempted; admitted again ----------------------------------


def test_a_job_waiting_for_quota_shows_queued_with_kueues_reason() -> None:
    decision = decide(observed(job=job(), workload=wl(PENDING)), SETTINGS, now=NOW)
    status = decision.status
    assert status.phase == "Queued"
    assert INSUFFICIENT in (status.message or "")
    queued = cond_of(status, "Queued")
    assert (queued.status, queued.reason, queued.message) == ("True", "Pending", INSUFFICIENT)
    assert status.workload_name == "job-run-3f2a1"
    events = transition_events(InferenceRunStatus(phase="Pending"), status)
    assert ("Queued", f"Job run is queued: {INSUFFICIENT}") in [
        (e.reason, e.message) for e in events
    ]


def test_before_kueue_makes_the_workload_the_run_waits_quietly_then_asks_about_kueue() -> None:
    fresh = job(status={})
    fresh["metadata"]["creationTimestamp"] = "2026-01-01T00:01:50Z"  # 10 s before NOW
    status = decide(observed(job=fresh), SETTINGS, now=NOW).status
    assert status.phase == "Queued"
    queued = cond_of(status, "Queued")
    assert queued.reason == "WaitingForWorkload" and 'LocalQueue "team-a"' in queued.message
    assert "is Kueue running" not in queued.message
    before = InferenceRunStatus(phase="Pending", job_name="run")
    assert [e.reason for e in transition_events(before, status)] == []  # moments, usually
    stale = job(status={})
    stale["metadata"]["creationTimestamp"] = "2026-01-01T00:00:30Z"  # 90 s before NOW
    later = decide(observed(job=stale, previous=status), SETTINGS, now=NOW).status
    queued = cond_of(later, "Queued")
    assert queued.reason == "NoWorkload"
    assert "for 90 s: is Kueue running, and does it manage this namespace?" in queued.message
    assert [e.reason for e in transition_events(status, later)] == ["Queued"]


def test_a_preempted_job_shows_queued_preempted_and_an_event_with_kueues_reason() -> None:
    previous = InferenceRunStatus(phase="Running", job_name="run")
    obs = observed(job=job(), workload=wl(*PREEMPTED), previous=previous)
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.phase == "Queued"
    queued, preempted = cond_of(status, "Queued"), cond_of(status, "Preempted")
    assert queued.reason == "Preempted" and "InClusterQueue" in queued.message
    assert "resumes after its committed chunks" in queued.message
    assert (preempted.status, preempted.reason, preempted.message) == (
        "True",
        "InClusterQueue",
        PREEMPTED_TEXT,
    )
    events = {e.reason: e for e in transition_events(previous, status)}
    assert set(events) == {"Preempted"}  # its own event says it all
    assert "InClusterQueue" in events["Preempted"].message
    assert events["Preempted"].type == "Normal"


def test_readmitted_after_a_preemption_the_run_runs_and_remembers_it() -> None:
    again = [
        condition("Evicted", False, "QuotaReserved", f"Previously: {PREEMPTED_TEXT}"),
        condition("Preempted", False, "QuotaReserved", f"Previously: {PREEMPTED_TEXT}"),
        *ADMITTED,
    ]
    obs = observed(job=job(suspend=False, status=RUNNING), workload=wl(*again))
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.phase == "Running"
    preempted = cond_of(status, "Preempted")
    assert (preempted.status, preempted.reason) == ("False", "Readmitted")
    assert preempted.message.startswith("Previously: Preempted")


def test_an_admitted_job_kueue_has_not_started_yet_stays_queued_as_admitted() -> None:
    status = decide(observed(job=job(), workload=wl(*ADMITTED)), SETTINGS, now=NOW).status
    assert status.phase == "Queued"  # never Suspended: the run is not
    queued = cond_of(status, "Queued")
    assert (queued.status, queued.reason) == ("True", "Admitted")
    assert "admitted by ClusterQueue" in queued.message


def test_a_finished_queued_run_keeps_queued_false_and_its_workload_name() -> None:
    done = {
        "conditions": [condition("Complete", True, "CompletionsReached")],
        "startTime": "2026-01-01T00:01:00Z",
        "completionTime": "2026-01-01T00:01:30Z",
    }
    finished = wl(*ADMITTED, condition("Finished", True, "Succeeded"))
    status = decide(observed(job=job(suspend=False, status=done), workload=finished),
                    SETTINGS, now=NOW).status  # fmt: skip
    assert status.phase == "Succeeded"
    assert (cond_of(status, "Queued").status, cond_of(status, "Queued").reason) == (
        "False",
        "Succeeded",
    )
    assert status.workload_name == "job-run-3f2a1"


def test_runs_outside_kueue_get_no_queue_condition() -> None:
    obs = observed({"queueName": None}, job=job(labels={}, suspend=False, status=RUNNING))
    status = decide(obs, SETTINGS, now=NOW).status
    assert cond_of(status, "Queued") is None and status.workload_name is None


def test_a_preempted_run_keeps_its_counts_without_a_rate() -> None:
    kept = RunProgress(
        job_name="run", records_read=400, records_written=400, records_per_second=9.0
    )
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=kept)
    status = decide(observed(job=job(), workload=wl(*PREEMPTED), previous=previous),
                    SETTINGS, now=NOW).status  # fmt: skip
    assert status.phase == "Queued"
    assert status.progress is not None and status.progress.records_written == 400
    assert status.progress.records_per_second is None


def test_a_queued_run_keeps_the_deployment_it_uses_up() -> None:
    assert uses.is_active({"status": {"phase": "Queued", "modelDeployment": "team/qwen"}})


def test_a_scheduled_execution_kueue_holds_is_pending_not_running() -> None:
    spawned = job()
    spawned["metadata"]["name"] = "run-29000000"
    assert execution_of(spawned, []).phase == "Pending"
    by_hand = job(labels={})
    assert execution_of(by_hand, []).phase == "Running"  # suspended by hand: it had started
