"""`longrun render` of a ModelDeployment: every object the controller creates for it.

What a deployment becomes, before it is applied: the key Secret (without its keys: the
controller makes them when it creates it), the sidecar's nginx ConfigMap, the cache PVC, the
Deployment, the Service, the NetworkPolicy, the HorizontalPodAutoscaler, the cert-manager
Certificate and the Ingress, each where the deployment asks for it, in the order the
controller writes them. Nothing is re-implemented: the deployment is resolved with its Model
(from the files) by the controller's `resolve_deployment`, under the controller's settings
(the same environment variables: ALLOWED_SERVING_IMAGES, SERVING_GPU_RESOURCE, ...), its
replica count is `decide_scale`'s for a new deployment, and the objects are the serving
builders' (`desired_children`; the key Secret as `plan_keys` makes it for a new deployment).

What only a cluster knows is filled in as `longrun serve` fills it in: the deployment's UID
is the deterministic local one, and the keys' version (the pods' `longrun.dev/api-keys-version`)
is the one a random source of zero bytes gives, since the real one is random.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.serving import ModelDeploymentSpec
from controller.core.serving.decide import Create, desired_children
from controller.core.serving.keys import plan_keys
from controller.core.serving.observed import ServingObserved
from controller.core.serving.resolve import model_namespace, resolve_deployment
from controller.core.serving.scaling import decide_scale
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem
from local.inputs import InputError, Inputs

Obj = dict[str, Any]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def zero_entropy(count: int) -> bytes:
    """The random source render uses: zero bytes (keys are never printed; the version is)."""
    return bytes(count)


def deployment_manifests(obj: Obj, inputs: Inputs, settings: ServingSettings) -> list[Obj]:
    """The objects the controller creates for the ModelDeployment `obj`, in its write order;
    InputError naming the field when the controller would refuse it."""
    meta = obj["metadata"]
    who = f"ModelDeployment/{meta['name']}"
    try:
        spec = ModelDeploymentSpec.model_validate(obj.get("spec") or {})
    except ValueError as exc:
        raise InputError(f"{who}: {exc}") from None
    model = None
    if spec.named_model is not None:  # a modelRef, or a catalog entry's Model
        where = (model_namespace(obj, spec), spec.named_model.name)
        model = inputs.models.get(where)
        if model is None:
            field = "spec.modelRef" if spec.model_ref else "spec.model.catalog"
            raise InputError(f'{who}: {field}: Model "{where[0]}/{where[1]}" is not in the files')
    resolved = resolve_deployment(obj, spec, model, settings)
    if isinstance(resolved, Problem):
        raise InputError(f"{who}: {resolved.field}: {resolved.message} ({resolved.reason})")
    scale = decide_scale(
        spec, current=None, active=False, idle_since=None, last_run_finished=None, now=EPOCH
    )
    keys = plan_keys(ServingObserved(obj), resolved, entropy=zero_entropy, now=EPOCH)
    out: list[Obj] = []
    for write in keys.writes:  # a new deployment's: the key Secret, created
        assert isinstance(write, Create)
        secret = dict(write.body)
        secret.pop("data")
        out.append(secret)
    children = desired_children(resolved, settings, scale.replicas or 0, keys)
    out += [child for _, child in children if child is not None]
    return out


def pick_deployment(inputs: Inputs, name: str | None, *, namespace: str) -> Obj | None:
    """The deployment to render: the one named, or the only one when the files hold no run;
    None when a run is meant."""
    if name is not None:
        return inputs.deployments.get((namespace, name))
    if inputs.runs or not inputs.deployments:
        if not inputs.runs and not inputs.deployments and inputs.models:
            listed = ", ".join(f"Model/{n}" for _, n in sorted(inputs.models))
            raise InputError(
                f"{listed} makes no object of its own: render a ModelDeployment that serves it"
            )
        return None
    if len(inputs.deployments) != 1:
        found = ", ".join(f"{ns}/{n}" for ns, n in sorted(inputs.deployments))
        raise InputError(f"name the ModelDeployment to render (found: {found})")
    return next(iter(inputs.deployments.values()))
