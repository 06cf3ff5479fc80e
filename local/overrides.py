"""`longrun run --set KIND[/NAME]:PATH=VALUE`: change a field of an object from the files.

Why: the examples and a team's run files name what a cluster has (`http://iris.models.svc`,
an S3 endpoint inside the cluster, a volume path), and on a laptop those are a local port or
directory. Editing a copy of the file for each machine drifts from the file that is applied to
the cluster; an override on the command line keeps one file, as `helm --set` does.

Rules (the same as `helm --set` where they overlap):
- TARGET is `KIND` (every object of that kind in the files) or `KIND/NAME` (objects of that
  kind and name, in any namespace); kinds are InferenceConfig, InferenceRun, Secret, Model
  and ModelDeployment (any case, or the short names icfg, irun, mdl, mdep). No object
  matching is an error: an override never silently does nothing.
- PATH is dotted keys, `[N]` for a list item (N at most the list's length: equal appends),
  `\\.` for a dot inside a key (`metadata.annotations.example\\.com/x`). Missing maps are
  created. `metadata.name`, `metadata.namespace`, `kind` and `apiVersion` are refused: they
  are the object's identity.
- VALUE is read as YAML (`8080` a number, `true` a boolean, `[a, b]` a list, `null` null);
  quote it for a string that looks otherwise (`--set 'irun:spec.parameters.batch="7"'`).
- A Secret takes `stringData.KEY` (VALUE as typed, not read as YAML) or `data.KEY`
  (base64), as the API server does; it then holds that key's new value.

Overrides apply after the files are read and after `--env-file`, in the order given; the
run and its config are then validated and resolved as usual, so a bad value gets the
controller's own message naming the field.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from local.inputs import InputError, Inputs

FLAG = "--set"
HELP = (
    "change a field of an object from the files: KIND[/NAME]:PATH=VALUE, e.g. "
    "InferenceConfig:spec.model.url=http://127.0.0.1:8080 (VALUE is YAML; repeatable)"
)

_KINDS = {
    "inferenceconfig": "InferenceConfig",
    "icfg": "InferenceConfig",
    "inferencerun": "InferenceRun",
    "irun": "InferenceRun",
    "secret": "Secret",
    "model": "Model",
    "mdl": "Model",
    "modeldeployment": "ModelDeployment",
    "mdep": "ModelDeployment",
}
_IDENTITY = {("kind",), ("apiVersion",), ("metadata", "name"), ("metadata", "namespace")}
_STEP = re.compile(r"\[(\d+)\]")
Step = str | int


@dataclass(frozen=True)
class Override:
    """One `--set`: which objects, which field, the new value."""

    text: str
    kind: str
    name: str | None
    path: tuple[Step, ...]
    value: Any
    raw: str  # VALUE as typed: a Secret's value is text, never YAML-read


def parse_override(text: str) -> Override:
    """`KIND[/NAME]:PATH=VALUE` as an Override; InputError saying what is wrong."""
    target, colon, rest = text.partition(":")
    path_text, equals, value_text = rest.partition("=")
    if not colon or not equals or not target or not path_text:
        raise InputError(f"{FLAG} {text!r}: expected KIND[/NAME]:PATH=VALUE")
    kind_text, _, name = target.partition("/")
    kind = _KINDS.get(kind_text.lower())
    if kind is None:
        known = ", ".join(sorted(set(_KINDS.values())))
        raise InputError(f"{FLAG} {text!r}: unknown kind {kind_text!r} (one of {known})")
    path = parse_path(path_text, flag=text)
    if path[:1] in _IDENTITY or path[:2] in _IDENTITY:
        raise InputError(f"{FLAG} {text!r}: {path_text} is the object's identity; edit the file")
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else ""
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"{FLAG} {text!r}: VALUE is not YAML ({first}); quote it") from None
    return Override(text, kind, name or None, path, value, value_text)


def parse_path(text: str, *, flag: str) -> tuple[Step, ...]:
    """`a.b[0].c\\.d` as ("a", "b", 0, "c.d")."""
    steps: list[Step] = []
    for part in re.split(r"(?<!\\)\.", text):
        key, *rest = _STEP.split(part)
        key = key.replace("\\.", ".")
        if not key or any(bit for bit in rest[1::2]):  # text between or after [N]s
            raise InputError(f"{FLAG} {flag!r}: bad PATH {text!r} (keys.like[0].this)")
        steps.append(key)
        steps += [int(index) for index in rest[0::2]]
    return tuple(steps)


def apply_overrides(inputs: Inputs, entries: Iterable[str]) -> None:
    """Apply each `--set` entry, in order, to the objects in `inputs`."""
    for entry in entries:
        override = parse_override(entry)
        if override.kind == "Secret":
            _set_secret(inputs, override)
            continue
        targets = _objects(inputs, override)
        for obj in targets:
            set_path(obj, override.path, override.value, flag=override.text)


def _objects(inputs: Inputs, override: Override) -> list[dict[str, Any]]:
    table = {
        "InferenceConfig": inputs.configs,
        "InferenceRun": inputs.runs,
        "Model": inputs.models,
        "ModelDeployment": inputs.deployments,
    }[override.kind]
    found = [obj for (_ns, name), obj in table.items() if override.name in (None, name)]
    if not found:
        raise InputError(f"{FLAG} {override.text!r}: {_missing(override)}")
    return found


def _missing(override: Override) -> str:
    named = f" named {override.name!r}" if override.name else ""
    return f"no {override.kind}{named} in the given files"


def set_path(obj: Any, path: tuple[Step, ...], value: Any, *, flag: str) -> None:
    """Set `value` at `path` inside `obj`, creating missing maps."""
    node = obj
    for done, step in enumerate(path):
        last = done == len(path) - 1
        if isinstance(step, int):
            parent = _dotted(path[:done])
            if not isinstance(node, list):
                raise InputError(f"{FLAG} {flag!r}: {parent} is not a list")
            if step > len(node):
                raise InputError(
                    f"{FLAG} {flag!r}: {parent} has {len(node)} items: no [{step}] "
                    f"([{len(node)}] appends one)"
                )
            if step == len(node):
                node.append(value if last else {})
            elif last:
                node[step] = value
            node = node[step]
            continue
        if not isinstance(node, dict):
            raise InputError(f"{FLAG} {flag!r}: {_dotted(path[:done])} is not a map")
        if last:
            node[step] = value
        else:
            node = node.setdefault(step, [] if isinstance(path[done + 1], int) else {})


def _dotted(path: tuple[Step, ...]) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else f".{step}" if text else str(step)
    return text or "the object"


def _set_secret(inputs: Inputs, override: Override) -> None:
    path = override.path
    if len(path) != 2 or path[0] not in ("stringData", "data") or not isinstance(path[1], str):
        raise InputError(f"{FLAG} {override.text!r}: a Secret takes stringData.KEY or data.KEY")
    found = [data for (_ns, name), data in inputs.secrets.items() if override.name in (None, name)]
    if not found:
        raise InputError(f"{FLAG} {override.text!r}: {_missing(override)}")
    if path[0] == "data":
        try:
            raw = base64.b64decode(override.raw, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{FLAG} {override.text!r}: data.{path[1]}: not base64") from None
    else:
        raw = override.raw.encode()
    for data in found:
        data[path[1]] = raw
