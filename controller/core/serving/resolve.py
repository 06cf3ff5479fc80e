"""Find a deployment's model and decide whether the pair may be served: every user error.

The order of checks is the order a person fixes things in: the deployment's own spec,
the Model reference (missing, or in a namespace that does not allow this deployment),
the Model, whether the runtime can serve it, then the controller's allow-lists. Each
failure is a `Problem` that the status reports; none is retried until something changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from contracts.serving import (
    ROTATE_KEYS_ANNOTATION,
    ModelDeploymentSpec,
    ModelSpec,
    format_problem,
)
from controller.core.builders import ObjectIdentity
from controller.core.ports import Obj
from controller.core.resolve import identity
from controller.core.serving.policy import deployment_problems
from controller.core.serving.runtimes import (
    ModelLayout,
    RuntimePlan,
    model_layout,
    needs_auth_proxy,
    plan_runtime,
)
from controller.core.serving.settings import ServingSettings
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

    @property
    def uses_auth_proxy(self) -> bool:
        """True when the nginx sidecar checks the keys."""
        return needs_auth_proxy(self.spec)


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
    return (spec.model_ref.namespace if spec.model_ref else None) or own


def find_model(
    obj: Obj, spec: ModelDeploymentSpec, model: Obj | None
) -> tuple[ModelSpec, str] | Problem:
    """The model spec and its name: inline, or the referenced Model if it may be used."""
    if spec.model is not None:
        return spec.model, identity(obj).name
    assert spec.model_ref is not None  # one of the two, by the spec's validator
    own, name = identity(obj).namespace, spec.model_ref.name
    where = f"{model_namespace(obj, spec)}/{name}"
    if model is None:
        message = f'Model "{where}" does not exist; create it and the deployment starts'
        return Problem("spec.modelRef", "ModelNotFound", message)
    try:
        model_spec = ModelSpec.model_validate(model.get("spec") or {})
    except ValidationError as exc:
        return Problem("spec.modelRef", "InvalidModel", f'Model "{where}": {first_error(exc)}')
    if model_namespace(obj, spec) != own:
        problem = _foreign_model_problem(model_spec, where=where, own=own)
        if problem is not None:
            return problem
    return model_spec, name


def _foreign_model_problem(model: ModelSpec, *, where: str, own: str) -> Problem | None:
    field = "spec.modelRef.namespace"
    if own not in model.allowed_namespaces:
        message = f'Model "{where}" does not list namespace "{own}" in spec.allowedNamespaces'
        return Problem(field, "ModelNotAllowed", message)
    if model.credentials is not None:
        return Problem(
            field,
            "SecretInOtherNamespace",
            f'Model "{where}" downloads with the Secret "{model.credentials.name}" of its own '
            f'namespace, and a deployment only reads Secrets in "{own}": define the Model in '
            f'namespace "{own}"',
        )
    return None


def resolve_deployment(
    obj: Obj, spec: ModelDeploymentSpec, model: Obj | None, settings: ServingSettings
) -> ServingResolved | Problem:
    """The deployment with its model and runtime plan, validated; or the first problem."""
    found = find_model(obj, spec, model)
    if isinstance(found, Problem):
        return found
    model_spec, model_name = found
    if problem := format_problem(spec.runtime.kind, model_spec.format, model_spec.resolved_task()):
        return Problem("spec.runtime", "ModelIncompatible", f'Model "{model_name}": {problem}')
    served = spec.served_name or model_name
    layout = model_layout(spec, model_spec, served)
    plan = plan_runtime(spec, model_spec, served_name=served, layout=layout, images=settings.images)
    if problems := deployment_problems(spec, plan, settings, namespace=identity(obj).namespace):
        return problems[0]
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    rotation = str(annotations.get(ROTATE_KEYS_ANNOTATION) or "")
    return ServingResolved(identity(obj), spec, model_spec, served, rotation, layout, plan)
