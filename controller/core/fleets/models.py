"""An InferenceModel as the fleet decision sees it: its spec, the model name, its problem.

The name hosts are asked for, and runs call the model by, is `spec.model`, or for a
`modelRef` the Model's own name (its `spec.source` goes with the load request, for the
protocols that fetch models: docs/serving.md, External hosts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from contracts.fleets import InferenceModelSpec, InferenceModelStatus
from controller.core.children import ObjectIdentity
from controller.core.fleets.capacity import parse_quantity
from controller.core.fleets.hosts import HostView
from controller.core.fleets.placement import ModelWant
from controller.core.fleets.selector import matches
from controller.core.ports import Obj
from controller.core.validation import Problem


@dataclass(frozen=True)
class ModelView:
    """One InferenceModel, ready to be decided on; `problem` is a user error."""

    obj: Obj
    spec: InferenceModelSpec | None
    model_name: str | None
    source: str | None
    problem: Problem | None
    previous: InferenceModelStatus

    @property
    def name(self) -> str:
        """The InferenceModel's name."""
        return str(self.obj["metadata"]["name"])

    @property
    def identity(self) -> ObjectIdentity:
        """Name, namespace, uid and generation (owner references, conditions)."""
        meta = self.obj.get("metadata") or {}
        return ObjectIdentity(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation") or 0),
        )

    @property
    def is_deleting(self) -> bool:
        """True once the InferenceModel has a deletionTimestamp."""
        return bool((self.obj.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def is_placeable(self) -> bool:
        """True when replicas of it may be kept and placed."""
        return self.spec is not None and self.problem is None and not self.is_deleting


def model_view(obj: Obj, sources: Mapping[str, Obj]) -> ModelView:
    """The view of one InferenceModel; `sources` are the Models of its namespace by name."""
    previous = _previous(obj)
    try:
        spec = InferenceModelSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"] if not str(p).startswith("function"))
        message = error["msg"].removeprefix("Value error, ")
        return ModelView(
            obj,
            None,
            None,
            None,
            Problem(f"spec.{where}".rstrip("."), "InvalidSpec", message),
            previous,
        )
    if spec.model is not None:
        return ModelView(obj, spec, spec.model, None, None, previous)
    assert spec.model_ref is not None
    found = sources.get(spec.model_ref.name)
    if found is None or (found.get("metadata") or {}).get("deletionTimestamp"):
        problem = Problem(
            "spec.modelRef",
            "ModelNotFound",
            f'Model "{spec.model_ref.name}" does not exist in this namespace; create it and '
            "the replicas are placed",
        )
        return ModelView(obj, spec, None, None, problem, previous)
    source = (found.get("spec") or {}).get("source")
    return ModelView(
        obj, spec, spec.model_ref.name, str(source) if source else None, None, previous
    )


def _previous(obj: Obj) -> InferenceModelStatus:
    try:
        return InferenceModelStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return InferenceModelStatus()


def want_of(view: ModelView, hosts: Sequence[HostView]) -> ModelWant:
    """What a placeable InferenceModel asks of the fleet (its hosts' scheme: see scheme_of)."""
    assert view.spec is not None and view.model_name is not None
    resources = view.spec.resources
    return ModelWant(
        name=view.name,
        model_name=view.model_name,
        selector=view.spec.host_selector,
        replicas=view.spec.replicas,
        slots=resources.slots,
        memory=parse_quantity(resources.memory),
        scheme=scheme_of(view, hosts),
    )


def scheme_of(view: ModelView, hosts: Sequence[HostView]) -> str:
    """https when every selected host speaks https (then so does the Service), else http."""
    assert view.spec is not None
    schemes = {h.scheme for h in hosts if h.spec and matches(view.spec.host_selector, h.labels)}
    return "https" if schemes == {"https"} else "http"
