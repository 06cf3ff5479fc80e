"""What each runtime needs: image, command line, ports, health endpoint, protocol, and whether
it checks API keys itself.

This is the one table of runtime knowledge. The pod builder turns a `RuntimePlan` into a
container; status reads its protocol; local mode (`longrun serve`) maps the same plan to a
local command (llama-cpp-python's server, KServe's Python server, MLServer, PyTriton). The
images are the runtimes' public images by default and chart values in a cluster.

Where an nginx sidecar checks the keys, the runtime is bound to 127.0.0.1 when it can be
(MLServer's `MLSERVER_HOST`, Triton's `--http-address`), so nothing reaches it unchecked;
KServe's server and generic images always listen on every address, and a NetworkPolicy
(see network.py) keeps their port closed from outside the pod.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from contracts.serving import (
    API_KEYS_SECRET_KEY,
    ModelDeploymentSpec,
    ModelSpec,
    RuntimeKind,
    parse_source,
)
from controller.core.names import short_hash

CACHE_MOUNT = "/models"
SOURCE_MOUNT = "/mnt/source"
CREDENTIALS_MOUNT = "/var/run/longrun/model-credentials"
KEYS_MOUNT = "/etc/longrun/keys"
LOOPBACK = "127.0.0.1"
# Only where the runtime checks keys itself, or cannot bind elsewhere (a NetworkPolicy guards).
ANY_ADDRESS = "0.0.0.0"
HTTP_PORT = 8080
GRPC_PORT = 8081
TRITON_PORTS = (8000, 8001, 8002)  # http, grpc, metrics
LLAMA_TASK_PROTOCOLS = {
    "chat-completion": "openai-chat",
    "completion": "openai-completions",
    "embeddings": "openai-embeddings",
}
GRPC_PROTOCOLS = frozenset({"triton-grpc"})
# Runtimes that check `Authorization: Bearer <key>` themselves; the others get the sidecar.
ENFORCES_KEYS = frozenset({"llamacpp"})
MLSERVER_CLASSES = {
    "sklearn": "mlserver_sklearn.SKLearnModel",
    "xgboost": "mlserver_xgboost.XGBoostModel",
}
KEEP_EXTENSIONS = {"sklearn": (".joblib", ".pkl", ".pickle"), "xgboost": (".bst", ".json", ".ubj")}


@dataclass(frozen=True)
class ServingImages:
    """Default images per runtime (chart values). Tags are the runtimes' public releases."""

    llamacpp: str = "ghcr.io/ggml-org/llama.cpp:server"
    llamacpp_cuda: str = "ghcr.io/ggml-org/llama.cpp:server-cuda"
    kserve_sklearn: str = "kserve/sklearnserver:v0.14.1"
    kserve_xgboost: str = "kserve/xgbserver:v0.14.1"
    mlserver: str = "seldonio/mlserver:1.7.1"
    triton: str = "nvcr.io/nvidia/tritonserver:24.10-py3"
    auth_proxy: str = "nginxinc/nginx-unprivileged:1.27-alpine"

    def defaults(self) -> frozenset[str]:
        """Every default image (always allowed, whatever the allow-list says)."""
        return frozenset(vars(self).values())


@dataclass(frozen=True)
class ModelLayout:
    """Where the model is for the runtime, and how it gets there.

    `path` is what the runtime loads (a file, or a directory for a Triton repository).
    `fetch_args` are `longrun-fetch`'s arguments (empty: no init container). A pvc://
    source is used in place from `source_claim`, mounted read-only, unless the runtime
    needs a layout of its own (Triton's model repository), when it is copied to the cache.
    """

    path: str
    fetch_args: tuple[str, ...]
    uses_cache: bool
    source_claim: str | None = None


