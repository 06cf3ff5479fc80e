"""InferenceConfig: the "how" and "where" of a run — model, runner image, storage, tuning."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from contracts.base import (
    Condition,
    LocalObjectReference,
    NamespaceName,
    Schema,
    SecretKeyRef,
    cel,
)
from contracts.concurrency import ConcurrencyTuning
from contracts.llm import run_problem
from contracts.model import KServeBlock, ModelBlock, ModelEndpoint, normalize_kserve
from contracts.run import LIST_MAP_BY_TYPE
from contracts.storage import (
    INPUT_RULES,
    OUTPUT_RULES,
    StorageSpec,
    check_errors,
    check_input,
    check_output,
)

AutoDeletePolicy = Literal["None", "DeleteOnCompletion", "DeleteOnSuccess"]
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|[kMGTPE]i?|[eE][0-9]+)?$")


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 2, 500m, 512Mi, 1.5Gi)")
    return value


# A Kubernetes resource quantity: 2, "500m", "1.5Gi" (int-or-string in the CRD).
Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]
LabelValue = Annotated[str, StringConstraints(max_length=63)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=253)]


class StorageBlock(Schema):
    """Where records come from and where results go."""

    input: Annotated[StorageSpec, AfterValidator(check_input)] = Field(
        description="Where the runner reads records: a one-key map {<kind>: {...}}.",
        json_schema_extra=cel(*INPUT_RULES),
    )
    output: Annotated[StorageSpec, AfterValidator(check_output)] = Field(
        description="Where the runner writes predictions: a one-key map {<kind>: {...}}.",
        json_schema_extra=cel(*OUTPUT_RULES),
    )
    errors: Annotated[StorageSpec, AfterValidator(check_errors)] | None = Field(
        default=None,
        description=(
            "Where failed records go (record id + reason). Default: next to the output "
            "(a sibling table, prefix or directory named <output>-errors); for a krateo "
            "output, one JSON line per failed record in the runner pod's log."
        ),
        json_schema_extra=cel(*OUTPUT_RULES),
    )

    def volume_claims(self) -> list[tuple[str, str, bool]]:
        """(claim, mountPath, readOnly) of the file storages' volumes, one per distinct pair.

        A mount is read-only when only the input uses it: the runner never writes there.
        """
        writable: dict[tuple[str, str], bool] = {}
        roles = {"input": self.input, "output": self.output, "errors": self.errors}
        for role, storage in roles.items():
            file = storage.file if storage is not None else None
            mount_path = file.volume_mount_path() if file is not None else None
            if file is None or file.volume is None or mount_path is None:
                continue
            key = (file.volume, mount_path)
            writable[key] = writable.get(key, False) or role != "input"
        return [(claim, path, not rw) for (claim, path), rw in sorted(writable.items())]


# Records per model request when `batchSize` is unset (bench/tuning.py; bench/README.md has the
# grid): the tensor protocols make 3-5x the records/s at 256 than at 32 on Triton, KServe and
# MLServer. The OpenAI protocols keep 32: chat sends one request per record, a batch being the
# unit of retry and commit, and llama.cpp, their server here, serialises requests, so the grid
# cannot tell them apart.
TENSOR_PROTOCOLS = frozenset({"kserve-v1", "kserve-v2", "triton-grpc"})
TENSOR_BATCH_SIZE = 256
OTHER_BATCH_SIZE = 32


def default_batch_size(protocol: str) -> int:
    """Records per model request for `protocol` when `batchSize` is unset."""
    return TENSOR_BATCH_SIZE if protocol in TENSOR_PROTOCOLS else OTHER_BATCH_SIZE


class RunnerTuning(ConcurrencyTuning):
    """Throughput, retry and error-budget knobs read by the runner (the concurrency knobs:
    contracts/concurrency.py)."""

    batch_size: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description=(
            "Records per model request. Default: 256 for kserve-v1, kserve-v2 and triton-grpc,"
            " 32 for the other protocols."
        ),
    )
    chunk_size: int = Field(
        default=1000,
        ge=1,
        le=10_000_000,
        description="Records per chunk; a chunk is written atomically and is the unit of resume.",
    )
    # 10 attempts: at 15 % transient answers (10 % 503 + 5 % 429) a batch gives up with
    # probability 0.15**10 ~ 6e-9 (5 attempts: 8e-5, one batch in 13,000), and with the default
    # backoff the attempts span up to ~2 minutes, long enough to outlast a model server's restart.
    max_attempts: int = Field(
        default=10,
        ge=1,
        le=100,
        description=(
            "Attempts per request on 429/5xx/timeouts; with the default backoff they span up to"
            " ~2 minutes."
        ),
    )
    initial_backoff_seconds: float = Field(
        default=0.5,
        ge=0,
        le=600,
        description="First retry delay (exponential, full jitter).",
    )
    max_backoff_seconds: float = Field(
        default=30, ge=0, le=3600, description="Upper bound of one retry delay."
    )
    requests_per_second: float | None = Field(
        default=None,
        gt=0,
        le=100000,
        description="Optional cap on model requests per second.",
    )
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        description=(
            "OpenAI protocols: optional cap on tokens (prompt + completion) per minute, as "
            "providers and gateways impose it. Each request reserves an upper bound of its "
            "tokens before it is sent and is charged its `usage` after; over any minute the "
            "run stays within the cap, or over it by at most one request (docs/llm-batch.md)."
        ),
    )
    max_failed_records: int = Field(
        default=0,
        ge=0,
        description="Failed records tolerated before the run fails (error budget).",
    )
    max_failed_ratio: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description=(
            "Failed/read ratio tolerated before the run fails: judged against the input's"
            " record count when the input can tell it, else once 10,000 records are done,"
            " and at the end."
        ),
    )
    progress_interval_seconds: int = Field(
        default=30, ge=1, le=3600, description="Seconds between progress log lines."
    )


class ResourceRequirements(Schema):
    """CPU/memory requests and limits of the runner container."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Requested resources, e.g. cpu: 500m, memory: 512Mi.",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, description="Resource limits, e.g. memory: 1Gi."
    )


