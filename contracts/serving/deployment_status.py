"""A ModelDeployment's status: what the controller observed, and what runs read from it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from contracts.base import Condition, ObjectName, Schema
from contracts.model import Protocol
from contracts.run import LIST_MAP_BY_TYPE
from contracts.serving.model import ShortText
from contracts.serving.sources import API_KEY_SECRET_KEY, DeploymentPhase, RuntimeKind

KeysReason = Literal["Created", "RotationRequested", "KeyCountChanged", "SecretMissing"]


class ApiKeysStatus(Schema):
    """The keys the controller last wrote into the API-key Secret, never the keys themselves.

    The controller may not read Secrets, so what it needs to know about the keys is kept
    here: which rotation request they were made for, how many, and a random `version`
    (the pods' `longrun.dev/api-keys-version`, so new keys roll the pods)."""

    version: Annotated[str, StringConstraints(max_length=64)] = Field(
        description="Identifies this set of keys (random, not derived from them)."
    )
    count: int = Field(ge=1, le=16, description="How many keys the Secret holds.")
    rotated_for: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="",
        description='The longrun.dev/rotate-api-keys value they were made for ("": none).',
    )
    made_at: datetime | None = Field(default=None, description="When they were made.")
    reason: KeysReason | None = Field(
        default=None,
        description=(
            "Why they were made: Created, RotationRequested, KeyCountChanged, or SecretMissing "
            "(the Secret was deleted: new keys)."
        ),
    )


class AcceptedModel(Schema):
    """The Model version a deployment's children are rendered from (see modelRef.generation)."""

    uid: Annotated[str, StringConstraints(max_length=128)] = Field(description="The Model's UID.")
    generation: int = Field(ge=0, description="The Model's metadata.generation.")
    spec: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "The Model's spec at that generation, without allowedNamespaces: what the pods are "
            "rendered from while a later change of the Model waits to be accepted."
        ),
    )


class ModelDeploymentStatus(Schema):
    """What the controller observed about a deployment; runs read endpoint, protocol and key."""

    phase: DeploymentPhase | None = Field(
        default=None,
        description=(
            "Pending, Downloading, Deploying, Running, Updating, Idle (on demand, no run), "
            "Failed or Terminating."
        ),
    )
    message: Annotated[str, StringConstraints(max_length=32768)] | None = Field(
        default=None, description="What is wrong, naming the cause, when something is."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the status was computed from."
    )
    replicas: int | None = Field(default=None, ge=0, description="Server pods wanted now.")
    ready_replicas: int | None = Field(default=None, ge=0, description="Server pods ready.")
    waiting_for: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None,
        description=(
            "What no node can give the pods now, as the scheduler says (e.g. nvidia.com/gpu, "
            "cpu); empty once they are scheduled."
        ),
    )
    slots_per_replica: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Requests one replica serves at once, as its runtime declares (llama.cpp: "
            "parallelSlots); runs with concurrency auto start from it times readyReplicas."
        ),
    )
    ready_text: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None, description="readyReplicas/replicas, e.g. 1/2 (a printer column)."
    )
    endpoint: Annotated[str, StringConstraints(max_length=2048)] | None = Field(
        default=None, description="In-cluster URL (gRPC: host:port)."
    )
    external_endpoint: Annotated[str, StringConstraints(max_length=2048)] | None = Field(
        default=None, description="URL through the Ingress, when there is one."
    )
    protocol: Protocol | None = Field(default=None, description="Protocol runs use.")
    model_name: ShortText | None = Field(default=None, description="Name runs call the model by.")
    runtime: RuntimeKind | None = Field(default=None, description="The runtime (printer column).")
    api_key_secret: ObjectName | None = Field(
        default=None, description=f"Secret holding the API keys (key `{API_KEY_SECRET_KEY}`)."
    )
    api_keys: ApiKeysStatus | None = Field(
        default=None, description="What the controller knows of the keys it made (no key)."
    )
    token_audiences: list[ShortText] | None = Field(
        default=None,
        description=(
            "With auth.oidc: the audiences its tokens may carry (a run sets one as "
            "model.auth.serviceAccountToken.audience)."
        ),
    )
    accepted_model: AcceptedModel | None = Field(
        default=None,
        description="The Model version the pods are rendered from (modelRef only).",
    )
    active_runs: list[Annotated[str, StringConstraints(max_length=317)]] = Field(
        default_factory=list, max_length=64, description="Runs using the deployment now (ns/name)."
    )
    idle_since: datetime | None = Field(
        default=None, description="On demand: since when no run has used the deployment."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="ModelCached, Available, Progressing; ModelCurrent for a pinned Model.",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )
