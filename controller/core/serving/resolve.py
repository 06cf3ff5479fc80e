"""Find a deployment's model and decide whether the pair may be served: every user error.

The order of checks is the order a person fixes things in: the deployment's own spec,
the Model reference (missing, or in a namespace that does not allow this deployment: one
answer for both, so nothing tells what another namespace holds), the Model version the
deployment accepted (pinning.py), the Model, whether the runtime can serve it, then the
controller's allow-lists. Each failure is a `Problem` that the status reports; none is
retried until something changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError

from contracts.serving import (
    ROTATE_KEYS_ANNOTATION,
    ModelDeploymentSpec,
    ModelSpec,
    OidcSpec,
    format_problem,
    parse_source,
)
from controller.core.builders import ObjectIdentity
from controller.core.ports import Obj
from controller.core.resolve import identity
from controller.core.serving.layout import ModelLayout, model_layout
from controller.core.serving.pinning import ModelPin, model_pin
from controller.core.serving.placement import gpu_resource
from controller.core.serving.policy import deployment_problems
from controller.core.serving.runtimes import (
    RuntimePlan,
    needs_auth_proxy,
    plan_runtime,
)
from controller.core.serving.settings import GPU_RESOURCE, ServingSettings
from controller.core.validation import Problem


@dataclass(frozen=True)
class ServingResolved:
    """A deployment with its model, validated: everything the builders need."""

    owner: ObjectIdentity
    spec: ModelDeploymentSpec
    model: ModelSpec
    served_name: str
    rotation: str  # the rotate annotation's value ("" before any rotation)
    layout: ModelLayout
    plan: RuntimePlan
    pin: ModelPin | None = None  # a modelRef's: which Model version is served (pinning.py)
    gpu_resource: str = GPU_RESOURCE  # the extended resource `resources.gpu` counts
    metrics: bool = False  # the sidecar serves the runtime's metrics (SERVING_METRICS)

    @property
    def uses_auth_proxy(self) -> bool:
        """True when the nginx sidecar checks callers (keys, tokens or both)."""
        return needs_auth_proxy(self.spec, metrics=self.metrics)

    @property
    def proxy_checks_keys(self) -> bool:
        """True when the sidecar checks the API keys (and mounts their map)."""
        return self.uses_auth_proxy and self.spec.auth.keys

    @property
    def oidc(self) -> OidcSpec | None:
        """The issuer whose tokens the sidecar's verifier checks, when tokens are on."""
        return self.spec.auth.oidc if self.spec.auth.tokens else None

    @property
    def has_sidecar(self) -> bool:
        """True when the pod has the nginx sidecar: for the keys, the metrics, or both."""
        return self.uses_auth_proxy or self.metrics


def parse_spec(obj: Obj) -> ModelDeploymentSpec | Problem:
    """The deployment's spec, or InvalidSpec naming the first bad field."""
    try:
        return ModelDeploymentSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        return Problem("spec", "InvalidSpec", first_error(exc))


