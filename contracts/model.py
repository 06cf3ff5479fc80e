"""The model endpoint block, and Krateo's `kserve` block that is accepted as its alias.

A config names its model either with `model` (longrun's normalized block, every
protocol) or with Krateo's `kserve` block (KServe v1/v2 only). `normalize_kserve`
turns the latter into the former so the rest of the system sees one shape.

A config's `model` block (`ModelBlock`) names the server either by `url` (with
`protocol` and `name`) or by `deploymentRef`, a ModelDeployment whose status gives the
URL, protocol, model name and API-key Secret. The contract a runner reads always has
the resolved form (`ModelEndpoint`: url, protocol and name required), so runners and
their plug-ins never see a deploymentRef.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from contracts.auth import ApiKeyAuth
from contracts.base import ModelUrl, NamespaceName, ObjectName, Schema, SecretKeyRef, cel
from contracts.llm import model_problem, protocol_problem

# The built-in protocols: name -> the runner's ModelClientFactory ("module:Class", imported by
# the runner only when a contract uses it). The runner's registry and the CRD's pattern read it.
BUILTIN_PROTOCOLS: dict[str, str] = {
    "kserve-v1": "runners.models.kserve:KServeV1Client",
    "kserve-v2": "runners.models.kserve:KServeV2Client",
    "triton-grpc": "runners.models.triton_grpc:TritonGrpcClient",
    "openai-chat": "runners.models.openai:ChatClient",
    "openai-completions": "runners.models.openai:CompletionsClient",
    "openai-embeddings": "runners.models.openai:EmbeddingsClient",
}
# A built-in protocol, or a third-party one installed in a custom runner image and named
# `<domain>/<name>` so it can never collide with a future built-in.
PROTOCOL_PATTERN = (
    "^(" + "|".join(BUILTIN_PROTOCOLS) + r"|[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9][-a-z0-9]*)$"
)
Protocol = Annotated[str, StringConstraints(pattern=PROTOCOL_PATTERN, max_length=253)]
TensorDatatype = Literal["BOOL", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES"]
Url = ModelUrl  # http(s)://, grpc(s)://, or no scheme (http, or host:port for gRPC); no user@


class TlsOptions(Schema):
    """TLS settings for an HTTPS or gRPC-over-TLS endpoint."""

    ca_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a PEM CA bundle used to verify the server.",
    )
    insecure_skip_verify: bool = Field(
        default=False,
        description="Skip server certificate verification (testing only).",
    )


ModelName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
_PROTOCOL_DOC = (
    "Wire protocol spoken by the model server: kserve-v1, kserve-v2, triton-grpc, "
    "openai-chat, openai-completions, openai-embeddings, or a protocol a custom runner "
    "image registers, named <domain>/<name> (e.g. acme.com/scoring)."
)
_URL_DOC = (
    "Base URL of the model server, e.g. http://iris.models.svc:8080 (gRPC: host:port). "
    "A full inference URL (.../v2/models/NAME/infer, .../v1/models/NAME:predict, "
    ".../v1/chat/completions) is accepted too. A URL without a scheme gets http://."
)
_NAME_DOC = "Model name as the server knows it (the `model` field for OpenAI protocols)."


class _EndpointFields(Schema):
    """What the config's `model` block and the contract's share: how to call the model."""

    protocol: Protocol | None = Field(
        default=None,
        description=f"{_PROTOCOL_DOC} Not with deploymentRef.",
    )
    url: Url | None = Field(
        default=None,
        description=f"{_URL_DOC} Set this or deploymentRef.",
    )
    name: ModelName | None = Field(
        default=None,
        description=f"{_NAME_DOC} Not with deploymentRef.",
    )
    version: Annotated[str, StringConstraints(max_length=63)] | None = Field(
        default=None,
        description="Model version, for servers that serve several (KServe v2).",
    )
    input_name: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None,
        description="Input tensor name for KServe v2 / Triton (default: input-0).",
    )
    input_datatype: TensorDatatype | None = Field(
        default=None,
        description=(
            "Input tensor datatype for KServe v2 / Triton (default: FP32). Numeric types take "
            "numbers, numeric strings and booleans (as 1 and 0), integer types whole numbers "
            "only; a record whose values do not fit fails on its own (to the error output)."
        ),
    )
    output_names: list[Annotated[str, StringConstraints(max_length=253)]] | None = Field(
        default=None,
        max_length=32,
        description="Output tensors to request (KServe v2 / Triton); default: all outputs.",
    )
    input_fields: list[Annotated[str, StringConstraints(max_length=253)]] | None = Field(
        default=None,
        max_length=4096,
        description=(
            "Record fields sent to the model, in order. Default: every field except the id "
            "field (tensor protocols) or `promptField` (OpenAI protocols)."
        ),
    )
    prompt_field: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None,
        description=(
            "OpenAI protocols: record field holding the prompt or text (default: prompt, when "
            "neither messagesField nor bodyField is set)."
        ),
    )
    messages_field: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = Field(
        default=None,
        description=(
            "openai-chat: record field holding the request's `messages` array (or JSON text "
            "of it), for multi-turn conversations; systemPrompt, when set, goes first."
        ),
    )
    body_field: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = Field(
        default=None,
        description=(
            "OpenAI protocols: record field holding a whole request body (an object, or JSON "
            "text of one), merged over `body`; a `model` in it must be model.name."
        ),
    )
    body: dict[str, Any] | None = Field(
        default=None,
        description=(
            "OpenAI protocols: a JSON object merged into every request body: any parameter the "
            "endpoint takes (response_format, tools, stop, seed, max_tokens, ...). Not model "
            "(model.name says it), stream, nor what each record gives (messages, prompt, input). "
            "maxTokens and temperature are shortcuts for its max_tokens and temperature."
        ),
    )
    system_prompt: Annotated[str, StringConstraints(max_length=65536)] | None = Field(
        default=None, description="openai-chat: system message sent before each prompt."
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="OpenAI protocols: max tokens per answer.",
    )
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="OpenAI protocols: sampling temperature."
    )
    binary_data: bool | None = Field(
        default=None,
        description=(
            "KServe v2: use the binary tensor extension (default: asks the server, on for "
            "Triton and KServe 0.14+)."
        ),
    )
    timeout_seconds: float = Field(
        default=60,
        gt=0,
        le=3600,
        description="Timeout for one inference request, in seconds.",
    )
    auth: ApiKeyAuth | None = Field(
        default=None,
        description="Authentication: an API key from a Secret, or a ServiceAccount token.",
    )
    tls: TlsOptions | None = Field(default=None, description="TLS options.")

    @model_validator(mode="after")
    def _body_settings(self) -> _EndpointFields:
        problem = model_problem(self)
        if problem is None and self.protocol is not None:
            problem = protocol_problem(self, self.protocol)
        if problem is not None:
            raise ValueError(problem)
        return self


class ModelEndpoint(_EndpointFields):
    """Which model to call and how: the contract's model block (always resolved)."""

    protocol: Protocol = Field(description=_PROTOCOL_DOC)
    url: Url = Field(description=_URL_DOC)
    name: ModelName = Field(description=_NAME_DOC)


