"""Where a model comes from and what it is: source URIs, formats, tasks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
)

from contracts.base import (
    DNS_SUBDOMAIN,
)

ModelFormat = Literal["gguf", "sklearn", "xgboost", "onnx", "triton-repository"]
Task = Literal["chat-completion", "completion", "embeddings", "predict"]
RuntimeKind = Literal["llamacpp", "kserve", "mlserver", "triton", "generic"]
DeploymentPhase = Literal[
    "Pending", "Downloading", "Deploying", "Running", "Updating", "Idle", "Failed", "Terminating"
]
# Change this annotation's value on a ModelDeployment (any new value) to get new API keys:
#   kubectl annotate mdep NAME longrun.dev/rotate-api-keys="$(date +%s)" --overwrite
ROTATE_KEYS_ANNOTATION = "longrun.dev/rotate-api-keys"
# Keys of the API-key Secret: the first key (what runs send), and every key, one a line.
API_KEY_SECRET_KEY = "api-key"
API_KEYS_SECRET_KEY = "api-keys"
# Formats each runtime loads, and the tasks it serves (generic: anything).
RUNTIME_FORMATS: dict[str, tuple[str, ...]] = {
    "llamacpp": ("gguf",),
    "kserve": ("sklearn", "xgboost"),
    "mlserver": ("sklearn", "xgboost"),
    "triton": ("onnx", "triton-repository"),
}
GENERATIVE_TASKS = ("chat-completion", "completion", "embeddings")
HTTP_NEEDS_SHA = (
    "source: an http:// source needs sha256 (plain HTTP is not authenticated); set sha256 "
    "or use https://"
)
SOURCE_HELP = (
    "use s3://bucket/key, hf://org/repo[/file][@revision], https://host/path or pvc://claim/path"
)
_SOURCE = {
    "s3": re.compile(r"^s3://(?P<where>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<path>\S+)$"),
    "hf": re.compile(
        r"^hf://(?P<where>[\w.-]+/[\w.-]+)(/(?P<path>[^@\s]+))?(@(?P<rev>[\w./-]+))?$"
    ),
    "https": re.compile(r"^https://(?P<where>[^/\s@]+)(?P<path>/\S*)?$"),
    "http": re.compile(r"^http://(?P<where>[^/\s@]+)(?P<path>/\S*)?$"),
    "pvc": re.compile(rf"^pvc://(?P<where>{DNS_SUBDOMAIN[1:-1]})/(?P<path>\S+)$"),
}

_SCHEME_HELP = {
    "s3": "use s3://bucket/key, with a bucket name of 3 to 63 characters (a-z, 0-9, '.', '-')",
    "hf": "use hf://org/repo, hf://org/repo/file or either with @revision",
    "https": "use https://host/path",
    "http": "use http://host/path (with sha256), or better https://",
    "pvc": "use pvc://claim/path, with the lowercase name of a PersistentVolumeClaim",
}


@dataclass(frozen=True)
class ModelSource:
    """A parsed `source` URI: scheme, bucket/org-repo/host/claim, path, and whether it is a
    directory (an S3 prefix ending in `/`, a whole Hugging Face repo, or a PVC path)."""

    scheme: str
    where: str
    path: str
    revision: str | None = None

    @property
    def is_directory(self) -> bool:
        """True when the source is a directory rather than one file."""
        if self.scheme == "pvc":
            return True
        return self.path == "" or self.path.endswith("/")

    @property
    def key(self) -> str:
        """The source's identity: Hugging Face's default revision is `main`, so
        hf://org/repo/f and hf://org/repo/f@main name the same file."""
        if self.scheme == "hf":
            return f"hf://{self.where}/{self.path}@{self.revision or 'main'}"
        return f"{self.scheme}://{self.where}/{self.path}"

    @property
    def file_name(self) -> str:
        """The last path segment ('' for a directory source)."""
        return "" if self.is_directory and self.scheme != "pvc" else self.path.rsplit("/", 1)[-1]


def parse_source(uri: str) -> ModelSource:
    """The parts of a model source URI; ValueError with the accepted forms otherwise."""
    for scheme, pattern in _SOURCE.items():
        if match := pattern.match(uri):
            path = (
                (match.group("path") or "").lstrip("/") if scheme != "hf" else match["path"] or ""
            )
            if ".." in path.split("/"):
                raise ValueError(f"{uri!r}: a source path may not contain '..'")
            rev = match.groupdict().get("rev")
            return ModelSource(scheme, match.group("where"), path, rev)
    scheme, _, rest = uri.partition("://")
    if scheme in ("http", "https") and "@" in rest.split("/", 1)[0]:
        raise ValueError(
            "a source must not contain credentials (user:password@): put them in a Secret and "
            "name it in credentials"
        )
    if scheme in _SCHEME_HELP:
        raise ValueError(f"{uri!r} is not a {scheme}:// source: {_SCHEME_HELP[scheme]}")
    raise ValueError(f"{uri!r} is not a model source: {SOURCE_HELP}")


def _check_source(uri: str) -> str:
    parse_source(uri)
    return uri


def default_task(format_: str) -> str:
    """The task a format serves when `task` is left out."""
    return "chat-completion" if format_ == "gguf" else "predict"


def format_problem(runtime: str, format_: str, task: str) -> str | None:
    """Why `runtime` cannot serve a model of `format_` for `task`, or None when it can."""
    formats = RUNTIME_FORMATS.get(runtime)
    if formats is not None and format_ not in formats:
        return f"runtime {runtime} serves format {' or '.join(formats)}, not {format_}"
    if runtime == "llamacpp" and task not in GENERATIVE_TASKS:
        return f"runtime llamacpp serves {', '.join(GENERATIVE_TASKS)}, not {task}"
    if runtime in RUNTIME_FORMATS and runtime != "llamacpp" and task != "predict":
        return f"runtime {runtime} serves task predict, not {task}"
    return None


SHA256_PATTERN = r"^[a-fA-F0-9]{64}$"


def _check_sha256(value: str) -> str:
    if not re.match(SHA256_PATTERN, value):
        raise ValueError("must be a SHA-256 digest: 64 hexadecimal digits")
    return value


Sha256 = Annotated[
    str,
    AfterValidator(_check_sha256),
    Field(json_schema_extra={"pattern": SHA256_PATTERN}),
]
