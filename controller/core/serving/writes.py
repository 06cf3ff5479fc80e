"""The writes a serving decision asks for: create, patch, delete (pure data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controller.core.ports import Obj

ServingKind = Literal[
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Deployment",
    "Service",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "Certificate",
    "Ingress",
    "ModelDeployment",
]


@dataclass(frozen=True)
class Create:
    """Create `body`; AlreadyExists means: read it, and keep it if it is ours (a Secret is
    never read: see keys.py)."""

    kind: ServingKind
    body: Obj


@dataclass(frozen=True)
class Patch:
    """Patch a child we own: a merge patch (dict) or a JSON patch (list)."""

    kind: ServingKind
    namespace: str
    name: str
    body: Obj | list[Obj]


@dataclass(frozen=True)
class Delete:
    """Delete a child, only while it still has `uid`."""

    kind: ServingKind
    namespace: str
    name: str
    uid: str


Write = Create | Patch
