"""Reading what `longrun run` was given: YAML objects, Secrets and `.env` files.

The same files a user would `kubectl apply` must work here, so validation is
`longrun validate`'s own (`controller.validate`), and the run is resolved
against its config with the controller's own `resolve`, which also applies the
controller's checks (image allow-list, Secret namespaces). Anything wrong is an
`InputError`, which the command reports with exit code 2.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import secrets
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from contracts.run import InferenceRunSpec
from controller.core.builders import Resolved
from controller.core.resolve import parse_run_spec, resolve
from controller.core.settings import Settings
from controller.validate import check_file, expand_paths

Obj = dict[str, Any]
# A fixed namespace for run UIDs: the same namespace/name always gets the same UID,
# so a re-run finds (and resumes after) the chunks the previous attempt committed.
RUN_UID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "runs.longrun.dev")


Lookup = Callable[[str, str], Obj | None]


class InputError(Exception):
    """The files, flags or objects cannot be run (exit code 2)."""


@dataclass
class Inputs:
    """The objects found in the files, by (namespace, name)."""

    configs: dict[tuple[str, str], Obj] = field(default_factory=dict)
    runs: dict[tuple[str, str], Obj] = field(default_factory=dict)
    secrets: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    models: dict[tuple[str, str], Obj] = field(default_factory=dict)
    deployments: dict[tuple[str, str], Obj] = field(default_factory=dict)
    inference_models: dict[tuple[str, str], Obj] = field(default_factory=dict)  # never served here


def add_files_option(parser: argparse.ArgumentParser, *, holding: str) -> None:
    """The `-f/--filename PATH` option (repeatable) every command reading YAML files takes."""
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="PATH",
        help=f"a YAML file or a directory of them (repeatable): {holding}",
    )


def run_uid(namespace: str, name: str) -> str:
    """The deterministic UID of a local run (stable across invocations)."""
    return str(uuid.uuid5(RUN_UID_NAMESPACE, f"{namespace}/{name}"))


def load_inputs(paths: Iterable[str], *, namespace: str) -> Inputs:
    """Validate and load every object under `paths`; InputError listing every problem."""
    try:
        files = expand_paths(paths)
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
    findings = [str(f) for path in files for c in check_file(path) for f in c.findings]
    if findings:
        raise InputError("\n".join(findings))
    inputs = Inputs()
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                _add(inputs, doc, namespace=namespace, file=str(path))
    return inputs


def generated_name(prefix: str) -> str:
    """`prefix` completed as the API server completes `generateName`: 5 random characters of
    its alphabet (no vowels, no look-alikes), the whole at most 253 characters."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return prefix[:248] + "".join(secrets.choice(alphabet) for _ in range(5))


def _add(inputs: Inputs, doc: Obj, *, namespace: str, file: str) -> None:
    meta = doc.setdefault("metadata", {})
    meta.setdefault("namespace", namespace)
    if not meta.get("name") and meta.get("generateName"):
        # A new object, as `kubectl create` makes: a run file with generateName runs afresh
        # every time (a new UID, so a new work directory: nothing is resumed).
        meta["name"] = generated_name(str(meta["generateName"]))
    key = (meta["namespace"], str(meta.get("name", "")))
    kind = doc.get("kind")
    if kind == "InferenceConfig":
        meta.setdefault("generation", 1)  # as the API server sets it on creation
        inputs.configs[key] = doc
    elif kind == "InferenceRun":
        meta["uid"] = run_uid(*key)
        meta.setdefault("generation", 1)
        inputs.runs[key] = doc
    elif kind == "Model":
        inputs.models[key] = doc
    elif kind == "ModelDeployment":
        meta["uid"] = run_uid(*key)
        meta.setdefault("generation", 1)
        inputs.deployments[key] = doc
    elif kind == "InferenceModel":
        inputs.inference_models[key] = doc
    elif kind == "Secret" and doc.get("apiVersion") == "v1":
        inputs.secrets[key] = secret_data(doc, file=file)


def secret_data(doc: Obj, *, file: str) -> dict[str, bytes]:
    """A Secret's decoded data, `stringData` winning as on the API server."""
    name = (doc.get("metadata") or {}).get("name")
    data: dict[str, bytes] = {}
    for key, value in (doc.get("data") or {}).items():
        try:
            data[key] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{file}: Secret/{name}: data.{key}: not base64") from None
    data.update({k: str(v).encode() for k, v in (doc.get("stringData") or {}).items()})
    return data


def parse_env_file(text: str, *, source: str) -> dict[str, bytes]:
    """`KEY=VALUE` lines (`#` comments, blank lines, `export `, quotes) as Secret data."""
    data: dict[str, bytes] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not key.strip():
            raise InputError(f"{source}:{number}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        data[key.strip()] = value.encode()
    return data


def add_env_files(inputs: Inputs, entries: Iterable[str], *, namespace: str) -> None:
    """`NAME=PATH` flags: Secret NAME (in `namespace`) from a `.env`-style file."""
    for entry in entries:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--env-file {entry!r}: expected NAME=PATH")
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InputError(f"--env-file {entry!r}: {exc.strerror or exc}") from None
        inputs.secrets[(namespace, name)] = parse_env_file(text, source=path)


def pick_run(inputs: Inputs, name: str | None, *, namespace: str) -> Obj:
    """The run to execute: the one named (by name, or by the `generateName` it was given),
    or the only one."""
    if name is not None:
        run = inputs.runs.get((namespace, name)) or _generated_from(inputs, name, namespace)
        if run is None:
            raise InputError(f'no InferenceRun "{namespace}/{name}" in the given files')
        return run
    if len(inputs.runs) != 1:
        found = ", ".join(f"{ns}/{n}" for ns, n in sorted(inputs.runs)) or "none"
        raise InputError(f"name the InferenceRun to execute (found: {found})")
    return next(iter(inputs.runs.values()))


def _generated_from(inputs: Inputs, prefix: str, namespace: str) -> Obj | None:
    found = [
        run
        for (ns, _), run in inputs.runs.items()
        if ns == namespace and run["metadata"].get("generateName") == prefix
    ]
    if len(found) > 1:
        raise InputError(f'several InferenceRuns with generateName "{prefix}": name one')
    return found[0] if found else None


def resolve_run(
    run: Obj, inputs: Inputs, *, settings: Settings, deployments: Lookup | None = None
) -> Resolved:
    """The run with its config, checked as the controller checks it; `deployments` finds
    the ModelDeployment a config's model.deploymentRef names (local/serve.py)."""
    spec, problem = parse_run_spec(run)
    if problem is None and isinstance(spec, InferenceRunSpec):
        result = resolve(
            run,
            spec,
            lookup=lambda ns, n: inputs.configs.get((ns, n)),
            settings=settings,
            deployments=deployments or (lambda _ns, _name: None),
        )
        if isinstance(result, Resolved):
            return result
        problem = result
    assert problem is not None
    name = run["metadata"]["name"]
    raise InputError(f"InferenceRun/{name}: {problem.field}: {problem.message} ({problem.reason})")
