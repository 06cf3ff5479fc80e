"""Sample ModelDeployments, Models, Deployments and pods as plain dicts (as the API server
returns them), and a pinned random source, for the serving unit tests."""

from __future__ import annotations

import base64
import copy
import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from contracts.serving import ModelDeploymentSpec
from controller.core.serving import names
from controller.core.serving.decide import Create, ServingDecision, decide_deployment
from controller.core.serving.observed import ServingChildren, ServingObserved
from controller.core.serving.resolve import ServingResolved, resolve_deployment
from controller.core.serving.settings import ServingSettings

NS = "team"
UID = "mdep-uid"
NOW = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
# The cluster the samples assume: its admin allows what they use beyond the defaults (the
# generic sample's image and command line, Ingress hosts and a ClusterIssuer of example.com,
# every Service type). Tests of the defaults themselves pass ServingSettings().
SETTINGS = ServingSettings(
    allowed_images=("vllm/vllm-openai:*",),
    allow_custom_commands=True,
    allowed_hosts=("*.example.com",),
    allowed_cluster_issuers=("letsencrypt",),
    allowed_service_types=("ClusterIP", "NodePort", "LoadBalancer"),
)
GGUF = {"source": "hf://org/chat-GGUF/chat.Q4_K_M.gguf@main", "format": "gguf"}
SKLEARN = {"source": "s3://models/iris/model.joblib", "format": "sklearn"}
XGBOOST = {"source": "https://models.example.com/churn/model.json", "format": "xgboost"}
ONNX = {"source": "s3://models/resnet/resnet50.onnx", "format": "onnx"}
# One inline model and runtime block per runtime: the matrix most tests run over.
RUNTIMES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "llamacpp": (GGUF, {"llamacpp": {"contextSize": 4096, "parallelSlots": 2}}),
    "kserve": (SKLEARN, {"kserve": {"protocol": "v1"}}),
    "mlserver": (XGBOOST, {"mlserver": {}}),
    "triton": (ONNX, {"triton": {"protocol": "grpc"}}),
    "generic": (
        GGUF,
        {
            "generic": {
                "image": "vllm/vllm-openai:v0.6.3",
                "args": ["--model", "$(MODEL_PATH)", "--port", "8000"],
                "port": 8000,
                "protocol": "openai-chat",
                "healthPath": "/health",
            }
        },
    ),
}

# What the examples under testdata/examples/serving need beyond the defaults, as each one's
# comment tells the cluster admin (chart values); the others run under the defaults.
EXAMPLE_SETTINGS = {
    "generic.yaml": ServingSettings(
        allowed_images=("registry.example.com/ml/*",), allow_custom_commands=True
    ),
    "llamacpp.yaml": ServingSettings(
        allowed_hosts=("*.llm.example.com",), allowed_cluster_issuers=("letsencrypt",)
    ),
}
EXAMPLE_VALUES = {
    "generic.yaml": ("serving.allowedImages", "serving.allowCustomCommands"),
    "llamacpp.yaml": ("serving.ingress.allowedHosts", "serving.tls.allowedClusterIssuers"),
}


def example_settings(file_name: str) -> ServingSettings:
    """The settings of a cluster that runs the example `file_name`."""
    return EXAMPLE_SETTINGS.get(file_name, ServingSettings())


