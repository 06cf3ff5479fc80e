"""Decide: an observed ModelDeployment in, the writes that converge it and its status out.

One straight flow, like a one-shot run's (controller/core/decide.py): parse the spec,
resolve the model and the runtime, decide the replica count (scaling.py), plan the keys
(keys.py: the Secret is written, never read), render every child, and compare with what
is there: create what is missing, patch only what drifted (a spec-hash annotation, since
the API server adds defaults), delete the children a change of spec no longer wants. A
child with our name that is not ours stops the plan.

The Secret write carries the new keys in its `data`: the act layer must never log a
write's body. `entropy` is the only source of randomness, passed in so deciding stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from contracts.serving import ApiKeysStatus, ModelDeploymentStatus, RuntimeKind
from controller.core import conditions as cond
from controller.core.conditions import find
from controller.core.decide import is_owned_by
from controller.core.names import MANAGED_BY, MANAGER
from controller.core.ports import Obj
from controller.core.serving import builders, names, network, uses
from controller.core.serving.auth import Entropy
from controller.core.serving.keys import KeyPlan, plan_keys
from controller.core.serving.meta import hash_of
from controller.core.serving.observed import ServingObserved
from controller.core.serving.pinning import CONDITION, ModelPin
from controller.core.serving.resolve import ServingResolved, parse_spec, resolve_deployment
from controller.core.serving.scaling import Scale, decide_scale, wanted_replicas
from controller.core.serving.settings import ServingSettings
from controller.core.serving.status import deployment_status, terminating_status
from controller.core.serving.writes import ServingKind, Write
from controller.core.validation import Problem
from controller.core.writes import Create, Delete, Patch

__all__ = ["Create", "Delete", "Patch", "ServingDecision", "Write", "decide_deployment"]
# The spec fields we own, per kind; a drifted kind gets exactly these set again. The rest
# (a Service's clusterIP, a Deployment's selector and replicas) is left to the server.
OWNED_SPEC = {
    "Deployment": ("strategy", "progressDeadlineSeconds", "revisionHistoryLimit", "template"),
    "Service": ("type", "selector", "ports"),
}


@dataclass(frozen=True)
class ServingDecision:
    """Child writes in order, the status, deletions and when to look again."""

    writes: tuple[Write, ...]
    status: ModelDeploymentStatus
    deletions: tuple[Delete[ServingKind], ...] = ()
    requeue_after: float | None = None


def decide_deployment(
    obs: ServingObserved, settings: ServingSettings, *, now: datetime, entropy: Entropy
) -> ServingDecision:
    """What to write for a ModelDeployment, and its status, from what was observed."""
    stamp = now.replace(microsecond=0)
    if obs.is_deleting:
        return ServingDecision((), terminating_status(obs))
    obs = replace(obs, active_runs=uses.allowed_runs(obs.obj, obs.active_runs))
    spec = parse_spec(obs.obj)
    if isinstance(spec, Problem):
        return _refused(obs, settings, spec, runtime=None, now=stamp)
    if obs.catalog is not None and obs.model is None:
        return _refused(obs, settings, obs.catalog, runtime=spec.runtime.kind, now=stamp)
    resolved = resolve_deployment(obs.obj, spec, obs.model, settings)
    if isinstance(resolved, Problem):
        return _refused(obs, settings, resolved, runtime=spec.runtime.kind, now=stamp)
    if obs.answer is not None:
        return _refused(obs, settings, obs.answer, runtime=spec.runtime.kind, now=stamp)
    current = _replicas(obs.children.deployment)
    scale = decide_scale(
        spec,
        current=current,
        active=bool(obs.active_runs),
        idle_since=obs.previous.idle_since,
        last_run_finished=obs.last_run_finished,
        now=stamp,
    )
    keys = plan_keys(obs, resolved, entropy=entropy, now=stamp)
    writes, deletions, problem = plan_children(obs, resolved, settings, scale, keys)
    writes = (*keys.writes, *writes) if problem is None else writes
    status = deployment_status(
        obs,
        resolved,
        settings,
        wanted=wanted_replicas(scale, current),
        idle_since=scale.idle_since if spec.is_on_demand else None,
        updating=_rolls_pods(writes),
        revoking=keys.revoke_old,
        problem=problem,
        now=stamp,
    )
    status = status.model_copy(update={"api_keys": keys.keys if problem is None else _keys(obs)})
    status = pinned(status, obs, resolved.pin, now=stamp)
    return ServingDecision(writes, status, deletions, scale.requeue_after)


def pinned(
    status: ModelDeploymentStatus, obs: ServingObserved, pin: ModelPin | None, *, now: datetime
) -> ModelDeploymentStatus:
    """The status with the accepted Model version and, for a pinned Model, ModelCurrent (an
    inline model has neither)."""
    wants = [pin.want] if pin is not None and pin.want is not None else []
    kept = cond.resolve(obs.previous.conditions, wants, now=now, generation=obs.generation)
    accepted = pin.accepted if pin is not None else None
    return status.model_copy(
        update={"accepted_model": accepted, "conditions": [*status.conditions, *kept]}
    )


def _kept_pin(status: ModelDeploymentStatus, obs: ServingObserved) -> ModelDeploymentStatus:
    """A refused deployment keeps what it accepted, and says so as it did."""
    previous = find(obs.previous.conditions, CONDITION)
    return status.model_copy(
        update={
            "accepted_model": obs.previous.accepted_model,
            "conditions": [*status.conditions, *([previous] if previous else [])],
        }
    )


def _keys(obs: ServingObserved) -> ApiKeysStatus | None:
    """What the status said of the keys: kept while nothing is written."""
    return obs.previous.api_keys


def _refused(
    obs: ServingObserved,
    settings: ServingSettings,
    problem: Problem,
    *,
    runtime: RuntimeKind | None,
    now: datetime,
) -> ServingDecision:
    """Status only: a user error, or an answer of the API server only the user can fix."""
    status = deployment_status(
        obs,
        None,
        settings,
        wanted=_replicas(obs.children.deployment) or 0,
        idle_since=obs.previous.idle_since,
        problem=problem,
        runtime=runtime,
        now=now,
    )
    status = _kept_pin(status.model_copy(update={"api_keys": _keys(obs)}), obs)
    return ServingDecision((), status)


def _replicas(deployment: Obj | None) -> int | None:
    if deployment is None:
        return None
    return int((deployment.get("spec") or {}).get("replicas") or 0)


def desired_children(
    r: ServingResolved, settings: ServingSettings, replicas: int, keys: KeyPlan
) -> list[tuple[ServingKind, Obj | None]]:
    """Every child but the key Secret, in write order (None: not wanted)."""
    config_map = builders.build_auth_config_map(r) if r.has_sidecar else None
    deployment = builders.build_deployment(
        r, settings, replicas=replicas, keys_version=keys.version, revoke_old_keys=keys.revoke_old
    )
    return [
        ("ConfigMap", config_map),
        ("PersistentVolumeClaim", builders.build_cache_claim(r, settings)),
        ("Deployment", deployment),
        ("Service", network.build_service(r)),
        ("NetworkPolicy", network.build_network_policy(r, settings)),
        ("HorizontalPodAutoscaler", network.build_hpa(r)),
        ("Certificate", network.build_certificate(r)),
        ("Ingress", network.build_ingress(r)),
    ]


def plan_children(
    obs: ServingObserved,
    r: ServingResolved,
    settings: ServingSettings,
    scale: Scale,
    keys: KeyPlan,
) -> tuple[tuple[Write, ...], tuple[Delete[ServingKind], ...], Problem | None]:
    """Writes and deletions that converge the children; a child not ours stops the writes."""
    current = _current(obs)
    replicas = scale.replicas if scale.replicas is not None else _replicas(current["Deployment"])
    writes: list[Write] = []
    deletions: list[Delete[ServingKind]] = []
    problem: Problem | None = None
    for kind, desired in desired_children(r, settings, replicas or 0, keys):
        if problem is not None:
            break
        have = current[kind]
        if desired is None:
            if have is not None and is_owned_by(have, obs.uid):
                deletions.append(_delete(kind, have))
        elif have is None:
            writes.append(Create(kind, desired))
        elif not is_ours(kind, have, obs.uid, r.owner.name):
            problem = not_owned(kind, have)
        elif (patch := drift_patch(kind, desired, have, scale)) is not None:
            writes.append(Patch(kind, r.owner.namespace, have["metadata"]["name"], patch))
    return tuple(writes), tuple(deletions), problem


def _current(obs: ServingObserved) -> dict[str, Obj | None]:
    c = obs.children
    return {
        "ConfigMap": c.config_map,
        "PersistentVolumeClaim": c.claim,
        "Deployment": c.deployment,
        "Service": c.service,
        "NetworkPolicy": c.network_policy,
        "HorizontalPodAutoscaler": c.hpa,
        "Certificate": c.certificate,
        "Ingress": c.ingress,
    }


def is_ours(kind: str, obj: Obj, uid: str, name: str) -> bool:
    """True when a child with our name is ours: owned, or a retained cache PVC with our labels."""
    # A retained cache PVC has no owner reference by design: ours if our labels say so.
    if is_owned_by(obj, uid):
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (
        kind == "PersistentVolumeClaim"
        and labels.get(MANAGED_BY) == MANAGER
        and labels.get(names.DEPLOYMENT_LABEL) == names.label_value(name)
    )


def not_owned(kind: str, obj: Obj) -> Problem:
    """The NameConflict problem for an object with our name that is not ours."""
    name = obj["metadata"]["name"]
    return Problem(
        "metadata.name",
        "NameConflict",
        f'{kind} "{name}" already exists and is not owned by this ModelDeployment; longrun '
        "leaves it alone: delete it or rename the ModelDeployment",
    )


def drift_patch(kind: str, desired: Obj, current: Obj, scale: Scale) -> Obj | list[Obj] | None:
    """The patch that brings a child we own back to `desired`, or None when current."""
    if kind == "ConfigMap":
        return None if current.get("data") == desired["data"] else {"data": desired["data"]}
    if kind == "PersistentVolumeClaim":
        return _owner_patch(desired, current)
    ops = _spec_ops(kind, desired, current)
    rescale = scale.replicas is not None and _replicas(current) != scale.replicas
    if kind == "Deployment" and rescale:
        ops.append({"op": "add", "path": "/spec/replicas", "value": scale.replicas})
    return ops or None


def _spec_ops(kind: str, desired: Obj, current: Obj) -> list[Obj]:
    wanted = hash_of(desired)
    if hash_of(current) == wanted:
        return []
    fields = OWNED_SPEC.get(kind)
    if fields is None:
        ops = [{"op": "add", "path": "/spec", "value": desired["spec"]}]
    else:
        spec = desired["spec"]
        ops = [{"op": "add", "path": f"/spec/{f}", "value": spec[f]} for f in fields if f in spec]
    return [*ops, _annotation_op(current, wanted or "")]


def _annotation_op(current: Obj, wanted: str) -> Obj:
    if (current.get("metadata") or {}).get("annotations"):
        escaped = names.SPEC_HASH_ANNOTATION.replace("~", "~0").replace("/", "~1")
        return {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": wanted}
    value = {names.SPEC_HASH_ANNOTATION: wanted}
    return {"op": "add", "path": "/metadata/annotations", "value": value}


def _owner_patch(desired: Obj, current: Obj) -> Obj | None:
    # Retain ⇄ Delete moves the owner reference: with it the PVC goes with the deployment.
    want = desired["metadata"].get("ownerReferences")
    have = (current.get("metadata") or {}).get("ownerReferences")
    if bool(want) == bool(have):
        return None
    return {"metadata": {"ownerReferences": want}}


def _rolls_pods(writes: tuple[Write, ...]) -> bool:
    """True when a write replaces the pod template: the pods are about to be replaced."""
    return any(
        isinstance(w, Patch)
        and w.kind == "Deployment"
        and isinstance(w.body, list)
        and any(op.get("path") == "/spec/template" for op in w.body)
        for w in writes
    )


def _delete(kind: ServingKind, obj: Obj) -> Delete[ServingKind]:
    meta: dict[str, Any] = obj["metadata"]
    return Delete(kind, meta["namespace"], meta["name"], str(meta.get("uid") or ""))
