"""The narrow interface between the serving reconciler and Kubernetes.

As `controller/core/ports.py` is for runs: the reconciler sees plain dicts and these few
calls; `controller/kube/serving.py` implements them on the official client, and tests
implement them in memory. What is deliberately missing: any read of a Secret. The
controller may create the API-key Secret and patch its keys, never get, list or watch
one (docs/security.md), so nothing here returns a Secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from controller.core.ports import EventType, Obj
from controller.core.serving.observed import ServingChildren
from controller.core.serving.writes import ServingKind

StatusKind = Literal["ModelDeployment", "Model"]
# What may be read live (after AlreadyExists, when the cache may lag): never a Secret.
ReadKind = Literal[
    "Model",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Deployment",
    "Service",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "Certificate",
    "Ingress",
]


@dataclass(frozen=True)
class Usage:
    """The runs that use a deployment now (`namespace/name`) and when the last one ended."""

    active: tuple[str, ...] = ()
    last_finished: datetime | None = None


class ServingCluster(Protocol):
    """Reads from the informer caches, writes to the API server; no Secret is ever read."""

    def get_deployment(self, namespace: str, name: str) -> Obj | None:
        """The cached ModelDeployment."""
        ...

    def get_model(self, namespace: str, name: str) -> Obj | None:
        """The cached Model."""
        ...

    def children(self, namespace: str, name: str) -> ServingChildren:
        """The cached objects a deployment owns, found by their deterministic names, and its
        pods (found by label)."""
        ...

    def usage(self, namespace: str, name: str) -> Usage:
        """The runs admitted to this deployment (status.modelDeployment) that use it now."""
        ...

    def read(self, kind: ReadKind, namespace: str, name: str) -> Obj | None:
        """A live read (after AlreadyExists); None on 404."""
        ...

    def create(self, kind: ServingKind, body: Obj) -> Obj:
        """Create an object; raises ApiError (409 when it exists). A created Secret comes
        back without its data."""
        ...

    def patch(self, kind: ServingKind, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        """A JSON merge patch (dict body) or JSON patch (list body); a patched Secret comes
        back without its data."""
        ...

    def patch_status(self, kind: StatusKind, namespace: str, name: str, status: Obj) -> Obj:
        """JSON merge patch of a ModelDeployment's or Model's /status."""
        ...

    def delete(self, kind: ServingKind, namespace: str, name: str, *, uid: str) -> None:
        """Delete with Background propagation, only if the object still has `uid`."""
        ...

    def emit_event(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Record a Kubernetes Event about `obj` (best effort: never raises)."""
        ...