class Toleration(Schema):
    """A pod toleration (core/v1 Toleration)."""

    key: Annotated[str, StringConstraints(max_length=316)] | None = Field(
        default=None, description="Taint key; empty with operator Exists matches all."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: LabelValue | None = Field(default=None, description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all."
    )
    toleration_seconds: int | None = Field(
        default=None, description="For NoExecute: how long the pod stays bound."
    )


class EnvVar(Schema):
    """An environment variable for the runner: a literal or a Secret key (never copied)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.value) != has(self.secretKeyRef)",
            "set exactly one of value and secretKeyRef",
        )
    )

    name: EnvName = Field(description="Variable name.")
    value: Annotated[str, StringConstraints(max_length=32768)] | None = Field(
        default=None, description="Literal value (not for credentials)."
    )
    secret_key_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key whose value the variable receives."
    )

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError("set exactly one of value and secretKeyRef")
        return self


class PodOptions(Schema):
    """Pod-level knobs for the runner."""

    resources: ResourceRequirements | None = Field(
        default=None, description="Runner container resources."
    )
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict, description="Node labels the runner pod must match."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=64,
        description="Tolerations of the runner pod.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=256, description="Extra environment variables."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets used to pull the image.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy; default: Kubernetes' own."
    )
    service_account_name: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None,
        description="ServiceAccount of the runner pod; must be on the controller's allow-list.",
    )
    labels: dict[str, LabelValue] = Field(
        default_factory=dict, description="Extra labels on the runner pod."
    )
    annotations: dict[str, Annotated[str, StringConstraints(max_length=65536)]] = Field(
        default_factory=dict, description="Extra annotations on the runner pod."
    )


class InferenceConfigSpec(Schema):
    """How to run inference: model endpoint, runner image, storage and tuning."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.model) != has(self.kserve)",
            "set exactly one of model and kserve (kserve is Krateo's alias of model)",
        )
    )

    image: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = Field(
        default=None,
        description="Runner image. Default: the controller's; may be restricted by an allow-list.",
    )
    model: ModelBlock | None = Field(
        default=None,
        description="The model endpoint (a url, or a ModelDeployment). Set this or `kserve`.",
    )
    kserve: KServeBlock | None = Field(
        default=None,
        description="Krateo's model block, accepted as an alias of `model`.",
    )
    storage: StorageBlock = Field(description="Input, output and error storage.")
    auto_delete_policy: AutoDeletePolicy = Field(
        default="None",
        description=(
            "One-shot runs: delete the InferenceRun (and its Job, Pods, ConfigMap) after it "
            "finishes: never (None), always (DeleteOnCompletion) or only on success "
            "(DeleteOnSuccess). Scheduled runs: applies to each finished Job instead."
        ),
    )
    auto_delete_delay_seconds: int = Field(
        default=0,
        ge=0,
        le=2_592_000,
        description="Wait this long after completion before auto-deleting.",
    )
    backoff_limit: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Pod retries before the Job is marked failed.",
    )
    runner: RunnerTuning = Field(
        default_factory=RunnerTuning,
        description="Batching, concurrency, retry, error budget.",
        # default {} lets the API server fill in (and show) every tuning default.
        json_schema_extra={"default": {}},
    )
    pod: PodOptions = Field(default_factory=PodOptions, description="Runner pod settings.")
    allowed_namespaces: list[NamespaceName] = Field(
        default_factory=list,
        max_length=256,
        description="Other namespaces whose InferenceRuns may reference this config.",
    )
    krateo_contract_path: bool | None = Field(
        default=None,
        description=(
            "Also mount the contract at /tmp/contract.json (over a writable /tmp) so Krateo "
            "runner images run unchanged. Default: on when `kserve` is used."
        ),
    )

    @model_validator(mode="after")
    def _one_model_block(self) -> InferenceConfigSpec:
        if self.model is not None and self.kserve is not None:
            raise ValueError("set only one of model and kserve (kserve is an alias of model)")
        if self.model is None and self.kserve is None:
            raise ValueError("set model (or Krateo's kserve block)")
        return self

    @model_validator(mode="after")
    def _llm_rules(self) -> InferenceConfigSpec:
        # contracts/llm.py; a deploymentRef's protocol is checked once resolved (serving/uses.py)
        model = self.model if self.kserve is None else normalize_kserve(self.kserve)
        assert model is not None  # guaranteed by _one_model_block
        storage = self.storage
        outputs = {"output": storage.output, "errors": storage.errors}
        problem = run_problem(
            model, model.protocol, storage_input=storage.input, outputs=outputs, runner=self.runner
        )
        if problem is not None:
            raise ValueError(problem)
        return self

    def endpoint(self) -> ModelEndpoint:
        """The normalized model endpoint, whichever block the user wrote (a deploymentRef
        must have been resolved: `ModelBlock.with_target`)."""
        if self.model is not None:
            return self.model.endpoint()
        assert self.kserve is not None  # guaranteed by _one_model_block
        return normalize_kserve(self.kserve)

    def uses_krateo_contract_path(self) -> bool:
        """Whether the contract is also mounted at Krateo's /tmp/contract.json."""
        if self.krateo_contract_path is not None:
            return self.krateo_contract_path
        return self.kserve is not None


class InferenceConfigStatus(Schema):
    """What the controller observed about this config."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the status was computed from."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Latest observations (Accepted).",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )
