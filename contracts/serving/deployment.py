"""The ModelDeployment resource: a model served on a runtime, its endpoint, keys and cache."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)
from pydantic.config import JsonDict

from contracts.base import (
    LocalObjectReference,
    NamespaceName,
    ObjectName,
    Schema,
    cel,
)
from contracts.config import EnvVar, LabelValue, Quantity, Toleration
from contracts.serving.catalog import DeploymentModel
from contracts.serving.endpoint import AuthSpec, EndpointSpec
from contracts.serving.model import (
    ModelRef,
    ModelSpec,
    ShortText,
)
from contracts.serving.placement import Affinity, ServingResources, TopologySpreadConstraint
from contracts.serving.runtime import (
    RuntimeSpec,
)
from contracts.serving.sources import (
    format_problem,
)
from contracts.serving.text import ServedName


class PodsMetric(Schema):
    """A per-pod custom metric for the HorizontalPodAutoscaler (needs a metrics adapter)."""

    name: ShortText = Field(description="Metric name, e.g. llamacpp:requests_processing.")
    target_average_value: Quantity = Field(description="Target average value per pod.")


class Autoscaling(Schema):
    """An autoscaling/v2 HorizontalPodAutoscaler on the server Deployment."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "self.minReplicas <= self.maxReplicas",
            "minReplicas must not exceed maxReplicas",
            "!(has(self.targetCpuPercent) && has(self.podsMetric))",
            "set at most one of targetCpuPercent and podsMetric",
        )
    )

    min_replicas: int = Field(default=1, ge=1, le=100, description="Fewest replicas.")
    max_replicas: int = Field(ge=1, le=100, description="Most replicas.")
    target_cpu_percent: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Target CPU use in percent of the request; default 80 without podsMetric.",
    )
    pods_metric: PodsMetric | None = Field(default=None, description="Scale on a Pods metric.")

    @model_validator(mode="after")
    def _consistent(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        if self.target_cpu_percent is not None and self.pods_metric is not None:
            raise ValueError("set at most one of targetCpuPercent and podsMetric")
        return self


class CacheSpec(Schema):
    """Where the init container puts the model: a PVC (downloaded once) or an emptyDir."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "self.storage == 'pvc' || (!has(self.storageClassName) && !has(self.accessMode))",
            "storageClassName and accessMode apply to storage pvc only",
        )
    )

    storage: Literal["emptyDir", "pvc"] = Field(
        default="emptyDir", description="emptyDir (per pod) or pvc (shared, survives restarts)."
    )
    size: Quantity | None = Field(
        default=None, description="PVC size (default: the controller's) or the emptyDir limit."
    )
    storage_class_name: ObjectName | None = Field(default=None, description="PVC storage class.")
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] | None = Field(
        default=None,
        description="PVC access mode; default ReadWriteOnce (replicas on several nodes need Many).",
    )
    retain_policy: Literal["Retain", "Delete"] = Field(
        default="Delete",
        description="Delete: the PVC goes with the deployment. Retain: it stays (and is reused).",
    )

    @model_validator(mode="after")
    def _pvc_fields(self) -> CacheSpec:
        if self.storage != "pvc" and (self.storage_class_name or self.access_mode):
            raise ValueError("storageClassName and accessMode apply to storage pvc only")
        return self


_BLOCK_DEFAULT: JsonDict = {"default": {}}
IDLE_ABOVE = "idleReplicas: must not exceed replicas"
TP_ABOVE_GPUS = (
    "runtime.vllm.tensorParallelSize: must not exceed resources.gpu (the GPUs of one pod)"
)
IDLE_WITH_HPA = "idleReplicas: with autoscaling it can only be 0 (the autoscaler owns other counts)"


# CEL: the deployment defines its model itself (a catalog entry's format is known later).
_INLINE = "!has(self.model) || !has(self.model.format) || "


class ModelDeploymentSpec(Schema):
    """A model served on a runtime, with its Service, keys, cache and scaling."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.modelRef) != has(self.model)",
            "set exactly one of modelRef and model",
            "!has(self.idleReplicas) || self.idleReplicas <= self.replicas",
            IDLE_ABOVE,
            "!has(self.idleReplicas) || !has(self.autoscaling) || self.idleReplicas == 0",
            IDLE_WITH_HPA,
            _INLINE + "!has(self.runtime.llamacpp) || self.model.format == 'gguf'",
            "model.format: runtime llamacpp serves format gguf",
            _INLINE + "!has(self.runtime.triton) || "
            "self.model.format in ['onnx', 'triton-repository']",
            "model.format: runtime triton serves format onnx or triton-repository",
            _INLINE + "!(has(self.runtime.kserve) || has(self.runtime.mlserver)) || "
            "self.model.format in ['sklearn', 'xgboost']",
            "model.format: runtimes kserve and mlserver serve format sklearn or xgboost",
            _INLINE + "!has(self.runtime.vllm) || self.model.format == 'hf'",
            "model.format: runtime vllm serves format hf",
            "!has(self.runtime.vllm) || !has(self.runtime.vllm.tensorParallelSize) || "
            "!has(self.resources) || !has(self.resources.gpu) || self.resources.gpu == 0 || "
            "self.runtime.vllm.tensorParallelSize <= self.resources.gpu",
            TP_ABOVE_GPUS,
        )
    )

    model_ref: ModelRef | None = Field(default=None, description="The Model to serve.")
    model: DeploymentModel | None = Field(
        default=None,
        description=(
            "An inline model (no Model object), or a catalog entry by alias "
            "({catalog: {name: ...}}): the Model of that name, made from the catalog if missing."
        ),
    )
    served_name: ServedName | None = Field(
        default=None,
        description="Name runs call the model by; default: the Model's (inline: the deployment's).",
    )
    runtime: RuntimeSpec = Field(description="The server: a one-key map {<runtime>: {...}}.")
    replicas: int = Field(default=1, ge=0, le=100, description="Server pods while in use.")
    idle_replicas: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description=(
            "On demand: pods while no run uses the deployment (0 frees GPUs). Runs that reference "
            "it scale it to `replicas`. Default: always `replicas`."
        ),
    )
    scale_down_delay_seconds: int = Field(
        default=600,
        ge=0,
        le=604_800,
        description="On demand: wait this long after the last run before going to idleReplicas.",
    )
    startup_timeout_seconds: int = Field(
        default=900, ge=30, le=86_400, description="Time a server pod gets to load the model."
    )
    resources: ServingResources | None = Field(default=None, description="Per-pod resources.")
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict, description="Node labels the server pods must match."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=64, description="Tolerations of the server pods."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, max_length=16, description="Secrets used to pull the images."
    )
    priority_class_name: ObjectName | None = Field(
        default=None,
        description=(
            "PriorityClass of the server pods (allow-listed: chart runner.allowedPriorityClasses)."
        ),
    )
    runtime_class_name: ObjectName | None = Field(
        default=None,
        description=(
            "RuntimeClass of the server pods, e.g. nvidia (allow-listed: chart "
            "serving.allowedRuntimeClasses)."
        ),
    )
    affinity: Affinity | None = Field(
        default=None,
        description=(
            "Node affinity, and pod (anti-)affinity within the namespace; the node label keys "
            "and topology keys it names are allow-listed (chart serving.allowedAffinityKeys)."
        ),
    )
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(
        default_factory=list,
        max_length=8,
        description=(
            "Spread the pods over zones or nodes (default selector: the deployment's own pods); "
            "topology keys allow-listed as for affinity."
        ),
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=256, description="Extra server environment variables."
    )
    autoscaling: Autoscaling | None = Field(
        default=None, description="HorizontalPodAutoscaler; `replicas` is then not used."
    )
    endpoint: EndpointSpec = Field(
        default_factory=EndpointSpec,
        description="Service, Ingress and TLS.",
        json_schema_extra=_BLOCK_DEFAULT,
    )
    auth: AuthSpec = Field(
        default_factory=AuthSpec, description="API keys.", json_schema_extra=_BLOCK_DEFAULT
    )
    cache: CacheSpec = Field(
        default_factory=CacheSpec, description="Model cache.", json_schema_extra=_BLOCK_DEFAULT
    )
    allowed_namespaces: list[NamespaceName] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "Other namespaces whose runs may use this deployment (a config's "
            "model.deploymentRef), as InferenceConfig.spec.allowedNamespaces does for configs."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> ModelDeploymentSpec:
        if (self.model_ref is None) == (self.model is None):
            raise ValueError("set exactly one of modelRef and model")
        idle = self.idle_replicas
        if idle is not None and idle > self.replicas:
            raise ValueError(IDLE_ABOVE)
        if idle not in (None, 0) and self.autoscaling is not None:
            raise ValueError(IDLE_WITH_HPA)
        vllm, gpus = self.runtime.vllm, self.resources.gpu if self.resources else 0
        if vllm is not None and gpus and (vllm.tensor_parallel_size or 0) > gpus:
            raise ValueError(TP_ABOVE_GPUS)
        inline = self.model.inline() if self.model is not None else None
        if inline is not None and (
            problem := format_problem(self.runtime.kind, inline.format, inline.resolved_task())
        ):
            raise ValueError(f"model.format: {problem}")
        return self

    @property
    def inline_model(self) -> ModelSpec | None:
        """The model defined in the deployment itself (not a Model, not a catalog entry)."""
        return self.model.inline() if self.model is not None else None

    @property
    def named_model(self) -> ModelRef | None:
        """The Model the deployment serves by name: its modelRef, or the Model named after
        its catalog entry, in its own namespace."""
        if self.model is not None and self.model.catalog is not None:
            return ModelRef(name=self.model.catalog.name)
        return self.model_ref

    @property
    def is_on_demand(self) -> bool:
        """True when the deployment idles at `idleReplicas` while no run uses it."""
        return self.idle_replicas is not None
