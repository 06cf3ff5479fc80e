"""An InferenceModel as a run sees it: what `model.deploymentRef` with `kind: InferenceModel`
takes (endpoint, protocol, model name, Available), in the shape serving/uses.py reads."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from contracts.fleets import InferenceModelStatus
from contracts.serving import ModelDeploymentStatus
from controller.core.ports import Obj


def as_deployment_status(obj: Obj) -> ModelDeploymentStatus:
    """The run-facing part of an InferenceModel's status (no API key: hosts take none from
    longrun; a config that needs one names it in model.auth). Raises ValidationError for a
    status longrun cannot read."""
    status = InferenceModelStatus.model_validate(obj.get("status") or {})
    # model_construct: the phase keeps the InferenceModel's own words (Loading, Degraded)
    # in the waiting run's message; nothing else reads it.
    fields: dict[str, Any] = {
        "phase": status.phase,
        "message": status.message,
        "endpoint": status.endpoint,
        "protocol": status.protocol,
        "model_name": status.model_name,
        "api_key_secret": None,
        "conditions": [c for c in status.conditions if c.type == "Available"],
    }
    return ModelDeploymentStatus.model_construct(**fields)


__all__ = ["ValidationError", "as_deployment_status"]
