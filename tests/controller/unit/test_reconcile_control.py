"""Progress, suspend/resume/cancel and the decision log, through the reconciler against the
recording in-memory cluster (tests/controller/unit/fakes.py).

Real: the reconciler, observe/decide/act, the status, progress and log code. Faked: the
Kubernetes API (an in-memory store recording every call, with pod logs set by the test), the
clock, and the Job controller (tests set the Job's status as it would).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.core import names
from controller.core.ports import ApiError
from controller.core.settings import Settings
from controller.reconcile.act import merge_patch
from controller.reconcile.runs import Reconciler
from tests.controller.unit.fakes import FakeCluster
from tests.controller.unit.objects import NS, config, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
KEY = f"{NS}/run"
REPORT = '{"longrunProgress":{"read":40,"written":39,"failed":1,"rate":4.0,"total":100}}\n'


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster()
    # The runner reports every 5 s: the controller reads at its own 15 s at most.
    fake.put("InferenceConfig", config(runner={"progressIntervalSeconds": 5}))
    return fake


def started(cluster: FakeCluster, clock: Clock, **spec: Any) -> Reconciler:
    """A run whose Job the reconciler made, now running one pod (as the Job controller would)."""
    cluster.put("InferenceRun", run(**spec))
    reconciler = Reconciler(cluster, Settings(progress_interval=15.0), now=clock)
    reconciler.reconcile(KEY)
    set_job_status(cluster, {"active": 1, "startTime": "2026-01-01T00:00:00Z"})
    pod = {
        "metadata": {
            "name": "run-abcde",
            "namespace": NS,
            "labels": {"batch.kubernetes.io/job-name": "run"},
            "annotations": {names.RUN_ANNOTATION: "run"},
            "creationTimestamp": "2026-01-01T00:00:01Z",
        },
        "status": {"phase": "Running"},
    }
    cluster.put("Pod", pod)
    cluster.logs["run-abcde"] = "longrun-runner: run=team/run\n" + REPORT
    return reconciler


def set_job_status(cluster: FakeCluster, status: dict[str, Any]) -> None:
    job = cluster.get("Job", NS, "run")
    assert job is not None
    cluster.put("Job", {**job, "status": status})


def status_of(cluster: FakeCluster) -> dict[str, Any]:
    return (cluster.get("InferenceRun", NS, "run") or {}).get("status") or {}


def logs_and_patches(cluster: FakeCluster) -> list[tuple[str, str, str]]:
    return [c for c in cluster.calls if c[0] in ("log", "patch_status")]


def test_a_running_run_reads_its_progress_once_per_interval(cluster: FakeCluster) -> None:
    clock = Clock()
    reconciler = started(cluster, clock)
    cluster.calls.clear()
    result = reconciler.reconcile(KEY)
    assert logs_and_patches(cluster) == [
        ("log", "Pod", "run-abcde"),
        ("patch_status", "InferenceRun", "run"),
    ]
    progress = status_of(cluster)["progress"]
    assert (progress["text"], progress["rateText"], progress["etaText"]) == (
        "40/100 (40%)",
        "4/s",
        "15s",
    )
    assert result.requeue_after == 15.0
    cluster.calls.clear()
    clock.now += timedelta(seconds=10)  # an event 10 s later: nothing is read, nothing written
    assert reconciler.reconcile(KEY).requeue_after == 5.0
    assert cluster.writes() == [] and logs_and_patches(cluster) == []
    clock.now += timedelta(seconds=5)
    cluster.logs["run-abcde"] += REPORT.replace('"written":39', '"written":59')
    reconciler.reconcile(KEY)
    assert logs_and_patches(cluster) == [
        ("log", "Pod", "run-abcde"),
        ("patch_status", "InferenceRun", "run"),
    ]
    assert status_of(cluster)["progress"]["recordsWritten"] == 59


def test_runs_that_do_not_run_are_never_read(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    reconciler = Reconciler(cluster, Settings(), now=Clock())
    reconciler.reconcile(KEY)  # pending: the Job was just made
    reconciler.reconcile(KEY)
    assert not [c for c in cluster.calls if c[0] == "log"]


def test_a_failed_log_read_is_not_an_error_and_waits_for_the_next_interval(
    cluster: FakeCluster,
) -> None:
    clock = Clock()
    reconciler = started(cluster, clock)
    cluster.fail["log"] = ApiError(403, "pods/log is forbidden")
    assert reconciler.reconcile(KEY).requeue_after == 15.0
    assert status_of(cluster)["progress"] == {"jobName": "run", "updatedAt": "2026-01-01T00:02:00Z"}
    cluster.calls.clear()
    reconciler.reconcile(KEY)
    assert not [c for c in cluster.calls if c[0] == "log"]


def test_suspend_patches_the_job_and_resume_patches_it_back(cluster: FakeCluster) -> None:
    clock = Clock()
    reconciler = started(cluster, clock)
    reconciler.reconcile(KEY)
    spec = {**(cluster.get("InferenceRun", NS, "run") or {})["spec"], "suspend": True}
    cluster.put("InferenceRun", {**(cluster.get("InferenceRun", NS, "run") or {}), "spec": spec})
    cluster.calls.clear()
    reconciler.reconcile(KEY)
    assert ("patch", "Job", "run") in cluster.calls
    assert (cluster.get("Job", NS, "run") or {})["spec"]["suspend"] is True
    cond = {"type": "Suspended", "status": "True", "lastTransitionTime": "2026-01-01T00:02:00Z"}
    set_job_status(cluster, {"conditions": [cond]})  # pods gone, startTime reset
    cluster.objects.pop(("Pod", NS, "run-abcde"))
    reconciler.reconcile(KEY)
    status = status_of(cluster)
    assert status["phase"] == "Suspended"
    assert status["progress"]["text"] == "40/100 (40%)" and "rateText" not in status["progress"]
    assert ("Normal", "Suspended", "Job run is suspended") in cluster.events
    run_obj = cluster.get("InferenceRun", NS, "run") or {}
    cluster.put("InferenceRun", {**run_obj, "spec": {**run_obj["spec"], "suspend": False}})
    reconciler.reconcile(KEY)
    assert (cluster.get("Job", NS, "run") or {})["spec"]["suspend"] is False


def test_cancel_ends_cancelled_with_the_last_counts(cluster: FakeCluster) -> None:
    clock = Clock()
    reconciler = started(cluster, clock)
    reconciler.reconcile(KEY)  # the progress: 39 written, 1 failed
    run_obj = cluster.get("InferenceRun", NS, "run") or {}
    cluster.put("InferenceRun", {**run_obj, "spec": {**run_obj["spec"], "cancel": True}})
    reconciler.reconcile(KEY)
    assert (cluster.get("Job", NS, "run") or {})["spec"]["suspend"] is True
    cond = {"type": "Suspended", "status": "True", "lastTransitionTime": "2026-01-01T00:02:00Z"}
    set_job_status(cluster, {"conditions": [cond]})
    cluster.objects.pop(("Pod", NS, "run-abcde"))
    reconciler.reconcile(KEY)
    status = status_of(cluster)
    assert status["phase"] == "Cancelled"
    assert (status["result"]["recordsWritten"], status["result"]["recordsFailed"]) == (39, 1)
    assert any(reason == "Cancelled" for _, reason, _ in cluster.events)


def test_each_decision_that_changes_the_world_is_logged(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="controller.reconcile")
    clock = Clock()
    cluster.put("InferenceConfig", config(autoDeletePolicy="DeleteOnCompletion"))
    reconciler = started(cluster, clock)
    summary = '{"recordsRead": 100, "recordsWritten": 98, "recordsFailed": 2}'
    set_job_status(
        cluster,
        {
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"}
            ],
        },
    )
    pod = cluster.get("Pod", NS, "run-abcde") or {}
    pod["status"] = {
        "phase": "Succeeded",
        "containerStatuses": [
            {"name": "runner", "state": {"terminated": {"exitCode": 0, "message": summary}}}
        ],
    }
    cluster.put("Pod", pod)
    reconciler.reconcile(KEY)
    records = {r.getMessage(): r for r in caplog.records}
    assert "created ConfigMap run-contract" in records and "created Job run" in records
    finished = records["Succeeded: Job run succeeded: 98 written, 2 failed of 100 read"]
    assert (finished.phase, finished.records_written, finished.records_failed) == (  # type: ignore[attr-defined]
        "Succeeded",
        98,
        2,
    )
    deleting = records["deleting InferenceRun run (autoDeletePolicy=DeleteOnCompletion)"]
    assert deleting.policy == "autoDeletePolicy=DeleteOnCompletion"  # type: ignore[attr-defined]


def test_a_user_error_is_logged_with_its_reason(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="controller.reconcile")
    cluster.put("InferenceRun", run(configRef={"name": "missing"}))
    Reconciler(cluster, Settings(), now=Clock()).reconcile(KEY)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [getattr(r, "reason", None) for r in warnings] == ["ConfigNotFound"]


def test_the_status_patch_removes_nested_fields_the_new_status_lacks() -> None:
    old = {"phase": "Running", "progress": {"text": "4", "rateText": "1/s"}, "message": "x"}
    new = {"phase": "Suspended", "progress": {"text": "4"}}
    assert merge_patch(old, new) == {
        "message": None,
        "phase": "Suspended",
        "progress": {"text": "4", "rateText": None},
    }
