"""Reconcile one ModelDeployment (or Model) by key, level-triggered: observe, decide, act.

1. observe: the deployment, its Model, its children and pods, and the runs that use it,
   from the caches, into one frozen `ServingObserved`; a Model named from the catalog and
   missing is made first (catalog.py);
2. decide: `controller.core.serving.decide` returns the child writes (the key Secret
   first), the status, the deletions and when to look again;
3. act: apply the writes; what the API server answers that the decision did not assume
   (an object already there, a name taken, the key Secret there or gone, a refusal) is
   observed and the deployment decided again;
4. publish the status once, if it changed, with the events of its transitions;
5. delete the children a spec change no longer wants.

The key Secret is written, never read (keys.py): its writes carry key material, so no
write body, and no API answer to a Secret write, is ever logged, put in an event or in
the status. Transient API errors propagate (the work queue retries with backoff); user
errors become the status and a Warning event. `now`, `entropy` and the cluster are
injected.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from contracts.serving import ModelStatus
from controller.core import names as run_names
from controller.core.ports import ApiError, Obj
from controller.core.serving.auth import Entropy
from controller.core.serving.catalog import model_of
from controller.core.serving.decide import (
    Create,
    Patch,
    ServingDecision,
    Write,
    decide_deployment,
    is_ours,
    not_owned,
)
from controller.core.serving.observed import ServingObserved
from controller.core.serving.ports import ServingCluster
from controller.core.serving.settings import ServingSettings
from controller.core.serving.status import model_status, normalize
from controller.core.serving.writes import ServingKind
from controller.core.validation import Problem
from controller.reconcile.act import is_forbidden, is_refusal
from controller.reconcile.catalog import register
from controller.reconcile.runs import Result

# At most this many write-and-decide-again passes (each settles at least one answer).
PASSES = 4
CHILD_FIELDS = {
    "ConfigMap": "config_map",
    "PersistentVolumeClaim": "claim",
    "Deployment": "deployment",
    "Service": "service",
    "NetworkPolicy": "network_policy",
    "HorizontalPodAutoscaler": "hpa",
    "Certificate": "certificate",
    "Ingress": "ingress",
}


def observe(cluster: ServingCluster, key: str) -> ServingObserved | None:
    """Everything one decision needs about the deployment `key`; None when it is gone."""
    namespace, name = run_names.split_key(key)
    obj = cluster.get_deployment(namespace, name)
    if obj is None:
        return None
    usage = cluster.usage(namespace, name)
    return ServingObserved(
        obj=obj,
        model=_model(cluster, obj),
        children=cluster.children(namespace, name),
        active_runs=usage.active,
        last_run_finished=usage.last_finished,
    )


def _model(cluster: ServingCluster, obj: Obj) -> Obj | None:
    key = model_of(obj)  # a modelRef's Model, or the one named after a catalog entry
    if key is None:
        return None
    namespace, name = run_names.split_key(key)
    return cluster.get_model(namespace, name)


@dataclass(frozen=True)
class Written:
    """What the writes left: the objects and answers to fold into the observation."""

    obs: ServingObserved
    retry: ApiError | None = None


class DeploymentReconciler:
    """Serves a ModelDeployment: its Deployment, Service, keys, cache and network objects."""

    def __init__(
        self,
        cluster: ServingCluster,
        settings: ServingSettings,
        *,
        now: Callable[[], datetime],
        entropy: Entropy = secrets.token_bytes,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.now = now
        self.entropy = entropy

    def reconcile(self, key: str) -> Result:
        """Converge one deployment (`key` is `namespace/name`); ApiError when transient."""
        obs = observe(self.cluster, key)  # 1. everything, read once
        if obs is None:
            return Result()
        obs = register(self.cluster, obs, self.settings.catalog)  # a catalog entry's Model
        decision, retry = self._converge(obs)  # 2-3. decide, write, decide again
        publish(self.cluster, obs, decision)  # 4. status and events
        if retry is not None:
            raise retry
        for item in decision.deletions:  # 5. what a spec change no longer wants
            self.cluster.delete(item.kind, item.namespace, item.name, uid=item.uid)
        return Result(decision.requeue_after)

    def _decide(self, obs: ServingObserved) -> ServingDecision:
        return decide_deployment(obs, self.settings, now=self.now(), entropy=self.entropy)

    def _converge(self, obs: ServingObserved) -> tuple[ServingDecision, ApiError | None]:
        decision = self._decide(obs)
        for _ in range(PASSES):
            if not decision.writes:
                break
            written = write(self.cluster, obs, decision)
            obs = written.obs
            decision = self._decide(obs)
            if written.retry is not None:
                return decision, written.retry
        return decision, None


def write(cluster: ServingCluster, obs: ServingObserved, decision: ServingDecision) -> Written:
    """Apply the writes in order; stop at the first answer the decision did not assume."""
    for item in decision.writes:
        try:
            answer = _apply(cluster, obs, item)
        except ApiError as exc:
            if not is_forbidden(exc):
                raise
            problem = _refused(item, exc)
            return Written(replace(obs, answer=problem), retry=exc)
        if isinstance(answer, _Answer):
            return Written(answer.into(obs))
        obs = _learned(obs, item, answer, decision)
    return Written(obs)


@dataclass(frozen=True)
class _Answer:
    """What the API server said that changes the plan."""

    problem: Problem | None = None
    secret: Literal["exists", "missing"] | None = None

    def into(self, obs: ServingObserved) -> ServingObserved:
        if self.problem is not None:
            return replace(obs, answer=self.problem)
        return replace(obs, secret_answer=self.secret)


def _apply(cluster: ServingCluster, obs: ServingObserved, item: Write) -> Obj | _Answer:
    if item.kind == "Secret":
        return _write_secret(cluster, obs, item)
    if isinstance(item, Create):
        return _create(cluster, obs, item)
    try:
        return cluster.patch(item.kind, item.namespace, item.name, item.body)
    except ApiError as exc:
        if is_refusal(exc):
            return _Answer(problem=_refused(item, exc))
        raise


def _write_secret(cluster: ServingCluster, obs: ServingObserved, item: Write) -> Obj | _Answer:
    """Create or patch the key Secret; answers say what the decision must know. The API's
    own words are never kept: an answer to a write carrying keys could quote them."""
    name = item.body["metadata"]["name"] if isinstance(item, Create) else item.name
    try:
        if isinstance(item, Create):
            return cluster.create("Secret", item.body)
        return cluster.patch("Secret", item.namespace, item.name, item.body)
    except ApiError as exc:
        if isinstance(item, Create) and exc.is_already_exists:
            return _Answer(secret="exists")
        if isinstance(item, Patch) and exc.is_not_found:
            return _Answer(secret="missing")
        if isinstance(item, Patch) and exc.status == 422:  # the owner test failed
            return _Answer(problem=_not_ours_secret(name))
        failed = f'writing Secret "{name}" failed'
        raise ApiError(exc.status, failed, retry_after=exc.retry_after) from None


# Creating a Certificate answers 404 when the cluster has no cert-manager.io/v1 API.
NO_CERT_MANAGER = Problem(
    "spec.endpoint.tls",
    "CertManagerMissing",
    "endpoint.tls names an issuer, but the API server does not serve cert-manager's "
    "Certificate (cert-manager.io/v1): install cert-manager, and the controller finds it "
    "within one polling interval (POLLING_INTERVAL), or remove endpoint.tls",
)


def _not_ours_secret(name: str) -> Problem:
    return not_owned("Secret", {"metadata": {"name": name}})


def _create(
    cluster: ServingCluster, obs: ServingObserved, item: Create[ServingKind]
) -> Obj | _Answer:
    meta = item.body["metadata"]
    try:
        return cluster.create(item.kind, item.body)
    except ApiError as exc:
        if exc.is_not_found and item.kind == "Certificate":
            return _Answer(problem=NO_CERT_MANAGER)
        if is_refusal(exc):
            return _Answer(problem=_refused(item, exc))
        if not exc.is_already_exists or item.kind not in CHILD_FIELDS:
            raise
    live = cluster.read(item.kind, meta["namespace"], meta["name"])  # type: ignore[arg-type]
    if live is None:  # deleted in between: the retry creates it
        raise ApiError(409, f"{item.kind} {meta['name']} vanished after AlreadyExists")
    if not _is_ours(item.kind, live, obs):
        return _Answer(problem=not_owned(item.kind, live))
    return live


def _is_ours(kind: str, live: Obj, obs: ServingObserved) -> bool:
    return is_ours(kind, live, obs.uid, str(obs.obj["metadata"]["name"]))


def _refused(item: Write, exc: ApiError) -> Problem:
    name = item.body["metadata"]["name"] if isinstance(item, Create) else item.name
    said = "" if item.kind == "Secret" else f": {exc.message}"
    advice = (
        "retrying with backoff; free the quota or fix the policy that forbids it"
        if is_forbidden(exc)
        else "fix the ModelDeployment"
    )
    return Problem(
        "spec",
        "ChildRejected",
        f'the API server refused {item.kind} "{name}" ({exc.status}){said}; {advice}',
    )


def _learned(
    obs: ServingObserved, item: Write, answer: Obj, decision: ServingDecision
) -> ServingObserved:
    """The observation after a successful write: the child as stored, or the keys made."""
    if item.kind == "Secret":
        status = dict(obs.obj.get("status") or {})
        keys = decision.status.api_keys
        status["apiKeys"] = keys.to_wire() if keys is not None else None
        return replace(obs, obj={**obs.obj, "status": status}, secret_answer="exists")
    changes: dict[str, Any] = {CHILD_FIELDS[item.kind]: answer}
    return replace(obs, children=replace(obs.children, **changes))


# -- status and events -----------------------------------------------------------------------


def publish(cluster: ServingCluster, obs: ServingObserved, decision: ServingDecision) -> None:
    """Patch /status once when it changed, and record the events of its transitions."""
    new, old = normalize(decision.status), normalize(obs.obj.get("status"))
    if new == old:
        return
    patch: Obj = {**{k: None for k in old if k not in new}, **new}
    meta = obs.obj["metadata"]
    stored = cluster.patch_status("ModelDeployment", meta["namespace"], meta["name"], patch)
    for type_, reason, message in transition_events(old, new):
        cluster.emit_event(
            {**stored, "kind": "ModelDeployment"}, type_=type_, reason=reason, message=message
        )


KEY_EVENTS = {
    "Created": ("KeysCreated", "API keys were made in Secret {secret}"),
    "RotationRequested": ("KeysRotated", "API keys in Secret {secret} were rotated on request"),
    "KeyCountChanged": ("KeysRotated", "the key count changed: new API keys in Secret {secret}"),
    "SecretMissing": (
        "KeysRotated",
        "the API-key Secret {secret} was missing (deleted?): made it again with new keys",
    ),
}


def transition_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[Any, str, str]]:
    """(type, reason, message) of what changed: new keys, a new phase, a failure cause."""
    events: list[tuple[Any, str, str]] = []
    keys, old_keys = new.get("apiKeys") or {}, old.get("apiKeys") or {}
    if keys and keys.get("version") != old_keys.get("version"):
        reason, text = KEY_EVENTS[str(keys.get("reason") or "Created")]
        events.append(("Normal", reason, text.format(secret=new.get("apiKeySecret"))))
    events.extend(_model_change_events(old, new))
    phase, message = new.get("phase"), new.get("message") or ""
    if phase == "Failed" and (old.get("phase") != "Failed" or old.get("message") != message):
        events.append(("Warning", _progress_reason(new) or "Failed", message))
    elif phase != old.get("phase") and phase in ("Running", "Idle", "Updating"):
        events.append(("Normal", str(phase), f"{phase}: {new.get('readyText', '')} ready"))
    return events


def _model_change_events(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[Any, str, str]]:
    """A Warning when a pinned Model changed and the change waits for the owner (once per
    new Model generation)."""
    current, was = _condition(new, "ModelCurrent"), _condition(old, "ModelCurrent")
    if current.get("status") != "False" or (
        was.get("status") == "False" and was.get("message") == current.get("message")
    ):
        return []
    return [("Warning", str(current.get("reason") or ""), str(current.get("message") or ""))]


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found = (c for c in status.get("conditions") or [] if c.get("type") == type_)
    return dict(next(found, None) or {})


def _progress_reason(status: dict[str, Any]) -> str | None:
    for item in status.get("conditions") or []:
        if item.get("type") == "Progressing":
            return str(item.get("reason") or "") or None
    return None


# -- Models ---------------------------------------------------------------------------------


class ModelReconciler:
    """Keeps `Model.status` (Accepted, observedGeneration) current."""

    def __init__(self, cluster: ServingCluster, *, now: Callable[[], datetime]) -> None:
        self.cluster = cluster
        self.now = now

    def reconcile(self, key: str) -> Result:
        """Converge one Model's status (`key` is `namespace/name`)."""
        namespace, name = run_names.split_key(key)
        model = self.cluster.get_model(namespace, name)
        if model is None or (model.get("metadata") or {}).get("deletionTimestamp"):
            return Result()
        status = model_status(model, now=self.now().replace(microsecond=0)).to_wire()
        old = _model_wire(model.get("status"))
        if status != old:
            patch: Obj = {**{k: None for k in old if k not in status}, **status}
            self.cluster.patch_status("Model", namespace, name, patch)
        return Result()


def _model_wire(status: object) -> dict[str, Any]:
    try:
        return ModelStatus.model_validate(status or {}).to_wire()
    except ValueError:
        return {"invalid": True}
