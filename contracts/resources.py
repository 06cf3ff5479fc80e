"""The two custom resources as whole objects: apiVersion, kind, metadata, spec, status."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts.base import DNS_LABEL, DNS_SUBDOMAIN
from contracts.config import InferenceConfigSpec, InferenceConfigStatus
from contracts.run import InferenceRunSpec, InferenceRunStatus

GROUP = "longrun.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KRATEO_API_VERSION = "ai.krateo.io/v1"


class ObjectMeta(BaseModel):
    """The parts of metadata that offline validation checks; the rest passes through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)] = (
        Field(description="Object name.")
    )
    namespace: Annotated[str, StringConstraints(max_length=63, pattern=DNS_LABEL)] | None = Field(
        default=None, description="Object namespace."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")


class InferenceConfig(BaseModel):
    """An InferenceConfig object."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["longrun.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["InferenceConfig"]
    metadata: ObjectMeta
    spec: InferenceConfigSpec
    status: InferenceConfigStatus | None = None


class InferenceRun(BaseModel):
    """An InferenceRun object."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["longrun.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["InferenceRun"]
    metadata: ObjectMeta
    spec: InferenceRunSpec
    status: InferenceRunStatus | None = None


RESOURCE_MODELS: dict[str, type[InferenceConfig] | type[InferenceRun]] = {
    "InferenceConfig": InferenceConfig,
    "InferenceRun": InferenceRun,
}


def resource_models() -> dict[str, type[BaseModel]]:
    """Every longrun kind by name: the run kinds and the serving kinds (Model, ModelDeployment)."""
    # Imported here: contracts.serving builds on this module's ObjectMeta.
    from contracts.serving import SERVING_RESOURCE_MODELS

    return {**RESOURCE_MODELS, **SERVING_RESOURCE_MODELS}


def parse_resource(doc: dict[str, Any]) -> BaseModel:
    """Validate one YAML/JSON document as one of longrun's kinds.

    Raises ValueError for an unknown kind and pydantic.ValidationError for a bad object.
    """
    kind = doc.get("kind")
    models = resource_models()
    model = models.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(models)}")
    return model.model_validate(doc)
