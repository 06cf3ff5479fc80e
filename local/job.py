"""The Job controller's retry rules, applied to local pods.

A run that fails locally must fail for the same reasons it would in the
cluster, so this follows the Job controller: a failed pod counts against
`backoffLimit` unless `podFailurePolicy` says otherwise (exit 2 → FailJob at
once, as the rendered policy asks); `activeDeadlineSeconds` bounds the whole
Job, retries included. Only the pause between pods differs: Kubernetes waits
10 s, 20 s, 40 s...; locally the pause is short (see `short_backoff`), because a
person is watching.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from local.executor import PodExit

Obj = dict[str, Any]
JobPhase = Literal["Succeeded", "Failed", "Stopped"]
# Reasons a pod never started: retrying cannot help (in a cluster the pod stays Pending).
# A pod that cannot start fails the same way on every retry: the run ends at once (exit 2).
SETUP_REASONS = ("CreateContainerConfigError", "ErrImagePull", "StartError")
Attempt = Callable[[int, float | None], PodExit]  # (pod index, monotonic deadline) → exit
# (completion index, pod index within it, monotonic deadline) → exit
IndexAttempt = Callable[[int, int, float | None], PodExit]


@dataclass(frozen=True)
class JobOutcome:
    """How a local Job ended, with every pod's exit in order."""

    phase: JobPhase
    reason: str  # Completed, BackoffLimitExceeded, PodFailurePolicy, DeadlineExceeded, ...
    pods: list[PodExit] = field(default_factory=list)

    @property
    def last(self) -> PodExit | None:
        """The last pod's exit, if any pod ran."""
        return self.pods[-1] if self.pods else None


def short_backoff(failures: int) -> float:
    """Seconds before replacing the n-th failed pod: 1, 2, 4... capped at 10 s."""
    return float(min(2 ** max(failures - 1, 0), 10))


def failure_action(policy: Obj | None, *, exit_code: int, container: str) -> str:
    """The podFailurePolicy action for an exit code: FailJob, Ignore or Count (default)."""
    for rule in (policy or {}).get("rules") or []:
        codes = rule.get("onExitCodes")
        if codes is None or codes.get("containerName") not in (None, container):
            continue  # onPodConditions never match locally: no disruptions here
        listed: bool = exit_code in (codes.get("values") or [])
        if listed == (codes.get("operator", "In") == "In"):
            return str(rule["action"])
    return "Count"


def run_job(
    spec: Obj,
    *,
    attempt: Attempt,
    container: str,
    stop: threading.Event,
    backoff: Callable[[int], float] = short_backoff,
) -> JobOutcome:
    """Run pods until one succeeds or the Job fails (blocking)."""
    limit = int(spec.get("backoffLimit", 6))
    deadline_s = spec.get("activeDeadlineSeconds")
    deadline = time.monotonic() + float(deadline_s) if deadline_s is not None else None
    pods: list[PodExit] = []
    failures = 0
    while True:
        pod = attempt(len(pods), deadline)
        pods.append(pod)
        verdict = _verdict(pod, spec=spec, container=container, stop=stop, deadline=deadline)
        if verdict is not None:
            return JobOutcome(verdict[0], verdict[1], pods)
        if (
            failure_action(
                spec.get("podFailurePolicy"), exit_code=pod.exit_code, container=container
            )
            == "Count"
        ):
            failures += 1
        if failures > limit:
            return JobOutcome("Failed", "BackoffLimitExceeded", pods)
        if _wait(backoff(failures), stop=stop, deadline=deadline):
            return _interrupted(pods, stop=stop)


def run_indexes(
    spec: Obj,
    *,
    attempt: IndexAttempt,
    container: str,
    stop: threading.Event,
    backoff: Callable[[int], float] = short_backoff,
) -> JobOutcome:
    """An Indexed Job (a run over several pods): its indexes one after another, each retried
    up to `backoffLimitPerIndex` as the Job controller retries an index; one index that fails
    fails the Job (`maxFailedIndexes: 0`, as longrun renders it), and `activeDeadlineSeconds`
    bounds them all. In a cluster the indexes run at once; the output and status are the same.
    """
    limit = spec.get("backoffLimitPerIndex", spec.get("backoffLimit", 6))
    deadline_s = spec.get("activeDeadlineSeconds")
    started = time.monotonic()
    pods: list[PodExit] = []
    for index in range(int(spec.get("completions") or 1)):
        one = {**spec, "backoffLimit": limit}
        if deadline_s is not None:
            one["activeDeadlineSeconds"] = max(float(deadline_s) - (time.monotonic() - started), 0)

        def this(n: int, deadline: float | None, index: int = index) -> PodExit:
            return attempt(index, n, deadline)

        outcome = run_job(one, attempt=this, container=container, stop=stop, backoff=backoff)
        pods += outcome.pods
        if outcome.phase != "Succeeded":
            spent = outcome.reason == "BackoffLimitExceeded"
            reason = "MaxFailedIndexesExceeded" if spent else outcome.reason
            return JobOutcome(outcome.phase, reason, pods)
    return JobOutcome("Succeeded", "Completed", pods)


def _verdict(
    pod: PodExit, *, spec: Obj, container: str, stop: threading.Event, deadline: float | None
) -> tuple[JobPhase, str] | None:
    """The Job's end after this pod, or None to go on retrying."""
    if pod.exit_code == 0:
        return "Succeeded", "Completed"
    if pod.reason == "DeadlineExceeded" or (deadline is not None and time.monotonic() >= deadline):
        return "Failed", "DeadlineExceeded"
    if stop.is_set():
        return "Stopped", "Stopped"
    if pod.reason in SETUP_REASONS:
        return "Failed", pod.reason
    action = failure_action(
        spec.get("podFailurePolicy"), exit_code=pod.exit_code, container=container
    )
    if action == "FailJob":
        return "Failed", "PodFailurePolicy"
    return None


def _wait(seconds: float, *, stop: threading.Event, deadline: float | None) -> bool:
    """Sleep before the next pod; True when interrupted by `stop` or the deadline."""
    until = time.monotonic() + seconds
    if deadline is not None and deadline <= until:
        stop.wait(max(deadline - time.monotonic(), 0))
        return True
    return stop.wait(seconds)


def _interrupted(pods: list[PodExit], *, stop: threading.Event) -> JobOutcome:
    if stop.is_set():
        return JobOutcome("Stopped", "Stopped", pods)
    return JobOutcome("Failed", "DeadlineExceeded", pods)
