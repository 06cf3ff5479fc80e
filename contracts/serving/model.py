"""The Model resource: a reusable model definition."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from contracts.base import (
    Condition,
    NamespaceName,
    ObjectName,
    Schema,
    SecretReference,
    cel,
)
from contracts.run import LIST_MAP_BY_TYPE
from contracts.serving.sources import (
    DIRECTORY_FORMATS,
    GENERATIVE_FORMATS,
    HTTP_NEEDS_SHA,
    SOURCE_HELP,
    ModelFormat,
    ModelSource,
    Sha256,
    Task,
    _check_source,
    default_task,
    parse_source,
)
from contracts.serving.text import EndpointUrl

ShortText = Annotated[str, StringConstraints(min_length=1, max_length=253)]
Arg = Annotated[str, StringConstraints(max_length=4096)]


class ModelCredentials(SecretReference):
    """A Secret mounted read-only into the download init container (see docs/serving.md for the
    keys it reads: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, HF_TOKEN,
    BEARER_TOKEN). Values never leave the Secret."""

    name: ObjectName = Field(description="Name of a Secret in the ModelDeployment's namespace.")


# CEL for "the source is a directory" (ModelSource.is_directory, pvc:// aside).
_CEL_DIRECTORY = "self.source.endsWith('/') || self.source.matches('^hf://[^/]+/[^/@]+(@.*)?$')"
HF_NEEDS_DIRECTORY = (
    "source: format hf needs a directory (a Hugging Face repository): hf://org/repo[@revision], "
    "s3://bucket/prefix/ or pvc://claim/path"
)
TASK_FOR_FORMAT = (
    "task: gguf and hf serve chat-completion, completion or embeddings; other formats predict"
)
PATTERNS_NEED_DIRECTORY = (
    "include and exclude: apply to a downloaded directory (hf://org/repo, s3://bucket/prefix/)"
)
# A file pattern of a repository: a glob on the path inside it (`*.safetensors`, `onnx/*`).
FilePattern = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^/\s]")]


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


# The CEL rules of a Model's spec (each mirrors a check of `_source_problem` or
# `_task_problem`), as rule, message pairs; catalog.py reuses them for an inline model.
MODEL_RULES: tuple[str, ...] = (
    "self.source.matches('^(s3|hf|https?|pvc)://.+')",
    f"source: {SOURCE_HELP}",
    "!self.source.matches('^https?://[^/]*@')",
    "source: must not contain credentials (user:password@): name a Secret in credentials",
    "!self.source.startsWith('http://') || has(self.sha256)",
    HTTP_NEEDS_SHA,
    "!has(self.endpointUrl) || self.source.startsWith('s3://')",
    "endpointUrl: applies to s3:// sources only",
    "!has(self.credentials) || !self.source.startsWith('pvc://')",
    "credentials: a pvc:// source is mounted, not downloaded, so it takes none",
    f"!has(self.sha256) || !({_CEL_DIRECTORY} || self.format in {_cel_list(DIRECTORY_FORMATS)})",
    "sha256: checks one file, but the source is a directory",
    f"self.format != 'triton-repository' || self.source.startsWith('pvc://') || {_CEL_DIRECTORY}",
    "source: format triton-repository needs a directory: s3://bucket/prefix/, "
    "hf://org/repo or pvc://claim/path",
    f"self.format != 'hf' || self.source.startsWith('pvc://') || {_CEL_DIRECTORY}",
    HF_NEEDS_DIRECTORY,
    f"self.format in {_cel_list(DIRECTORY_FORMATS)} || self.source.startsWith('pvc://') "
    f"|| !({_CEL_DIRECTORY})",
    "source: this format needs a source naming one file, not a directory",
    f"!has(self.task) || (self.format in {_cel_list(GENERATIVE_FORMATS)}) == "
    "(self.task != 'predict')",
    TASK_FOR_FORMAT,
    f"(!has(self.include) && !has(self.exclude)) || (!self.source.startsWith('pvc://') "
    f"&& ({_CEL_DIRECTORY}))",
    PATTERNS_NEED_DIRECTORY,
)


SourceUri = Annotated[str, StringConstraints(max_length=2048), AfterValidator(_check_source)]
SOURCE_DOC = (
    "Where the model is: s3://bucket/key (a prefix ending in / for a directory), "
    "hf://org/repo[/file][@revision] (Hugging Face; a repo without a file is a "
    "directory), https://host/path, or pvc://claim/path (used in place, read-only)."
)
FORMAT_DOC = (
    "gguf, hf (a Hugging Face repository: config, safetensors, tokenizer; a directory), "
    "sklearn (joblib), xgboost, onnx, or triton-repository (a directory)."
)


class ModelFields(Schema):
    """The fields of a model definition, each optional: a Model's spec requires `source` and
    `format` (ModelSpec); a deployment's inline `model` may instead name a catalog entry
    (contracts/serving/catalog.py)."""

    source: SourceUri | None = Field(default=None, description=SOURCE_DOC)
    credentials: ModelCredentials | None = Field(
        default=None,
        description="Secret with the credentials the download needs (S3 keys, HF_TOKEN, ...).",
    )
    endpoint_url: EndpointUrl | None = Field(
        default=None, description="s3:// sources: endpoint of an S3-compatible store (MinIO, ...)."
    )
    sha256: Sha256 | None = Field(
        default=None,
        description=(
            "Expected SHA-256 of the model file (64 hex digits): the download (or a pvc:// "
            "file, in place) is checked, and a cached file that matches is not downloaded "
            "again. A directory has none."
        ),
    )
    format: ModelFormat | None = Field(default=None, description=FORMAT_DOC)
    task: Task | None = Field(
        default=None,
        description=(
            "chat-completion, completion, embeddings (gguf, hf) or predict (the other formats). "
            "Default: chat-completion for gguf and hf, predict otherwise."
        ),
    )
    include: list[FilePattern] | None = Field(
        default=None,
        max_length=64,
        description=(
            "A directory source: download only the files matching one of these globs (on the "
            "path inside the directory, e.g. `*.safetensors`, `*.json`, `tokenizer*`; a pattern "
            "ending in / takes what is under it). Default: every file."
        ),
    )
    exclude: list[FilePattern] | None = Field(
        default=None,
        max_length=64,
        description=(
            "A directory source: leave out the files matching one of these globs (it wins "
            "over include), e.g. `*.bin`, `*.pt`, `original/`."
        ),
    )
    allowed_namespaces: list[NamespaceName] = Field(
        default_factory=list,
        max_length=256,
        description="Other namespaces whose ModelDeployments may reference this Model.",
    )


class ModelSpec(ModelFields):
    """Where a model lives and what it is: a reusable definition for ModelDeployments."""

    model_config = ConfigDict(json_schema_extra=cel(*MODEL_RULES))

    source: SourceUri = Field(description=SOURCE_DOC)
    format: ModelFormat = Field(description=FORMAT_DOC)

    @model_validator(mode="after")
    def _source_fits(self) -> ModelSpec:
        source = parse_source(self.source)
        if problem := _source_problem(self, source) or _task_problem(self):
            raise ValueError(problem)
        return self

    def resolved_task(self) -> str:
        """The task, defaulted from the format."""
        return self.task or default_task(self.format)


def _source_problem(model: ModelSpec, source: ModelSource) -> str | None:
    """Why the source does not fit the rest of the model, as `field: reason`."""
    copied = source.scheme != "pvc"  # a pvc:// source is used in place, file or directory
    wants_dir = model.format in DIRECTORY_FORMATS
    patterns = model.include is not None or model.exclude is not None
    problems = (
        (source.scheme == "http" and model.sha256 is None, HTTP_NEEDS_SHA),
        (
            model.endpoint_url is not None and source.scheme != "s3",
            "endpointUrl: applies to s3:// sources only",
        ),
        (
            model.credentials is not None and not copied,
            "credentials: a pvc:// source is mounted, not downloaded, so it takes none",
        ),
        (
            model.sha256 is not None and _names_directory(model, source),
            "sha256: checks one file, but the source is a directory",
        ),
        (
            model.format == "triton-repository" and not source.is_directory,
            "source: format triton-repository needs a directory: s3://bucket/prefix/, "
            "hf://org/repo or pvc://claim/path",
        ),
        (model.format == "hf" and not source.is_directory, HF_NEEDS_DIRECTORY),
        (
            not wants_dir and source.is_directory and copied,
            f"source: format {model.format} needs a source naming one file, not a directory",
        ),
        (patterns and not (source.is_directory and copied), PATTERNS_NEED_DIRECTORY),
    )
    return next((message for failed, message in problems if failed), None)


def _names_directory(model: ModelSpec, source: ModelSource) -> bool:
    """True when the source is known to be a directory: a downloaded one by its form, a
    pvc:// one (file or directory, used in place) when it ends in `/` or holds a Triton or a
    Hugging Face repository. `longrun-fetch` refuses a sha256 for a pvc:// path that turns out
    to be a directory."""
    if source.scheme != "pvc":
        return source.is_directory
    return source.path.endswith("/") or model.format in DIRECTORY_FORMATS


def _task_problem(model: ModelSpec) -> str | None:
    task = model.resolved_task()
    if model.format in GENERATIVE_FORMATS and task == "predict":
        return f"task: format {model.format} serves chat-completion, completion or embeddings"
    if model.format not in GENERATIVE_FORMATS and task != "predict":
        return f"task: format {model.format} serves predict only"
    return None


class ModelStatus(Schema):
    """What the controller observed about a Model."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the status was computed from."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Accepted: the source, format and task are usable.",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )


class ModelRef(Schema):
    """Which Model a deployment serves."""

    name: ObjectName = Field(description="Name of the Model.")
    namespace: NamespaceName | None = Field(
        default=None,
        description=(
            "Namespace of the Model; default: the deployment's. Another namespace works only if "
            "that Model lists the deployment's namespace in spec.allowedNamespaces."
        ),
    )
    generation: int | None = Field(
        default=None,
        ge=1,
        description=(
            "The Model generation this deployment accepts. A Model in another namespace is "
            "pinned at the generation the deployment first accepted; a later change reaches the "
            "deployment only when its owner sets this to the new generation "
            "(status.acceptedModel shows which)."
        ),
    )
