"""A checker for the rules kube-apiserver applies to CRD schemas (apiextensions v1).

Written from the Kubernetes documentation on structural schemas, defaulting and
pruning, so the generated CRDs are checked against the server's rules, not against
the generator's own idea of them. Returns human-readable violations.
"""

from __future__ import annotations

from typing import Any

# Fields of JSONSchemaProps that apiextensions.k8s.io/v1 knows.
KNOWN_KEYS = frozenset(
    {
        "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum",
        "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
        "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties", "minProperties",
        "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
        "additionalProperties", "nullable", "example", "externalDocs",
        "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
        "x-kubernetes-map-type", "x-kubernetes-validations",
    }
)  # fmt: skip
# Keys a structural schema forbids inside allOf/anyOf/oneOf/not.
FORBIDDEN_IN_JUNCTORS = frozenset(
    {"description", "type", "default", "additionalProperties", "nullable"}
)
TYPES = {"object", "array", "string", "integer", "number", "boolean"}
PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def violations(schema: dict[str, Any], path: str = "") -> list[str]:
    """Every rule the schema node (and its children) breaks."""
    found = _node_rules(schema, path)
    for name, sub in schema.get("properties", {}).items():
        found += violations(sub, f"{path}.properties.{name}")
    if isinstance(schema.get("items"), dict):
        found += violations(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        found += violations(schema["additionalProperties"], f"{path}.additionalProperties")
    for junctor in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(schema.get(junctor, [])):
            found += _junctor_rules(sub, f"{path}.{junctor}[{i}]")
    return found


def _node_rules(node: dict[str, Any], path: str) -> list[str]:
    found = [f"{path}: unknown keyword {k!r}" for k in node if k not in KNOWN_KEYS]
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    if not int_or_string and node.get("type") not in TYPES:
        found.append(f"{path}: every node needs a type (got {node.get('type')!r})")
    if "properties" in node and "additionalProperties" in node:
        found.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if node.get("additionalProperties") is False or node.get("additionalProperties") is True:
        found.append(f"{path}: additionalProperties must be a schema, not a boolean")
    if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
        found.append(f"{path}: exclusiveMinimum must be a boolean in OpenAPI v3.0")
    found += _list_map_rules(node, path)
    found += _value_rules(node, path)
    return found


def _junctor_rules(node: dict[str, Any], path: str) -> list[str]:
    bad = sorted(FORBIDDEN_IN_JUNCTORS & node.keys())
    return [f"{path}: {k!r} is not allowed inside allOf/anyOf/oneOf/not" for k in bad]


def _list_map_rules(node: dict[str, Any], path: str) -> list[str]:
    if node.get("x-kubernetes-list-type") != "map":
        return []
    item = node.get("items", {})
    keys = node.get("x-kubernetes-list-map-keys", [])
    found = [] if keys else [f"{path}: list-type map needs x-kubernetes-list-map-keys"]
    for key in keys:
        sub = item.get("properties", {}).get(key)
        if sub is None or (key not in item.get("required", []) and "default" not in sub):
            found.append(f"{path}: list-map key {key!r} must be required or defaulted")
    return found


def _value_rules(node: dict[str, Any], path: str) -> list[str]:
    found = []
    expected = PY_TYPES.get(node.get("type", ""), (object,))
    for value in node.get("enum", []):
        if not isinstance(value, expected):
            found.append(f"{path}: enum value {value!r} does not match type {node['type']}")
    if "default" in node:
        found += _default_rules(node, node["default"], path)
    return found


def _default_rules(node: dict[str, Any], default: Any, path: str) -> list[str]:
    expected = PY_TYPES.get(node.get("type", ""), (object,))
    if isinstance(default, bool) and node.get("type") in ("integer", "number"):
        return [f"{path}: default {default!r} is a boolean, not a {node['type']}"]
    if not isinstance(default, expected):
        return [f"{path}: default {default!r} does not match type {node.get('type')}"]
    if "enum" in node and default not in node["enum"]:
        return [f"{path}: default {default!r} is not one of the enum values"]
    if isinstance(default, dict) and "properties" in node:
        unknown = set(default) - set(node["properties"])
        if unknown and not node.get("x-kubernetes-preserve-unknown-fields"):
            return [f"{path}: default would be pruned: {sorted(unknown)}"]
    return []


def preserve_unknown_paths(schema: dict[str, Any], path: str = "") -> list[str]:
    """Where the schema keeps unknown fields (pass-through), as dotted paths."""
    paths = [path] if schema.get("x-kubernetes-preserve-unknown-fields") else []
    for name, sub in schema.get("properties", {}).items():
        paths += preserve_unknown_paths(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            paths += preserve_unknown_paths(schema[key], f"{path}[]")
    return paths
