"""Decide: an observed run in, the writes that converge it and its status out. Pure.

One-shot and scheduled runs each read as one straight flow:
- one-shot: resolve the config and plan the contract ConfigMap and the Job, until
  the Job exists (from then on the run is frozen); status from the Job and its pods;
  `autoDeletePolicy` deletes the run itself once it finished;
- scheduled: resolve the config and keep the ConfigMap and the CronJob current on
  every pass; status from the CronJob and the Jobs it spawned; `autoDeletePolicy`
  deletes finished Jobs; look again at the next schedule time.

The decision assumes its child writes succeed. When the API server answers
otherwise (an object refused, a name taken, an object we already made), the
reconciler observes that answer and decides again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from contracts.run import InferenceRunStatus
from controller.core import builders, names
from controller.core import conditions as cond
from controller.core.builders import Resolved
from controller.core.conditions import find
from controller.core.jobs import is_finished, job_state
from controller.core.kueue import policy as queueing
from controller.core.kueue import workload
from controller.core.kueue.status import with_queue
from controller.core.pinning import Pin, config_pin
from controller.core.ports import Kind, Obj
from controller.core.progress import progress_wait, with_progress
from controller.core.resolve import resolve
from controller.core.serving import uses
from controller.core.settings import Settings
from controller.core.status import (
    FINISHED,
    Observed,
    lost_job_status,
    one_shot_status,
    scheduled_status,
)
from controller.core.validation import Problem
from controller.core.writes import Create, Delete, Patch

OPTIONAL_CRON = ("timeZone", "startingDeadlineSeconds")
# Job template fields we set only sometimes: suspend (a job template in a queue); the first
# (one pod) or the rest (spec.parallelism > 1: builders.retry_fields) of the retry fields.
OPTIONAL_JOB = (
    "activeDeadlineSeconds", "suspend", "backoffLimit", "completionMode", "completions",
    "parallelism", "backoffLimitPerIndex", "maxFailedIndexes",
)  # fmt: skip


ChildWrite = Create[Kind] | Patch[Kind]


@dataclass(frozen=True)
class Decision:
    """Child writes in order, the run's status, deletions and when to look again."""

    writes: tuple[ChildWrite, ...]
    status: InferenceRunStatus
    deletions: tuple[Delete[Kind], ...] = ()
    requeue_after: float | None = None


def decide(obs: Observed, settings: Settings, *, now: datetime) -> Decision:
    """What to write for a run, and what its status is, from what was observed."""
    flow = _scheduled if obs.spec.is_scheduled else _one_shot
    return flow(obs, settings, now=now)


def _one_shot(obs: Observed, settings: Settings, *, now: datetime) -> Decision:
    stamp = now.replace(microsecond=0)
    if obs.is_job_lost:
        return Decision((), lost_job_status(obs, now=stamp))
    if uses.gave_up(obs.previous):  # its deployment never became Available: never starts
        return Decision((), obs.previous)
    writes: tuple[ChildWrite, ...] = ()
    problem, pin, held, use = obs.problem, None, False, None
    if problem is None and obs.is_started:
        # Frozen, but for the two fields a user may change: suspend, and cancel (for good).
        writes = tuple(w for w in [suspend_write(obs, settings)] if w is not None)
        use = uses.started_use(obs)
    elif problem is None and not obs.spec.cancel:  # cancelled before it started: nothing runs
        resolved = _resolve(obs, settings)
        pin = None if isinstance(resolved, Problem) else config_pin(obs)
        use = uses.admitted_to(resolved, obs.config) if pin is None or pin.follow else None
        if isinstance(resolved, Problem):
            problem = resolved
        elif obs.answer is not None or (pin is not None and not pin.follow):
            problem = obs.answer or (pin.problem if pin else None)
        else:
            config_map = builders.build_config_map(resolved, settings)
            pairs = [(config_map, obs.config_map)]
            held = queueing.holds(resolved.spec, settings)  # suspended before it was queued
            if not held:
                pairs.append((builders.build_job(resolved, settings), obs.job))
            writes, problem = _child_writes(obs, pairs)
    status = one_shot_status(obs, problem=problem, now=stamp)
    status = _pinned(status.model_copy(update={"model_deployment": use}), obs, pin, now=stamp)
    status = with_queue(status, obs, settings, held=held, now=stamp)
    status = with_progress(status, obs, now=stamp)
    status, waiting = uses.waiting_status(
        status,
        problem,
        run=obs.run,
        timeout_seconds=obs.spec.timeout_seconds,
        generation=obs.generation,
        now=stamp,
    )
    deletions, wait = _run_deletion(obs, status, now=now)
    return Decision(
        writes,
        status,
        deletions,
        _soonest(wait, waiting, progress_wait(status, obs, settings, now=now)),
    )


