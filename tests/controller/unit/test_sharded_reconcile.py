"""A run over several pods through the reconciler: it makes an Indexed Job, reads one log per
running index per interval, and lists a finished Job's pods when an index's summary is missing.

Real: the reconciler, observe/decide/act, the status and progress code. Faked: the Kubernetes
API (the recording in-memory cluster of tests/controller/unit/fakes.py, with pod logs set by
the test), the clock, and the Job controller (tests set the Job's status and pods as it would).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.core import names
from controller.core.settings import Settings
from controller.core.shards import INDEX_KEY
from controller.reconcile.runs import Reconciler
from tests.controller.unit.fakes import FakeCluster
from tests.controller.unit.objects import NS, config, finished, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
KEY = f"{NS}/run"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def report(written: int) -> str:
    counts = {"read": written, "written": written, "failed": 0, "rate": 2.0, "total": 100}
    return json.dumps({"longrunProgress": counts}) + "\n"


def shard_pod(index: int, *, exit_code: int | None = None, message: str = "") -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"run-{index}-abcde",
            "namespace": NS,
            "labels": {"batch.kubernetes.io/job-name": "run", INDEX_KEY: str(index)},
            "annotations": {names.RUN_ANNOTATION: "run", INDEX_KEY: str(index)},
            "creationTimestamp": "2026-01-01T00:00:01Z",
        },
        "status": {"phase": "Running"},
    }
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "message": message}
        pod["status"] = {
            "phase": "Succeeded",
            "containerStatuses": [{"name": "runner", "state": {"terminated": terminated}}],
        }
    return pod


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.put("InferenceConfig", config())
    fake.put("InferenceRun", run(parallelism=3))
    return fake


def set_job_status(cluster: FakeCluster, status: dict[str, Any]) -> None:
    job = cluster.get("Job", NS, "run")
    assert job is not None
    cluster.put("Job", {**job, "status": status})


def test_makes_an_indexed_job_and_adds_up_the_progress_of_every_running_index(
    cluster: FakeCluster,
) -> None:
    clock = Clock()
    reconciler = Reconciler(cluster, Settings(progress_interval=15.0), now=clock)
    reconciler.reconcile(KEY)
    job = cluster.get("Job", NS, "run")
    assert job is not None and job["spec"]["completionMode"] == "Indexed"
    set_job_status(cluster, {"active": 3, "startTime": "2026-01-01T00:00:00Z"})
    for index in range(3):
        cluster.put("Pod", shard_pod(index))
        cluster.logs[f"run-{index}-abcde"] = report(10 * (index + 1))
    cluster.calls.clear()
    reconciler.reconcile(KEY)
    reads = sorted(name for verb, _, name in cluster.calls if verb == "log")
    assert reads == ["run-0-abcde", "run-1-abcde", "run-2-abcde"]  # one per running index
    progress = (cluster.get("InferenceRun", NS, "run") or {})["status"]["progress"]
    assert (progress["recordsWritten"], progress["recordsTotal"]) == (60, 300)
    assert (progress["recordsPerSecond"], progress["etaSeconds"]) == (6.0, 40)
    cluster.calls.clear()
    clock.now += timedelta(seconds=5)  # before the interval: nothing is read
    reconciler.reconcile(KEY)
    assert not [c for c in cluster.calls if c[0] == "log"]


def test_lists_the_pods_of_a_finished_job_when_an_indexs_summary_is_missing(
    cluster: FakeCluster,
) -> None:
    reconciler = Reconciler(cluster, Settings(), now=Clock())
    reconciler.reconcile(KEY)
    set_job_status(cluster, finished("Complete"))
    done = '{"recordsRead": 5, "recordsWritten": 5}'
    for index in range(3):
        cluster.put("Pod", shard_pod(index, exit_code=0, message=done))
    # The pod cache (children) has not delivered index 2's pod yet; the live list has it.
    late = cluster.objects.pop(("Pod", NS, "run-2-abcde"))
    original = cluster.job_pods

    def live(namespace: str, job_name: str) -> list[dict[str, Any]]:
        return [*original(namespace, job_name), late]

    cluster.job_pods = live  # type: ignore[method-assign]
    reconciler.reconcile(KEY)
    assert ("list", "Pod", "run") in cluster.calls
    status = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    assert status["phase"] == "Succeeded"
    assert status["result"]["recordsWritten"] == 15