@dataclass(frozen=True)
class RuntimePlan:
    """Everything about the server container that depends on the runtime."""

    kind: RuntimeKind
    image: str
    protocol: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    http_port: int | None = HTTP_PORT  # the runtime's HTTP port (None: gRPC only)
    grpc_port: int | None = None  # the runtime's gRPC port when runs use gRPC
    health_path: str | None = None  # HTTP readiness path; None: a TCP probe
    enforces_keys: bool = False
    key_file: str | None = None  # the key list the runtime reads itself

    @property
    def is_grpc(self) -> bool:
        """True when runs speak gRPC to this deployment."""
        return self.protocol in GRPC_PROTOCOLS


def needs_auth_proxy(spec: ModelDeploymentSpec) -> bool:
    """True when keys are on and the runtime cannot check them: the nginx sidecar does."""
    return spec.auth.enabled and spec.runtime.kind not in ENFORCES_KEYS


def model_layout(spec: ModelDeploymentSpec, model: ModelSpec, served_name: str) -> ModelLayout:
    """Where the model lands in the pod, and the init container's arguments to put it there."""
    source = parse_source(model.source)
    triton_copy = spec.runtime.kind == "triton" and model.format == "onnx"
    if source.scheme == "pvc" and not triton_copy:
        path = f"{SOURCE_MOUNT}/{source.where}/{source.path}".rstrip("/")
        verify = (model.source, path, "--sha256", model.sha256) if model.sha256 else ()
        return ModelLayout(path, verify, uses_cache=False, source_claim=source.where)
    root = f"{CACHE_MOUNT}/{short_hash(source.key + (model.sha256 or ''), 12)}"
    dest, path = _cache_paths(spec, model, root, source.file_name, served_name)
    args = [model.source, dest]
    if model.sha256:
        args += ["--sha256", model.sha256.lower()]
    if model.endpoint_url:
        args += ["--endpoint-url", model.endpoint_url]
    if model.credentials is not None:
        args += ["--credentials-dir", CREDENTIALS_MOUNT]
    claim = source.where if source.scheme == "pvc" else None
    return ModelLayout(path, tuple(args), uses_cache=True, source_claim=claim)


def _cache_paths(
    spec: ModelDeploymentSpec, model: ModelSpec, root: str, file_name: str, served: str
) -> tuple[str, str]:
    """(download destination, path the runtime loads) under the cache root."""
    if model.format == "triton-repository":
        return root, root
    if model.format == "onnx" and spec.runtime.kind == "triton":
        return f"{root}/repository/{served}/1/model.onnx", f"{root}/repository"
    if spec.runtime.kind == "generic":
        dest = f"{root}/{file_name or 'model'}"
        return dest, dest
    ext = posixpath.splitext(file_name)[1].lower()
    keep = KEEP_EXTENSIONS.get(model.format, ())
    name = f"model{ext}" if ext in keep else f"model{keep[0] if keep else '.' + model.format}"
    return f"{root}/{name}", f"{root}/{name}"


def plan_runtime(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    *,
    served_name: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    """The server container's plan for this deployment's runtime."""
    build = {
        "llamacpp": _llamacpp,
        "kserve": _kserve,
        "mlserver": _mlserver,
        "triton": _triton,
        "generic": _generic,
    }[spec.runtime.kind]
    return build(spec, model, served_name, layout, images)


def _bind(spec: ModelDeploymentSpec) -> str:
    return LOOPBACK if needs_auth_proxy(spec) else ANY_ADDRESS


def _gpus(spec: ModelDeploymentSpec) -> int:
    return spec.resources.gpu if spec.resources is not None else 0


def _llamacpp(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    served: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    cfg = spec.runtime.llamacpp
    assert cfg is not None
    gpus = _gpus(spec)
    layers = cfg.gpu_layers if cfg.gpu_layers is not None else (999 if gpus else 0)
    args = ["--model", layout.path, "--alias", served, "--host", ANY_ADDRESS]
    args += ["--port", str(HTTP_PORT), "--parallel", str(cfg.parallel_slots)]
    args += ["--n-gpu-layers", str(layers), "--metrics"]
    if cfg.context_size is not None:
        args += ["--ctx-size", str(cfg.context_size)]
    if model.resolved_task() == "embeddings":
        args.append("--embedding")
    key_file = f"{KEYS_MOUNT}/{API_KEYS_SECRET_KEY}" if spec.auth.enabled else None
    if key_file:
        args += ["--api-key-file", key_file]
    image = cfg.image or (images.llamacpp_cuda if gpus else images.llamacpp)
    return RuntimePlan(
        kind="llamacpp",
        image=image,
        protocol=LLAMA_TASK_PROTOCOLS[model.resolved_task()],
        args=(*args, *cfg.extra_args),
        health_path="/health",
        enforces_keys=True,
        key_file=key_file,
    )


def _kserve(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    served: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    # KServe's server listens on 0.0.0.0 whatever it is told (the NetworkPolicy guards it) and
    # loads the one model file in --model_dir; gRPC is off since runs use REST.
    cfg = spec.runtime.kserve
    assert cfg is not None
    default = images.kserve_xgboost if model.format == "xgboost" else images.kserve_sklearn
    args = (
        f"--model_name={served}",
        f"--model_dir={posixpath.dirname(layout.path)}",
        f"--http_port={HTTP_PORT}",
        "--enable_grpc=false",
        "--enable_latency_logging=false",
    )
    return RuntimePlan(
        kind="kserve",
        image=cfg.image or default,
        protocol=f"kserve-{cfg.protocol}",
        args=args,
        env=_home(),
        health_path=f"/v1/models/{served}" if cfg.protocol == "v1" else "/v2/health/ready",
    )


def _mlserver(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    served: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    cfg = spec.runtime.mlserver
    assert cfg is not None
    env = (
        ("MLSERVER_HOST", _bind(spec)),
        ("MLSERVER_HTTP_PORT", str(HTTP_PORT)),
        ("MLSERVER_GRPC_PORT", str(GRPC_PORT)),
        ("MLSERVER_METRICS_PORT", "8082"),
        ("MLSERVER_PARALLEL_WORKERS", str(cfg.parallel_workers)),
        ("MLSERVER_MODEL_NAME", served),
        ("MLSERVER_MODEL_IMPLEMENTATION", MLSERVER_CLASSES[model.format]),
        ("MLSERVER_MODEL_URI", layout.path),
        *_home(),
    )
    return RuntimePlan(
        kind="mlserver",
        image=cfg.image or images.mlserver,
        protocol="kserve-v2",
        command=("mlserver", "start", posixpath.dirname(layout.path)),
        env=env,
        health_path="/v2/health/ready",
    )


def _triton(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    served: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    cfg = spec.runtime.triton
    assert cfg is not None
    http, grpc, metrics = TRITON_PORTS
    bind = _bind(spec)
    uses_grpc = cfg.protocol == "grpc"
    args = (
        f"--model-repository={layout.path}",
        f"--http-port={http}",
        f"--http-address={bind}",
        f"--grpc-port={grpc}",
        f"--grpc-address={bind}",
        f"--metrics-port={metrics}",
        f"--allow-grpc={'true' if uses_grpc else 'false'}",
    )
    return RuntimePlan(
        kind="triton",
        image=cfg.image or images.triton,
        protocol="triton-grpc" if uses_grpc else "kserve-v2",
        command=("tritonserver",),
        args=args,
        env=_home(),
        http_port=http,
        grpc_port=grpc if uses_grpc else None,
        health_path="/v2/health/ready",
    )


def _generic(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    served: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    cfg = spec.runtime.generic
    assert cfg is not None
    grpc = cfg.protocol in GRPC_PROTOCOLS
    env = (("MODEL_PATH", layout.path), ("MODEL_NAME", served), *_home())
    return RuntimePlan(
        kind="generic",
        image=cfg.image,
        protocol=cfg.protocol,
        command=tuple(cfg.command),
        args=tuple(cfg.args),
        env=env,
        http_port=None if grpc else cfg.port,
        grpc_port=cfg.port if grpc else None,
        health_path=None if grpc else cfg.health_path,
    )


def _home() -> tuple[tuple[str, str], ...]:
    # Python servers write caches under $HOME; the root filesystem is read-only.
    return (("HOME", "/tmp"),)