def _soonest(*waits: float | None) -> float | None:
    pending = [w for w in waits if w is not None and w > 0]
    return min(pending) if pending else None


def suspend_write(obs: Observed, settings: Settings) -> Patch[Kind] | None:
    """The patch suspending (`spec.suspend` or `spec.cancel`) or resuming a one-shot run's
    Job, while the Job is ours and has not finished; None when it is as wanted.

    A Job Kueue manages is never patched: its `spec.suspend` is Kueue's. The run stops and
    starts through its Workload's `spec.active` instead (controller/core/kueue/workload.py),
    once Kueue has made it."""
    job, uid = obs.job, str((obs.run.get("metadata") or {}).get("uid") or "")
    if job is None or not is_owned_by(job, uid) or is_finished(job_state(job)):
        return None
    stop = obs.spec.suspend or obs.spec.cancel
    if queueing.is_managed(job, settings):
        found = workload.owned(job, obs.workload)
        body = workload.active_patch(found, active=not stop) if found is not None else None
        return None if body is None or found is None else _patch("Workload", found, body)
    body = job_suspend_patch(job, wanted=stop)
    return None if body is None else _patch("Job", job, body)


def _patch(kind: Kind, obj: Obj, body: Obj) -> Patch[Kind]:
    meta = obj["metadata"]
    return Patch(kind, meta["namespace"], meta["name"], body)


def job_suspend_patch(current: Obj, *, wanted: bool) -> Obj | None:
    """`spec.suspend`, the one field of a Job longrun changes after creating it."""
    if bool((current.get("spec") or {}).get("suspend")) == wanted:
        return None
    return {"spec": {"suspend": wanted}}


def _scheduled(obs: Observed, settings: Settings, *, now: datetime) -> Decision:
    writes: tuple[ChildWrite, ...] = ()
    problem = obs.problem
    resolved: Resolved | None = None
    if problem is None:
        found = _resolve(obs, settings)
        resolved = None if isinstance(found, Problem) else found
        problem = found if isinstance(found, Problem) else None
    pin = config_pin(obs) if resolved is not None else None
    use = uses.scheduled_use(obs, resolved or problem)
    if resolved is not None and obs.answer is not None:
        problem = obs.answer
    elif pin is not None and not pin.follow:
        # The CronJob keeps running the accepted version; nothing may start without one.
        problem = pin.problem if obs.cron_job is None else None
    elif resolved is not None:
        config_map = builders.build_config_map(resolved, settings)
        cron_job = builders.build_cron_job(resolved, settings)
        pairs = [(config_map, obs.config_map), (cron_job, obs.cron_job)]
        writes, problem = _child_writes(obs, pairs)
    stamp = now.replace(microsecond=0)
    status = scheduled_status(obs, problem=problem, now=stamp)
    status = _pinned(status.model_copy(update={"model_deployment": use}), obs, pin, now=stamp)
    status = with_progress(status, obs, now=stamp)
    waits = [_until_next(status, settings, now=now), progress_wait(status, obs, settings, now=now)]
    deletions: list[Delete[Kind]] = []
    if resolved is not None:
        spec = resolved.config_spec
        phases = {e.job_name: e.phase for e in status.history}  # the runner's word folded in
        for job in obs.jobs:
            phase = phases.get(job["metadata"]["name"])
            wait = _job_deletion_wait(
                job, phase, spec.auto_delete_policy, spec.auto_delete_delay_seconds, now
            )
            if wait == 0:
                deletions.append(_delete("Job", job, why=spec.auto_delete_policy))
            waits.append(wait)
    return Decision(writes, status, tuple(deletions), _soonest(*waits))


