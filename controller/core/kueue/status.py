"""The run's status while Kueue decides when its Job runs.

`one_shot_status` (controller/core/status.py) reads a Job as the Job controller reports it,
and to the Job controller a Kueue-managed Job that waits is merely suspended. What only the
Workload knows is added here:
- phase `Queued` while the Job has not started (waiting for admission, admitted but not yet
  un-suspended, or waiting again after a preemption or an eviction) and the run itself is
  neither suspended nor cancelled; `status.message` and the `Queued` condition say why, in
  Kueue's words (`workload.waiting`);
- the `Queued` condition False once the Job runs (reason `Admitted`), or the run is
  suspended, cancelled or finished (the phase as reason);
- `Preempted`, mirrored from the Workload, and `workloadName`;
- a run held back because it was suspended before its Job existed (`policy.holds`): phase
  `Suspended`, and its Job is made once it is resumed.
"""

from __future__ import annotations

from datetime import datetime

from contracts.run import InferenceRunStatus
from controller.core import conditions as cond
from controller.core.conditions import Want, find
from controller.core.jobs import parse_time
from controller.core.kueue import policy, workload
from controller.core.settings import Settings
from controller.core.status import Observed

WAITING = ("Pending", "Suspended")  # what a Job Kueue has not started looks like


def with_queue(
    status: InferenceRunStatus, obs: Observed, settings: Settings, *, held: bool, now: datetime
) -> InferenceRunStatus:
    """A one-shot run's status with what Kueue says about its Job (unchanged when Kueue
    does not manage the Job)."""
    if obs.job is None:
        return (
            _held(status, obs, settings, now=now) if held and status.phase == "Pending" else status
        )
    if not policy.is_managed(obs.job, settings):
        return status
    found = workload.owned(obs.job, obs.workload)
    phase, message = status.phase, status.message
    wanted_stop = obs.spec.suspend or obs.spec.cancel
    queued = Want("Queued", False, phase or "Pending")
    if phase == "Running":
        where = workload.cluster_queue(found) if found is not None else ""
        queued = Want(
            "Queued", False, "Admitted", f"admitted by ClusterQueue {where}" if where else ""
        )
    elif phase in WAITING and not wanted_stop:
        meta = obs.job["metadata"]
        created = parse_time(meta.get("creationTimestamp"))
        wait = workload.waiting(
            found,
            job_name=meta["name"],
            queue=(meta.get("labels") or {}).get(policy.QUEUE_LABEL),
            waited=(now - created).total_seconds() if created else 0.0,
        )
        queued = Want("Queued", True, wait.reason, wait.message)
        phase, message = "Queued", "; ".join(m for m in (message, wait.message) if m)
    wants = [queued]
    preempted = workload.preemption(found)
    if preempted is not None:
        wants.append(preempted)
    conditions = cond.resolve(obs.previous.conditions, wants, now=now, generation=obs.generation)
    if preempted is None and (kept := find(obs.previous.conditions, "Preempted")) is not None:
        conditions.append(kept)
    return status.model_copy(
        update={
            "phase": phase,
            "message": message,
            "conditions": [*status.conditions, *conditions],
            "workload_name": workload.name_of(found) or obs.previous.workload_name,
        }
    )


def _held(
    status: InferenceRunStatus, obs: Observed, settings: Settings, *, now: datetime
) -> InferenceRunStatus:
    queue = policy.queue_of(obs.spec, settings)
    where = f'in LocalQueue "{queue}"' if queue else "in Kueue's queue"
    message = (
        f"suspended before it started: its Job is created, {where}, once spec.suspend is false"
    )
    wants = [Want("Queued", False, "Suspended", message)]
    conditions = cond.resolve(obs.previous.conditions, wants, now=now, generation=obs.generation)
    return status.model_copy(
        update={
            "phase": "Suspended",
            "message": "; ".join(m for m in (status.message, message) if m),
            "conditions": [*status.conditions, *conditions],
        }
    )
