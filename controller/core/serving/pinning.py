"""A Model in another namespace cannot change what a deployment here serves: deployments pin it.

As configs are pinned for runs (controller/core/pinning.py). A Model names what the pods of
this namespace load and run: a sklearn or xgboost model is a pickle, so its source is code,
run with this namespace's env Secrets and traffic. If edits to a shared Model
(`allowedNamespaces`) flowed into the deployments that use it, the Model's owner could run
other code here without any right here. So a deployment that uses a Model from another
namespace is rendered from the Model version it accepted (`status.acceptedModel`: uid,
generation and the spec at that generation), and a later change waits, shown by the
`ModelCurrent` condition and a Warning event, until the deployment's owner accepts it by
editing the deployment: `spec.modelRef.generation: <new generation>`. A Model deleted and
created again (a new uid) is a change too.

The controller caches only the current Model, so the accepted spec is kept in the status:
while a change waits, the pods go on being rendered from it (a change of the deployment's
own spec still rolls them, with the accepted Model).

A Model in the deployment's own namespace is followed as it changes (whoever may edit it may
edit the deployment too), unless the deployment names `spec.modelRef.generation` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts.serving import AcceptedModel, ModelDeploymentStatus, ModelRef
from controller.core.conditions import Want
from controller.core.ports import Obj
from controller.core.validation import Problem

CONDITION = "ModelCurrent"
NOT_ACCEPTED = "ModelChangeNotAccepted"


@dataclass(frozen=True)
class ModelPin:
    """Which Model spec to render from, and what the status records and shows."""

    spec: dict[str, Any] | None  # None: nothing accepted yet to render from (`problem` says)
    accepted: AcceptedModel | None
    want: Want | None = None  # the ModelCurrent condition, for pinned deployments
    problem: Problem | None = None

    @property
    def follows(self) -> bool:
        """True when the deployment renders from the Model as it is now."""
        return self.want is None or self.want.status


def kept_spec(model: Obj) -> dict[str, Any]:
    """What the status keeps of a Model's spec: all of it but the namespaces it allows (the
    other tenants sharing it are none of this namespace's business)."""
    spec = dict(model.get("spec") or {})
    spec.pop("allowedNamespaces", None)
    return spec


def model_pin(obj: Obj, ref: ModelRef, model: Obj) -> ModelPin:
    """The pin of a deployment (`obj`) on the Model its modelRef names (present, allowed)."""
    meta = model.get("metadata") or {}
    current = AcceptedModel(
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        spec=kept_spec(model),
    )
    own = (obj.get("metadata") or {}).get("namespace")
    if meta.get("namespace") == own and ref.generation is None:
        return ModelPin(current.spec, current)
    previous = _previous(obj)
    accepted = previous.accepted_model
    if _accepts(obj, previous, accepted, current, ref.generation):
        return ModelPin(current.spec, current, Want(CONDITION, True, "Accepted"))
    return _waiting(f'Model "{meta.get("namespace")}/{meta.get("name")}"', accepted, current, ref)


def _previous(obj: Obj) -> ModelDeploymentStatus:
    try:
        return ModelDeploymentStatus.model_validate(obj.get("status") or {})
    except ValueError:
        return ModelDeploymentStatus()


def _same(a: AcceptedModel | None, b: AcceptedModel) -> bool:
    return a is not None and (a.uid, a.generation) == (b.uid, b.generation)


def _accepts(
    obj: Obj,
    previous: ModelDeploymentStatus,
    accepted: AcceptedModel | None,
    current: AcceptedModel,
    wanted: int | None,
) -> bool:
    if _same(accepted, current):
        return True
    if accepted is None:  # the deployment's creator accepts the Model as it is, or as named
        return wanted in (None, current.generation)
    # Only an edit of the deployment by its owner accepts a change: a spec the status has
    # not seen.
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    edited = generation != previous.observed_generation
    return edited and wanted == current.generation


def _waiting(
    name: str, accepted: AcceptedModel | None, current: AcceptedModel, ref: ModelRef
) -> ModelPin:
    if accepted is None:
        text = (
            f"{name} is at generation {current.generation}, but spec.modelRef.generation says "
            f"{ref.generation}; set it to {current.generation} to accept the Model as it is"
        )
        want = Want(CONDITION, False, NOT_ACCEPTED, text)
        return ModelPin(None, None, want, Problem("spec.modelRef.generation", NOT_ACCEPTED, text))
    was = f"generation {accepted.generation}"
    if accepted.uid != current.uid:
        was += " of a Model since deleted and created again"
    text = (
        f"{name} changed since this deployment accepted it ({was}, now generation "
        f"{current.generation}); this deployment keeps serving what it accepted. Review the "
        f"change, then set spec.modelRef.generation: {current.generation} on this deployment"
    )
    return ModelPin(accepted.spec, accepted, Want(CONDITION, False, NOT_ACCEPTED, text))