class DeploymentRef(Schema):
    """A ModelDeployment (or an InferenceModel: a fleet of external hosts) whose endpoint a
    config uses."""

    name: ObjectName = Field(description="Name of the ModelDeployment (or InferenceModel).")
    namespace: NamespaceName | None = Field(
        default=None,
        description=(
            "Namespace of the ModelDeployment; default: the config's. Another namespace works "
            "only if that deployment lists the run's namespace in spec.allowedNamespaces."
        ),
    )
    kind: Literal["ModelDeployment", "InferenceModel"] = Field(
        default="ModelDeployment",
        description=(
            "ModelDeployment (served by longrun's pods) or InferenceModel (served by external "
            "hosts, docs/serving.md)."
        ),
    )


DEPLOYMENT_REF_EXCLUSIVE = (
    "deploymentRef: takes protocol, name and tls from the deployment; leave them out"
)


class ModelBlock(_EndpointFields):
    """Which model to call and how: a `url` (with `protocol` and `name`), or a
    `deploymentRef` to a ModelDeployment, which gives the URL, protocol, name and key."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.url) != has(self.deploymentRef)",
            "set exactly one of url and deploymentRef",
            "!has(self.url) || (has(self.protocol) && has(self.name))",
            "url: needs protocol and name",
            "!has(self.deploymentRef) || (!has(self.protocol) && !has(self.name) && "
            "!has(self.tls))",
            DEPLOYMENT_REF_EXCLUSIVE,
        )
    )

    deployment_ref: DeploymentRef | None = Field(
        default=None,
        description=(
            "A ModelDeployment serving the model: its status gives url, protocol, name and the "
            "API-key Secret (auth, unless set here). Runs wait while it is not Available."
        ),
    )

    @model_validator(mode="after")
    def _one_target(self) -> ModelBlock:
        if (self.url is None) == (self.deployment_ref is None):
            raise ValueError("set exactly one of url and deploymentRef")
        if self.url is not None and (self.protocol is None or self.name is None):
            raise ValueError("url: needs protocol and name")
        if self.deployment_ref is not None and (
            self.protocol is not None or self.name is not None or self.tls is not None
        ):
            raise ValueError(DEPLOYMENT_REF_EXCLUSIVE)
        return self

    def endpoint(self) -> ModelEndpoint:
        """The block as the contract's endpoint; a deploymentRef must be resolved first
        (`with_target`)."""
        if self.deployment_ref is not None:
            raise ValueError("model.deploymentRef is not resolved")
        return ModelEndpoint.model_validate(
            self.model_dump(exclude={"deployment_ref"}, exclude_none=True)
        )

    def with_target(
        self, *, url: str, protocol: str, name: str, auth: ApiKeyAuth | None
    ) -> ModelBlock:
        """The block with its deploymentRef replaced by what the deployment says."""
        fields = self.model_dump(exclude={"deployment_ref"}, exclude_none=True)
        fields.update(url=url, protocol=protocol, name=name)
        if self.auth is None and auth is not None:
            fields["auth"] = auth.model_dump(exclude_none=True)
        return ModelBlock.model_validate(fields)


class KServeBlock(Schema):
    """Krateo kserve-controller's model block, kept for compatibility."""

    model_name: Annotated[str, StringConstraints(min_length=1, max_length=253)] = Field(
        description="Model name as served by KServe."
    )
    model_url: Url = Field(
        description=(
            "Krateo style inference URL, usually without scheme, e.g. "
            "sklearn-iris-predictor.ns.svc.cluster.local/v2/models/sklearn-iris/infer."
        )
    )
    model_version: Literal["v1", "v2"] = Field(
        default="v2",
        description="KServe protocol version: v1 or v2 (Open Inference Protocol).",
    )
    model_input_name: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None, description="Input tensor name (v2)."
    )


def normalize_kserve(block: KServeBlock) -> ModelEndpoint:
    """Krateo's `kserve` block expressed as longrun's `model` block."""
    return ModelEndpoint(
        protocol="kserve-v1" if block.model_version == "v1" else "kserve-v2",
        url=block.model_url,
        name=block.model_name,
        input_name=block.model_input_name,
    )


def kserve_view(model: ModelEndpoint) -> KServeBlock | None:
    """The Krateo `kserve` contract block for a KServe model, so Krateo runners work."""
    if model.protocol not in ("kserve-v1", "kserve-v2"):
        return None
    return KServeBlock(
        model_name=model.name,
        model_url=model.url,
        model_version="v1" if model.protocol == "kserve-v1" else "v2",
        model_input_name=model.input_name,
    )
