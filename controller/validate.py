"""Offline validation of InferenceConfig/InferenceRun YAML (`longrun validate`).

The same pydantic models and semantic checks the controller uses, so a file
that passes here is accepted by the controller. Every problem is reported as
`<file>: <Kind>/<name>: <field path>: <what is wrong>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from contracts.base import DNS_LABEL, DNS_SUBDOMAIN, SECRET_KEY
from contracts.config import InferenceConfigSpec
from contracts.model import BUILTIN_PROTOCOLS, PROTOCOL_PATTERN
from contracts.resources import (
    API_VERSION,
    KRATEO_API_VERSION,
    InferenceConfig,
    InferenceRun,
    parse_resource,
    resource_models,
)
from controller.core.podpolicy import PodPolicy, pod_problems
from controller.core.settings import Settings
from controller.core.validation import Problem, image_problem, run_spec_problems

YAML_SUFFIXES = (".yaml", ".yml", ".json")
PATTERN_HINTS = {
    DNS_SUBDOMAIN: "must be a lowercase RFC 1123 name: a-z, 0-9, '-' and '.', "
    "starting and ending with a letter or digit",
    DNS_LABEL: "must be a lowercase RFC 1123 label: a-z, 0-9 and '-', "
    "starting and ending with a letter or digit, at most 63 characters",
    SECRET_KEY: "must be a Secret key: letters, digits, '-', '_' and '.'",
    PROTOCOL_PATTERN: "must be one of "
    + ", ".join(BUILTIN_PROTOCOLS)
    + ", or a custom runner's protocol named <domain>/<name>",
}


@dataclass(frozen=True)
class Finding:
    """One problem in one object of one file."""

    file: str
    object: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.object}" if self.object else self.file
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


@dataclass(frozen=True)
class Checked:
    """A longrun object that was checked, with its problems (none when valid)."""

    file: str
    object: str
    findings: list[Finding]


def expand_paths(paths: Iterable[str]) -> list[Path]:
    """Files named directly, plus YAML/JSON files found under directories (sorted).

    Raises FileNotFoundError naming a path that does not exist.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
    return files


def check_file(path: Path, *, settings: Settings | None = None) -> list[Checked]:
    """Check every longrun object in a (multi-document) YAML file; other kinds are skipped.

    `settings` are the controller's (allow-lists); the defaults when not given.
    """
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        return [Checked(str(path), "", [Finding(str(path), "", "", f"not valid YAML: {exc}")])]
    return [
        check_document(doc, file=str(path), settings=settings or Settings())
        for doc in _longrun_docs(docs)
    ]


def _longrun_docs(docs: list[Any]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") in resource_models():
            yield doc


def check_document(doc: dict[str, Any], *, file: str, settings: Settings) -> Checked:
    """Check one InferenceConfig or InferenceRun document."""
    meta = doc.get("metadata")
    label = f"{doc.get('kind')}/{_name(meta)}"
    if doc.get("apiVersion") == KRATEO_API_VERSION:
        hint = f"this is Krateo's API; change apiVersion to {API_VERSION}"
        return Checked(file, label, [Finding(file, label, "apiVersion", hint)])
    try:
        resource = parse_resource(doc)
    except ValidationError as exc:
        return Checked(file, label, [_finding(err, file=file, label=label) for err in exc.errors()])
    problems: list[Problem] = []
    if isinstance(resource, InferenceRun):  # the serving kinds' models check them fully
        problems = run_spec_problems(resource.spec)
    elif isinstance(resource, InferenceConfig):
        problems = config_spec_problems(resource.spec, settings)
    return Checked(file, label, [Finding(file, label, p.field, p.message) for p in problems])


def _name(meta: Any) -> str:
    """The object's name; `prefix*` for one the API server names (`generateName`)."""
    if not isinstance(meta, dict):
        return "?"
    if meta.get("name"):
        return str(meta["name"])
    return f"{meta['generateName']}*" if meta.get("generateName") else "?"


def config_spec_problems(spec: InferenceConfigSpec, settings: Settings) -> list[Problem]:
    """What the controller refuses in a config whatever the run: image and pod knobs."""
    image = image_problem(
        spec.image or settings.default_runner_image, allowed=settings.allowed_images
    )
    return [*([image] if image else []), *pod_problems(spec, PodPolicy.of(settings))]


def _finding(error: Any, *, file: str, label: str) -> Finding:
    path = _field_path(error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "literal_error" and path == "apiVersion":
        message = f"must be {API_VERSION}"
    elif error["type"] == "string_pattern_mismatch":
        message = PATTERN_HINTS.get(error["ctx"]["pattern"], message)
    elif error["type"] == "missing":
        message = "required field is missing"
    elif error["type"] == "extra_forbidden":
        message = "unknown field (check its spelling and indentation)"
    return Finding(file, label, path, message)


def _field_path(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as a Kubernetes-style field path: spec.pod.env[0].name."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and "[" in part and "(" in part:
            continue  # validator wrappers such as function-after[...]
        else:
            path += f".{part}" if path else str(part)
    return path
