"""The fleet kinds as objects, and what the CRD generator needs about them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.fleets.host import InferenceHostSpec, InferenceHostStatus
from contracts.fleets.model import InferenceModelSpec, InferenceModelStatus
from contracts.resources import Column, ObjectMeta
from contracts.serving.kinds import AGE, KindInfo


class InferenceHost(BaseModel):
    """An InferenceHost object."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["longrun.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["InferenceHost"]
    metadata: ObjectMeta
    spec: InferenceHostSpec
    status: InferenceHostStatus | None = None


class InferenceModel(BaseModel):
    """An InferenceModel object."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["longrun.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["InferenceModel"]
    metadata: ObjectMeta
    spec: InferenceModelSpec
    status: InferenceModelStatus | None = None


INFERENCE_HOST_KIND = KindInfo(
    kind="InferenceHost",
    plural="inferencehosts",
    short_name="ihost",
    spec=InferenceHostSpec,
    status=InferenceHostStatus,
    columns=(
        Column("Endpoint", ".spec.endpoint"),
        Column("Ready", ".status.ready", "boolean"),
        Column("Models", ".status.modelsText"),
        Column("Protocol", ".spec.adminProtocol", priority=1),
        Column("Last Seen", ".status.lastSeen", "date", priority=1),
        Column("Error", ".status.lastError", priority=1),
        AGE,
    ),
)
INFERENCE_MODEL_KIND = KindInfo(
    kind="InferenceModel",
    plural="inferencemodels",
    short_name="imodel",
    spec=InferenceModelSpec,
    status=InferenceModelStatus,
    columns=(
        Column("Model", ".status.modelName"),
        Column("Replicas", ".spec.replicas", "integer"),
        Column("Ready", ".status.readyReplicas", "integer"),
        Column("Phase", ".status.phase", priority=1),
        Column("Endpoint", ".status.endpoint", priority=1),
        Column("Message", ".status.message", priority=1),
        AGE,
    ),
)
FLEET_KINDS = (INFERENCE_HOST_KIND, INFERENCE_MODEL_KIND)
FLEET_RESOURCE_MODELS: dict[str, type[InferenceHost] | type[InferenceModel]] = {
    "InferenceHost": InferenceHost,
    "InferenceModel": InferenceModel,
}
