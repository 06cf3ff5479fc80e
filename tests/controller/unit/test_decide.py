"""The pure `decide` step from plain data: observed run in, child writes, status and
deletions out. Nothing is faked and nothing is read: each test builds an `Observed`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.run import InferenceRunSpec, InferenceRunStatus
from controller.core import names
from controller.core.decide import Create, Delete, Patch, decide
from controller.core.settings import Settings
from controller.core.status import Observed
from controller.core.validation import Problem
from tests.controller.unit.objects import NS, config, finished, pod, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
SETTINGS = Settings()


def observed(obj: dict[str, Any] | None = None, **fields: Any) -> Observed:
    obj = obj or run()
    fields.setdefault("config", config())
    return Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=InferenceRunStatus.model_validate(obj.get("status") or {}),
        **fields,
    )


def ours(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    owner = {"kind": "InferenceRun", "name": "run", "uid": "run-uid", "controller": True}
    meta = {"name": name, "namespace": NS, "uid": f"{name}-uid", "ownerReferences": [owner]}
    return {"kind": kind, "metadata": meta, **extra}


def test_new_one_shot_run_creates_its_contract_then_its_job_and_is_pending() -> None:
    decision = decide(observed(), SETTINGS, now=NOW)
    assert [(type(w), w.kind) for w in decision.writes] == [(Create, "ConfigMap"), (Create, "Job")]
    assert decision.status.phase == "Pending"
    assert decision.deletions == () and decision.requeue_after is None


def test_started_one_shot_run_writes_nothing_even_when_its_config_changed() -> None:
    changed = config(image="other:2")
    decision = decide(observed(job=ours("Job", "run"), config=changed), SETTINGS, now=NOW)
    assert decision.writes == ()


def test_missing_config_is_a_condition_and_no_write() -> None:
    decision = decide(observed(config=None), SETTINGS, now=NOW)
    assert decision.writes == ()
    accepted = decision.status.conditions[0]
    assert (accepted.type, accepted.status, accepted.reason) == (
        "Accepted",
        "False",
        "ConfigNotFound",
    )


def test_child_we_do_not_own_stops_the_writes_with_name_conflict() -> None:
    stranger = {"kind": "ConfigMap", "metadata": {"name": "run-contract", "namespace": NS}}
    decision = decide(observed(config_map=stranger), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.conditions[0].reason == "NameConflict"


def test_answer_of_the_api_server_is_reported_instead_of_writing_again() -> None:
    refused = Problem("spec", "ChildRejected", "the API server refused Job")
    decision = decide(observed(answer=refused), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.conditions[0].reason == "ChildRejected"


def test_config_map_whose_data_drifted_is_patched_with_its_data_only() -> None:
    current = decide(observed(), SETTINGS, now=NOW).writes[0]
    assert isinstance(current, Create)
    drifted = {**current.body, "data": {"contract.json": "{}"}}
    drifted["metadata"] = {**drifted["metadata"], "uid": "cm-uid"}
    decision = decide(observed(config_map=drifted), SETTINGS, now=NOW)
    patch = decision.writes[0]
    assert isinstance(patch, Patch) and patch.body == {"data": current.body["data"]}


def test_succeeded_run_is_deleted_after_the_policy_delay() -> None:
    annotations = {names.POLICY_ANNOTATION: "DeleteOnSuccess", names.DELAY_ANNOTATION: "60"}
    job = ours(
        "Job", "run", status={**finished("Complete"), "completionTime": "2026-01-01T00:01:30Z"}
    )
    job["metadata"]["annotations"] = annotations
    pods = [pod("run", exit_code=0, message="{}")]
    waiting = decide(observed(job=job, pods=pods), SETTINGS, now=NOW)
    assert waiting.status.phase == "Succeeded"
    assert waiting.deletions == () and waiting.requeue_after == 30
    due = decide(observed(job=job, pods=pods), SETTINGS, now=NOW + timedelta(seconds=31))
    assert due.deletions == (Delete("InferenceRun", NS, "run", "run-uid"),)


def test_failed_run_is_kept_under_delete_on_success() -> None:
    job = ours("Job", "run", status=finished("Failed", reason="BackoffLimitExceeded"))
    job["metadata"]["annotations"] = {names.POLICY_ANNOTATION: "DeleteOnSuccess"}
    decision = decide(observed(job=job), SETTINGS, now=NOW)
    assert decision.status.phase == "Failed" and decision.deletions == ()


def test_job_deleted_by_someone_else_fails_a_running_run_and_is_not_recreated() -> None:
    obj = run()
    obj["status"] = {"phase": "Running", "jobName": "run"}
    decision = decide(observed(obj), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Failed"
    assert decision.status.conditions[-1].reason == "JobDeleted"


def test_scheduled_run_keeps_its_cron_job_current_and_looks_again_before_the_next_time() -> None:
    obj = run(schedule="*/5 * * * *")
    first = decide(observed(obj), SETTINGS, now=NOW)
    assert [w.kind for w in first.writes] == ["ConfigMap", "CronJob"]
    config_map, cron_job = (w.body for w in first.writes if isinstance(w, Create))
    stored = [{**config_map, "metadata": {**config_map["metadata"], "uid": "c"}},
              {**cron_job, "metadata": {**cron_job["metadata"], "uid": "j"}}]  # fmt: skip
    current = decide(observed(obj, config_map=stored[0], cron_job=stored[1]), SETTINGS, now=NOW)
    assert current.writes == ()
    assert current.status.phase == "Scheduled"
    assert current.requeue_after is not None and 0 < current.requeue_after <= 181
    edited = run(schedule="0 * * * *")
    drift = decide(observed(edited, config_map=stored[0], cron_job=stored[1]), SETTINGS, now=NOW)
    assert [type(w) for w in drift.writes] == [Patch]


def test_finished_jobs_of_a_scheduled_run_are_deleted_by_policy() -> None:
    obj = run(schedule="*/5 * * * *")
    done = ours("Job", "run-29000000", status=finished("Complete"))
    decision = decide(
        observed(obj, config=config(autoDeletePolicy="DeleteOnCompletion"), jobs=[done]),
        SETTINGS,
        now=NOW,
    )
    assert Delete("Job", NS, "run-29000000", "run-29000000-uid") in decision.deletions
