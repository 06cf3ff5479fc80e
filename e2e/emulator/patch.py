"""The three PATCH formats kube-apiserver accepts from kubectl and client libraries.

JSON merge patch (RFC 7386) and JSON patch (RFC 6902) are generic. Strategic merge
patch needs per-field merge keys from the Go types; the emulator carries the keys
controllers actually touch (containers, env, volumes, volumeMounts, ports, ...)
instead of the whole OpenAPI, which is a documented divergence.
"""

from __future__ import annotations

from typing import Any

from .codec import clone
from .errors import ApiError, bad_request

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"

# Field name -> merge key for lists with patchStrategy=merge in the core/batch Go types.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# Lists of scalars merged as sets (patchStrategy=merge on []string).
MERGE_SCALAR_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces.

    The patch is consumed: its values become part of the result (Api.patch owns
    every patch it applies; it clones those a caller keeps). Unpatched values of
    `target` are shared, never changed.
    """
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 with add/remove/replace/move/copy/test."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = clone(target)
    for op in ops:
        doc = _apply_op(doc, op)
    return doc


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for part in parts[:-1]:
        try:
            cur = cur[int(part)] if isinstance(cur, list) else cur[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, f"doc is missing path: /{'/'.join(parts)}") from None
    return cur


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    key = parts[-1]
    try:
        return parent[int(key)] if isinstance(parent, list) else parent[key]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, f"doc is missing path: /{'/'.join(parts)}") from None


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _parent(doc, parts)
    key = parts[-1]
    try:
        return parent.pop(int(key) if isinstance(parent, list) else key)
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, f"Unable to remove nonexistent key: {key}: missing value") from None


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    key = parts[-1]
    if isinstance(parent, list):
        idx = len(parent) if key == "-" else int(key)
        if idx > len(parent):
            raise ApiError(422, f"add operation index out of bounds: {idx}")
        parent.insert(idx, value)
    elif isinstance(parent, dict):
        parent[key] = value
    else:
        raise ApiError(422, f"doc is missing path: /{'/'.join(parts)}")
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    parts = _pointer(op.get("path", ""))
    if kind == "add":
        return _add(doc, parts, clone(op.get("value")))
    if kind == "remove":
        _remove(doc, parts)
        return doc
    if kind == "replace":
        _get(doc, parts)
        if not parts:
            return clone(op.get("value"))
        _remove(doc, parts)
        return _add(doc, parts, clone(op.get("value")))
    if kind in ("move", "copy"):
        src = _pointer(op.get("from", ""))
        value = _remove(doc, src) if kind == "move" else clone(_get(doc, src))
        return _add(doc, parts, value)
    if kind == "test":
        if _get(doc, parts) != op.get("value"):
            raise ApiError(422, f"testing value /{'/'.join(parts)} failed: test failed")
        return doc
    raise ApiError(422, f"Unexpected kind: {kind}")


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for built-in kinds (merge keys from MERGE_KEYS)."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return {}
    result = dict(target)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _smp_map(result[key], value)
        elif isinstance(value, dict):
            result[key] = _smp_map({}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain or k not in target}
    return result


def _smp_list(field: str, existing: Any, patch: list[Any]) -> list[Any]:
    current: list[Any] = list(existing) if isinstance(existing, list) else []
    if field in MERGE_SCALAR_LISTS:
        return current + [v for v in patch if v not in current]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return [_strip_directives(p) for p in patch]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [p for p in patch if p.get("$patch") != "replace"]
    result = [dict(c) if isinstance(c, dict) else c for c in current]
    for item in patch:
        idx = next(
            (
                i
                for i, c in enumerate(result)
                if isinstance(c, dict) and c.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
        elif idx is None:
            result.append(_smp_map({}, item))
        else:
            result[idx] = _smp_map(result[idx], item)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    return value


def apply_patch(target: dict[str, Any], patch: Any, *, content_type: str, custom: bool) -> Any:
    """Dispatch on Content-Type the way the real PATCH handler does."""
    ctype = content_type.split(";")[0].strip().lower()
    if ctype == JSON_PATCH:
        return json_patch(target, patch)
    if ctype == MERGE_PATCH:
        return merge_patch(target, patch)
    if ctype == STRATEGIC_PATCH and not custom:
        return strategic_merge_patch(target, patch)
    # Server-side apply is not implemented: answer like a server without it.
    accepted = [JSON_PATCH, MERGE_PATCH] + ([] if custom else [STRATEGIC_PATCH])
    raise ApiError(
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )
