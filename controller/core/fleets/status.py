"""The statuses of hosts and InferenceModels, rebuilt from what was observed every pass.

A host's `ready`, `address`, `models` and `lastError` are what the prober saw; its
`assignments` are the placement (placement.py), `lastSeen` is refreshed at most once a
minute (a status write per host per health check would load the API server for nothing).
An InferenceModel's placements say, host by host, whether its replica is Ready (the host
passes its checks and lists the model), Loading, NotReady or Failed (its load failed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from contracts.fleets import HostAssignment, InferenceHostStatus, InferenceModelStatus, Placement
from controller.core import conditions as cond
from controller.core.fleets.capacity import format_bytes
from controller.core.fleets.health import OpState
from controller.core.fleets.hosts import HostView, taken
from controller.core.fleets.models import ModelView
from controller.core.fleets.settings import FleetSettings

MODELS_TEXT_MAX = 256
NOT_CHECKED = "waiting for the host's first health check"


def _generation(obj: dict[str, object]) -> int:
    meta = obj.get("metadata") or {}
    return int(meta.get("generation") or 0) if isinstance(meta, dict) else 0


def host_status(
    view: HostView,
    assignments: tuple[HostAssignment, ...],
    *,
    ops: Mapping[str, OpState],
    settings: FleetSettings,
    now: datetime,
) -> InferenceHostStatus:
    """An InferenceHost's status after this pass."""
    health, previous = view.health, view.previous
    slots, memory = taken(assignments)
    models = list(health.models)[:256]
    text = ", ".join(models)
    return InferenceHostStatus(
        ready=view.is_ready,
        address=health.address or previous.address,
        models=models,
        models_text=text if len(text) <= MODELS_TEXT_MAX else text[: MODELS_TEXT_MAX - 3] + "...",
        last_seen=_last_seen(view, settings),
        last_error=_last_error(view, ops),
        assignments=list(assignments),
        allocated_slots=slots,
        allocated_memory=format_bytes(memory) if memory > Decimal(0) else None,
        observed_generation=_generation(view.obj),
        conditions=cond.resolve(
            previous.conditions, [_ready(view, settings)], now=now, generation=_generation(view.obj)
        ),
    )


def _last_seen(view: HostView, settings: FleetSettings) -> datetime | None:
    seen, before = view.health.last_seen, view.previous.last_seen
    if seen is None or before is None:
        return seen or before
    fresh_enough = (seen - before).total_seconds() < settings.last_seen_refresh
    return before if fresh_enough and view.is_ready == view.previous.ready else seen


def _last_error(view: HostView, ops: Mapping[str, OpState]) -> str | None:
    if view.problem is not None:
        return view.problem.message[:1024]
    failed = [op for op in ops.values() if op.phase == "failed" and op.at is not None]
    latest = max(failed, key=lambda op: op.at or datetime.min, default=None)
    text = view.health.last_error or (f"{latest.kind}: {latest.message}" if latest else None)
    return text[:1024] if text else None


def _ready(view: HostView, settings: FleetSettings) -> cond.Want:
    health = view.health
    if view.problem is not None:
        return cond.Want("Ready", False, view.problem.reason, view.problem.message)
    if view.is_deleting:
        return cond.Want("Ready", False, "Deleting", "the InferenceHost is being deleted")
    if not health.checked:
        every = f"every {settings.health_interval:g}s (FLEET_HEALTH_INTERVAL)"
        return cond.Want("Ready", False, "Pending", f"{NOT_CHECKED}, {every}")
    if health.ready:
        return cond.Want("Ready", True, "HealthCheckPassed", "the last health check passed")
    return cond.Want(
        "Ready",
        False,
        "HealthCheckFailed",
        f"{health.failures} health checks failed in a row: {health.last_error or 'no answer'}",
    )


# -- InferenceModels -----------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """One replica of an InferenceModel, as the status reports it."""

    host: HostView
    assignment: HostAssignment
    state: str
    message: str | None


def placement_state(
    host: HostView, model: str, *, ops: Mapping[str, OpState], previous: Placement | None
) -> tuple[str, str | None]:
    """(state, message) of the replica of `model` on `host`."""
    op = ops.get(model)
    if not host.health.checked:
        if previous is not None:
            return previous.state, previous.message
        return "NotReady", NOT_CHECKED
    if not host.is_ready:
        return "NotReady", host.health.last_error or "the host is not ready"
    if host.serves(model):
        return "Ready", None
    if op is not None and op.kind == "load" and op.phase == "failed":
        return "Failed", f"loading failed: {op.message}"
    if host.protocol is not None and host.protocol.can_load:
        return "Loading", "the host is loading it"
    return "NotReady", f'the host no longer lists "{model}"'


def model_status(
    view: ModelView,
    placed: list[Placed],
    *,
    shortfall: str | None,
    endpoint: str | None,
    now: datetime,
) -> InferenceModelStatus:
    """An InferenceModel's status after this pass."""
    spec, previous = view.spec, view.previous
    generation = view.identity.generation
    wanted = spec.replicas if spec is not None else 0
    ready = sum(1 for p in placed if p.state == "Ready")
    phase, message = _phase(view, placed, ready=ready, wanted=wanted, shortfall=shortfall)
    reason = view.problem.reason if view.problem is not None else "InvalidSpec"
    wants = _model_conditions(
        phase, message, ready=ready, placed=len(placed), shortfall=shortfall, reason=reason
    )
    return InferenceModelStatus(
        phase=phase,
        message=message,
        observed_generation=generation,
        model_name=view.model_name,
        replicas=wanted,
        ready_replicas=ready,
        placements=[_placement(p) for p in placed],
        service_name=view.name if endpoint else None,
        endpoint=endpoint,
        protocol=spec.protocol if spec is not None else None,
        conditions=cond.resolve(previous.conditions, wants, now=now, generation=generation),
    )


def _placement(p: Placed) -> Placement:
    return Placement(
        host=p.host.name,
        address=p.host.health.address or p.host.previous.address,
        port=p.host.health.port,
        state=p.state,
        message=p.message,
        since=p.assignment.since,
    )


def _phase(
    view: ModelView, placed: list[Placed], *, ready: int, wanted: int, shortfall: str | None
) -> tuple[str, str | None]:
    if view.problem is not None:
        return "Failed", f"{view.problem.field}: {view.problem.message}"
    if ready >= wanted:
        return "Ready", None
    troubles = [f"{p.host.name}: {p.message}" for p in placed if p.state != "Ready" and p.message]
    said = "; ".join([*([shortfall] if shortfall else []), *troubles]) or None
    if not placed:
        return "Pending", said
    return ("Degraded" if ready else "Loading"), said


def _model_conditions(
    phase: str,
    message: str | None,
    *,
    ready: int,
    placed: int,
    shortfall: str | None,
    reason: str,
) -> list[cond.Want]:
    available = (
        cond.Want("Available", True, "ReplicaReady", f"{ready} replica(s) ready")
        if ready
        else cond.Want("Available", False, "NoReplicaReady", message or "no replica is ready")
    )
    if phase == "Failed":
        return [available, cond.Want("Progressing", False, reason, message or "")]
    if phase == "Ready":
        return [available, cond.Want("Progressing", False, "Complete", "every replica is ready")]
    if shortfall and placed == ready:
        return [available, cond.Want("Progressing", False, "NoEligibleHost", shortfall)]
    return [available, cond.Want("Progressing", True, "Loading", message or "placing replicas")]
