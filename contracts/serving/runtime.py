"""The runtimes a ModelDeployment can serve on (a one-key map, like storage blocks)."""

from __future__ import annotations

from typing import Annotated, Literal, cast

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from contracts.base import (
    Schema,
    cel,
)
from contracts.model import Protocol
from contracts.serving.model import (
    Arg,
)
from contracts.serving.serverflags import LLAMA_CPP
from contracts.serving.sources import (
    RuntimeKind,
)
from contracts.serving.text import UrlPath

Image = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
_IMAGE_DOC = "Image override; default: the controller's image for this runtime (a chart value)."


LLAMA_ARGS_REFUSED = (
    "extraArgs may not set the model source, served name, API keys, listen address, TLS, "
    "server-side files, tools or RPC (docs/serving.md lists the flags)"
)


def _check_llama_args(args: list[str]) -> list[str]:
    # Matched as llama.cpp reads them: `--api_key` is `--api-key` (contracts/serving/serverflags).
    for arg in args:
        if problem := LLAMA_CPP.arg_problem(arg, field="extraArgs"):
            raise ValueError(problem)
    return args


class LlamaCppRuntime(Schema):
    """llama.cpp's server: generative models (GGUF), OpenAI-compatible API, enforces API keys."""

    image: Image | None = Field(default=None, description=_IMAGE_DOC)
    context_size: int | None = Field(
        default=None, ge=128, le=1_048_576, description="Context window in tokens (--ctx-size)."
    )
    parallel_slots: int = Field(
        default=1, ge=1, le=256, description="Requests served at once (--parallel)."
    )
    gpu_layers: int | None = Field(
        default=None,
        ge=-1,
        le=100_000,
        description="Layers on the GPU (--n-gpu-layers); default: all with a GPU, else 0.",
    )
    extra_args: Annotated[list[Arg], AfterValidator(_check_llama_args)] = Field(
        default_factory=list,
        max_length=64,
        description="More llama-server flags, appended as given (not the ones longrun sets).",
        json_schema_extra=cel(LLAMA_CPP.cel_arg_rule(), LLAMA_ARGS_REFUSED),
    )


class KServeRuntime(Schema):
    """KServe's Python model server (sklearn or xgboost), protocol v1 or v2."""

    image: Image | None = Field(default=None, description=_IMAGE_DOC)
    protocol: Literal["v1", "v2"] = Field(
        default="v2", description="Protocol runs use: v1 (kserve-v1) or v2 (kserve-v2)."
    )


class MLServerRuntime(Schema):
    """Seldon MLServer (sklearn or xgboost), Open Inference Protocol (v2)."""

    image: Image | None = Field(default=None, description=_IMAGE_DOC)
    parallel_workers: int = Field(
        default=0,
        ge=0,
        le=64,
        description="MLServer's parallel_workers; 0 (in-process) is fastest for small models.",
    )


class TritonRuntime(Schema):
    """NVIDIA Triton Inference Server (ONNX or a model repository)."""

    image: Image | None = Field(default=None, description=_IMAGE_DOC)
    protocol: Literal["http", "grpc"] = Field(
        default="http", description="Protocol runs use: http (kserve-v2) or grpc (triton-grpc)."
    )


class GenericRuntime(Schema):
    """Any server image; the model's local path is in $(MODEL_PATH)."""

    image: Image = Field(description="Server image.")
    command: list[Arg] = Field(default_factory=list, max_length=64, description="Entrypoint.")
    args: list[Arg] = Field(
        default_factory=list, max_length=256, description="Arguments; may use $(MODEL_PATH)."
    )
    port: int = Field(ge=1, le=65535, description="Port the server listens on (HTTP or gRPC).")
    protocol: Protocol = Field(description="Protocol runs use, e.g. openai-chat or kserve-v2.")
    health_path: UrlPath | None = Field(
        default=None, description="HTTP path of the readiness probe; default: a TCP probe."
    )


class RuntimeSpec(Schema):
    """A one-key map `{<runtime>: {...}}`: which server runs the model."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})

    llamacpp: LlamaCppRuntime | None = Field(default=None, description="llama.cpp's server.")
    kserve: KServeRuntime | None = Field(default=None, description="KServe's model server.")
    mlserver: MLServerRuntime | None = Field(default=None, description="Seldon MLServer.")
    triton: TritonRuntime | None = Field(default=None, description="NVIDIA Triton.")
    generic: GenericRuntime | None = Field(default=None, description="Any server image.")

    @model_validator(mode="after")
    def _exactly_one(self) -> RuntimeSpec:
        kinds = [k for k in type(self).model_fields if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"set exactly one runtime (found: {', '.join(kinds) or 'none'})")
        return self

    @property
    def kind(self) -> RuntimeKind:
        """The runtime's name, e.g. llamacpp."""
        kind = next(k for k in type(self).model_fields if getattr(self, k) is not None)
        return cast(RuntimeKind, kind)

    def body(self) -> Schema:
        """The runtime's settings."""
        value = getattr(self, self.kind)
        assert isinstance(value, Schema)
        return value
