"""The reconciler against a recording in-memory cluster (tests/controller/unit/fakes.py).

Real: the reconciler, builders, status derivation, validation. Faked: the
Kubernetes API (an in-memory store that records every call) and the clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller.core import names
from controller.core.ports import ApiError, Children
from controller.core.settings import Settings
from controller.reconcile.runs import Reconciler
from tests.controller.unit.fakes import FakeCluster
from tests.controller.unit.objects import NS, config, finished, pod, run

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.put("InferenceConfig", config())
    return fake


def reconciler(cluster: FakeCluster, clock: Clock | None = None, **settings: object) -> Reconciler:
    return Reconciler(cluster, Settings(**settings), now=clock or Clock())  # type: ignore[arg-type]


def test_creates_config_map_and_job_then_reports_pending(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    reconciler(cluster).reconcile(f"{NS}/run")
    assert cluster.writes() == [
        ("create", "ConfigMap", "run-contract"),
        ("create", "Job", "run"),
        ("patch_status", "InferenceRun", "run"),
        ("event", "Pending", "run"),
    ]
    assert cluster.get("InferenceRun", NS, "run")["status"]["phase"] == "Pending"  # type: ignore[index]


def test_does_nothing_when_current(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")
    assert cluster.writes() == []


def test_returns_when_the_run_is_gone(cluster: FakeCluster) -> None:
    assert reconciler(cluster).reconcile(f"{NS}/missing").requeue_after is None
    assert cluster.calls == []


def test_refuses_unowned_job(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    cluster.put("Job", {"metadata": {"name": "run", "namespace": NS, "ownerReferences": []}})
    reconciler(cluster).reconcile(f"{NS}/run")
    status = cluster.get("InferenceRun", NS, "run")["status"]  # type: ignore[index]
    assert status["conditions"][0]["reason"] == "NameConflict"
    assert ("Warning", "NameConflict") in [(t, r) for t, r, _ in cluster.events]
    assert ("patch", "Job", "run") not in cluster.calls


def test_already_exists_reads_and_keeps_our_object(cluster: FakeCluster) -> None:
    owned = run()
    cluster.put("InferenceRun", owned)
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    # Simulate a lagging cache: the Job exists but children() does not show it.
    original = cluster.children
    cluster.children = lambda ns, name: type(original(ns, name))()  # type: ignore[method-assign]
    rec.reconcile(f"{NS}/run")
    assert ("read", "Job", "run") in cluster.calls
    assert len([k for k in cluster.objects if k[0] == "Job"]) == 1


def test_user_error_is_a_condition_not_an_exception(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run(schedule="not a cron"))
    reconciler(cluster).reconcile(f"{NS}/run")
    status = cluster.get("InferenceRun", NS, "run")["status"]  # type: ignore[index]
    assert status["conditions"][0]["reason"] == "InvalidSchedule"
    assert not [k for k in cluster.objects if k[0] in ("Job", "CronJob", "ConfigMap")]


def test_config_in_another_namespace_needs_allowed_namespaces(cluster: FakeCluster) -> None:
    other = config()
    other["metadata"]["namespace"] = "shared"
    cluster.put("InferenceConfig", other)
    cluster.put("InferenceRun", run(configRef={"name": "cfg", "namespace": "shared"}))
    reconciler(cluster).reconcile(f"{NS}/run")
    assert (
        cluster.get("InferenceRun", NS, "run")["status"]["conditions"][0]["reason"]
        == "ConfigNotAllowed"
    )  # type: ignore[index]
    other["spec"]["allowedNamespaces"] = [NS]
    cluster.put("InferenceConfig", other)
    reconciler(cluster).reconcile(f"{NS}/run")
    assert cluster.get("Job", NS, "run") is not None


def test_a_config_of_another_namespace_answers_the_same_missing_or_not_allowing(
    cluster: FakeCluster,
) -> None:
    cluster.put("InferenceRun", run(configRef={"name": "cfg", "namespace": "shared"}))
    reconciler(cluster).reconcile(f"{NS}/run")
    missing = cluster.get("InferenceRun", NS, "run")["status"]["conditions"][0]  # type: ignore[index]
    other = config()
    other["metadata"]["namespace"] = "shared"
    cluster.put("InferenceConfig", other)
    reconciler(cluster).reconcile(f"{NS}/run")
    not_allowing = cluster.get("InferenceRun", NS, "run")["status"]["conditions"][0]  # type: ignore[index]
    said = {(c["reason"], c["message"]) for c in (missing, not_allowing)}
    assert said == {
        (
            "ConfigNotAllowed",
            'spec.configRef: InferenceConfig "shared/cfg" does not exist, or does not list '
            f'namespace "{NS}" in spec.allowedNamespaces; the run starts when it does',
        )
    }


def test_service_account_must_be_allowed(cluster: FakeCluster) -> None:
    cluster.put("InferenceConfig", config(pod={"serviceAccountName": "admin"}))
    cluster.put("InferenceRun", run())
    reconciler(cluster, allowed_service_accounts=("runner-*",)).reconcile(f"{NS}/run")
    status = cluster.get("InferenceRun", NS, "run")["status"]  # type: ignore[index]
    assert status["conditions"][0]["reason"] == "ServiceAccountNotAllowed"


def test_config_that_sets_a_runtime_env_variable_is_refused_with_the_field(
    cluster: FakeCluster,
) -> None:
    cluster.put("InferenceConfig", config(pod={"env": [{"name": "PYTHONPATH", "value": "/x"}]}))
    cluster.put("InferenceRun", run())
    reconciler(cluster).reconcile(f"{NS}/run")
    status = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "EnvNotAllowed")
    assert accepted["message"].startswith('spec.pod.env[0].name: environment variable "PYTHONPATH"')
    assert cluster.get("Job", NS, "run") is None


def test_transient_errors_propagate_for_retry(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    cluster.fail["create"] = ApiError(500, "etcd unhappy")
    with pytest.raises(ApiError):
        reconciler(cluster).reconcile(f"{NS}/run")


def test_object_the_api_server_refuses_is_a_user_error_not_a_retry(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    refusal = 'ConfigMap "run-contract" is invalid: data: Too long: must have at most 1048576 bytes'
    cluster.fail["create"] = ApiError(422, refusal)
    reconciler(cluster).reconcile(f"{NS}/run")  # no exception: nothing to retry with backoff
    status = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "ChildRejected")
    assert "Too long" in accepted["message"] and ("event", "ChildRejected", "run") in cluster.calls


def test_job_forbidden_by_a_quota_is_reported_and_retried(cluster: FakeCluster) -> None:
    # What a real API server answers for `kubectl create quota no-jobs --hard=count/jobs.batch=0`.
    quota = (
        'jobs.batch "run" is forbidden: exceeded quota: no-jobs, requested: count/jobs.batch=1, '
        "used: count/jobs.batch=0, limited: count/jobs.batch=0"
    )
    cluster.put("InferenceRun", run())
    cluster.fail["create Job"] = ApiError(403, quota)
    with pytest.raises(ApiError):  # the work queue retries it with backoff
        reconciler(cluster).reconcile(f"{NS}/run")
    status = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "ChildRejected")
    assert "exceeded quota: no-jobs" in accepted["message"] and "retrying" in accepted["message"]
    assert ("event", "ChildRejected", "run") in cluster.calls
    reconciler(cluster).reconcile(f"{NS}/run")  # the quota was raised: the retry creates the Job
    assert cluster.get("Job", NS, "run") is not None
    status = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    assert next(c for c in status["conditions"] if c["type"] == "Accepted")["status"] == "True"


def test_auto_delete_waits_for_the_delay_then_deletes(cluster: FakeCluster) -> None:
    cluster.put(
        "InferenceConfig", config(autoDeletePolicy="DeleteOnSuccess", autoDeleteDelaySeconds=60)
    )
    cluster.put("InferenceRun", run())
    clock = Clock()
    rec = reconciler(cluster, clock)
    rec.reconcile(f"{NS}/run")
    job = cluster.get("Job", NS, "run")
    assert job is not None
    job["status"] = finished("Complete")
    job["status"]["completionTime"] = "2026-01-01T00:01:30Z"
    cluster.put("Job", job)
    cluster.put("Pod", pod("run", exit_code=0, message="{}"))
    result = rec.reconcile(f"{NS}/run")
    assert result.requeue_after == pytest.approx(30)
    clock.now = NOW + timedelta(seconds=31)
    rec.reconcile(f"{NS}/run")
    assert ("delete", "InferenceRun", "run") in cluster.calls


def test_finished_job_is_never_recreated_nor_retried(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    job = cluster.get("Job", NS, "run")
    assert job is not None
    job["status"] = finished("Failed", reason="BackoffLimitExceeded")
    cluster.put("Job", job)
    rec.reconcile(f"{NS}/run")
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")
    assert cluster.writes() == []


def test_pods_are_listed_live_only_on_the_pass_that_sees_the_job_finish(
    cluster: FakeCluster,
) -> None:
    cluster.put("InferenceRun", run())
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    job = cluster.get("Job", NS, "run")
    assert job is not None
    job["status"] = finished("Failed", reason="DeadlineExceeded")  # its pods are gone
    cluster.put("Job", job)
    rec.reconcile(f"{NS}/run")
    assert ("list", "Pod", "run") in cluster.calls
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")  # a resync: the status already says Failed
    assert ("list", "Pod", "run") not in cluster.calls


def _forget_job(cluster: FakeCluster) -> None:
    del cluster.objects[("Job", NS, "run")]


def test_finished_job_deleted_by_someone_else_is_not_recreated(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    job = cluster.get("Job", NS, "run")
    assert job is not None
    job["status"] = finished("Complete")
    cluster.put("Job", job)
    rec.reconcile(f"{NS}/run")
    before = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    _forget_job(cluster)  # e.g. a TTL controller or `kubectl delete job`
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")
    assert cluster.writes() == []
    assert (cluster.get("InferenceRun", NS, "run") or {})["status"] == before
    assert before["phase"] == "Succeeded"


def test_running_job_deleted_by_someone_else_fails_the_run_once(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run())
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    _forget_job(cluster)
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")
    assert ("read", "Job", "run") in cluster.calls  # the cache may lag: asked live first
    assert ("create", "Job", "run") not in cluster.writes()
    status = (cluster.get("InferenceRun", NS, "run") or {})["status"]
    assert status["phase"] == "Failed" and "was deleted before it finished" in status["message"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "JobDeleted"
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")
    assert cluster.writes() == [] and ("read", "Job", "run") not in cluster.calls


def test_cron_job_is_patched_only_when_its_spec_drifts(cluster: FakeCluster) -> None:
    cluster.put("InferenceRun", run(schedule="*/5 * * * *"))
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    cluster.calls.clear()
    rec.reconcile(f"{NS}/run")
    assert ("patch", "CronJob", "run") not in cluster.calls
    updated = cluster.get("InferenceRun", NS, "run")
    assert updated is not None
    updated["spec"]["suspend"] = True
    cluster.put("InferenceRun", updated)
    rec.reconcile(f"{NS}/run")
    cron = cluster.get("CronJob", NS, "run")
    assert cron is not None and cron["spec"]["suspend"] is True
    assert cron["metadata"]["annotations"][names.SPEC_HASH_ANNOTATION]
    assert cluster.get("InferenceRun", NS, "run")["status"]["phase"] == "Suspended"  # type: ignore[index]


def test_scheduled_execution_result_is_read_live_before_its_job_can_be_deleted(
    cluster: FakeCluster,
) -> None:
    # The Job's watch event can arrive before its pod's: the pass that sees the Job finish
    # lists the pods live, because DeleteOnSuccess removes the Job (and its pods) right after.
    cluster.put("InferenceConfig", config(autoDeletePolicy="DeleteOnSuccess"))
    cluster.put("InferenceRun", run(schedule="*/5 * * * *"))
    rec = reconciler(cluster)
    rec.reconcile(f"{NS}/run")
    cron = cluster.get("CronJob", NS, "run")
    assert cron is not None
    owner = {"kind": "CronJob", "name": "run", "uid": cron["metadata"]["uid"], "controller": True}
    job_meta = {"name": "run-29000000", "namespace": NS, "ownerReferences": [owner]}
    job_meta["annotations"] = {names.RUN_ANNOTATION: "run"}
    cluster.put("Job", {"metadata": job_meta, "status": finished("Complete")})
    summary = '{"recordsRead": 5, "recordsWritten": 5, "durationSeconds": 1}'
    cluster.put("Pod", pod("run-29000000", exit_code=0, message=summary))
    cached = cluster.children

    def lagging(namespace: str, run_name: str) -> Children:
        children = cached(namespace, run_name)
        children.pods = []  # the pod's event has not reached the cache yet
        return children

    cluster.children = lagging  # type: ignore[method-assign]
    rec.reconcile(f"{NS}/run")
    history = (cluster.get("InferenceRun", NS, "run") or {})["status"]["history"]
    assert history[0]["jobName"] == "run-29000000"
    assert history[0]["result"]["recordsWritten"] == 5
