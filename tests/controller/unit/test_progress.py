"""Live progress from plain data: which pod's log is read and when, what a log tail says, the
counts and column texts of `status.progress`, when the run is looked at again. Pure: nothing is
faked and nothing is read; each test builds an `Observed`, with the log tail as read."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts.run import InferenceRunSpec, InferenceRunStatus, ProgressReport, RunProgress
from controller.core import names
from controller.core.decide import decide
from controller.core.progress import (
    LogTarget,
    compact,
    duration_text,
    interval_of,
    log_target,
    parse_report,
)
from controller.core.settings import Settings
from controller.core.status import Observed, RunnerLog
from tests.controller.unit.objects import NS, config, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
SETTINGS = Settings(progress_interval=15.0)
LINE = '{"longrunProgress":{"read":1200,"written":1180,"failed":20,"rate":40.0,"total":3000}}'


def job(name: str = "run", *, active: int = 1, owner: str = "InferenceRun", **status: Any) -> Any:
    ref = {"kind": owner, "name": "run", "uid": "run-uid", "controller": True}
    meta = {"name": name, "namespace": NS, "uid": f"{name}-uid", "ownerReferences": [ref]}
    meta["annotations"] = {names.RUN_ANNOTATION: "run"}
    meta["creationTimestamp"] = status.pop("created", "2026-01-01T00:00:00Z")
    return {
        "kind": "Job",
        "metadata": meta,
        "spec": {"suspend": False},
        "status": {"active": active, "startTime": "2026-01-01T00:00:00Z", **status},
    }


def runner_pod(
    name: str, *, job_name: str = "run", phase: str = "Running", created: str = "00:00:01"
) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"batch.kubernetes.io/job-name": job_name},
            "annotations": {names.RUN_ANNOTATION: "run"},
            "creationTimestamp": f"2026-01-01T{created}Z",
        },
        "status": {"phase": phase},
    }


def contract_map(interval: int) -> Any:
    contract = {"runner": {"progressIntervalSeconds": interval}, "jobName": "run"}
    return {"metadata": {"name": "run-contract"}, "data": {"contract.json": json.dumps(contract)}}


def observed(spec: dict[str, Any] | None = None, **fields: Any) -> Observed:
    obj = run(**(spec or {}))
    fields.setdefault("config", config())
    return Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=fields.pop("previous", None) or InferenceRunStatus(),
        **fields,
    )


def progress(updated: datetime, **counts: Any) -> RunProgress:
    return RunProgress(job_name=counts.pop("job_name", "run"), updated_at=updated, **counts)


# -- which log is read, and when ------------------------------------------------------------


def test_the_running_pod_of_a_running_job_is_read_when_there_is_no_progress_yet() -> None:
    pods = [runner_pod("run-old", phase="Failed"), runner_pod("run-new", created="00:00:09")]
    target = log_target(observed(job=job(), pods=pods), SETTINGS, now=NOW)
    assert target == LogTarget(NS, "run-new", "run", container="runner")


def test_nothing_is_read_for_a_run_that_does_not_run() -> None:
    pending = job(active=0, startTime=None)
    assert log_target(observed(), SETTINGS, now=NOW) is None  # no Job
    assert log_target(observed(job=pending, pods=[]), SETTINGS, now=NOW) is None
    done = job(active=0, conditions=[{"type": "Complete", "status": "True"}])
    assert log_target(observed(job=done, pods=[runner_pod("p")]), SETTINGS, now=NOW) is None


def test_nothing_is_read_while_no_pod_of_the_job_runs() -> None:
    starting = [runner_pod("p", phase="Pending"), runner_pod("other", job_name="x")]
    assert log_target(observed(job=job(), pods=starting), SETTINGS, now=NOW) is None


def test_progress_younger_than_the_interval_is_not_read_again() -> None:
    fresh = InferenceRunStatus(phase="Running", progress=progress(NOW - timedelta(seconds=14)))
    stale = InferenceRunStatus(phase="Running", progress=progress(NOW - timedelta(seconds=15)))
    pods = [runner_pod("p")]
    assert log_target(observed(job=job(), pods=pods, previous=fresh), SETTINGS, now=NOW) is None
    assert log_target(observed(job=job(), pods=pods, previous=stale), SETTINGS, now=NOW)


def test_a_progress_stamped_in_the_future_is_read_again() -> None:
    ahead = InferenceRunStatus(phase="Running", progress=progress(NOW + timedelta(minutes=5)))
    assert log_target(
        observed(job=job(), pods=[runner_pod("p")], previous=ahead), SETTINGS, now=NOW
    )


def test_the_interval_is_the_runners_when_longer_never_below_the_controllers() -> None:
    assert interval_of(observed(config_map=contract_map(60)), SETTINGS) == 60
    assert interval_of(observed(config_map=contract_map(1)), SETTINGS) == 15
    assert interval_of(observed(), SETTINGS) == 15
    broken = {"data": {"contract.json": "{not json"}}
    assert interval_of(observed(config_map=broken), SETTINGS) == 15


def test_a_scheduled_run_reads_its_newest_running_execution() -> None:
    older = job("run-1", owner="CronJob", created="2026-01-01T00:00:00Z")
    newer = job("run-2", owner="CronJob", created="2026-01-01T00:01:00Z")
    pods = [runner_pod("a", job_name="run-1"), runner_pod("b", job_name="run-2")]
    obs = observed({"schedule": "* * * * *"}, jobs=[older, newer], pods=pods)
    target = log_target(obs, SETTINGS, now=NOW)
    assert target is not None and (target.pod, target.job_name) == ("b", "run-2")


# -- what a log tail says -------------------------------------------------------------------


def test_the_last_report_in_the_tail_counts() -> None:
    tail = "\n".join(
        [
            '{"longrunProgress":{"written":1}}',
            "longrun-runner: a warning",
            '2026-01-01T00:00:00Z {"longrunProgress":{"written":2,"future":"ignored"}}',
            '{"longrunProgress": broken',
            "",
        ]
    )
    assert parse_report(tail) == ProgressReport(written=2)


@pytest.mark.parametrize(
    "tail",
    [
        "",
        "plain text\n",
        '{"other": 1}',
        '{"longrunProgress":{"written":-5}}',
        '{"longrunProgress":[1]}',
        '{"longrunProgress":{"rate":"fast"}}',
    ],
)
def test_a_tail_without_a_valid_report_says_nothing(tail: str) -> None:
    assert parse_report(tail) is None


# -- status.progress ------------------------------------------------------------------------


def test_a_read_report_becomes_counts_percent_rate_eta_and_texts() -> None:
    obs = observed(job=job(), pods=[runner_pod("p")], runner_log=RunnerLog("run", LINE))
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.phase == "Running"
    assert status.progress == RunProgress(
        job_name="run",
        records_read=1200,
        records_written=1180,
        records_failed=20,
        records_total=3000,
        percent=40.0,
        records_per_second=40.0,
        eta_seconds=45,  # computed: the runner gave none
        updated_at=NOW,
        text="1.2k/3k (40%)",
        rate_text="40/s",
        eta_text="45s",
    )
    assert status.result is None  # the final result is the runner's summary, not this


def test_an_llm_runs_report_adds_its_tokens_and_tokens_per_second() -> None:
    line = LINE.replace('"total":3000', '"total":3000,"tokens":123456,"tokenRate":2345.67')
    obs = observed(job=job(), pods=[runner_pod("p")], runner_log=RunnerLog("run", line))
    shown = decide(obs, SETTINGS, now=NOW).status.progress
    assert shown is not None
    assert (shown.tokens_total, shown.tokens_per_second) == (123456, 2345.7)
    assert shown.tokens_per_second_text == "2.3k/s"
    plain = decide(
        observed(job=job(), pods=[runner_pod("p")], runner_log=RunnerLog("run", LINE)),
        SETTINGS,
        now=NOW,
    ).status.progress
    assert plain is not None and plain.tokens_per_second_text is None


def test_a_finished_llm_run_keeps_its_token_total() -> None:
    running = progress(NOW, records_read=3, records_written=3, tokens_per_second=50.0)
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=running)
    done = job(active=0, conditions=[{"type": "Complete", "status": "True"}])
    summary = '{"recordsRead": 3, "recordsWritten": 3, "totalTokens": 99, "promptTokens": 60}'
    exited = runner_pod("p", phase="Succeeded")
    exited["status"]["containerStatuses"] = [
        {"name": "runner", "state": {"terminated": {"exitCode": 0, "message": summary}}}
    ]
    status = decide(observed(job=done, pods=[exited], previous=previous), SETTINGS, now=NOW).status
    assert status.result is not None and status.result.total_tokens == 99
    assert status.progress is not None and status.progress.tokens_total == 99
    assert status.progress.tokens_per_second is None


def test_a_tail_without_a_report_moves_only_the_time_it_was_looked_at() -> None:
    before = progress(NOW - timedelta(minutes=1), records_read=5, records_written=5)
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=before)
    obs = observed(
        job=job(),
        pods=[runner_pod("p")],
        previous=previous,
        runner_log=RunnerLog("run", "no report yet\n"),
    )
    after = decide(obs, SETTINGS, now=NOW).status.progress
    assert after is not None and after.updated_at == NOW
    assert (after.records_written, after.text) == (5, "5")
    silent = observed(job=job(), pods=[runner_pod("p")], runner_log=RunnerLog("run", ""))
    first = decide(silent, SETTINGS, now=NOW).status.progress
    assert first == RunProgress(job_name="run", updated_at=NOW)  # a runner that never reports


def test_between_reads_the_progress_is_kept_as_it_was() -> None:
    kept = progress(NOW - timedelta(seconds=5), records_read=7, records_written=7, text="7")
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=kept)
    status = decide(observed(job=job(), previous=previous), SETTINGS, now=NOW).status
    assert status.progress == kept


def test_the_run_is_looked_at_again_when_its_progress_is_due() -> None:
    kept = progress(NOW - timedelta(seconds=5))
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=kept)
    decision = decide(observed(job=job(), previous=previous), SETTINGS, now=NOW)
    assert decision.requeue_after == 10.0
    assert decide(observed(), SETTINGS, now=NOW).requeue_after is None  # nothing runs


def test_a_suspended_run_keeps_its_counts_without_rate_or_eta() -> None:
    running = progress(
        NOW,
        records_read=10,
        records_written=10,
        records_per_second=2.0,
        eta_seconds=30,
        records_total=40,
    )
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=running)
    cond = {"type": "Suspended", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}
    paused = job(active=0, conditions=[cond])
    paused["spec"]["suspend"] = True
    status = decide(
        observed({"suspend": True}, job=paused, previous=previous), SETTINGS, now=NOW
    ).status
    assert status.phase == "Suspended" and status.progress is not None
    assert (status.progress.text, status.progress.rate_text, status.progress.eta_text) == (
        "10/40 (25%)",
        None,
        None,
    )


def test_a_succeeded_run_ends_with_the_counts_of_its_result() -> None:
    running = progress(
        NOW, records_read=10, records_written=10, records_total=150, records_per_second=5.0
    )
    previous = InferenceRunStatus(phase="Running", job_name="run", progress=running)
    done = job(active=0, conditions=[{"type": "Complete", "status": "True"}])
    summary = '{"recordsRead": 150, "recordsWritten": 149, "recordsFailed": 1}'
    exited = runner_pod("p", phase="Succeeded")
    exited["status"]["containerStatuses"] = [
        {"name": "runner", "state": {"terminated": {"exitCode": 0, "message": summary}}}
    ]
    status = decide(observed(job=done, pods=[exited], previous=previous), SETTINGS, now=NOW).status
    assert status.result is not None and status.result.records_written == 149
    assert status.progress is not None
    assert (status.progress.percent, status.progress.text, status.progress.rate_text) == (
        100.0,
        "150/150 (100%)",
        None,
    )


def test_a_scheduled_run_shows_progress_only_while_an_execution_runs() -> None:
    execution = job("run-1", owner="CronJob")
    obs = observed(
        {"schedule": "* * * * *"},
        jobs=[execution],
        pods=[runner_pod("a", job_name="run-1")],
        runner_log=RunnerLog("run-1", LINE),
    )
    status = decide(obs, SETTINGS, now=NOW).status
    assert status.progress is not None and status.progress.job_name == "run-1"
    previous = status.model_copy(update={"phase": "Scheduled"})
    finished = job(
        "run-1", owner="CronJob", active=0, conditions=[{"type": "Complete", "status": "True"}]
    )
    idle = observed({"schedule": "* * * * *"}, jobs=[finished], previous=previous)
    assert decide(idle, SETTINGS, now=NOW).status.progress is None


# -- what the columns print -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (0.5, "0.5"),
        (950, "950"),
        (1000, "1k"),
        (1250, "1.2k"),
        (12_000, "12k"),
        (999_600, "1M"),
        (3_000_000, "3M"),
        (1_500_000_000, "1.5B"),
    ],
)
def test_counts_print_with_three_significant_digits_at_most(value: float, text: str) -> None:
    assert compact(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45s"), (330, "5m30s"), (600, "10m"), (4800, "1h20m"), (90_000, "1d1h")],
)
def test_etas_print_like_kubectl_ages(seconds: int, text: str) -> None:
    assert duration_text(seconds) == text
