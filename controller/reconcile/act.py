"""Act: apply a decision through the Cluster port, controller-runtime `CreateOrUpdate` style.

The rules the code relies on:
- A deterministic name is the lock: create, and on AlreadyExists read the live
  object and decide from its owner reference, never create under another name.
- An object we do not own is left alone and reported (`NameConflict`); an object
  the API server refuses (400/422) is reported (`ChildRejected`): both are user
  errors, not retried until something changes.
- A write forbidden by admission (403: an exceeded ResourceQuota, a webhook, or RBAC)
  is reported the same way, and retried with backoff, since the quota may free up.
  Every other error propagates, and the work queue retries it with backoff.
- What the API server answered is observed: the reconciler decides again from it.

Every write that changes the world is logged (JSON, with the run key and reconcile id from
`controller.runtime.logs`): children created or changed, suspend/resume, each transition
the events publish (a run finished, with its counts; a user error, with its reason), and
the deletions of `autoDeletePolicy`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from contracts.run import InferenceRunStatus
from controller.core.decide import ChildWrite, Decision, is_owned_by, not_owned
from controller.core.events import EventSpec, transition_events
from controller.core.ports import ApiError, Cluster, Kind, Obj
from controller.core.status import FINISHED, Observed, normalize
from controller.core.validation import Problem
from controller.core.writes import Create, Delete

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    """What the child writes left in the cluster: the objects, or why they stopped."""

    objects: tuple[tuple[Kind, Obj], ...] = ()
    problem: Problem | None = None
    retry: ApiError | None = None  # raise it once the problem is reported


def is_refusal(exc: ApiError) -> bool:
    """400/422: the API server refuses the object itself; sending it again cannot help."""
    return exc.status in (400, 422)


def is_forbidden(exc: ApiError) -> bool:
    """403: admission (a quota, a webhook) or RBAC forbids the write, for now."""
    return exc.status == 403


def _refused(kind: Kind, name: str, exc: ApiError) -> Problem:
    if is_forbidden(exc):
        advice = "retrying with backoff; free the quota or fix the policy that forbids it"
    else:
        advice = "fix the run or its config"
    return Problem(
        "spec",
        "ChildRejected",
        f'the API server refused {kind} "{name}" ({exc.status}): {exc.message}; {advice}',
    )


def write_children(cluster: Cluster, writes: tuple[ChildWrite, ...], *, uid: str) -> Written:
    """Apply child writes in order; stop at the first user error."""
    objects: list[tuple[Kind, Obj]] = []
    for write in writes:
        try:
            objects.append((write.kind, _write(cluster, write, uid=uid)))
            _log_write(write)
        except _UserError as exc:
            return Written(tuple(objects), exc.problem)
        except ApiError as exc:
            if not is_forbidden(exc):
                raise
            name = write.body["metadata"]["name"] if isinstance(write, Create) else write.name
            return Written(tuple(objects), _refused(write.kind, name, exc), retry=exc)
    return Written(tuple(objects))


class _UserError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _log_write(write: ChildWrite) -> None:
    if isinstance(write, Create):
        name = write.body["metadata"]["name"]
        log.info("created %s %s", write.kind, name, extra={"kind": write.kind, "object": name})
        return
    verb = "updated"
    if write.kind == "Job" and isinstance(write.body, dict):
        verb = "suspended" if write.body["spec"]["suspend"] else "resumed"
    elif write.kind == "Workload" and isinstance(write.body, dict):  # the run's suspend, in Kueue
        verb = "activated" if write.body["spec"]["active"] else "deactivated"
    extra = {"kind": write.kind, "object": write.name}
    log.info("%s %s %s", verb, write.kind, write.name, extra=extra)


def _write(cluster: Cluster, write: ChildWrite, *, uid: str) -> Obj:
    if isinstance(write, Create):
        return _create(cluster, write, uid=uid)
    try:
        return cluster.patch(write.kind, write.namespace, write.name, write.body)
    except ApiError as exc:
        if is_refusal(exc):
            raise _UserError(_refused(write.kind, write.name, exc)) from exc
        raise


def _create(cluster: Cluster, write: Create[Kind], *, uid: str) -> Obj:
    meta = write.body["metadata"]
    try:
        return cluster.create(write.kind, write.body)
    except ApiError as exc:
        if is_refusal(exc):
            raise _UserError(_refused(write.kind, meta["name"], exc)) from exc
        if not exc.is_already_exists:
            raise
    live = cluster.read(write.kind, meta["namespace"], meta["name"])
    if live is None:  # deleted in between: the retry will create it
        raise ApiError(409, f"{write.kind} {meta['name']} vanished after AlreadyExists")
    if not is_owned_by(live, uid):
        raise _UserError(not_owned(write.kind, live))
    return live


def publish(cluster: Cluster, obs: Observed, decision: Decision) -> None:
    """Patch /status once when it changed, and record the events of its transitions."""
    new, old = normalize(decision.status), normalize(obs.run.get("status"))
    if new == old:
        return
    patch = merge_patch(old, new)
    meta = obs.run["metadata"]
    run = cluster.patch_status(meta["namespace"], meta["name"], patch)
    for event in transition_events(obs.previous, decision.status):
        cluster.emit_event(run, type_=event.type, reason=event.reason, message=event.message)
        _log_event(event, decision.status)


def merge_patch(old: Obj, new: Obj) -> Obj:
    """The JSON merge patch (RFC 7386) turning `old` into `new`: every key of `new`, and null
    for each key `old` has and `new` lacks, at any depth (`progress.rateText` of a run that
    stopped running goes, not only whole top-level fields)."""
    patch: Obj = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            value = merge_patch(before, value)
        patch[key] = value
    return patch


def _log_event(event: EventSpec, status: InferenceRunStatus) -> None:
    """A transition as a log line: the event's reason and words, the phase, and the counts
    of a finished run."""
    extra: dict[str, object] = {"reason": event.reason, "phase": status.phase}
    if status.phase in FINISHED and status.result is not None:
        result = status.result
        extra.update(
            records_read=result.records_read,
            records_written=result.records_written,
            records_failed=result.records_failed,
        )
    level = logging.WARNING if event.type == "Warning" else logging.INFO
    log.log(level, "%s: %s", event.reason, event.message, extra=extra)


def delete(cluster: Cluster, deletions: tuple[Delete[Kind], ...]) -> None:
    """Delete each object, only while it still has the uid the decision saw."""
    for item in deletions:
        extra = {"kind": item.kind, "object": item.name, "policy": item.why}
        log.info("deleting %s %s (%s)", item.kind, item.name, item.why, extra=extra)
        cluster.delete(item.kind, item.namespace, item.name, uid=item.uid)
