"""The Job controller: pods from templates, counting, failure policies, deadlines, TTL.

Real: the official client reading Jobs and Pods over HTTP; the Job controller's
logic mirrors kube-controller-manager 1.31+; the node agent runs each pod as a
process. Faked: what that process does, scripted by the test (exit code,
termination message, held until finished; e2e/nodeagent/scripted.py); the Job
controller's time is the emulator clock, advanced by the tests.
"""

from __future__ import annotations

from typing import Any

from e2e.fixtures import eventually


def job_body(name: str = "j", **spec: Any) -> dict:
    template = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }
    return {"metadata": {"name": name}, "spec": {"template": template, **spec}}


def create(k8s, name: str = "j", **spec: Any):
    return k8s.batch.create_namespaced_job(k8s.ns, job_body(name, **spec))


def conditions(k8s, name: str = "j") -> dict[str, Any]:
    job = k8s.batch.read_namespaced_job(name, k8s.ns)
    return {c.type: c for c in job.status.conditions or [] if c.status == "True"}


def wait_condition(k8s, type_: str, name: str = "j", timeout: float = 5.0):
    return eventually(lambda: conditions(k8s, name).get(type_), timeout=timeout)


def pods(k8s, name: str = "j") -> list:
    return k8s.core.list_namespaced_pod(k8s.ns, label_selector=f"job-name={name}").items


def running(k8s, name: str = "j") -> list:
    """The Job's pods once one runs (the node agent has started its container)."""
    return eventually(lambda: [p for p in pods(k8s, name) if p.status.phase == "Running"])


def test_job_creates_labelled_owned_pod(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    job = create(k8s)
    pod = eventually(lambda: pods(k8s))[0]
    assert pod.metadata.name.startswith("j-") and len(pod.metadata.name) == 7
    labels = pod.metadata.labels
    assert labels["job-name"] == "j" and labels["batch.kubernetes.io/job-name"] == "j"
    assert (
        labels["controller-uid"] == job.metadata.uid == labels["batch.kubernetes.io/controller-uid"]
    )
    ref = pod.metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.controller, ref.block_owner_deletion) == (
        "Job",
        "j",
        True,
        True,
    )
    assert "batch.kubernetes.io/job-tracking" in pod.metadata.finalizers
    eventually(lambda: k8s.batch.read_namespaced_job("j", k8s.ns).status.ready == 1)
    status = k8s.batch.read_namespaced_job("j", k8s.ns).status
    assert status.active == 1 and status.start_time is not None


def test_successful_job_completes_with_real_conditions(k8s):
    k8s.emu.executor.script(job="j", exit_code=0, message='{"records": 3}')
    create(k8s)
    complete = wait_condition(k8s, "Complete")
    assert complete.reason == "CompletionsReached"
    conds = conditions(k8s)
    assert conds["SuccessCriteriaMet"].reason == "CompletionsReached"
    job = k8s.batch.read_namespaced_job("j", k8s.ns)
    assert (
        job.status.succeeded == 1
        and job.status.completion_time is not None
        and not job.status.active
    )
    pod = pods(k8s)[0]
    assert pod.status.phase == "Succeeded"
    assert pod.status.container_statuses[0].state.terminated.message == '{"records": 3}'
    eventually(lambda: not pods(k8s)[0].metadata.finalizers)


def test_backoff_limit_exceeded_fails_job_and_keeps_failed_pods(k8s):
    k8s.emu.executor.script(job="j", exit_code=3, message="boom")
    create(k8s, backoffLimit=1)
    failed = wait_condition(k8s, "Failed")
    assert failed.reason == "BackoffLimitExceeded"
    assert conditions(k8s)["FailureTarget"].reason == "BackoffLimitExceeded"
    job = k8s.batch.read_namespaced_job("j", k8s.ns)
    assert job.status.failed == 2 and job.status.completion_time is None
    kept = pods(k8s)
    assert len(kept) == 2 and {p.status.phase for p in kept} == {"Failed"}
    assert kept[0].status.container_statuses[0].state.terminated.exit_code == 3


def test_pod_failure_policy_fail_job_on_exit_code(k8s):
    k8s.emu.executor.script(job="j", exit_code=2)
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}}]}
    create(k8s, backoffLimit=6, podFailurePolicy=policy)
    failed = wait_condition(k8s, "Failed")
    assert failed.reason == "PodFailurePolicy"
    assert "failed with exit code 2 matching FailJob rule at index 0" in failed.message
    assert k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 1


