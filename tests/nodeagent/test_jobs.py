"""Jobs whose pods the node agent runs: the backend's Job controller decides, the agent reports.

Real: both backends' Job controllers (the emulator's, and kube-controller-manager's on the
real control plane) creating, counting and replacing pods; the agent binding them and
running `python -c ...` as local processes; the exit codes and termination messages the
processes produce. Faked: nothing (the emulator's Job back-off base is 1 s, see conftest).
"""

from __future__ import annotations

from tests.nodeagent.conftest import Cluster, condition_of, phase, terminated

SUCCEED = "print('hello from the node agent')"
FAIL = (
    "import os, sys\n"
    "open(os.environ['TERMINATION_MESSAGE_PATH'], 'w').write('gave up')\n"
    "sys.exit(3)"
)


def test_job_runs_its_pod_to_completion(cluster: Cluster) -> None:
    cluster.create_job("hello", SUCCEED, backoffLimit=0)

    job = cluster.wait_job("hello", "Complete")

    assert job["status"]["succeeded"] == 1
    [pod] = cluster.job_pods("hello")
    assert pod["spec"]["nodeName"] == cluster.node_name
    assert phase(pod) == "Succeeded"
    ended = terminated(pod)
    assert (ended["exitCode"], ended["reason"]) == (0, "Completed")
    assert ended["startedAt"] <= ended["finishedAt"]


def test_failing_pod_is_replaced_once_then_the_job_fails(cluster: Cluster) -> None:
    recorder = cluster.record("jobs", "flaky")
    cluster.create_job("flaky", FAIL, backoffLimit=1)

    job = cluster.wait_job("flaky", "Failed", timeout=90)
    statuses = recorder.stop(until=lambda s: "Failed" in _condition_types(s))

    assert condition_of(job, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]
    pods = cluster.job_pods("flaky")
    assert len(pods) == 2 and all(phase(p) == "Failed" for p in pods)
    assert {terminated(p)["message"] for p in pods} == {"gave up"}
    # The back-off between the two pods: one failure counted and nothing running.
    assert any(s.get("failed") == 1 and not s.get("active") for s in statuses), statuses
    kinds = [_condition_types(s) for s in statuses]
    first_target = next(i for i, k in enumerate(kinds) if "FailureTarget" in k)
    first_failed = next(i for i, k in enumerate(kinds) if "Failed" in k)
    assert first_target <= first_failed
    assert kinds[first_target].index("FailureTarget") < kinds[first_failed].index("Failed")


def test_pod_failure_policy_fails_the_job_on_an_exit_code(cluster: Cluster) -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}
    cluster.create_job("strict", FAIL, backoffLimit=5, podFailurePolicy=policy)

    job = cluster.wait_job("strict", "Failed")

    assert condition_of(job, "Failed")["reason"] == "PodFailurePolicy"  # type: ignore[index]
    assert len(cluster.job_pods("strict")) == 1


def test_on_failure_restarts_the_container_in_place(cluster: Cluster) -> None:
    # The first run leaves a mark in its emptyDir (/tmp, TMPDIR) and fails; the restarted
    # container finds it and succeeds: the pod's volumes survive a restart.
    script = (
        "import pathlib, sys, tempfile\n"
        "mark = pathlib.Path(tempfile.gettempdir(), 'ran-once')\n"
        "if mark.exists(): sys.exit(0)\n"
        "mark.write_text('x'); sys.exit(1)"
    )
    mount = {"volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    cluster.create_pod(
        "retry",
        script,
        restartPolicy="OnFailure",
        container=mount,
        volumes=[{"name": "tmp", "emptyDir": {}}],
    )

    pod = cluster.wait_phase("retry", "Succeeded", "Failed")

    assert phase(pod) == "Succeeded"
    [status] = pod["status"]["containerStatuses"]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["state"]["terminated"]["exitCode"] == 0


def _condition_types(status: dict) -> list[str]:
    return [c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"]
