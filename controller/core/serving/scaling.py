"""On demand: how many server pods a deployment should have right now. Pure.

A deployment with `idleReplicas` holds its GPUs only while runs use it: `replicas`
while at least one run does, `idleReplicas` once `scaleDownDelaySeconds` have passed
since the last one ended (a run that follows soon finds it warm). The wait is measured
from `status.idleSince`, set the first time no run is seen, so a restarted controller
keeps counting from the same moment.

With `autoscaling`, the HorizontalPodAutoscaler owns the count between its bounds; only
the step to and from zero is ours (an HPA does not scale a Deployment that has 0 pods).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from contracts.serving import ModelDeploymentSpec


@dataclass(frozen=True)
class Scale:
    """`replicas` to write on the Deployment (None: leave it as it is), and for status."""

    replicas: int | None
    idle_since: datetime | None = None
    requeue_after: float | None = None


def decide_scale(
    spec: ModelDeploymentSpec,
    *,
    current: int | None,
    active: bool,
    idle_since: datetime | None,
    last_run_finished: datetime | None,
    now: datetime,
) -> Scale:
    """The replica count for now; `current` is the Deployment's (None: not created yet)."""
    if not spec.is_on_demand or active:
        return Scale(_in_use(spec, current))
    idle = spec.idle_replicas or 0
    since = idle_since or last_run_finished or now
    if current is None or current <= idle:
        return Scale(idle, since)
    due = since + timedelta(seconds=spec.scale_down_delay_seconds)
    if now >= due:
        return Scale(idle, since)
    return Scale(None, since, (due - now).total_seconds())


def _in_use(spec: ModelDeploymentSpec, current: int | None) -> int | None:
    scaling = spec.autoscaling
    if scaling is None:
        return spec.replicas
    return scaling.min_replicas if current in (None, 0) else None


def wanted_replicas(scale: Scale, current: int | None) -> int:
    """The count status reports: ours, or the Deployment's while the HPA or a hold owns it."""
    if scale.replicas is not None:
        return scale.replicas
    return current or 0
