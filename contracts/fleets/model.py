"""The InferenceModel resource: a model served by N external hosts, behind one Service.

The controller picks hosts among those the `hostSelector` selects in the model's
namespace, by free capacity, one replica per host; asks each to load the model; and
publishes a selector-less Service with an EndpointSlice of the hosts' addresses, so pods
reach the fleet at one in-cluster name. Runs use it like a deployment (a config's
`model.deploymentRef` with `kind: InferenceModel`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from contracts.base import (
    Condition,
    LocalObjectReference,
    NamespaceName,
    ObjectName,
    Schema,
    cel,
)
from contracts.config import LabelValue, Quantity
from contracts.fleets.host import ShortText
from contracts.run import LIST_MAP_BY_TYPE

# Label keys: an optional DNS prefix and a name of up to 63 characters (as Kubernetes checks).
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=317, pattern=LABEL_KEY)]
FleetProtocol = Literal["openai-chat", "openai-completions", "openai-embeddings"]
FleetPhase = Literal["Pending", "Loading", "Ready", "Degraded", "Failed"]
PlacementState = Literal["Loading", "Ready", "NotReady", "Failed"]
VALUES_NEEDED = "values: operators In and NotIn need values; Exists and DoesNotExist take none"
ONE_MODEL = "set exactly one of model and modelRef"


class LabelSelectorRequirement(Schema):
    """One expression of a label selector (metav1.LabelSelectorRequirement)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
            VALUES_NEEDED,
        )
    )

    key: LabelKey = Field(description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[LabelValue] = Field(
        default_factory=list, max_length=64, description="Values for In and NotIn."
    )

    @model_validator(mode="after")
    def _values(self) -> LabelSelectorRequirement:
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError(VALUES_NEEDED)
        return self


class HostSelector(Schema):
    """Which InferenceHosts of the namespace may serve the model, by their labels (both
    parts must match; empty: every host)."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict, description="Labels a host must have, with these values."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=32, description="Expressions a host must satisfy."
    )


class ReplicaResources(Schema):
    """What one replica takes from its host's capacity."""

    slots: int = Field(default=1, ge=0, le=1024, description="Slots (default 1).")
    memory: Quantity | None = Field(
        default=None,
        description="Memory, e.g. 8Gi; needed on hosts that count memory (capacity.memory).",
    )


class InferenceModelSpec(Schema):
    """A model served by external hosts: which hosts, how many, and how runs call it."""

    model_config = ConfigDict(
        json_schema_extra=cel("has(self.model) != has(self.modelRef)", ONE_MODEL)
    )

    model: ShortText | None = Field(
        default=None,
        description=(
            "The model by the name the hosts know it (what GET /v1/models lists, an Ollama "
            "tag such as qwen2.5:3b, a Hugging Face repo for inferenced)."
        ),
    )
    model_ref: LocalObjectReference | None = Field(
        default=None,
        description=(
            "A Model of this namespace: each host is asked for it by the name its protocol "
            "derives from the Model's source (docs/serving.md, External hosts)."
        ),
    )
    host_selector: HostSelector = Field(
        default_factory=HostSelector,
        description="Labels of the InferenceHosts (of this namespace) that may serve it.",
        json_schema_extra={"default": {}},
    )
    replicas: int = Field(
        default=1, ge=0, le=64, description="Hosts that should serve it (one replica per host)."
    )
    resources: ReplicaResources = Field(
        default_factory=ReplicaResources,
        description="What each replica takes from its host's capacity.",
        json_schema_extra={"default": {}},
    )
    protocol: FleetProtocol = Field(
        default="openai-chat",
        description="What runs call: openai-chat, openai-completions or openai-embeddings.",
    )
    port: int = Field(default=8080, ge=1, le=65535, description="The Service's port.")
    allowed_namespaces: list[NamespaceName] = Field(
        default_factory=list,
        max_length=256,
        description="Other namespaces whose runs may use it (a config's model.deploymentRef).",
    )

    @model_validator(mode="after")
    def _one_model(self) -> InferenceModelSpec:
        if (self.model is None) == (self.model_ref is None):
            raise ValueError(ONE_MODEL)
        return self


class Placement(Schema):
    """One replica: the host it is on and how it is doing."""

    host: ObjectName = Field(description="The InferenceHost.")
    address: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None, description="The host's address in the EndpointSlice."
    )
    port: int | None = Field(default=None, ge=1, le=65535, description="The host's port.")
    state: PlacementState = Field(
        description="Loading, Ready (in the EndpointSlice as ready), NotReady or Failed."
    )
    message: Annotated[str, StringConstraints(max_length=1024)] | None = Field(
        default=None, description="What the host or its admin API said, when not Ready."
    )
    since: datetime | None = Field(default=None, description="When it was placed there.")


class InferenceModelStatus(Schema):
    """What the controller placed and observed; runs read endpoint, protocol and model name."""

    phase: FleetPhase | None = Field(
        default=None,
        description=(
            "Pending (no replica placed), Loading, Ready (every replica ready), Degraded "
            "(some ready, fewer than wanted) or Failed (a user error)."
        ),
    )
    message: Annotated[str, StringConstraints(max_length=32768)] | None = Field(
        default=None, description="What is wrong, naming the cause, when something is."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the status was computed from."
    )
    model_name: ShortText | None = Field(
        default=None, description="The name hosts serve the model by and runs call it by."
    )
    replicas: int | None = Field(default=None, ge=0, description="Replicas wanted.")
    ready_replicas: int | None = Field(default=None, ge=0, description="Replicas ready.")
    placements: list[Placement] = Field(
        default_factory=list, max_length=64, description="Where each replica is."
    )
    service_name: ObjectName | None = Field(default=None, description="The Service.")
    endpoint: Annotated[str, StringConstraints(max_length=2048)] | None = Field(
        default=None, description="In-cluster URL of the Service."
    )
    protocol: FleetProtocol | None = Field(default=None, description="What runs call.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=8,
        description="Available (a replica is ready), Progressing (placing or loading).",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )
