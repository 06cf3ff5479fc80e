"""What each runtime needs: image, command line, ports, health endpoint, protocol, and whether
it checks API keys itself.

This is the one table of runtime knowledge. The pod builder turns a `RuntimePlan` into a
container; status reads its protocol; local mode (`longrun serve`) maps the same plan to a
local command (llama-cpp-python's server, vLLM's CPU build, KServe's Python server, MLServer,
PyTriton). The images are the runtimes' public images by default and chart values in a
cluster.

Where an nginx sidecar checks the keys, the runtime is bound to 127.0.0.1 when it can be
(MLServer's `MLSERVER_HOST`, Triton's `--http-address`), so nothing reaches it unchecked;
KServe's server and generic images always listen on every address, and a NetworkPolicy
(see network.py) keeps their port closed from outside the pod.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, replace

from contracts.serving import (
    API_KEYS_SECRET_KEY,
    ModelDeploymentSpec,
    ModelSpec,
    RuntimeKind,
)
from controller.core.serving.layout import ModelLayout

KEYS_MOUNT = "/etc/longrun/keys"
LOOPBACK = "127.0.0.1"
# Only where the runtime checks keys itself, or cannot bind elsewhere (a NetworkPolicy guards).
ANY_ADDRESS = "0.0.0.0"
HTTP_PORT = 8080
GRPC_PORT = 8081
TRITON_PORTS = (8000, 8001, 8002)  # http, grpc, metrics
MLSERVER_METRICS_PORT = 8082
METRICS_PATH = "/metrics"  # every runtime's Prometheus path
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


@dataclass(frozen=True)
class ServingImages:
    """Default images per runtime (chart values). Tags are the runtimes' public releases."""

    llamacpp: str = "ghcr.io/ggml-org/llama.cpp:server"
    llamacpp_cuda: str = "ghcr.io/ggml-org/llama.cpp:server-cuda"
    # vLLM's OpenAI server: the CUDA image (with GPUs) and its x86 CPU build (without).
    vllm: str = "vllm/vllm-openai:v0.32.0"
    vllm_cpu: str = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0"
    kserve_sklearn: str = "kserve/sklearnserver:v0.14.1"
    kserve_xgboost: str = "kserve/xgbserver:v0.14.1"
    mlserver: str = "seldonio/mlserver:1.7.1"
    triton: str = "nvcr.io/nvidia/tritonserver:24.10-py3"
    auth_proxy: str = "nginxinc/nginx-unprivileged:1.27-alpine"

    def defaults(self) -> frozenset[str]:
        """Every default image (always allowed, whatever the allow-list says)."""
        return frozenset(vars(self).values())


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
    shm_size: str | None = None  # a memory-backed /dev/shm of this size limit (vLLM)
    metrics_port: int | None = None  # where the runtime answers METRICS_PATH (None: nowhere)

    @property
    def is_grpc(self) -> bool:
        """True when runs speak gRPC to this deployment."""
        return self.protocol in GRPC_PROTOCOLS


def needs_auth_proxy(spec: ModelDeploymentSpec, *, metrics: bool = False) -> bool:
    """True when the nginx sidecar checks callers: tokens are accepted (only the sidecar's
    verifier checks them), or keys are on and the runtime cannot check them, or the sidecar
    also serves the runtime's metrics without a key (llama.cpp would ask for one)."""
    if spec.auth.tokens:
        return True
    return spec.auth.keys and (spec.runtime.kind not in ENFORCES_KEYS or metrics)


def plan_runtime(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    *,
    served_name: str,
    layout: ModelLayout,
    images: ServingImages,
    metrics: bool = False,
) -> RuntimePlan:
    """The server container's plan for this deployment's runtime; with `metrics` (the
    controller's SERVING_METRICS) the sidecar checks the keys of every runtime."""
    build = {
        "llamacpp": _llamacpp,
        "vllm": _vllm,
        "kserve": _kserve,
        "mlserver": _mlserver,
        "triton": _triton,
        "generic": _generic,
    }[spec.runtime.kind]
    plan = build(spec, model, served_name, layout, images)
    if plan.kind == "llamacpp" and needs_auth_proxy(spec, metrics=metrics):
        return _behind_sidecar(plan)
    return plan


def _behind_sidecar(plan: RuntimePlan) -> RuntimePlan:
    """llama.cpp with its callers checked by the sidecar: no key file, listening on loopback."""
    args = list(plan.args)
    if "--api-key-file" in args:
        at = args.index("--api-key-file")
        del args[at : at + 2]
    args[args.index("--host") + 1] = LOOPBACK
    return replace(plan, args=tuple(args), enforces_keys=False, key_file=None)


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
    key_file = f"{KEYS_MOUNT}/{API_KEYS_SECRET_KEY}" if spec.auth.keys else None
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
        metrics_port=HTTP_PORT,  # --metrics
    )


def _vllm(
    spec: ModelDeploymentSpec,
    model: ModelSpec,
    served: str,
    layout: ModelLayout,
    images: ServingImages,
) -> RuntimePlan:
    # `vllm serve DIR`: the Hugging Face repository in the cache, behind the sidecar (vLLM's
    # own --api-key guards only /v1, /v2, /inference and /cohere: /pooling, /score,
    # /invocations and the rest would answer without a key). Nothing is downloaded by the
    # server (HF_HUB_OFFLINE) and no usage statistics leave the pod.
    cfg = spec.runtime.vllm
    assert cfg is not None
    gpus = _gpus(spec)
    args = [layout.path, "--served-model-name", served, "--host", _bind(spec)]
    args += ["--port", str(HTTP_PORT), "--disable-uvicorn-access-log"]
    tensor_parallel = cfg.tensor_parallel_size or gpus
    typed = (
        ("--tensor-parallel-size", tensor_parallel or None),
        ("--max-model-len", cfg.max_model_len),
        ("--gpu-memory-utilization", cfg.gpu_memory_utilization),
        ("--dtype", cfg.dtype),
        ("--quantization", cfg.quantization),
        ("--kv-cache-dtype", cfg.kv_cache_dtype),
        ("--max-num-seqs", cfg.max_num_seqs),
    )
    args += [str(a) for flag, value in typed if value is not None for a in (flag, value)]
    if cfg.enable_prefix_caching is not None:
        args.append(f"--{'' if cfg.enable_prefix_caching else 'no-'}enable-prefix-caching")
    if model.resolved_task() == "embeddings":
        args += ["--runner", "pooling"]
    env = (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("VLLM_NO_USAGE_STATS", "1"),
        ("DO_NOT_TRACK", "1"),
        *_home(),
    )
    return RuntimePlan(
        kind="vllm",
        image=cfg.image or (images.vllm if gpus else images.vllm_cpu),
        protocol=LLAMA_TASK_PROTOCOLS[model.resolved_task()],
        command=("vllm", "serve"),
        args=(*args, *cfg.extra_args),
        env=env,
        health_path="/health",
        shm_size=str(cfg.shm_size),
        metrics_port=HTTP_PORT,
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
        metrics_port=HTTP_PORT,
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
        ("MLSERVER_METRICS_PORT", str(MLSERVER_METRICS_PORT)),
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
        metrics_port=MLSERVER_METRICS_PORT,
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
        metrics_port=metrics,
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
