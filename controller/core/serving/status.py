"""A ModelDeployment's status from its Deployment and pods, rebuilt on every pass. Pure.

Nothing is accumulated from events, so a restarted controller converges to the same
answer. What children cannot tell is carried over: condition transition times and
`idleSince` (scaling.py). The phase is the first that applies:

- Terminating: the deployment is being deleted;
- Failed: a user error (bad spec, missing Model, ...), the rollout deadline passed, or
  no pod is ready and the download failed, an image cannot be pulled or a container
  crash-loops;
- Pending: no Deployment yet, or no node can take the pods (a GPU request, say);
- Idle: no pod wanted (on demand, no run);
- Downloading: no pod ready, a download running; Deploying: no pod ready yet;
- Updating: some pods ready while a rollout replaces them; Running: otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from contracts.serving import (
    DeploymentPhase,
    ModelDeploymentStatus,
    ModelSpec,
    ModelStatus,
    RuntimeKind,
)
from controller.core import conditions as cond
from controller.core.conditions import Want
from controller.core.serving import names
from controller.core.serving.network import endpoint_url, external_url
from controller.core.serving.observed import ServingObserved
from controller.core.serving.pods import PodIssue, download_state, pod_issue, waiting_for
from controller.core.serving.resolve import ServingResolved, first_error
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem

Obj = dict[str, Any]
ACTIVE_RUNS_MAX = 64
IDLE_MESSAGE = "no pod is wanted now; on demand, a run that references the deployment starts them"


@dataclass(frozen=True)
class Rollout:
    """Where the Deployment's rollout stands."""

    ready: int
    in_progress: bool
    deadline_exceeded: bool


def rollout_of(deployment: Obj) -> Rollout:
    """Ready pods, whether a rollout is under way and whether it passed its deadline."""
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    status = deployment.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    progressing: Obj = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {}
    )
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return Rollout(ready, True, False)
    # New pods still to make, or old ones still to remove (a pod that fails after the
    # rollout is a degraded deployment, not a rollout: that shows in the message).
    updated = int(status.get("updatedReplicas") or 0)
    in_progress = (
        updated < int(spec.get("replicas") or 0) or int(status.get("replicas") or 0) > updated
    )
    exceeded = progressing.get("reason") == "ProgressDeadlineExceeded"
    return Rollout(ready, in_progress, exceeded)


@dataclass(frozen=True)
class Verdict:
    """The phase with the reason and sentence behind it."""

    phase: DeploymentPhase
    reason: str
    message: str | None = None


OLD_KEYS_REVOKED = (
    "the rollout after new API keys made no progress before its deadline "
    "(ProgressDeadlineExceeded), and pods started before still accepted the old keys: they "
    "are being stopped (the Deployment's strategy is Recreate until they are gone), so the old "
    "keys no longer work, and nothing serves until new pods are ready"
)


def verdict(
    obs: ServingObserved,
    *,
    wanted: int,
    updating: bool,
    problem: Problem | None,
    revoking: bool = False,
) -> Verdict:
    """The phase of a deployment whose spec resolved (or failed with `problem`)."""
    dep = obs.children.deployment
    if problem is not None:
        return Verdict("Failed", problem.reason, f"{problem.field}: {problem.message}")
    if dep is None:
        return Verdict("Pending", "Creating")
    roll = rollout_of(dep)
    issue = pod_issue(obs.children.pods)
    if revoking:  # after a stuck rollout (keys.py): the old pods are being stopped
        return Verdict("Failed", "OldKeysRevoked", _join(OLD_KEYS_REVOKED, issue))
    if roll.deadline_exceeded:
        said = "the rollout made no progress before its deadline (ProgressDeadlineExceeded)"
        return Verdict("Failed", "ProgressDeadlineExceeded", _join(said, issue))
    if wanted == 0 and roll.ready == 0:
        return Verdict("Idle", "ScaledToZero", IDLE_MESSAGE)
    if roll.ready == 0:
        if issue is not None:
            return Verdict(issue.phase, issue.reason, issue.message)
        if download_state(obs.children.pods) == "running":
            return Verdict("Downloading", "Downloading")
        return Verdict("Deploying", "Deploying")
    if roll.in_progress or updating:
        return Verdict("Updating", "Updating", issue.message if issue else None)
    short = f"{roll.ready}/{wanted} replicas ready" if roll.ready < wanted else None
    return Verdict("Running", "RolloutComplete", issue.message if issue else short)


