"""Indexed Jobs with a back-off limit per index: each index retries, fails and is counted alone.

Real: both backends' Job controllers (the emulator's, and kube-controller-manager's on the
real control plane) with `backoffLimitPerIndex`, `maxFailedIndexes` and podFailurePolicy
actions FailJob/FailIndex; the agent running each pod as a `python -c ...` process that
reads its index from JOB_COMPLETION_INDEX (the downward API, from the pod's label) and
exits as the test's plan says for that index. Faked: nothing (the emulator's back-off
base is 1 s, the real controller's 10 s; a test touches a file in its own folder to let
waiting pods finish).
"""

from __future__ import annotations

from pathlib import Path

from e2e.fixtures import eventually
from tests.nodeagent.conftest import Cluster, Obj, condition_of, phase

INDEX = "batch.kubernetes.io/job-completion-index"
FAILURES = "batch.kubernetes.io/job-index-failure-count"
# What the pod of each index does: an exit code, "flaky" (fails once, then succeeds) or
# "wait" (runs until the test touches `go` in the box folder, then succeeds).
PROGRAM = """\
import os, pathlib, sys, time
box = pathlib.Path({box!r})
index = os.environ['JOB_COMPLETION_INDEX']
what = {plan!r}.get(index, '0')
if what == 'flaky':
    mark = box / ('ran-' + index)
    if not mark.exists():
        mark.write_text('x')
        sys.exit(3)
    sys.exit(0)
while what == 'wait' and not (box / 'go').exists():
    time.sleep(0.1)
sys.exit(0 if what == 'wait' else int(what))
"""


def indexed_job(cluster: Cluster, plan: dict[str, str], **spec: object) -> Path:
    """Job `ix`: Indexed, all indexes at once, each pod doing what `plan` says."""
    box = cluster.tmp / "box"
    box.mkdir(exist_ok=True)
    script = PROGRAM.format(box=str(box), plan=plan)
    completions = spec.pop("completions", len(plan))
    cluster.create_job("ix", script, completionMode="Indexed", completions=completions,
                       parallelism=completions, **spec)  # fmt: skip
    return box


def pods_of(cluster: Cluster, index: int) -> list[Obj]:
    pods = [p for p in cluster.job_pods("ix") if p["metadata"]["annotations"][INDEX] == str(index)]
    return sorted(pods, key=lambda p: int(p["metadata"]["annotations"][FAILURES]))


def is_running(pod: Obj) -> bool:
    return phase(pod) in ("Pending", "Running") and not pod["metadata"].get("deletionTimestamp")


def test_a_failed_pod_is_replaced_for_its_index_only_with_its_failure_count(
    cluster: Cluster,
) -> None:
    box = indexed_job(cluster, {"0": "wait", "1": "flaky"}, backoffLimitPerIndex=1,
                      maxFailedIndexes=0)  # fmt: skip

    first, second = eventually(
        lambda: len(pods_of(cluster, 1)) == 2 and pods_of(cluster, 1), timeout=60
    )

    assert phase(first) == "Failed"
    assert (
        first["metadata"]["annotations"][FAILURES],
        second["metadata"]["annotations"][FAILURES],
    ) == ("0", "1")
    [waiting] = pods_of(cluster, 0)
    assert waiting["metadata"]["annotations"][FAILURES] == "0" and is_running(waiting)
    # kube-controller-manager counts the failed pod once its replacement exists, in a later
    # pass than the one that saw index 1 complete: wait for both.
    job = eventually(
        lambda: (
            (j := cluster.job("ix"))["status"].get("completedIndexes") == "1"
            and j["status"].get("failed") == 1
            and j
        )
    )
    assert job["status"]["failedIndexes"] == ""
    assert is_running(pods_of(cluster, 0)[0])  # index 0 ran on through index 1's retry
    (box / "go").touch()
    job = cluster.wait_job("ix", "Complete")
    status = job["status"]
    assert (status["completedIndexes"], status["failedIndexes"]) == ("0,1", "")
    assert (status["succeeded"], status["failed"]) == (2, 1)
    assert len(pods_of(cluster, 0)) == 1


def test_an_index_past_its_limit_fails_the_job_and_stops_the_other_indexes(
    cluster: Cluster,
) -> None:
    indexed_job(cluster, {"0": "wait", "1": "3", "2": "wait"}, backoffLimitPerIndex=0,
                maxFailedIndexes=0)  # fmt: skip

    job = cluster.wait_job("ix", "Failed")

    failed = condition_of(job, "Failed")
    assert failed is not None and failed["reason"] == "MaxFailedIndexesExceeded"
    assert failed["message"] == "Job has exceeded the specified maximal number of failed indexes"
    assert condition_of(job, "FailureTarget")["reason"] == "MaxFailedIndexesExceeded"  # type: ignore[index]
    assert job["status"]["failedIndexes"] == "1" and "completedIndexes" not in job["status"]
    assert job["status"]["failed"] == 3  # the stopped pods count as failed
    assert len(pods_of(cluster, 1)) == 1  # no retry: backoffLimitPerIndex 0
    eventually(lambda: not any(is_running(p) for p in cluster.job_pods("ix")))


def test_a_fail_job_rule_still_fails_the_whole_job_at_once(cluster: Cluster) -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    indexed_job(cluster, {"0": "wait", "1": "42"}, backoffLimitPerIndex=3, maxFailedIndexes=0,
                podFailurePolicy=policy)  # fmt: skip

    job = cluster.wait_job("ix", "Failed")

    failed = condition_of(job, "Failed")
    assert failed is not None and failed["reason"] == "PodFailurePolicy"
    assert "failed with exit code 42 matching FailJob rule at index 0" in failed["message"]
    assert job["status"]["failedIndexes"] == ""  # the index had retries left
    assert len(pods_of(cluster, 1)) == 1
    eventually(lambda: not any(is_running(p) for p in cluster.job_pods("ix")))


def test_a_fail_index_rule_fails_the_index_at_once_and_the_job_once_all_ended(
    cluster: Cluster,
) -> None:
    policy = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}
    indexed_job(cluster, {"0": "0", "1": "3"}, backoffLimitPerIndex=5, podFailurePolicy=policy)

    job = cluster.wait_job("ix", "Failed")

    failed = condition_of(job, "Failed")
    assert failed is not None
    assert (failed["reason"], failed["message"]) == ("FailedIndexes", "Job has failed indexes")
    status = job["status"]
    assert (status["completedIndexes"], status["failedIndexes"]) == ("0", "1")
    assert len(pods_of(cluster, 1)) == 1  # FailIndex: no retry despite the limit of 5


def test_completed_and_failed_indexes_are_listed_in_ranges(cluster: Cluster) -> None:
    plan = {"0": "0", "1": "0", "2": "0", "3": "3", "4": "3", "5": "0"}
    indexed_job(cluster, plan, backoffLimitPerIndex=0)

    job = cluster.wait_job("ix", "Failed")

    assert condition_of(job, "Failed")["reason"] == "FailedIndexes"  # type: ignore[index]
    status = job["status"]
    assert (status["completedIndexes"], status["failedIndexes"]) == ("0-2,5", "3,4")
    assert (status["succeeded"], status["failed"]) == (4, 2)
