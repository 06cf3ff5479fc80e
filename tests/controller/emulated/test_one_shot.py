"""One-shot runs end to end, on either backend.

Real: the backend (API semantics, Job controller with backoffLimit, deadlines and
podFailurePolicy, garbage collector), the node agent running each pod's container as a
process, the official client, the whole controller. Faked: what the container does —
scripted exit codes, termination messages, output and durations.
"""

from __future__ import annotations

from e2e.fixtures import eventually
from tests.controller.emulated.harness import SUMMARY, Env

JOB_BACKOFF_WAIT = 40.0


def test_success_reports_result_conditions_and_events(env: Env) -> None:
    env.scripted.script(exit_code=0, message=SUMMARY, duration=0.5)
    env.start()
    env.create_config()
    env.create_run(timeoutSeconds=600, parameters={"table": "iris"})
    status = env.wait_phase("Succeeded")
    assert status["result"] == {
        "recordsRead": 10,
        "recordsWritten": 9,
        "recordsFailed": 1,
        "recordsRetried": 0,
        "chunks": 0,
        "durationSeconds": 1.5,
    }
    assert status["jobName"] == "run" and status["configMapName"] == "run-contract"
    assert env.condition("Complete")["status"] == "True"
    assert env.condition("Failed")["status"] == "False"
    assert env.condition("Accepted")["observedGeneration"] == 1
    reasons = eventually(
        lambda: (
            {e["reason"] for e in env.events()} >= {"Succeeded"}
            and {e["reason"] for e in env.events()}
        )
    )
    assert "Succeeded" in reasons


def test_job_is_owned_labelled_and_bounded(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config()
    run = env.create_run(timeoutSeconds=600)
    job = eventually(lambda: env.jobs() and env.jobs()[0])
    ref = job["metadata"]["ownerReferences"][0]
    assert (ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
        run["metadata"]["uid"],
        True,
        True,
    )
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "longrun"
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert job["spec"]["backoffLimit"] == 1
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["onExitCodes"]["values"] == [2] and rules[0]["action"] == "FailJob"
    assert rules[1]["onExitCodes"]["values"] == [143] and rules[1]["action"] == "Ignore"
    assert rules[2]["onPodConditions"][0]["type"] == "DisruptionTarget"
    env.wait_phase("Running")


def test_fails_after_backoff_limit(env: Env) -> None:
    env.scripted.script(exit_code=4, message='{"reason": "model down"}')
    env.start()
    env.create_config(backoffLimit=1)
    env.create_run()
    # kube-controller-manager's Job controller waits 10 s before replacing a failed pod.
    status = env.wait_phase("Failed", timeout=JOB_BACKOFF_WAIT)
    failed = env.condition("Failed")
    assert failed["status"] == "True" and failed["reason"] == "BackoffLimitExceeded"
    assert "exit code 4" in status["message"] and "model down" in status["message"]
    assert len(env.pods()) == 2  # the first attempt and one retry
    assert len(env.jobs()) == 1


def test_exit_code_2_fails_fast_without_retries(env: Env) -> None:
    env.scripted.script(exit_code=2, message="contract unreadable")
    env.start()
    env.create_config(backoffLimit=5)
    env.create_run()
    env.wait_phase("Failed")
    assert env.condition("Failed")["reason"] == "BadContract"
    assert len(env.pods()) == 1
    assert "ignored" in env.status()["message"]  # the garbage summary is not copied


def test_deadline_exceeded(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config()
    env.create_run(timeoutSeconds=2)
    env.wait_phase("Running")
    env.pass_time(3)
    env.wait_phase("Failed")
    assert env.condition("Failed")["reason"] == "DeadlineExceeded"


def test_config_missing_then_created(env: Env) -> None:
    env.start()
    env.create_run()
    eventually(lambda: env.condition("Accepted").get("reason") == "ConfigNotFound")
    assert env.status()["phase"] == "Pending" and env.jobs() == []
    eventually(lambda: any(e["reason"] == "ConfigNotFound" for e in env.events()))
    env.create_config()
    env.wait_phase("Succeeded")
    assert env.condition("Accepted")["status"] == "True"


def test_config_change_never_touches_started_run(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config()
    env.create_run()
    env.wait_phase("Running")
    # A scheduled run of the same config follows config changes: once its CronJob carries
    # the new image, the controller has seen the change (a run created after the patch could
    # still read the old config from a lagging cache, and would prove nothing).
    env.create_run("probe", schedule="0 0 1 1 *")
    eventually(lambda: env.cron_jobs(), timeout=10)
    contract = env.config_map("run-contract")["data"]["contract.json"]
    env.patch_config("cfg", {"spec": {"image": "ghcr.io/longrun/runner:other"}})
    eventually(lambda: all("runner:other" in str(c) for c in env.cron_jobs()), timeout=10)
    assert env.config_map("run-contract")["data"]["contract.json"] == contract
    job = next(j for j in env.jobs() if j["metadata"]["name"] == "run")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":test")


def test_run_deleted_mid_execution_leaves_no_orphans(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config()
    env.create_run()
    env.wait_phase("Running")
    env.custom.delete_namespaced_custom_object(
        "longrun.dev", "v1alpha1", env.ns, "inferenceruns", "run"
    )
    eventually(lambda: not env.jobs() and not env.pods() and not env.config_maps(), timeout=10)
    assert env.run() is None


def test_image_not_on_allow_list_is_refused(env: Env) -> None:
    env.start(allowed_images=("registry.example/*",))
    env.create_config()
    env.create_run()
    eventually(lambda: env.condition("Accepted").get("reason") == "ImageNotAllowed")
    assert env.jobs() == [] and env.config_maps() == []


def test_watch_namespaces_limits_what_is_reconciled(env: Env) -> None:
    other = env.kube.namespace("other")
    env.start(watch_namespaces=(env.ns,))
    env.create_config()
    env.create_run()
    body = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": "ignored"},
        "spec": {"configRef": {"name": "cfg"}},
    }
    env.custom.create_namespaced_custom_object(
        "longrun.dev", "v1alpha1", other, "inferenceruns", body
    )
    env.wait_phase("Succeeded")
    ignored = env.custom.get_namespaced_custom_object(
        "longrun.dev", "v1alpha1", other, "inferenceruns", "ignored"
    )
    assert "status" not in ignored


def test_finished_job_deleted_out_of_band_is_never_created_again(env: Env) -> None:
    # Krateo's defect: a finished Job removed by someone else (a TTL, `kubectl delete job`)
    # was created again, running the batch a second time.
    env.scripted.script(exit_code=0, message=SUMMARY)
    manager = env.start(polling_interval=0.5)
    env.create_config()
    env.create_run()
    before = env.wait_phase("Succeeded")
    env.batch.delete_namespaced_job("run", env.ns, propagation_policy="Background")
    eventually(lambda: env.jobs() == [])
    passes = manager.metrics.reconcile_total.value(result="success")
    # Several resyncs later (polling_interval=0.5 s) no pass has created a Job.
    eventually(lambda: manager.metrics.reconcile_total.value(result="success") >= passes + 3)
    assert env.jobs() == [] and env.status() == before
