"""Per-index backoff of Indexed Jobs (`backoffLimitPerIndex`), as kube-controller-manager.

Pure functions of the Job and its pods (the real controller keeps no memory for it
either, pkg/controller/job/indexed_job_utils.go and backoff_utils.go):
- each pod of such a Job carries `batch.kubernetes.io/job-index-failure-count`, the
  counted failures of its index before it (0 on the first pod), and, when some were
  ignored by the podFailurePolicy, `batch.kubernetes.io/job-index-ignored-failure-count`;
- an index fails when a pod of it fails with a FailIndex rule, or with a counted
  failure once its failure count has reached `backoffLimitPerIndex`; failed indexes
  are listed in `status.failedIndexes` and never get another pod;
- the last failed pod of an index that is still to run keeps its tracking finalizer
  (it is not counted in `status.failed` yet) until its replacement exists, which takes
  its counts plus one; the replacement waits base * 2^(failures-1) seconds (capped at
  6 min) from the failed pod's finish, per index, while other indexes run on.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .clock import parse_time
from .jobpods import (
    completion_index,
    condition,
    format_indexes,
    is_finished,
    parse_indexes,
    phase,
    pod_failure_action,
)

Obj = dict[str, Any]
Held = dict[int, Obj]  # index -> its failed pod, held until replaced
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
MAX_DELAY = 360.0  # MaxJobPodFailureBackOff


def has_backoff_per_index(job: Obj) -> bool:
    spec = job["spec"]
    return spec.get("completionMode") == "Indexed" and spec.get("backoffLimitPerIndex") is not None


def index_state(job: Obj, pods: list[Obj], status: Obj, active: list[Obj], *,
                tracking: str) -> dict[int, Obj]:  # fmt: skip
    """Sets status.failedIndexes ("" too: a *string on a cluster) and returns the failed
    pod held for each index still to run. Once the Job is failing nothing is held, and the
    list stays as it was: the real controller released every pod in that pass, so the pods
    it stops fail no index."""
    if not has_backoff_per_index(job):
        return {}
    if is_finished(job) or condition({"status": status}, "FailureTarget"):
        status.setdefault("failedIndexes", "")
        return {}
    failed = failed_indexes(job, pods, status, tracking)
    status["failedIndexes"] = format_indexes(failed)
    done = parse_indexes(status.get("completedIndexes", "")) | {
        i for p in pods if phase(p) == "Succeeded" and (i := completion_index(p)) is not None
    }
    busy = {i for p in active if (i := completion_index(p)) is not None}
    return held_pods(job, pods, done=done, failed=failed, busy=busy, tracked=tracking)


def due_indexes(todo: list[int], held: dict[int, Obj], base: float,
                now: datetime) -> tuple[list[int], datetime | None]:  # fmt: skip
    """The indexes whose back-off is over, and, when none is, when the first one will be
    (getPodCreationInfoForIndependentIndexes)."""
    waits = {i: ready_at(held.get(i), base) for i in todo}
    due = [i for i, at in waits.items() if at is None or at <= now]
    later = [at for at in waits.values() if at is not None]
    return due, (min(later) if later and not due else None)


def _count(pod: Obj, key: str) -> int:
    """An annotation's count; 0 when absent or not a valid int32 (as parseInt32)."""
    try:
        value = int((pod["metadata"].get("annotations") or {}).get(key, "0"))
    except ValueError:
        return 0
    return value if 0 <= value <= 2**31 - 1 else 0


def absolute_failures(pod: Obj) -> int:
    return _count(pod, FAILURE_COUNT) + _count(pod, IGNORED_COUNT)


def is_index_failed(job: Obj, pod: Obj) -> bool:
    """Whether this failed pod makes its index fail (isIndexFailed)."""
    if phase(pod) != "Failed":
        return False
    action, _ = pod_failure_action(job, pod)
    if action == "FailIndex":
        return True
    return action != "Ignore" and _count(pod, FAILURE_COUNT) >= job["spec"]["backoffLimitPerIndex"]