def test_pod_failure_policy_ignore_does_not_count(k8s):
    k8s.emu.executor.script(job="j", exit_code=0)
    k8s.emu.executor.script(job="j", exit_code=137, times=2)
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}]}
    create(k8s, backoffLimit=0, podFailurePolicy=policy)
    wait_condition(k8s, "Complete")
    job = k8s.batch.read_namespaced_job("j", k8s.ns)
    assert not job.status.failed and job.status.succeeded == 1
    assert len(pods(k8s)) == 3


def test_pod_failure_policy_count_counts_towards_backoff_limit(k8s):
    k8s.emu.executor.script(job="j", exit_code=42)
    policy = {
        "rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}},
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [42]}},
        ]
    }
    create(k8s, backoffLimit=1, podFailurePolicy=policy)
    failed = wait_condition(k8s, "Failed")
    assert failed.reason == "BackoffLimitExceeded"  # counted like a rule-less failure
    assert k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 2
    assert len(pods(k8s)) == 2


def test_pod_failure_policy_on_disruption_condition(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    policy = {
        "rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
        ]
    }
    create(k8s, podFailurePolicy=policy)
    first = eventually(lambda: pods(k8s))[0].metadata.name
    k8s.emu.executor.disrupt(first)
    second = eventually(lambda: [p for p in pods(k8s) if p.metadata.name != first])[0].metadata.name
    k8s.emu.executor.finish(second, exit_code=1)
    failed = wait_condition(k8s, "Failed")
    assert failed.reason == "PodFailurePolicy" and second in failed.message


