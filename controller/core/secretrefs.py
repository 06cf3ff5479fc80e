"""Find every Secret a config refers to, wherever in the spec it is.

Two consumers need the same answer: the pod builder mounts each Secret (never
copying a value), and validation refuses references to another namespace. One
walker keeps them in agreement. A reference is any `SecretReference` (the
marker every credential model derives from, a plug-in's included), so a new
backend's credentials are found without this module knowing its models. Kinds
without a model pass through untouched, so Krateo-shaped `endpointRef` maps
inside them are found by a generic scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from contracts.base import SecretReference
from contracts.config import InferenceConfigSpec


@dataclass(frozen=True)
class SecretUse:
    """One reference to a Secret: where in the spec, which Secret, which namespace if any."""

    field: str
    name: str
    namespace: str | None = None


def secret_uses(spec: InferenceConfigSpec) -> list[SecretUse]:
    """Every Secret reference in a config spec, in document order."""
    return list(_walk_model(spec, "spec"))


def secret_names(spec: InferenceConfigSpec) -> list[str]:
    """The distinct Secret names to mount, sorted (deterministic pod specs).

    `spec.pod.env` Secrets reach the runner through `secretKeyRef` only: mounting
    the whole Secret as well would expose keys nobody asked for.
    """
    uses = secret_uses(spec)
    return sorted({u.name for u in uses if u.name and not u.field.startswith("spec.pod.")})


def _walk_model(model: BaseModel, path: str) -> Iterator[SecretUse]:
    if isinstance(model, SecretReference):
        yield SecretUse(path, model.name, model.secret_namespace())
        return
    for name, info in type(model).model_fields.items():
        yield from _walk_value(getattr(model, name), f"{path}.{info.alias or name}")
    for name, value in (model.model_extra or {}).items():
        yield from _walk_value(value, f"{path}.{name}")


def _walk_value(value: Any, path: str) -> Iterator[SecretUse]:
    if isinstance(value, BaseModel):
        yield from _walk_model(value, path)
    elif isinstance(value, dict):
        yield from _walk_dict(value, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_value(item, f"{path}[{index}]")


def _walk_dict(value: dict[str, Any], path: str) -> Iterator[SecretUse]:
    ref = value.get("endpointRef")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        namespace = ref.get("namespace")
        yield SecretUse(
            f"{path}.endpointRef",
            ref["name"],
            namespace if isinstance(namespace, str) else None,
        )
    for key, item in value.items():
        if key != "endpointRef":
            yield from _walk_value(item, f"{path}.{key}")
