"""Where a deployment's model lands in its pod, and the download that puts it there. Pure.

A model is downloaded once into the cache volume by `longrun-fetch` (the init container),
under a directory named by a hash of its source (and sha256, and file patterns), so two
deployments of the same model share a PVC's copy and a changed source never reuses a stale
one. A pvc:// source is used in place. What each runtime loads from there (a file, a Triton
repository, a Hugging Face repository) is decided here; runtimes.py plans the server around it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from contracts.serving import DIRECTORY_FORMATS, ModelDeploymentSpec, ModelSpec, parse_source
from controller.core.names import short_hash

CACHE_MOUNT = "/models"
SOURCE_MOUNT = "/mnt/source"
CREDENTIALS_MOUNT = "/var/run/longrun/model-credentials"
KEEP_EXTENSIONS = {"sklearn": (".joblib", ".pkl", ".pickle"), "xgboost": (".bst", ".json", ".ubj")}


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


def model_layout(spec: ModelDeploymentSpec, model: ModelSpec, served_name: str) -> ModelLayout:
    """Where the model lands in the pod, and the init container's arguments to put it there."""
    source = parse_source(model.source)
    triton_copy = spec.runtime.kind == "triton" and model.format == "onnx"
    if source.scheme == "pvc" and not triton_copy:
        path = f"{SOURCE_MOUNT}/{source.where}/{source.path}".rstrip("/")
        verify = (model.source, path, "--sha256", model.sha256) if model.sha256 else ()
        return ModelLayout(path, verify, uses_cache=False, source_claim=source.where)
    root = f"{CACHE_MOUNT}/{short_hash(source.key + (model.sha256 or '') + _patterns(model), 12)}"
    dest, path = _cache_paths(spec, model, root, source.file_name, served_name)
    args = [model.source, dest]
    if model.sha256:
        args += ["--sha256", model.sha256.lower()]
    for pattern in model.include or ():
        args += ["--include", pattern]
    for pattern in model.exclude or ():
        args += ["--exclude", pattern]
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
    if model.format in DIRECTORY_FORMATS:
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


def _patterns(model: ModelSpec) -> str:
    """The file patterns' part of the cache key ("" without: older caches keep their path)."""
    if model.include is None and model.exclude is None:
        return ""
    return f"|include={model.include or []}|exclude={model.exclude or []}"