def deployment(
    name: str = "chat", *, annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A ModelDeployment object; default: llama.cpp serving an inline GGUF model."""
    spec.setdefault("model", copy.deepcopy(GGUF))
    spec.setdefault("runtime", {"llamacpp": {}})
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": UID,
            "generation": 1,
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def for_runtime(kind: str, **spec: Any) -> dict[str, Any]:
    """A ModelDeployment named `kind` of that runtime with its matching inline model (either
    may be overridden)."""
    model, block = RUNTIMES[kind]
    spec.setdefault("model", copy.deepcopy(model))
    spec.setdefault("runtime", copy.deepcopy(block))
    return deployment(kind, **spec)


def model_object(name: str = "chat-model", namespace: str = NS, **spec: Any) -> dict[str, Any]:
    """A Model object."""
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "Model",
        "metadata": {"name": name, "namespace": namespace, "uid": "model-uid", "generation": 1},
        "spec": {**copy.deepcopy(GGUF), **spec},
    }


def resolved(
    obj: dict[str, Any], model: dict[str, Any] | None = None, settings: ServingSettings = SETTINGS
) -> ServingResolved:
    """The resolved deployment (fails the test on a problem)."""
    spec = ModelDeploymentSpec.model_validate(obj["spec"])
    result = resolve_deployment(obj, spec, model, settings)
    assert isinstance(result, ServingResolved), result
    return result


def counting_entropy() -> Callable[[int], bytes]:
    """A pinned random source: each call gives n copies of the next byte value."""
    counter: Iterator[int] = itertools.count(1)
    return lambda n: bytes([next(counter) % 256]) * n


def decide(
    obj: dict[str, Any],
    *,
    now: datetime = NOW,
    settings: ServingSettings = SETTINGS,
    entropy: Callable[[int], bytes] | None = None,
    **fields: Any,
) -> ServingDecision:
    """decide_deployment on an observed value built from keyword fields."""
    children = fields.pop("children", ServingChildren())
    observed = ServingObserved(obj, children=children, **fields)
    return decide_deployment(observed, settings, now=now, entropy=entropy or counting_entropy())


def created(decision: ServingDecision) -> dict[str, dict[str, Any]]:
    """kind → body of every Create in a decision."""
    return {w.kind: w.body for w in decision.writes if isinstance(w, Create)}


def recorded(obj: dict[str, Any], decision: ServingDecision) -> dict[str, Any]:
    """`obj` with the status a decision published (what the next pass reads back: the
    keys the controller made are known only from there)."""
    obj["status"] = decision.status.to_wire()
    return obj


def as_stored(body: dict[str, Any], uid: str = "child-uid") -> dict[str, Any]:
    """A created body as the API server would return it (with a UID)."""
    stored = copy.deepcopy(body)
    stored["metadata"]["uid"] = uid
    return stored


def keys_in(secret: dict[str, Any]) -> list[str]:
    """The plain keys of a key Secret body."""
    return base64.b64decode(secret["data"]["api-keys"]).decode().split()


def children_of(decision: ServingDecision, **overrides: Any) -> ServingChildren:
    """The children a first decision created, as stored objects (fields may be overridden)."""
    made = created(decision)
    fields = {
        "config_map": made.get("ConfigMap"),
        "claim": made.get("PersistentVolumeClaim"),
        "deployment": made.get("Deployment"),
        "service": made.get("Service"),
        "network_policy": made.get("NetworkPolicy"),
        "hpa": made.get("HorizontalPodAutoscaler"),
        "certificate": made.get("Certificate"),
        "ingress": made.get("Ingress"),
    }
    stored = {k: as_stored(v, f"{k}-uid") if v is not None else None for k, v in fields.items()}
    return ServingChildren(**{**stored, **overrides})


def deployment_status(dep: dict[str, Any], **status: Any) -> dict[str, Any]:
    """`dep` with a status (and metadata.generation 1)."""
    out = copy.deepcopy(dep)
    out["metadata"]["generation"] = out["metadata"].get("generation", 1)
    out["status"] = {"observedGeneration": 1, **status}
    return out


def rolled_out(dep: dict[str, Any], ready: int) -> dict[str, Any]:
    """`dep` with a finished rollout and `ready` ready pods."""
    replicas = dep["spec"]["replicas"]
    return deployment_status(
        dep,
        replicas=replicas,
        updatedReplicas=replicas,
        readyReplicas=ready,
        availableReplicas=ready,
        conditions=[{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
    )


def pod(
    *,
    fetch: dict[str, Any] | None = None,
    containers: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A server pod with the given init container state, container statuses and conditions."""
    status: dict[str, Any] = {"conditions": conditions or []}
    if fetch is not None:
        status["initContainerStatuses"] = [{"name": names.FETCH_CONTAINER, **fetch}]
    if containers is not None:
        status["containerStatuses"] = containers
    return {
        "metadata": {"name": "chat-7d9f-abc", "namespace": NS, "labels": names.labels("chat")},
        "status": status,
    }