def _pinned(
    status: InferenceRunStatus, obs: Observed, pin: Pin | None, *, now: datetime
) -> InferenceRunStatus:
    """The status with the accepted config version and, for pinned runs, ConfigCurrent.

    Without a pin this pass (a started one-shot run, a config not found) both are kept."""
    previous = find(obs.previous.conditions, "ConfigCurrent")
    if pin is None:
        accepted, kept = obs.previous.accepted_config, [previous] if previous else []
    else:
        accepted = pin.accepted
        wants = [pin.want] if pin.want else []
        kept = cond.resolve(obs.previous.conditions, wants, now=now, generation=obs.generation)
    if accepted == status.accepted_config and not kept:
        return status
    return status.model_copy(
        update={"accepted_config": accepted, "conditions": [*status.conditions, *kept]}
    )


def _resolve(obs: Observed, settings: Settings) -> Resolved | Problem:
    return resolve(
        obs.run,
        obs.spec,
        lookup=lambda _ns, _name: obs.config,
        settings=settings,
        deployments=lambda _ns, _name: obs.deployment,
    )


# -- child writes ---------------------------------------------------------------------------


def _child_writes(
    obs: Observed, pairs: list[tuple[Obj, Obj | None]]
) -> tuple[tuple[ChildWrite, ...], Problem | None]:
    """Writes that bring each (desired, observed) child up to date, in order; a child we
    do not own stops the plan with NameConflict."""
    uid = str((obs.run.get("metadata") or {}).get("uid") or "")
    writes: list[ChildWrite] = []
    for desired, current in pairs:
        if current is None:
            writes.append(Create(desired["kind"], desired))
            continue
        if not is_owned_by(current, uid):
            return tuple(writes), not_owned(desired["kind"], current)
        if (patch := drift_patch(desired, current)) is not None:
            meta = desired["metadata"]
            writes.append(Patch(desired["kind"], meta["namespace"], meta["name"], patch))
    return tuple(writes), None


