"""The two custom resources as whole objects: apiVersion, kind, metadata, spec, status."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from contracts.base import DNS_LABEL, DNS_SUBDOMAIN
from contracts.config import InferenceConfigSpec, InferenceConfigStatus
from contracts.run import InferenceRunSpec, InferenceRunStatus

GROUP = "longrun.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KRATEO_API_VERSION = "ai.krateo.io/v1"


# A name prefix the API server completes with 5 random characters (metadata.generateName).
NAME_PREFIX = r"^[a-z0-9][-a-z0-9.]*$"


class ObjectMeta(BaseModel):
    """The parts of metadata that offline validation checks; the rest passes through.

    `name`, or `generateName` for objects that are created again and again (a run file
    re-run with `kubectl create -f`): the API server (and `longrun run`) completes the prefix.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: (
        Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
        | None
    ) = Field(default=None, description="Object name.")
    generate_name: (
        Annotated[str, StringConstraints(min_length=1, max_length=248, pattern=NAME_PREFIX)] | None
    ) = Field(
        default=None,
        alias="generateName",
        description="Name prefix, completed by the API server when `name` is not set.",
    )
    namespace: Annotated[str, StringConstraints(max_length=63, pattern=DNS_LABEL)] | None = Field(
        default=None, description="Object namespace."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")

    @model_validator(mode="after")
    def _named(self) -> ObjectMeta:
        if self.name is None and self.generate_name is None:
            raise ValueError("set name (or generateName, a prefix the API server completes)")
        return self


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


class Column(NamedTuple):
    """An additionalPrinterColumn: what `kubectl get` prints, from `json_path`."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0  # 0: always; 1: with -o wide


# What a person reads at a glance. kubectl prints a future `date` as `<invalid>`, so the next
# run is an RFC 3339 string; the progress columns are texts the controller writes with the
# counts (`status.progress`), refreshed every progress interval.
RUN_COLUMNS = (
    Column("Phase", ".status.phase"),
    Column("Progress", ".status.progress.text"),
    Column("Rate", ".status.progress.rateText"),
    Column("ETA", ".status.progress.etaText"),
    Column("Tokens/s", ".status.progress.tokensPerSecondText", priority=1),
    Column("Last Run", ".status.startTime", "date"),
    Column("Next Run", ".status.nextScheduleTime"),
    Column("Config", ".spec.configRef.name", priority=1),
    Column("Schedule", ".spec.schedule", priority=1),
    Column("Message", ".status.message", priority=1),
    Column("Age", ".metadata.creationTimestamp", "date"),
)


RESOURCE_MODELS: dict[str, type[InferenceConfig] | type[InferenceRun]] = {
    "InferenceConfig": InferenceConfig,
    "InferenceRun": InferenceRun,
}


def resource_models() -> dict[str, type[BaseModel]]:
    """Every longrun kind by name: the run kinds, the serving kinds (Model, ModelDeployment)
    and the fleet kinds (InferenceHost, InferenceModel)."""
    # Imported here: contracts.serving and contracts.fleets build on this module's ObjectMeta.
    from contracts.fleets import FLEET_RESOURCE_MODELS
    from contracts.serving import SERVING_RESOURCE_MODELS

    return {**RESOURCE_MODELS, **SERVING_RESOURCE_MODELS, **FLEET_RESOURCE_MODELS}


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
