"""Model and ModelDeployment: models served by longrun itself (issue 21).

A `Model` (`mdl`) says once where a model lives and what it is; a
`ModelDeployment` (`mdep`) serves one on a runtime (llama.cpp, KServe, MLServer,
Triton, vLLM or any image) behind a Service, with API keys, a model cache, optional
Ingress/TLS and autoscaling. Runs take the endpoint from the deployment's status.

As everywhere in `contracts`, the pydantic models are the source of the CRDs, the
docs and `longrun validate`; every `cel(...)` rule mirrors a validator next to it so
the API server refuses the same mistakes with the same words. The runtime block is
a one-key map `{<runtime>: {...}}` like storage blocks: a structural schema cannot
express a discriminated union, a map with at most one property can.
"""

from contracts.serving.catalog import (
    CATALOG_KEY,
    COMPUTES,
    Catalog,
    CatalogChoice,
    CatalogEntry,
    CatalogError,
    Compute,
    DeploymentModel,
    parse_catalog,
)
from contracts.serving.deployment import (
    IDLE_ABOVE,
    IDLE_WITH_HPA,
    Autoscaling,
    CacheSpec,
    ModelDeploymentSpec,
    PodsMetric,
)
from contracts.serving.deployment_status import (
    AcceptedModel,
    ApiKeysStatus,
    ModelDeploymentStatus,
)
from contracts.serving.endpoint import AuthSpec, EndpointSpec, IngressSpec, IssuerRef, TlsSpec
from contracts.serving.kinds import (
    AGE,
    MODEL_DEPLOYMENT_KIND,
    MODEL_KIND,
    SERVING_KINDS,
    SERVING_RESOURCE_MODELS,
    KindInfo,
    Model,
    ModelDeployment,
)
from contracts.serving.model import (
    Arg,
    ModelCredentials,
    ModelRef,
    ModelSpec,
    ModelStatus,
    ShortText,
)
from contracts.serving.placement import (
    Affinity,
    ServingResources,
    TopologySpreadConstraint,
    affinity_keys,
)
from contracts.serving.runtime import (
    GenericRuntime,
    Image,
    KServeRuntime,
    LlamaCppRuntime,
    MLServerRuntime,
    RuntimeSpec,
    TritonRuntime,
    VllmRuntime,
)
from contracts.serving.sources import (
    API_KEY_SECRET_KEY,
    API_KEYS_SECRET_KEY,
    DIRECTORY_FORMATS,
    GENERATIVE_FORMATS,
    GENERATIVE_TASKS,
    HTTP_NEEDS_SHA,
    ROTATE_KEYS_ANNOTATION,
    RUNTIME_FORMATS,
    SHA256_PATTERN,
    SOURCE_HELP,
    DeploymentPhase,
    ModelFormat,
    ModelSource,
    RuntimeKind,
    Sha256,
    Task,
    default_task,
    format_problem,
    parse_source,
)

__all__ = [
    "AGE",
    "API_KEYS_SECRET_KEY",
    "API_KEY_SECRET_KEY",
    "CATALOG_KEY",
    "COMPUTES",
    "DIRECTORY_FORMATS",
    "GENERATIVE_FORMATS",
    "GENERATIVE_TASKS",
    "HTTP_NEEDS_SHA",
    "IDLE_ABOVE",
    "IDLE_WITH_HPA",
    "MODEL_DEPLOYMENT_KIND",
    "MODEL_KIND",
    "ROTATE_KEYS_ANNOTATION",
    "RUNTIME_FORMATS",
    "SERVING_KINDS",
    "SERVING_RESOURCE_MODELS",
    "SHA256_PATTERN",
    "SOURCE_HELP",
    "AcceptedModel",
    "Affinity",
    "ApiKeysStatus",
    "Arg",
    "AuthSpec",
    "Autoscaling",
    "CacheSpec",
    "Catalog",
    "CatalogChoice",
    "CatalogEntry",
    "CatalogError",
    "Compute",
    "DeploymentModel",
    "DeploymentPhase",
    "EndpointSpec",
    "GenericRuntime",
    "Image",
    "IngressSpec",
    "IssuerRef",
    "KServeRuntime",
    "KindInfo",
    "LlamaCppRuntime",
    "MLServerRuntime",
    "Model",
    "ModelCredentials",
    "ModelDeployment",
    "ModelDeploymentSpec",
    "ModelDeploymentStatus",
    "ModelFormat",
    "ModelRef",
    "ModelSource",
    "ModelSpec",
    "ModelStatus",
    "PodsMetric",
    "RuntimeKind",
    "RuntimeSpec",
    "ServingResources",
    "Sha256",
    "ShortText",
    "Task",
    "TlsSpec",
    "TopologySpreadConstraint",
    "TritonRuntime",
    "VllmRuntime",
    "affinity_keys",
    "default_task",
    "format_problem",
    "parse_catalog",
    "parse_source",
]
