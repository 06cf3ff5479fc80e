"""The Job controller's per-index rules on plain dicts: counts, delays, verdicts, index lists.

Real: e2e/emulator/jobindexes.py and jobpods.py, the functions the emulator's Job controller
calls (they mirror kube-controller-manager's indexed_job_utils.go and backoff_utils.go).
Faked: the Jobs and pods, written here as the API server would hold them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from e2e.emulator.clock import parse_time
from e2e.emulator.jobindexes import (
    FAILURE_COUNT,
    IGNORED_COUNT,
    held_pods,
    index_verdict,
    is_index_failed,
    ready_at,
    replacement_annotations,
)
from e2e.emulator.jobpods import format_indexes, parse_indexes

TRACKING = "batch.kubernetes.io/job-tracking"
IGNORE_137 = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}


def job(**spec: Any) -> dict[str, Any]:
    base = {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1}
    return {"metadata": {"name": "j"}, "spec": {**base, **spec}}


def pod(
    index: int,
    *,
    failures: int = 0,
    ignored: int = 0,
    exit_code: int = 1,
    finished: str = "2026-01-01T00:00:00Z",
    phase: str = "Failed",
) -> dict[str, Any]:
    notes = {"batch.kubernetes.io/job-completion-index": str(index), FAILURE_COUNT: str(failures)}
    if ignored:
        notes[IGNORED_COUNT] = str(ignored)
    term = {"exitCode": exit_code, "finishedAt": finished}
    return {
        "metadata": {"name": f"j-{index}-x", "namespace": "ns", "uid": f"u{index}{failures}",
                     "annotations": notes, "finalizers": [TRACKING],
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": phase,
                   "containerStatuses": [{"name": "main", "state": {"terminated": term}}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("indexes", "text"),
    [(set(), ""), ({0}, "0"), ({0, 1}, "0,1"), ({0, 1, 2}, "0-2"), ({0, 1, 2, 5}, "0-2,5"),
     ({1, 3, 4, 6, 7, 8}, "1,3,4,6-8")],
)  # fmt: skip
def test_index_lists_are_written_as_the_real_controller_writes_them(
    indexes: set[int], text: str
) -> None:
    assert format_indexes(indexes) == text
    assert parse_indexes(text) == indexes


def test_an_index_fails_once_its_counted_failures_reach_the_limit() -> None:
    assert not is_index_failed(job(), pod(0, failures=0))
    assert is_index_failed(job(), pod(0, failures=1))
    assert not is_index_failed(job(), pod(0, failures=1, phase="Succeeded"))


def test_ignored_failures_neither_fail_the_index_nor_count() -> None:
    spec = job(podFailurePolicy={"rules": [IGNORE_137]})
    assert not is_index_failed(spec, pod(0, failures=5, exit_code=137))
    notes = replacement_annotations(spec, pod(0, failures=1, exit_code=137))
    assert notes == {FAILURE_COUNT: "1", IGNORED_COUNT: "1"}


def test_a_fail_index_rule_fails_the_index_at_the_first_failure() -> None:
    rule = {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}
    assert is_index_failed(job(backoffLimitPerIndex=6, podFailurePolicy={"rules": [rule]}),
                           pod(0, exit_code=3))  # fmt: skip


def test_a_replacement_carries_one_more_failure_and_a_first_pod_zero() -> None:
    assert replacement_annotations(job(), None) == {FAILURE_COUNT: "0"}
    assert replacement_annotations(job(), pod(2, failures=1)) == {FAILURE_COUNT: "2"}
    assert replacement_annotations(job(backoffLimitPerIndex=None), pod(2)) == {}


@pytest.mark.parametrize(("failures", "delay"), [(0, 10), (1, 20), (2, 40), (5, 320), (6, 360)])
def test_an_index_waits_double_per_earlier_failure_from_its_pods_finish(
    failures: int, delay: float
) -> None:
    failed = pod(0, failures=failures)
    finished = parse_time("2026-01-01T00:00:00Z")
    assert ready_at(failed, 10.0) == finished + timedelta(seconds=delay)
    assert ready_at(None, 10.0) is None and ready_at(failed, 0.0) is None


def test_only_the_newest_failed_pod_of_an_index_still_to_run_is_held() -> None:
    older, newer = pod(0, failures=0), pod(0, failures=1, finished="2026-01-01T00:00:09Z")
    others = [pod(1), pod(2)]
    held = held_pods(job(), [newer, older, *others], done={1}, failed=set(), busy={2},
                     tracked=TRACKING)  # fmt: skip
    assert held == {0: newer}


@pytest.mark.parametrize(
    ("most", "failed", "done", "reason"),
    [(0, "1", "", "MaxFailedIndexesExceeded"), (1, "1", "", None), (1, "1", "0,2", "FailedIndexes"),
     (None, "0-2", "", "FailedIndexes"), (None, "", "0-2", None)],
)  # fmt: skip
def test_failed_indexes_fail_the_job_past_the_maximum_or_once_every_index_ended(
    most: int | None, failed: str, done: str, reason: str | None
) -> None:
    status = {"failedIndexes": failed, "completedIndexes": done}
    verdict = index_verdict(job(maxFailedIndexes=most), status)
    assert (verdict[0] if verdict else None) == reason
