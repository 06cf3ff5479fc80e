"""The serving kinds as objects, and what the CRD generator needs about them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from contracts.base import (
    Schema,
)
from contracts.resources import Column, ObjectMeta
from contracts.serving.deployment import (
    ModelDeploymentSpec,
)
from contracts.serving.deployment_status import ModelDeploymentStatus
from contracts.serving.model import (
    ModelSpec,
    ModelStatus,
)


class Model(BaseModel):
    """A Model object."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["longrun.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Model"]
    metadata: ObjectMeta
    spec: ModelSpec
    status: ModelStatus | None = None


class ModelDeployment(BaseModel):
    """A ModelDeployment object."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["longrun.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ModelDeployment"]
    metadata: ObjectMeta
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus | None = None


# -- what the CRD generator needs (controller/crds.py), kept next to the models -------------


@dataclass(frozen=True)
class KindInfo:
    """A kind's CRD names, schemas and printer columns."""

    kind: str
    plural: str
    short_name: str
    spec: type[Schema]
    status: type[Schema]
    columns: tuple[Column, ...]
    categories: tuple[str, ...] = ("longrun",)


AGE = Column("Age", ".metadata.creationTimestamp", "date")
MODEL_KIND = KindInfo(
    kind="Model",
    plural="models",
    short_name="mdl",
    spec=ModelSpec,
    status=ModelStatus,
    columns=(
        Column("Format", ".spec.format"),
        Column("Task", ".spec.task"),
        Column("Source", ".spec.source", priority=1),
        AGE,
    ),
)
MODEL_DEPLOYMENT_KIND = KindInfo(
    kind="ModelDeployment",
    plural="modeldeployments",
    short_name="mdep",
    spec=ModelDeploymentSpec,
    status=ModelDeploymentStatus,
    columns=(
        Column("Phase", ".status.phase"),
        Column("Model", ".status.modelName"),
        Column("Runtime", ".status.runtime"),
        Column("Ready", ".status.readyText"),
        Column("Endpoint", ".status.endpoint"),
        Column("Protocol", ".status.protocol", priority=1),
        Column("Message", ".status.message", priority=1),
        AGE,
    ),
)
SERVING_KINDS = (MODEL_KIND, MODEL_DEPLOYMENT_KIND)
SERVING_RESOURCE_MODELS: dict[str, type[Model] | type[ModelDeployment]] = {
    "Model": Model,
    "ModelDeployment": ModelDeployment,
}
