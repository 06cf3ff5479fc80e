"""docs/resources.md, generated from the CRD schemas so the reference never drifts."""

from __future__ import annotations

from typing import Any

from controller.crds import generate_crds

INTRO = """# Resource reference

Generated from the CRD schemas (`python scripts/generated.py`); do not edit by hand.
`kubectl explain inferenceconfig.spec` shows the same text on a cluster.
Defaults are applied by the API server; constraints are enforced at admission.
"""


def resource_reference() -> str:
    """Markdown tables of every field of both resources."""
    parts = [INTRO]
    for crd in generate_crds():
        kind = crd["spec"]["names"]["kind"]
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        parts.append(f"\n## {kind}\n\n{schema['description']}\n")
        for section in ("spec", "status"):
            parts.append(f"\n### {kind}.{section}\n")
            parts.append("\n| field | type | description |\n| --- | --- | --- |\n")
            parts.extend(_rows(schema["properties"][section], section))
    return "".join(parts)


def _rows(node: dict[str, Any], path: str) -> list[str]:
    rows = []
    required = set(node.get("required", []))
    for name, sub in node.get("properties", {}).items():
        field = f"{path}.{name}"
        rows.append(f"| `{field}` | {_type(sub, name in required)} | {_describe(sub)} |\n")
        rows += _rows(sub, field)
        if isinstance(sub.get("items"), dict):
            rows += _rows(sub["items"], f"{field}[]")
    return rows


def _type(node: dict[str, Any], required: bool) -> str:
    if node.get("x-kubernetes-int-or-string"):
        kind = "int or string"
    elif node.get("type") == "array":
        kind = f"[]{node.get('items', {}).get('type', 'object')}"
    elif "additionalProperties" in node:
        kind = f"map[string]{node['additionalProperties'].get('type', 'object')}"
    else:
        kind = node.get("type", "object")
    return f"{kind}, required" if required else kind


def _describe(node: dict[str, Any]) -> str:
    text = node.get("description", "").replace("\n", " ").replace("|", "\\|")
    extras = []
    if "enum" in node:
        extras.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    if "default" in node:
        extras.append(f"default `{node['default']}`")
    for key, label in (("minimum", "min"), ("maximum", "max"), ("maxLength", "max length")):
        if key in node:
            extras.append(f"{label} {node[key]}")
    for rule in node.get("x-kubernetes-validations", []):
        extras.append(f"rule: {rule['message']}".replace("|", "\\|"))
    return " ".join([text, *(f"({e})" for e in extras)]).strip()
