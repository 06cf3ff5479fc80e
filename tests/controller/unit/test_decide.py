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


# -- a config in another namespace is pinned (#17: a shared config cannot take over a namespace)


def shared(generation: int = 1, uid: str = "cfg-uid", **spec: Any) -> dict[str, Any]:
    obj = config(**spec)
    obj["metadata"].update(namespace="team-a", generation=generation, uid=uid)
    obj["spec"]["allowedNamespaces"] = [NS]
    return obj


def nightly(generation: int = 1, accepted: int | None = None, **ref: Any) -> dict[str, Any]:
    obj = run(schedule="0 2 * * *", configRef={"name": "cfg", "namespace": "team-a", **ref})
    obj["metadata"]["generation"] = generation
    if accepted is not None:
        obj["status"] = {
            "phase": "Scheduled",
            "observedGeneration": 1,
            "acceptedConfig": {"uid": "cfg-uid", "generation": accepted},
        }
    return obj


def stored_children(obs_run: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    writes = decide(observed(obs_run, config=cfg), SETTINGS, now=NOW).writes
    bodies = [w.body for w in writes if isinstance(w, Create)]
    for body in bodies:
        body["metadata"] = {**body["metadata"], "uid": body["kind"]}
    return {"config_map": bodies[0], "cron_job": bodies[1]}


def condition(decision: Any, type_: str) -> Any:
    return next((c for c in decision.status.conditions if c.type == type_), None)


def test_run_accepts_a_shared_config_as_it_is_when_created() -> None:
    decision = decide(observed(nightly(), config=shared()), SETTINGS, now=NOW)
    assert [w.kind for w in decision.writes] == ["ConfigMap", "CronJob"]
    assert decision.status.accepted_config is not None
    assert decision.status.accepted_config.generation == 1
    assert condition(decision, "ConfigCurrent").status == "True"


def test_change_of_a_shared_config_does_not_reach_the_run_until_its_owner_accepts_it() -> None:
    children = stored_children(nightly(), shared())
    # team-a swaps the image and adds team-b's Secret to the env: generation 2.
    secret_env = {"env": [{"name": "X", "secretKeyRef": {"name": "b-db", "key": "p"}}]}
    evil = shared(generation=2, image="evil/runner:1", pod=secret_env)
    waiting = decide(observed(nightly(accepted=1), config=evil, **children), SETTINGS, now=NOW)
    assert waiting.writes == ()  # the CronJob keeps running generation 1
    current = condition(waiting, "ConfigCurrent")
    assert (current.status, current.reason) == ("False", "ConfigChangeNotAccepted")
    assert "spec.configRef.generation: 2" in current.message
    assert waiting.status.accepted_config.generation == 1
    # The owner reviews and accepts by editing the run.
    accepted = nightly(generation=2, accepted=1)
    accepted["spec"]["configRef"]["generation"] = 2
    taken = decide(observed(accepted, config=evil, **children), SETTINGS, now=NOW)
    assert [type(w) for w in taken.writes] == [Patch, Patch]
    assert taken.status.accepted_config.generation == 2


def test_naming_the_new_generation_in_advance_is_not_an_acceptance_without_an_edit() -> None:
    children = stored_children(nightly(), shared())
    ahead = nightly(accepted=1)
    ahead["spec"]["configRef"]["generation"] = 2  # unchanged spec: observedGeneration is 1
    decision = decide(observed(ahead, config=shared(generation=2), **children), SETTINGS, now=NOW)
    assert decision.writes == ()


def test_a_shared_config_deleted_and_created_again_is_a_change() -> None:
    children = stored_children(nightly(), shared())
    again = shared(generation=1, uid="new-uid", image="evil/runner:1")
    decision = decide(observed(nightly(accepted=1), config=again, **children), SETTINGS, now=NOW)
    assert decision.writes == ()
    assert "deleted and created again" in condition(decision, "ConfigCurrent").message


def test_config_in_the_runs_own_namespace_is_followed_as_it_changes() -> None:
    obj = run(schedule="0 2 * * *")
    children = stored_children(obj, config())
    changed = config(image="ghcr.io/longrun/runner:2")
    changed["metadata"]["generation"] = 2
    decision = decide(observed(obj, config=changed, **children), SETTINGS, now=NOW)
    assert [type(w) for w in decision.writes] == [Patch, Patch]
    assert condition(decision, "ConfigCurrent") is None


def test_one_shot_run_naming_another_generation_waits_with_a_clear_condition() -> None:
    obj = run(configRef={"name": "cfg", "namespace": "team-a", "generation": 3})
    decision = decide(observed(obj, config=shared(generation=4)), SETTINGS, now=NOW)
    assert decision.writes == ()
    accepted = condition(decision, "Accepted")
    assert (accepted.status, accepted.reason) == ("False", "ConfigChangeNotAccepted")