def is_owned_by(obj: Obj, uid: str) -> bool:
    """True when `obj` has a controller owner reference to `uid`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def not_owned(kind: str, obj: Obj) -> Problem:
    """The NameConflict problem for an object with our name that is not ours."""
    name = obj["metadata"]["name"]
    return Problem(
        "metadata.name",
        "NameConflict",
        f'{kind} "{name}" already exists and is not owned by this run; longrun leaves it '
        "alone: delete it or rename the run",
    )


def drift_patch(desired: Obj, current: Obj) -> Obj | list[Obj] | None:
    """The patch that brings a child we own back to `desired`, or None when current.

    Only fields we own are written: a ConfigMap's data; a CronJob's spec, whose drift
    shows in our spec-hash annotation (the API server defaults fields we never set). Of a
    Job only `spec.suspend`: its pod template is immutable, and so is a one-shot run but
    for `suspend` and `cancel`; and not even that of a Job in a Kueue queue.
    """
    kind = desired["kind"]
    if kind == "ConfigMap":
        return None if current.get("data") == desired["data"] else {"data": desired["data"]}
    if kind == "Job":
        if queueing.QUEUE_LABEL in ((current.get("metadata") or {}).get("labels") or {}):
            return None  # Kueue's: longrun never writes its spec.suspend
        return job_suspend_patch(current, wanted=bool(desired["spec"].get("suspend")))
    if kind == "CronJob" and _hash_of(current) != (wanted := _hash_of(desired)):
        return [*cron_job_ops(current, desired["spec"]), _annotation_op(current, wanted or "")]
    return None


def _hash_of(obj: Obj) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(names.SPEC_HASH_ANNOTATION)
    return value if isinstance(value, str) else None


def cron_job_ops(current: Obj, spec: Obj) -> list[Obj]:
    """JSON patch ops setting every CronJob field we own, and removing owned ones we dropped.

    Fields the API server defaulted and we never set (completionMode, parallelism,
    ...) are left as they are: replacing the whole spec would drop them, and the
    real API server only re-defaults them on update, which an emulator may not. Those we
    set for some runs only (OPTIONAL_JOB: a run's parallelism went from 4 to 1, say) are
    removed when we no longer set them, so the template never mixes the two retry shapes.
    """
    have = current.get("spec") or {}
    have_job = (have.get("jobTemplate") or {}).get("spec") or {}
    ops: list[Obj] = []
    for key, value in spec.items():
        if key != "jobTemplate":
            ops.append({"op": "add", "path": f"/spec/{key}", "value": value})
    ops += [
        {"op": "remove", "path": f"/spec/{k}"} for k in OPTIONAL_CRON if k in have and k not in spec
    ]
    template = spec["jobTemplate"]
    ops.append({"op": "add", "path": "/spec/jobTemplate/metadata", "value": template["metadata"]})
    for key, value in template["spec"].items():
        ops.append({"op": "add", "path": f"/spec/jobTemplate/spec/{key}", "value": value})
    ops += [
        {"op": "remove", "path": f"/spec/jobTemplate/spec/{k}"}
        for k in OPTIONAL_JOB
        if k in have_job and k not in template["spec"]
    ]
    return ops


def _annotation_op(current: Obj, wanted: str) -> Obj:
    escaped = names.SPEC_HASH_ANNOTATION.replace("~", "~0").replace("/", "~1")
    if (current.get("metadata") or {}).get("annotations"):
        return {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": wanted}
    value = {names.SPEC_HASH_ANNOTATION: wanted}
    return {"op": "add", "path": "/metadata/annotations", "value": value}


# -- autoDeletePolicy -------------------------------------------------------------------------


def should_delete(policy: str, phase: str | None) -> bool:
    """Whether autoDeletePolicy removes something that finished in `phase` (a cancelled run
    completed too: its counts are in its status until the delay is over)."""
    if policy == "DeleteOnCompletion":
        return phase in FINISHED
    return policy == "DeleteOnSuccess" and phase == "Succeeded"


def is_deleting(obj: Obj) -> bool:
    """True when the object has a deletionTimestamp."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _run_deletion(
    obs: Observed, status: InferenceRunStatus, *, now: datetime
) -> tuple[tuple[Delete[Kind], ...], float | None]:
    # The policy and delay travel on the Job (annotations), fixed when it was made.
    if obs.job is None or status.phase not in FINISHED:
        return (), None
    annotations = obs.job["metadata"].get("annotations") or {}
    policy = annotations.get(names.POLICY_ANNOTATION, "None")
    if not should_delete(policy, status.phase):
        return (), None
    delay = int(annotations.get(names.DELAY_ANNOTATION) or 0)
    wait = _remaining(status.completion_time, delay, now=now)
    if wait > 0:
        return (), wait
    return (_delete("InferenceRun", obs.run, why=policy),), None


def _job_deletion_wait(
    job: Obj, phase: str | None, policy: str, delay: int, now: datetime
) -> float | None:
    """None: keep the Job; 0: delete it now; else: seconds until it may be deleted. `phase`
    is its execution's in the history: a Job that succeeded though its pods left the output
    incomplete (OutputIncomplete) failed, and DeleteOnSuccess keeps it."""
    state = job_state(job)
    if not is_finished(state) or is_deleting(job):
        return None
    if not should_delete(policy, phase or state.phase):
        return None
    return max(_remaining(state.finish_time, delay, now=now), 0.0)


def _remaining(finished: datetime | None, delay: int, *, now: datetime) -> float:
    if finished is None or delay <= 0:
        return 0.0
    return (finished + timedelta(seconds=delay) - now).total_seconds()


def _until_next(status: InferenceRunStatus, settings: Settings, *, now: datetime) -> float | None:
    if status.next_schedule_time is None:
        return None
    seconds = (status.next_schedule_time - now).total_seconds() + 1
    return min(max(seconds, 1.0), settings.polling_interval)


def _delete(kind: Kind, obj: Obj, *, why: str) -> Delete[Kind]:
    meta: dict[str, Any] = obj["metadata"]
    return Delete(kind, meta["namespace"], meta["name"], meta["uid"], f"autoDeletePolicy={why}")
