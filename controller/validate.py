"""Offline validation of InferenceConfig/InferenceRun YAML (`longrun validate`).

The same pydantic models and semantic checks the controller uses, so a file
that passes here is accepted by the controller. Every problem is reported as
`<file>: <Kind>/<name>: <field path>: <what is wrong>`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

from contracts.base import DNS_LABEL, DNS_SUBDOMAIN, SECRET_KEY
from contracts.config import InferenceConfigSpec
from contracts.fleets import ADMIN_PROTOCOL_PATTERN, BUILTIN_ADMIN_PROTOCOLS
from contracts.model import BUILTIN_PROTOCOLS, PROTOCOL_PATTERN
from contracts.resources import (
    API_VERSION,
    GROUP,
    KRATEO_API_VERSION,
    InferenceConfig,
    InferenceRun,
    parse_resource,
    resource_models,
)
from contracts.serving import ModelDeployment
from controller.core.kueue.policy import priority_problems
from controller.core.podpolicy import PodPolicy, pod_problems
from controller.core.serving.policy import static_problems
from controller.core.settings import Settings
from controller.core.validation import (
    Problem,
    image_problem,
    run_spec_problems,
    shared_output_problem,
)

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
    ADMIN_PROTOCOL_PATTERN: "must be one of "
    + ", ".join(BUILTIN_ADMIN_PROTOCOLS)
    + ", or a controller plug-in's admin protocol named <domain>/<name>",
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
    """Check every longrun object in a (multi-document) YAML file.

    A file that is not UTF-8 text or not YAML, a document that is not an object, and a
    document whose kind is missing or looks like ours but is not one of ours (`InferenceRunn`,
    or any kind of the longrun.dev group) are findings: dropping them silently would run less
    than the user wrote. Other Kubernetes kinds (a v1 Namespace) are skipped; Secrets are
    read by `longrun run`. `settings` are the controller's (allow-lists); defaults if not given.
    """
    file = str(path)
    docs, problem = read_documents(path)
    if problem is not None:
        return [Checked(file, "", [Finding(file, "", "", problem)])]
    checked: list[Checked] = []
    for index, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        where = f"document {index}"
        if (bad := document_problem(doc)) is not None:
            checked.append(Checked(file, where, [Finding(file, where, *bad)]))
        elif doc.get("kind") in resource_models():
            checked.append(check_document(doc, file=file, settings=settings or Settings()))
    by_object = {c.object: c for c in checked}
    for label, shared in shared_output_problems(docs):
        if label in by_object:
            by_object[label].findings.append(Finding(file, label, shared.field, shared.message))
    return checked


def shared_output_problems(docs: list[Any]) -> list[tuple[str, Problem]]:
    """Runs over several pods whose config, in the same file, cannot share its outputs (what
    the controller reports as OutputNotShareable): (the run's label, the problem)."""
    configs: dict[str, InferenceConfigSpec] = {}
    runs: list[InferenceRun] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") not in ("InferenceConfig", "InferenceRun"):
            continue
        try:
            resource = parse_resource(doc)
        except (ValidationError, ValueError):
            continue
        if isinstance(resource, InferenceConfig) and resource.metadata.name:
            configs[resource.metadata.name] = resource.spec
        elif isinstance(resource, InferenceRun):
            runs.append(resource)
    found: list[tuple[str, Problem]] = []
    for run in runs:
        name = run.spec.config_ref.name
        config = configs.get(name)
        problem = shared_output_problem(run.spec, config, config=name) if config else None
        if problem is not None:
            meta = run.metadata.model_dump(by_alias=True, exclude_none=True)
            found.append((f"InferenceRun/{_name(meta)}", problem))
    return found


def read_documents(path: Path) -> tuple[list[Any], str | None]:
    """The file's YAML documents, or one line saying why they cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        return [], (
            f"not a text file: byte 0x{byte:02x} at offset {exc.start} is not UTF-8 "
            "(expected YAML or JSON)"
        )
    except OSError as exc:
        return [], f"cannot read: {exc.strerror or exc}"
    try:
        return list(yaml.safe_load_all(text)), None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return [], f"not valid YAML: {at}{exc.problem or exc.context or 'cannot parse'}"
    except yaml.YAMLError as exc:
        return [], "not valid YAML: " + " ".join(str(exc).split())


def known_kinds() -> list[str]:
    """The kinds a longrun file may hold: longrun's own, and Secret (for `longrun run`)."""
    return sorted([*resource_models(), "Secret"])


def document_problem(doc: Any) -> tuple[str, str] | None:
    """(field, message) when a document is not an object or its kind is missing or unknown."""
    known = known_kinds()
    listed = "known kinds: " + ", ".join(known)
    if not isinstance(doc, dict):
        return (
            "",
            f"not a Kubernetes object (expected a mapping with apiVersion and kind); {listed}",
        )
    kind, api = doc.get("kind"), doc.get("apiVersion")
    if kind in known:
        return None
    if not isinstance(kind, str) or not kind:
        return "kind", f"required field is missing; {listed}"
    near = difflib.get_close_matches(kind, known, n=1, cutoff=0.75)
    near += [k for k in known if k.lower() == kind.lower() and k not in near]
    ours = not isinstance(api, str) or not api or api.split("/")[0] == GROUP
    if not near and not ours:
        return None  # another Kubernetes kind: not longrun's to check
    hint = f" (did you mean {near[0]}?)" if near else ""
    return "kind", f'"{kind}" is not a known kind{hint}; {listed}'


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
    if isinstance(resource, InferenceRun):
        meta = resource.metadata
        # generateName: the API server adds 5 characters (the longest name it may make)
        name = meta.name or f"{meta.generate_name}{'x' * 5}"
        problems = [
            *run_spec_problems(resource.spec, name),
            *priority_problems(resource.spec, settings),
        ]
    elif isinstance(resource, InferenceConfig):
        problems = config_spec_problems(resource.spec, settings)
    elif isinstance(resource, ModelDeployment):  # the rest depends on the serving settings
        problems = static_problems(resource.spec)
    return Checked(file, label, [Finding(file, label, p.field, p.message) for p in problems])


def _name(meta: Any) -> str:
    """The object's name; `prefix*` for one the API server names (`generateName`)."""
    if not isinstance(meta, dict):
        return "?"
    if meta.get("name"):
        return str(meta["name"])
    return f"{meta['generateName']}*" if meta.get("generateName") else "?"


def config_spec_problems(spec: InferenceConfigSpec, settings: Settings) -> list[Problem]:
    """What the controller refuses in a config whatever the run: image and pod knobs; and what
    the runner would refuse for good (exit 2) but can be seen here: a SQL URL's port."""
    image = image_problem(
        spec.image or settings.default_runner_image, allowed=settings.allowed_images
    )
    return [
        *([image] if image else []),
        *pod_problems(spec, PodPolicy.of(settings)),
        *sql_url_problems(spec),
    ]


def sql_url_problems(spec: InferenceConfigSpec) -> list[Problem]:
    """A `sql` storage URL written in the config (not in a Secret) whose port is not a port."""
    problems = []
    for role in ("input", "output", "errors"):
        storage = getattr(spec.storage, role, None)
        if storage is None or storage.kind != "sql":
            continue
        url = getattr(storage.body(), "url", None)
        if isinstance(url, str) and (message := port_problem(url)) is not None:
            problems.append(Problem(f"spec.storage.{role}.sql.url", "InvalidURL", message))
    return problems


def port_problem(url: str) -> str | None:
    """Why the URL's port is not a TCP port (1-65535), or None (no port is fine)."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError as exc:
        return f"not a URL: {exc}"
    port = netloc.rpartition("@")[2].rpartition("]")[2].rpartition(":")
    if not port[1] or not port[2]:
        return None
    text = port[2]
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        return f'port "{text}" is not a TCP port (a number from 1 to 65535)'
    return None


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
