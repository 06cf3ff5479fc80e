"""Field schemas of the built-in kinds: prune unknown fields, reject wrong JSON types.

kube-apiserver decodes built-ins into Go structs, so unknown fields vanish (with
a warning, or a 400 under `fieldValidation=Strict`) and a string where an int32
belongs is a 400. The emulator reproduces that from `builtin_fields.json`, a
compact table generated from the official client's models (which mirror the Go
types); regenerate it with `python -m e2e.emulator.builtin_schema` after a client
upgrade. Loading JSON keeps startup fast (importing the client's models is not).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from .errors import bad_request

TABLE = Path(__file__).with_name("builtin_fields.json")
ROOTS = {
    ("", "namespaces"): "V1Namespace",
    ("", "configmaps"): "V1ConfigMap",
    ("", "secrets"): "V1Secret",
    ("", "pods"): "V1Pod",
    ("", "events"): "CoreV1Event",
    ("", "serviceaccounts"): "V1ServiceAccount",
    ("batch", "jobs"): "V1Job",
    ("batch", "cronjobs"): "V1CronJob",
    ("coordination.k8s.io", "leases"): "V1Lease",
    # Stored (and therefore checked) in core/v1 shape; see events.py.
    ("events.k8s.io", "events"): "CoreV1Event",
    ("apiextensions.k8s.io", "customresourcedefinitions"): "V1CustomResourceDefinition",
}
_LIST = re.compile(r"^(?:List\[|list\[)(.*)\]$")
_DICT = re.compile(r"^(?:Dict\[str, |dict\(str, )(.*)[\])]$")
_GO = {"int": "int64", "bool": "bool", "str": "string", "float": "float64"}


@functools.cache
def _table() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(TABLE.read_text())
    return data


def prune(group: str, plural: str, obj: dict[str, Any], *, kind: str, unknown: list[str]) -> Any:
    """Drop fields the Go type does not have; 400 on JSON type mismatches."""
    root = ROOTS.get((group, plural))
    if root is None:
        return obj
    return _walk(obj, root, "", kind=kind, unknown=unknown)


def prune_metadata(meta: Any, *, kind: str, unknown: list[str]) -> Any:
    """ObjectMeta pruning, also applied to custom resources."""
    return _walk(meta, "V1ObjectMeta", "metadata", kind=kind, unknown=unknown)


def _walk(value: Any, typ: str, path: str, *, kind: str, unknown: list[str]) -> Any:
    if value is None:
        return None
    if m := _LIST.match(typ):
        _expect(isinstance(value, list), value, typ, path, kind)
        return [
            _walk(v, m.group(1), f"{path}[{i}]", kind=kind, unknown=unknown)
            for i, v in enumerate(value)
        ]
    if m := _DICT.match(typ):
        _expect(isinstance(value, dict), value, typ, path, kind)
        out = {
            k: _walk(v, m.group(1), _join(path, k), kind=kind, unknown=unknown)
            for k, v in value.items()
        }
        if path.rpartition(".")[2] in QUANTITY_MAPS:
            return {k: quantity(v) for k, v in out.items()}
        return out
    if typ in ("int", "bool", "str", "float", "datetime", "date"):
        _check_scalar(value, typ, path, kind)
        return quantity(value) if path.endswith(".sizeLimit") else value
    fields = _table().get(typ)
    if fields is None:  # 'object' (IntOrString, RawExtension, JSON): anything goes
        return value
    _expect(isinstance(value, dict), value, typ, path, kind)
    out = {}
    for key, item in value.items():
        child = _join(path, key)
        if key not in fields:
            unknown.append(child)
            continue
        out[key] = _walk(item, fields[key], child, kind=kind, unknown=unknown)
    return out


QUANTITY_MAPS = {"limits", "requests", "overhead", "capacity", "allocatable"}


def quantity(value: Any) -> Any:
    """resource.Quantity canonical form for the common cases (1 -> "1", 0.5 -> "500m")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return str(int(value))
    if isinstance(value, float):
        return f"{round(value * 1000)}m"
    if isinstance(value, str) and re.fullmatch(r"\d+m", value) and int(value[:-1]) % 1000 == 0:
        return str(int(value[:-1]) // 1000)
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check_scalar(value: Any, typ: str, path: str, kind: str) -> None:
    if typ == "int":
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    elif typ == "bool":
        ok = isinstance(value, bool)
    elif typ == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:  # strings; resource.Quantity is a string that also accepts numbers
        ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
    _expect(ok, value, typ, path, kind)


def _expect(ok: bool, value: Any, typ: str, path: str, kind: str) -> None:
    if ok:
        return
    json_type = {bool: "bool", str: "string", list: "array", dict: "object"}.get(
        type(value), "number"
    )
    go_type = _GO.get(typ, "[]" if typ.lower().startswith("list") else typ)
    raise bad_request(
        f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{json_type} into Go struct field {path} of type {go_type}"
    )


def generate() -> dict[str, dict[str, str]]:
    """Walk the official client's models from the root kinds (run by hand, see module doc)."""
    from kubernetes.client import models

    out: dict[str, dict[str, str]] = {}
    todo = list(ROOTS.values())
    while todo:
        name = todo.pop()
        cls = getattr(models, name, None)
        if cls is None or name in out:
            continue
        out[name] = {cls.attribute_map[a]: t for a, t in sorted(cls.openapi_types.items())}
        for typ in out[name].values():
            inner = typ
            while m := (_LIST.match(inner) or _DICT.match(inner)):
                inner = m.group(1)
            todo.append(inner)
    return dict(sorted(out.items()))


if __name__ == "__main__":
    TABLE.write_text(json.dumps(generate(), separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {TABLE}")