def test_active_deadline_exceeded_fails_job(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    create(k8s, activeDeadlineSeconds=30)
    eventually(lambda: pods(k8s))
    k8s.emu.clock.advance(31)
    failed = wait_condition(k8s, "Failed")
    assert failed.reason == "DeadlineExceeded"
    assert failed.message == "Job was active longer than specified deadline"
    eventually(lambda: all(p.status.phase == "Failed" for p in pods(k8s)))


def test_suspended_job_creates_no_pods_until_resumed(k8s):
    create(k8s, suspend=True)
    cond = eventually(lambda: conditions(k8s).get("Suspended"))
    assert cond.reason == "JobSuspended" and not pods(k8s)
    assert k8s.batch.read_namespaced_job("j", k8s.ns).status.start_time is None
    k8s.batch.patch_namespaced_job("j", k8s.ns, {"spec": {"suspend": False}})
    wait_condition(k8s, "Complete")
    assert len(pods(k8s)) == 1


def test_resuming_a_job_records_resumed_event(k8s):
    create(k8s, suspend=True)
    eventually(lambda: conditions(k8s).get("Suspended"))
    k8s.batch.patch_namespaced_job("j", k8s.ns, {"spec": {"suspend": False}})
    wait_condition(k8s, "Complete")
    events = k8s.core.list_namespaced_event(k8s.ns, field_selector="involvedObject.name=j").items
    resumed = [e for e in events if e.reason == "Resumed"]
    assert len(resumed) == 1 and resumed[0].message == "Job resumed"
    assert {"Suspended", "SuccessfulCreate", "Completed"} <= {e.reason for e in events}


def test_suspending_running_job_deletes_active_pods(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    create(k8s)
    eventually(lambda: pods(k8s))
    k8s.batch.patch_namespaced_job("j", k8s.ns, {"spec": {"suspend": True}})
    eventually(lambda: conditions(k8s).get("Suspended"))
    eventually(lambda: not [p for p in pods(k8s) if p.status.phase == "Running"])


def test_ttl_after_finished_deletes_job_and_pods(k8s):
    create(k8s, ttlSecondsAfterFinished=100)
    wait_condition(k8s, "Complete")
    k8s.emu.clock.advance(101)
    eventually(lambda: not k8s.batch.list_namespaced_job(k8s.ns).items)
    eventually(lambda: not pods(k8s))


def test_completions_and_parallelism(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    create(k8s, completions=3, parallelism=2)
    running = eventually(lambda: len(pods(k8s)) == 2 and pods(k8s))
    first_two = {pod.metadata.name for pod in running}
    for name in first_two:
        k8s.emu.executor.finish(name)
    third = eventually(lambda: [p for p in pods(k8s) if p.metadata.name not in first_two])
    assert len(pods(k8s)) == 3
    k8s.emu.executor.finish(third[0].metadata.name)
    wait_condition(k8s, "Complete")
    assert k8s.batch.read_namespaced_job("j", k8s.ns).status.succeeded == 3


def test_indexed_job_sets_index_env_annotation_and_completed_indexes(k8s):
    create(k8s, completions=3, parallelism=3, completionMode="Indexed")
    wait_condition(k8s, "Complete")
    job = k8s.batch.read_namespaced_job("j", k8s.ns)
    assert job.status.completed_indexes == "0-2"
    indexes = set()
    for pod in pods(k8s):
        idx = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        indexes.add(idx)
        assert pod.metadata.name.startswith(f"j-{idx}-")
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == idx
        assert (  # PodIndexLabel (1.28+): the env var reads the label
            env["JOB_COMPLETION_INDEX"].value_from.field_ref.field_path
            == "metadata.labels['batch.kubernetes.io/job-completion-index']"
        )
    assert indexes == {"0", "1", "2"}


def test_deleting_running_pod_counts_as_failure_and_replaces_it(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    create(k8s, backoffLimit=3)
    first = running(k8s)[0].metadata.name
    k8s.core.delete_namespaced_pod(first, k8s.ns)
    eventually(lambda: [p for p in pods(k8s) if p.metadata.name != first])
    eventually(lambda: k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 1)
    assert first in k8s.emu.executor.killed


def test_failed_pods_are_replaced_after_exponential_backoff_on_the_clock(k8s_factory):
    k8s = k8s_factory(job_backoff_seconds=10.0)  # the real controller's base delay
    k8s.emu.executor.script(job="j", exit_code=1)
    create(k8s, backoffLimit=2)
    eventually(lambda: k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 1)
    k8s.emu.emulator.wait_idle()
    assert len(pods(k8s)) == 1  # waiting 10 s before the replacement
    k8s.emu.clock.advance(10)
    eventually(lambda: k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 2)
    k8s.emu.clock.advance(10)
    k8s.emu.emulator.wait_idle()
    assert len(pods(k8s)) == 2  # second delay is 20 s
    k8s.emu.clock.advance(10)
    wait_condition(k8s, "Failed")
    assert len(pods(k8s)) == 3


def test_job_controller_records_events_and_labels_the_job(k8s):
    create(k8s)
    wait_condition(k8s, "Complete")
    events = eventually(
        lambda: k8s.core.list_namespaced_event(k8s.ns, field_selector="involvedObject.name=j").items
    )
    assert {e.reason for e in events} == {"SuccessfulCreate", "Completed"}
    assert (
        events[0].source.component == "job-controller" and events[0].involved_object.kind == "Job"
    )
    assert k8s.batch.read_namespaced_job("j", k8s.ns).metadata.labels["job-name"] == "j"


def test_force_deleted_running_pod_is_killed_and_counted(k8s):
    k8s.emu.executor.script(job="j", hold=True)
    create(k8s, backoffLimit=3)
    first = running(k8s)[0].metadata.name
    k8s.core.delete_namespaced_pod(first, k8s.ns, grace_period_seconds=0)
    eventually(lambda: k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 1)
    assert first in k8s.emu.executor.killed
    eventually(lambda: first not in [p.metadata.name for p in pods(k8s)])


def test_a_failed_index_waits_out_its_own_backoff_on_the_clock(k8s_factory):
    k8s = k8s_factory(job_backoff_seconds=10.0)  # the real controller's base delay
    index = "batch.kubernetes.io/job-completion-index"
    count = "batch.kubernetes.io/job-index-failure-count"
    k8s.emu.executor.script(job="j", hold=True)
    k8s.emu.executor.script(
        job="j", match=lambda p: p["metadata"]["annotations"][index] == "1", exit_code=1, times=1
    )
    create(k8s, completions=2, parallelism=2, completionMode="Indexed", backoffLimitPerIndex=1)

    def of_index(i: str) -> list:
        return [p for p in pods(k8s) if p.metadata.annotations[index] == i]

    eventually(lambda: [p for p in of_index("1") if p.status.phase == "Failed"])
    k8s.emu.emulator.wait_idle()
    [failed] = of_index("1")  # index 1 waits 10 s for its replacement
    assert failed.metadata.finalizers == ["batch.kubernetes.io/job-tracking"]  # held, uncounted
    assert not k8s.batch.read_namespaced_job("j", k8s.ns).status.failed
    [other] = of_index("0")
    k8s.emu.clock.advance(10)
    replacement = eventually(lambda: [p for p in of_index("1") if p.status.phase != "Failed"])[0]
    assert replacement.metadata.annotations[count] == "1"
    assert failed.metadata.annotations[count] == "0"
    eventually(lambda: k8s.batch.read_namespaced_job("j", k8s.ns).status.failed == 1)
    [still] = of_index("0")  # index 0 ran on meanwhile
    assert (still.metadata.name, still.status.phase) == (other.metadata.name, "Running")