def _join(said: str, issue: PodIssue | None) -> str:
    return f"{said}; {issue.message}" if issue is not None else said


def wants(
    v: Verdict, *, ready: int, cached: bool, download: str, problem: Problem | None
) -> list[Want]:
    """ModelCached, Available and Progressing for a verdict."""
    if cached:
        model = Want("ModelCached", True, "Cached")
    elif download == "failed":
        model = Want("ModelCached", False, "DownloadFailed", v.message or "")
    else:
        model = Want("ModelCached", False, "Downloading" if download == "running" else "NotYet")
    available = Want("Available", ready > 0, "MinimumReplicasAvailable" if ready else v.reason)
    moving = v.phase in ("Pending", "Downloading", "Deploying", "Updating")
    progress = Want("Progressing", moving, v.reason, v.message or "")
    if problem is not None:
        model = Want("ModelCached", False, problem.reason)
    return [model, available, progress]


def deployment_status(
    obs: ServingObserved,
    resolved: ServingResolved | None,
    settings: ServingSettings,
    *,
    wanted: int,
    idle_since: datetime | None,
    updating: bool = False,
    revoking: bool = False,
    problem: Problem | None = None,
    runtime: RuntimeKind | None = None,
    now: datetime,
) -> ModelDeploymentStatus:
    """The whole status of a deployment; `resolved` is None when its spec or model failed."""
    dep = obs.children.deployment
    ready = rollout_of(dep).ready if dep is not None else 0
    v = verdict(obs, wanted=wanted, updating=updating, problem=problem, revoking=revoking)
    download = download_state(obs.children.pods)
    cached = resolved is not None and (not resolved.layout.fetch_args or download == "done")
    conditions = wants(
        v, ready=ready, cached=cached or ready > 0, download=download, problem=problem
    )
    status = ModelDeploymentStatus(
        phase=v.phase,
        message=v.message,
        observed_generation=obs.generation,
        replicas=wanted,
        ready_replicas=ready,
        waiting_for=waiting_for(obs.children.pods),
        ready_text=f"{ready}/{wanted}",
        runtime=runtime,
        active_runs=list(obs.active_runs[:ACTIVE_RUNS_MAX]),
        idle_since=idle_since,
        conditions=cond.resolve(
            obs.previous.conditions, conditions, now=now, generation=obs.generation
        ),
    )
    if resolved is None:
        return status
    return status.model_copy(update=_serving_fields(resolved, settings))


def _serving_fields(r: ServingResolved, settings: ServingSettings) -> dict[str, Any]:
    return {
        "endpoint": endpoint_url(r, settings),
        "external_endpoint": external_url(r),
        "protocol": r.plan.protocol,
        "model_name": r.served_name,
        "runtime": r.plan.kind,
        "slots_per_replica": r.spec.runtime.slots,
        "api_key_secret": names.api_key_secret_name(r.owner.name) if r.spec.auth.keys else None,
        "token_audiences": list(r.oidc.audiences) if r.oidc is not None else None,
    }


def terminating_status(obs: ServingObserved) -> ModelDeploymentStatus:
    """The stored status with phase Terminating: the children are going with it."""
    return obs.previous.model_copy(
        update={"phase": "Terminating", "message": "being deleted with everything it owns"}
    )


def model_status(model: Obj, *, now: datetime) -> ModelStatus:
    """A Model's own status: Accepted when its spec is usable, whoever deploys it."""
    meta = model.get("metadata") or {}
    generation = int(meta.get("generation") or 0)
    try:
        previous = ModelStatus.model_validate(model.get("status") or {})
    except ValueError:
        previous = ModelStatus()
    try:
        ModelSpec.model_validate(model.get("spec") or {})
        want = Want("Accepted", True, "Accepted")
    except ValidationError as exc:
        want = Want("Accepted", False, "InvalidSpec", first_error(exc))
    conditions = cond.resolve(previous.conditions, [want], now=now, generation=generation)
    return ModelStatus(observed_generation=generation, conditions=conditions)


def normalize(status: Any) -> dict[str, Any]:
    """A status as wire JSON, so stored and computed statuses compare equal when they match."""
    if isinstance(status, ModelDeploymentStatus):
        return status.to_wire()
    try:
        return ModelDeploymentStatus.model_validate(status or {}).to_wire()
    except ValueError:
        return {"invalid": True}
