"""The status of a run over several pods adds its indexes up: the result from each index's
newest summary, the live progress from each index's newest report, and decide keeps the
Indexed Job as it is. Pure: nothing is faked and nothing is read; each test builds an
`Observed` holding the pods (with their completion index) and log tails as read.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.run import InferenceRunSpec, InferenceRunStatus, RunProgress
from controller.core import builders, names
from controller.core.decide import decide
from controller.core.jobs import runner_exit
from controller.core.progress import log_targets
from controller.core.settings import Settings
from controller.core.shards import INDEX_KEY
from controller.core.status import Observed, RunnerLog
from tests.controller.unit.objects import NS, config, finished, resolved, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
SETTINGS = Settings(progress_interval=15.0)
SHARDS = {"parallelism": 3}


def summary(read: int, *, failed: int = 0, **more: Any) -> str:
    counts = {"recordsRead": read, "recordsWritten": read - failed, "recordsFailed": failed}
    return json.dumps({**counts, "output": "s3://out/run/", **more})


def report(written: int, *, total: int | None = None, rate: float | None = None) -> str:
    counts: dict[str, Any] = {"read": written, "written": written, "failed": 0}
    counts.update({k: v for k, v in (("total", total), ("rate", rate)) if v is not None})
    return "some warning\n" + json.dumps({"longrunProgress": counts}) + "\n"


def indexed_job(parallelism: int = 3, **status: Any) -> dict[str, Any]:
    """The Job the builders make for the run, as the Job controller reports it."""
    job = builders.build_job(resolved({"parallelism": parallelism}), SETTINGS)
    job["metadata"]["uid"] = "job-uid"
    job["spec"].update(backoffLimit=2147483647, suspend=False)  # as the API server defaults
    job["status"] = status or {"active": parallelism, "startTime": "2026-01-01T00:00:00Z"}
    return job


def shard_pod(
    index: int,
    *,
    exit_code: int | None = None,
    message: str = "",
    created: str = "00:00:01",
    phase: str = "Running",
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"run-{index}-{created.replace(':', '')}",
            "namespace": NS,
            "labels": {"batch.kubernetes.io/job-name": "run", INDEX_KEY: str(index)},
            "annotations": {names.RUN_ANNOTATION: "run", INDEX_KEY: str(index)},
            "creationTimestamp": f"2026-01-01T{created}Z",
        },
        "status": {"phase": phase},
    }
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "message": message}
        pod["status"] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": [{"name": "runner", "state": {"terminated": terminated}}],
        }
    return pod


def observed(spec: dict[str, Any] | None = None, **fields: Any) -> Observed:
    obj = run(**{**SHARDS, **(spec or {})})
    fields.setdefault("config", config())
    return Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=fields.pop("previous", None) or InferenceRunStatus(),
        **fields,
    )


# -- the result -----------------------------------------------------------------------------


def test_result_adds_up_the_summaries_of_every_index() -> None:
    pods = [
        shard_pod(0, exit_code=0, message=summary(10, chunks=1, durationSeconds=9.5)),
        shard_pod(1, exit_code=0, message=summary(12, failed=2, chunks=2, durationSeconds=30)),
        shard_pod(2, exit_code=0, message=summary(8, chunks=1, totalTokens=80)),
    ]
    obs = observed(job=indexed_job(**finished("Complete")), pods=pods)
    status = decide(obs, SETTINGS, now=NOW).status
    result = status.result
    assert status.phase == "Succeeded" and result is not None
    assert (result.records_read, result.records_written, result.records_failed) == (30, 28, 2)
    assert (result.chunks, result.duration_seconds, result.total_tokens) == (4, 30, 80)
    assert result.output == "s3://out/run/"
    assert status.progress is not None and status.progress.text == "30/30 (100%)"


def test_an_index_whose_pod_was_replaced_counts_its_newest_pod_once() -> None:
    pods = [
        shard_pod(0, exit_code=0, message=summary(10)),
        shard_pod(1, exit_code=4, message=summary(4, reason="model down"), created="00:00:01"),
        shard_pod(1, exit_code=0, message=summary(10), created="00:01:00"),  # counts all of 1
    ]
    result = runner_exit(pods, "run")
    assert result is not None and result.exit_code == 0 and result.result is not None
    assert (result.result.records_read, result.result.reason) == (20, None)


def test_a_failed_index_gives_the_run_its_exit_code_and_reason() -> None:
    pods = [
        shard_pod(0, exit_code=143, message=summary(5, reason="stopped by SIGTERM")),
        shard_pod(1, exit_code=4, message=summary(3, reason="calling the model failed: 503")),
        shard_pod(2, exit_code=0, message=summary(7)),
    ]
    failed = finished("Failed", reason="FailedIndexes", message="Job has failed indexes")
    status = decide(observed(job=indexed_job(**failed), pods=pods), SETTINGS, now=NOW).status
    assert status.phase == "Failed" and status.result is not None
    assert status.result.records_read == 15
    assert status.result.reason == "calling the model failed: 503"
    assert "runner exit code 4: calling the model failed" in (status.message or "")


def _completed_by(*which: bool | None) -> list[dict[str, Any]]:
    """Three indexes that exited 0, each saying (or not: None) whether it completed the run."""
    said = [{} if w is None else {"runCompleted": w} for w in which]
    return [shard_pod(i, exit_code=0, message=summary(10, **more)) for i, more in enumerate(said)]


def test_a_succeeded_job_whose_pods_all_say_none_completed_the_run_fails_output_incomplete() -> (
    None
):
    obs = observed(job=indexed_job(**finished("Complete")), pods=_completed_by(False, False, False))
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.phase == "Failed" and status.result is not None
    assert status.result.run_completed is False and status.result.records_read == 30
    failed = next(c for c in status.conditions if c.type == "Failed")
    assert (failed.status, failed.reason) == ("True", "OutputIncomplete")
    assert "input changed while the run ran" in (status.message or "")
    assert "Delete the output (or give the run a new one) and run again" in (status.message or "")


def test_one_index_that_completed_the_run_makes_it_succeed() -> None:
    obs = observed(job=indexed_job(**finished("Complete")), pods=_completed_by(False, True, False))
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.phase == "Succeeded" and status.result is not None
    assert status.result.run_completed is True


def test_an_index_that_does_not_say_or_whose_summary_is_missing_leaves_the_job_trusted() -> None:
    # A runner too old to say, or a summary lost: the Job's own verdict stands.
    for pods in (_completed_by(False, None, False), _completed_by(False, False)):
        obs = observed(job=indexed_job(**finished("Complete")), pods=pods)
        assert decide(obs, SETTINGS, now=NOW).status.phase == "Succeeded"


def test_a_cancelled_run_adds_up_its_indexes_whether_their_pods_are_cached_or_deleted() -> None:
    stopped = summary(40, reason="stopped by SIGTERM")
    cached = [shard_pod(0, exit_code=143, message=stopped)]
    gone = [shard_pod(i, exit_code=143, message=stopped) for i in (1, 2)]
    condition = {
        "type": "Suspended",
        "status": "True",
        "lastTransitionTime": "2026-01-01T00:01:00Z",
    }
    job = indexed_job(conditions=[condition])
    job["spec"]["suspend"] = True
    progress = RunProgress(job_name="run", records_read=60, records_written=60, updated_at=NOW)
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=progress)
    obs = observed({"cancel": True}, job=job, pods=cached, stopped_pods=gone, previous=previous)
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.phase == "Cancelled" and status.result is not None
    assert status.result.records_written == 120  # not the 60 of the last progress report


# -- live progress --------------------------------------------------------------------------


def test_reads_the_newest_running_pod_of_every_index() -> None:
    pods = [
        shard_pod(0),
        shard_pod(1, exit_code=1, created="00:00:01"),
        shard_pod(1, created="00:00:30"),
        shard_pod(2, exit_code=0, message=summary(5)),  # done: nothing to read
    ]
    targets = log_targets(observed(job=indexed_job(), pods=pods), SETTINGS, now=NOW)
    assert [(t.index, t.pod) for t in targets] == [(0, "run-0-000001"), (1, "run-1-000030")]
    fresh = InferenceRunStatus(progress=RunProgress(job_name="run", updated_at=NOW))
    assert (
        log_targets(observed(job=indexed_job(), pods=pods, previous=fresh), SETTINGS, now=NOW) == ()
    )


def test_progress_adds_up_every_index_and_estimates_from_the_summed_rate() -> None:
    pods = [shard_pod(i) for i in range(3)]
    tails = {0: report(10, total=100, rate=2.0), 1: report(20, total=100, rate=3.0)}
    tails[2] = report(30, total=100, rate=5.0)
    obs = observed(job=indexed_job(), pods=pods, runner_log=RunnerLog("run", shards=tails))
    progress = decide(obs, SETTINGS, now=NOW).status.progress
    assert progress is not None
    assert (progress.records_written, progress.records_total) == (60, 300)
    assert (progress.records_per_second, progress.eta_seconds) == (10.0, 24)  # 240 left at 10/s
    assert progress.text == "60/300 (20%)"


def test_a_finished_index_counts_its_summary_and_a_new_pod_its_predecessors() -> None:
    pods = [
        shard_pod(0, exit_code=0, message=summary(100)),  # finished: its share was 100
        shard_pod(1, exit_code=4, message=summary(30), created="00:00:01"),
        shard_pod(1, created="00:01:00"),  # replaced, no report yet
        shard_pod(2),
    ]
    log = RunnerLog("run", shards={1: "starting\n", 2: report(50, total=100, rate=5.0)})
    progress = decide(observed(job=indexed_job(), pods=pods, runner_log=log), SETTINGS, now=NOW)
    shown = progress.status.progress
    assert shown is not None and shown.records_written == 180
    assert shown.records_total is None  # index 1's share is not known until it reports
    assert (shown.records_per_second, shown.eta_seconds) == (5.0, None)


def test_progress_of_an_index_not_read_this_pass_is_kept_until_the_next_read() -> None:
    kept = RunProgress(job_name="run", records_written=7, updated_at=NOW - timedelta(seconds=3))
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=kept)
    obs = observed(job=indexed_job(), pods=[shard_pod(0)], previous=previous)
    assert decide(obs, SETTINGS, now=NOW).status.progress == kept


# -- decide ---------------------------------------------------------------------------------


def test_decide_leaves_a_running_indexed_job_alone() -> None:
    obs = observed(job=indexed_job(), pods=[shard_pod(i) for i in range(3)])
    obs = Observed(**{**vars(obs), "config_map": builders.build_config_map(resolved(SHARDS))})
    assert decide(obs, SETTINGS, now=NOW).writes == ()


def test_decide_leaves_a_current_indexed_cron_job_alone() -> None:
    spec = {**SHARDS, "schedule": "0 * * * *"}
    cron_job = builders.build_cron_job(resolved(spec), SETTINGS)
    cron_job["metadata"]["uid"] = "cron-uid"
    template = cron_job["spec"]["jobTemplate"]["spec"]
    template["backoffLimit"] = 2147483647  # what a server defaulting the template would add
    config_map = builders.build_config_map(resolved(spec))
    obs = observed(spec, cron_job=cron_job, config_map=config_map)
    assert decide(obs, SETTINGS, now=NOW).writes == ()


def test_a_scheduled_runs_history_adds_up_each_executions_indexes() -> None:
    job = indexed_job(**finished("Complete"))
    job["metadata"]["name"] = "run-29000000"
    job["metadata"]["ownerReferences"][0]["kind"] = "CronJob"
    pods = [shard_pod(i, exit_code=0, message=summary(10 * (i + 1))) for i in range(3)]
    for pod in pods:
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "run-29000000"
    obs = observed({"schedule": "0 * * * *"}, jobs=[job], pods=pods)
    [execution] = decide(obs, SETTINGS, now=NOW).status.history
    assert execution.phase == "Succeeded" and execution.result is not None
    assert execution.result.records_read == 60


def _scheduled(*which: bool | None, policy: str = "None") -> Observed:
    """A scheduled run's finished Indexed Job whose pods say whether they completed it."""
    job = indexed_job(**finished("Complete"))
    job["metadata"]["name"] = "run-29000000"
    job["metadata"]["ownerReferences"][0]["kind"] = "CronJob"
    pods = _completed_by(*which)
    for pod in pods:
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "run-29000000"
    cfg = config(autoDeletePolicy=policy)
    return observed({"schedule": "0 * * * *"}, jobs=[job], pods=pods, config=cfg)


def test_a_scheduled_execution_that_no_pod_completed_is_recorded_failed() -> None:
    [execution] = decide(_scheduled(False, False, False), SETTINGS, now=NOW).status.history
    assert execution.phase == "Failed"


def test_delete_on_success_keeps_the_job_of_an_execution_no_pod_completed() -> None:
    kept = decide(_scheduled(False, False, False, policy="DeleteOnSuccess"), SETTINGS, now=NOW)
    assert kept.deletions == ()
    gone = decide(_scheduled(False, True, False, policy="DeleteOnSuccess"), SETTINGS, now=NOW)
    assert [d.name for d in gone.deletions] == ["run-29000000"]
