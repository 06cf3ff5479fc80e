"""The narrow interfaces between the fleet reconciler and the world.

`FleetCluster` is Kubernetes (controller/kube/fleets.py implements it on the official
client; tests, in memory). `HostAgent` is the hosts (controller/hosts/prober.py: health
checks on an interval, admin calls in the background). The reconciler sees plain dicts
and the values of health.py, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from controller.core.fleets.health import HostHealth, HostTarget, OpState, ProtocolInfo
from controller.core.fleets.observed import FleetChildren
from controller.core.ports import EventType, Obj
from controller.core.validation import Problem

FleetKind = Literal["Service", "EndpointSlice"]
StatusKind = Literal["InferenceHost", "InferenceModel"]


class FleetCluster(Protocol):
    """Reads from the informer caches, writes to the API server."""

    def hosts(self, namespace: str) -> list[Obj]:
        """The cached InferenceHosts of a namespace."""
        ...

    def inference_models(self, namespace: str) -> list[Obj]:
        """The cached InferenceModels of a namespace."""
        ...

    def get_model(self, namespace: str, name: str) -> Obj | None:
        """The cached Model (a modelRef's target)."""
        ...

    def children(self, namespace: str) -> FleetChildren:
        """The Services and EndpointSlices the namespace's InferenceModels own."""
        ...

    def host_credentials(self, namespace: str, name: str, key: str) -> str | Problem:
        """The token in a labelled Secret (docs/security.md), or why it cannot be had."""
        ...

    def read(self, kind: FleetKind, namespace: str, name: str) -> Obj | None:
        """A live read (after AlreadyExists); None on 404."""
        ...

    def create(self, kind: FleetKind, body: Obj) -> Obj:
        """Create an object; raises ApiError (409 when it exists)."""
        ...

    def patch(self, kind: FleetKind, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        """A JSON merge patch (dict) or JSON patch (list)."""
        ...

    def delete(self, kind: FleetKind, namespace: str, name: str, *, uid: str) -> None:
        """Delete with Background propagation, only if the object still has `uid`."""
        ...

    def patch_status(self, kind: StatusKind, namespace: str, name: str, status: Obj) -> Obj:
        """JSON merge patch of an InferenceHost's or InferenceModel's /status."""
        ...

    def emit_event(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Record a Kubernetes Event about `obj` (best effort: never raises)."""
        ...


class HostAgent(Protocol):
    """The hosts, as the prober sees them."""

    def protocols(self) -> Mapping[str, ProtocolInfo]:
        """The admin protocols installed, by name."""
        ...

    def track(self, namespace: str, targets: Sequence[HostTarget]) -> None:
        """Check exactly these hosts of `namespace` from now on (idempotent)."""
        ...

    def health(self, namespace: str, host: str) -> HostHealth | None:
        """What the checks of a host found so far; None before the first."""
        ...

    def ops(self, namespace: str, host: str) -> Mapping[str, OpState]:
        """The last admin call per model on a host."""
        ...

    def load(self, target: HostTarget, model: str, *, source: str | None) -> None:
        """Ask the host to load `model` (in the background; a call in flight is not
        repeated, a failed one is retried after a backoff)."""
        ...

    def unload(self, target: HostTarget, model: str) -> None:
        """Ask the host to unload `model` (in the background, once)."""
        ...