def failed_indexes(job: Obj, pods: list[Obj], status: Obj, tracked: str) -> set[int]:
    """status.failedIndexes plus the indexes of tracked pods that failed them."""
    completions = int(job["spec"]["completions"])
    out = {i for i in parse_indexes(status.get("failedIndexes") or "") if i < completions}
    for pod in pods:
        idx = completion_index(pod)
        if idx is None or idx >= completions or tracked not in _finalizers(pod):
            continue
        if is_index_failed(job, pod):
            out.add(idx)
    return out


def held_pods(job: Obj, pods: list[Obj], *, done: set[int], failed: set[int], busy: set[int],
              tracked: str) -> dict[int, Obj]:  # fmt: skip
    """The last failed pod of each index still to run (getPodsWithDelayedDeletionPerIndex)."""
    held: dict[int, Obj] = {}
    completions = int(job["spec"]["completions"])
    for pod in pods:
        idx = completion_index(pod)
        if phase(pod) != "Failed" or tracked not in _finalizers(pod):
            continue
        if idx is None or idx >= completions or idx in done | failed | busy:
            continue
        last = held.get(idx)
        if last is None or (
            absolute_failures(last) <= absolute_failures(pod)
            and finished_at(pod) >= finished_at(last)
        ):
            held[idx] = pod
    return held


def replacement_annotations(job: Obj, replaced: Obj | None) -> dict[str, str]:
    """The counts a new pod of the index carries (getNewIndexFailureCounts); none without
    backoffLimitPerIndex."""
    if not has_backoff_per_index(job):
        return {}
    failures, ignored = 0, 0
    if replaced is not None:
        failures, ignored = _count(replaced, FAILURE_COUNT), _count(replaced, IGNORED_COUNT)
        action, _ = pod_failure_action(job, replaced)
        if action == "Ignore":
            ignored += 1
        else:
            failures += 1
    out = {FAILURE_COUNT: str(failures)}
    if ignored:
        out[IGNORED_COUNT] = str(ignored)
    return out


def ready_at(replaced: Obj | None, base: float) -> datetime | None:
    """When the index's next pod may be created; None: now (getRemainingTimePerIndex)."""
    if replaced is None or not base:
        return None
    delay = base
    for _ in range(absolute_failures(replaced)):  # failures + 1 doublings, minus one
        delay = min(delay * 2, MAX_DELAY)
        if delay >= MAX_DELAY:
            break
    return finished_at(replaced) + timedelta(seconds=delay)


def finished_at(pod: Obj) -> datetime:
    """The containers' last finish, else Ready=False, else deletion, else creation."""
    status = pod.get("status") or {}
    ends: list[str] = [
        ((cs.get("state") or {}).get("terminated") or {}).get("finishedAt") or ""
        for cs in status.get("containerStatuses") or []
    ]
    if ends and all(ends):
        return max(parse_time(e) for e in ends)
    for cond in status.get("conditions") or []:
        if cond["type"] == "Ready" and cond["status"] == "False" and cond.get("lastTransitionTime"):
            return parse_time(cond["lastTransitionTime"])
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        grace = meta.get("deletionGracePeriodSeconds") or 0
        return parse_time(meta["deletionTimestamp"]) - timedelta(seconds=grace)
    return parse_time(meta["creationTimestamp"])


def index_verdict(job: Obj, status: Obj) -> tuple[str, str] | None:
    """(reason, message) of the FailureTarget the failed indexes call for, if any."""
    if not has_backoff_per_index(job):
        return None
    failed = parse_indexes(status.get("failedIndexes") or "")
    done = parse_indexes(status.get("completedIndexes") or "")
    spec = job["spec"]
    most = spec.get("maxFailedIndexes")
    if most is not None and len(failed) > most:
        return (
            "MaxFailedIndexesExceeded",
            "Job has exceeded the specified maximal number of failed indexes",
        )
    if failed and len(failed) + len(done) >= int(spec["completions"]):
        return "FailedIndexes", "Job has failed indexes"
    return None


def _finalizers(pod: Obj) -> list[str]:
    return list(pod["metadata"].get("finalizers") or [])