def first_error(exc: ValidationError) -> str:
    """`field.path: message` of a validation error's first entry."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if "[" not in str(p))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def model_namespace(obj: Obj, spec: ModelDeploymentSpec) -> str:
    """Where the referenced Model lives (the observer reads it from there)."""
    own = identity(obj).namespace
    return (spec.named_model.namespace if spec.named_model else None) or own


@dataclass(frozen=True)
class FoundModel:
    """The model spec to serve, the name it is served by default, and the pin (modelRef)."""

    spec: ModelSpec
    name: str
    pin: ModelPin | None = None


def find_model(obj: Obj, spec: ModelDeploymentSpec, model: Obj | None) -> FoundModel | Problem:
    """The model spec to serve: inline, or the referenced Model if it may be used, at the
    generation the deployment accepted (pinning.py)."""
    if (inline := spec.inline_model) is not None:
        return FoundModel(inline, identity(obj).name)
    ref = spec.named_model  # a modelRef, or the Model named after a catalog entry
    assert ref is not None  # one of the two, by the spec's validator
    own, namespace = identity(obj).namespace, model_namespace(obj, spec)
    where = f"{namespace}/{ref.name}"
    if model is not None and (model.get("metadata") or {}).get("deletionTimestamp"):
        model = None
    if namespace != own and not _allows(model, own):
        # The same answer whether it exists or not: nothing about another namespace leaks.
        message = (
            f'Model "{where}" does not exist, or does not list namespace "{own}" in '
            "spec.allowedNamespaces; the deployment starts when it does"
        )
        return Problem("spec.modelRef", "ModelNotAllowed", message)
    if model is None:
        message = f'Model "{where}" does not exist; create it and the deployment starts'
        field = "spec.modelRef" if spec.model_ref else "spec.model.catalog"
        return Problem(field, "ModelNotFound", message)
    pin = model_pin(obj, ref, model)
    if pin.spec is None:
        assert pin.problem is not None
        return pin.problem
    model_spec = _parse_model(pin, where=where, foreign=namespace != own)
    if isinstance(model_spec, Problem):
        return model_spec
    if namespace != own and (problem := _foreign_model_problem(model_spec, where, own)):
        return problem
    return FoundModel(model_spec, ref.name, pin)


def _allows(model: Obj | None, namespace: str) -> bool:
    # Read as the API server stored it: a Model this namespace may not use is not parsed.
    allowed = ((model or {}).get("spec") or {}).get("allowedNamespaces") or []
    return model is not None and isinstance(allowed, list) and namespace in allowed


def _parse_model(pin: ModelPin, *, where: str, foreign: bool) -> ModelSpec | Problem:
    """The spec the pin renders from, validated. Another namespace's Model is not quoted:
    its source may be what its owner keeps to themselves, and they see the reason in the
    Model's own status."""
    try:
        return ModelSpec.model_validate(pin.spec or {})
    except ValidationError as exc:
        error = first_error(exc)
        if not pin.follows:
            message = (
                f'the version of Model "{where}" this deployment accepted no longer passes '
                f"validation ({error}); accept the current one with spec.modelRef.generation"
            )
        elif foreign:
            message = (
                f'Model "{where}" is invalid ({_field_of(error)}); its owner sees why in the '
                "Model's status"
            )
        else:
            message = f'Model "{where}": {error}'
        return Problem("spec.modelRef", "InvalidModel", message)


def _field_of(error: str) -> str:
    """The field a `field: message` error names, without the message."""
    field = error.split(":", 1)[0]
    return f"spec.{field}" if re.fullmatch(r"[A-Za-z0-9_.]+", field) else "spec"


def _foreign_model_problem(model: ModelSpec, where: str, own: str) -> Problem | None:
    field = "spec.modelRef.namespace"
    if model.credentials is not None:
        return Problem(
            field,
            "SecretInOtherNamespace",
            f'Model "{where}" downloads with the Secret "{model.credentials.name}" of its own '
            f'namespace, and a deployment only reads Secrets in "{own}": define the Model in '
            f'namespace "{own}"',
        )
    source = parse_source(model.source)
    if source.scheme == "pvc":
        return Problem(
            field,
            "ClaimInOtherNamespace",
            f'Model "{where}" reads a PersistentVolumeClaim (pvc://), and a deployment mounts '
            f'claims of its own namespace only: it would name a claim of "{own}", not of the '
            f'Model\'s namespace. Define the Model in namespace "{own}", or use a source that is '
            "downloaded (s3://, https://, hf://)",
        )
    return None


def resolve_deployment(
    obj: Obj, spec: ModelDeploymentSpec, model: Obj | None, settings: ServingSettings
) -> ServingResolved | Problem:
    """The deployment with its model and runtime plan, validated; or the first problem."""
    found = find_model(obj, spec, model)
    if isinstance(found, Problem):
        return found
    model_spec, model_name = found.spec, found.name
    if problem := format_problem(spec.runtime.kind, model_spec.format, model_spec.resolved_task()):
        return Problem("spec.runtime", "ModelIncompatible", f'Model "{model_name}": {problem}')
    served = spec.served_name or model_name
    layout = model_layout(spec, model_spec, served)
    plan = plan_runtime(
        spec,
        model_spec,
        served_name=served,
        layout=layout,
        images=settings.images,
        metrics=settings.metrics,
    )
    if problems := deployment_problems(spec, plan, settings, namespace=identity(obj).namespace):
        return problems[0]
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    rotation = str(annotations.get(ROTATE_KEYS_ANNOTATION) or "")
    return ServingResolved(
        identity(obj),
        spec,
        model_spec,
        served,
        rotation,
        layout,
        plan,
        found.pin,
        gpu_resource=gpu_resource(spec, settings),
        metrics=settings.metrics and plan.metrics_port is not None,
    )
