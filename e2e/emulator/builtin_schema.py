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
import threading
from collections.abc import Callable, Hashable
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


def prune(
    group: str,
    plural: str,
    obj: dict[str, Any],
    *,
    kind: str,
    unknown: list[str],
    remember: bool = False,
) -> Any:
    """Drop fields the Go type does not have; 400 on JSON type mismatches.

    An object the Go type would decode unchanged (the usual case) is returned as
    is, not copied; anything else is rebuilt by `_walk`, which finds the unknown
    fields and type errors with their paths. `remember` (updates, whose fields are
    stored as they are) records the clean top-level values, so the next version,
    which shares the unchanged ones, does not check them again.
    """
    root = ROOTS.get((group, plural))
    if root is None:
        return obj
    if _root_is_clean(root, obj, remember=remember):
        return obj
    return _walk(obj, root, "", kind=kind, unknown=unknown)


def prune_metadata(meta: Any, *, kind: str, unknown: list[str]) -> Any:
    """ObjectMeta pruning, also applied to custom resources (returned as is when clean)."""
    if _checker("V1ObjectMeta", "metadata")(meta):
        return meta
    return _walk(meta, "V1ObjectMeta", "metadata", kind=kind, unknown=unknown)


def _root_is_clean(root: str, obj: Any, *, remember: bool) -> bool:
    """`_checker(root, "")(obj)`, skipping top-level values already proven clean."""
    if not isinstance(obj, dict):
        return _checker(root, "")(obj)
    fields = _table()[root]
    for key, value in obj.items():
        typ = fields.get(key)
        if typ is None:
            return False
        shareable = key != "metadata" and type(value) in (dict, list)  # metadata is rewritten
        if shareable and _PROVEN.has(value, (root, key)):
            continue
        if not _checker(typ, key)(value):
            return False
        if shareable and remember:
            _PROVEN.add(value, (root, key))
    return True


class _Proven:
    """Values, by identity, known to pass a check: stored values are immutable and each
    version shares its unchanged fields with the previous one (a pod's spec through
    all its status updates), so a check passed once holds for as long as the value
    lives. Holding the value keeps its id from being reused; the oldest are dropped."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: dict[int, tuple[Any, Hashable]] = {}
        self._lock = threading.Lock()

    def has(self, value: Any, what: Hashable) -> bool:
        hit = self._items.get(id(value))
        return hit is not None and hit[0] is value and hit[1] == what

    def add(self, value: Any, what: Hashable) -> None:
        with self._lock:
            self._items[id(value)] = (value, what)
            if len(self._items) > self._size:
                del self._items[next(iter(self._items))]


_PROVEN = _Proven(4096)


# -- the fast check: would _walk return the value unchanged? ------------------------------
# `_walk` builds paths, matches regexes and copies every node; most objects have no
# unknown field, no type error and no quantity to canonicalise, so one pass of
# compiled per-type predicates (no paths, no copies) settles them, and only the rest
# pay for `_walk`. A check is compiled per (type, path suffix): the suffix is the
# end of the path `_walk` would build ("" at the root, ".field" for a struct field,
# "]" for a list item), because quantity canonicalisation depends on field names.
Check = Callable[[Any], bool]
_SCALARS = {"int", "bool", "str", "float", "datetime", "date"}


@functools.cache
def _checker(typ: str, suffix: str) -> Check:
    """True when `_walk(value, typ, <path ending in suffix>)` returns an equal, unpruned value."""
    if m := _LIST.match(typ):
        return _list_checker(m.group(1))
    if m := _DICT.match(typ):
        return _map_checker(m.group(1), quantities=suffix.rpartition(".")[2] in QUANTITY_MAPS)
    if typ in _SCALARS:
        return _scalar_checker(typ, canonical=suffix.endswith(".sizeLimit"))
    fields = _table().get(typ)
    if fields is None:  # 'object': anything goes, kept as is
        return lambda value: True
    return _struct_checker(fields, root=not suffix)


def _list_checker(item_type: str) -> Check:
    item = _checker(item_type, "]")

    def check(value: Any) -> bool:
        return value is None or (isinstance(value, list) and all(map(item, value)))

    return check


def _map_checker(value_type: str, *, quantities: bool) -> Check:
    if _LIST.match(value_type) or _DICT.match(value_type):
        return lambda value: value is None  # no such map in the table: leave it to _walk
    if value_type in _SCALARS:
        return _scalar_map_checker(value_type, quantities=quantities)
    item = _checker(value_type, "]")

    def check(value: Any) -> bool:
        if value is None:
            return True
        if not isinstance(value, dict):
            return False
        values = value.values()
        if not all(map(item, values)):
            return False
        return not quantities or all(quantity(v) is v for v in values)

    return check


def _scalar_map_checker(value_type: str, *, quantities: bool) -> Check:
    """Maps of scalars (labels, data, limits...): `_walk` canonicalises a value whose
    path ends in ".sizeLimit", so a key ending in "sizeLimit" gets that check too."""
    plain = _checker(value_type, "]")
    sized = _checker(value_type, ".sizeLimit")

    def check(value: Any) -> bool:
        if value is None:
            return True
        if not isinstance(value, dict):
            return False
        for key, item in value.items():
            if not (sized if key.endswith("sizeLimit") else plain)(item):
                return False
            if quantities and quantity(item) is not item:
                return False
        return True

    return check


def _scalar_checker(typ: str, *, canonical: bool) -> Check:
    ok = _SCALAR_OK[typ]
    if not canonical:
        return lambda value: value is None or ok(value)
    return lambda value: value is None or (ok(value) and quantity(value) is value)


_SCALAR_OK: dict[str, Check] = {
    "int": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "bool": lambda v: isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool),
}
_SCALAR_OK["datetime"] = _SCALAR_OK["date"] = _SCALAR_OK["str"]


def _struct_checker(fields: dict[str, str], *, root: bool) -> Check:
    checks: dict[str, Check] = {}  # filled lazily: the types are recursive

    def check(value: Any) -> bool:
        if value is None:
            return True
        if not isinstance(value, dict):
            return False
        for key, item in value.items():
            field_check = checks.get(key)
            if field_check is None:
                typ = fields.get(key)
                if typ is None:
                    return False  # unknown field
                field_check = checks[key] = _checker(typ, key if root else "." + key)
            if not field_check(item):
                return False
        return True

    return check


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
