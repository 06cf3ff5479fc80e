# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""`FleetCluster` (controller/core/fleets/ports.py) on the official client.

A third adapter beside `KubeCluster` and `KubeServing`, on the same `Transport` and
informers: InferenceHosts, InferenceModels, Models (a modelRef's target), and the Services
and EndpointSlices labelled `longrun.dev/inference-model`. Every event but the echo of our
own write wakes the namespace's one fleet key (`Fleet/<namespace>`): labels matter (a
host's labels are what selectors match), so metadata changes count, not only specs.

Runs and configs come from `KubeCluster`'s events (`on_run_event`): a config whose
`model.deploymentRef` names an InferenceModel is indexed, and when that model's run-facing
status changes (endpoint, availability) its runs are woken, as `KubeServing` does for
ModelDeployments.

Secrets: one is read (a GET, never a list or watch) only for an InferenceHost's
`credentials`, only when FLEET_HOST_CREDENTIALS allows it (the chart then grants `get` on
Secrets), and its value is used only if the Secret carries the opt-in label
`longrun.dev/host-credentials: "true"` (docs/security.md).
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from contracts.fleets import CREDENTIALS_LABEL
from controller.core.fleets import names
from controller.core.fleets.observed import FleetChildren
from controller.core.fleets.ports import FleetKind, StatusKind
from controller.core.ports import ApiError, EventType, Obj
from controller.core.routing import is_own_write, object_key
from controller.core.serving import uses
from controller.core.validation import Problem
from controller.kube.cached import CachedKinds
from controller.kube.cluster import Enqueue
from controller.kube.transport import Transport, resource_path

OWN_KINDS = ("InferenceHost", "InferenceModel", "Model")
CHILD_KINDS = ("Service", "EndpointSlice")
RUN_FACING = ("phase", "endpoint", "protocol", "modelName")
CREDENTIALS_OFF = (
    "the controller may not read Secrets, so it cannot send these credentials: the cluster "
    "admin allows it with the chart value fleets.hostCredentials (docs/security.md), or "
    "remove spec.credentials"
)


def trim(kind: str, obj: Obj) -> Obj:
    """Drop in place what the fleet reconciler never reads."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def run_facing(model: Obj | None) -> tuple[Any, ...]:
    """The part of an InferenceModel's status runs depend on."""
    status = (model or {}).get("status") or {}
    available = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Available"),
        None,
    )
    return (*(status.get(k) for k in RUN_FACING), available)


class KubeFleets(CachedKinds):
    """`FleetCluster` on the official client: informer caches for reads, REST for writes."""

    def __init__(
        self,
        transport: Transport,
        *,
        namespaces: Iterable[str] = (),
        enqueue: Enqueue,
        events: Callable[..., None],
        runs_of_config: Callable[[str], list[str]] = lambda _key: [],
        allow_credentials: bool = False,
    ) -> None:
        super().__init__(transport, namespaces=namespaces, trim=trim)
        self._enqueue = enqueue
        self._events = events
        self._runs_of_config = runs_of_config
        self.allow_credentials = allow_credentials
        self._lock = threading.Lock()
        self._facing: dict[str, tuple[Any, ...]] = {}
        self._targets: dict[str, str] = {}  # config key -> InferenceModel key
        self._configs: dict[str, set[str]] = defaultdict(set)  # InferenceModel -> configs
        for kind in OWN_KINDS:
            self._informers[kind] = self._watch(kind)
        for kind in CHILD_KINDS:
            self._informers[kind] = self._watch(kind, selector=names.MODEL_LABEL)

    # -- informers ---------------------------------------------------------------

    def _on_event(self, kind: str, obj: Obj, *, present: bool) -> None:
        key = object_key(obj)
        written = self._delivered(kind, key, obj, present=present)
        if kind == "InferenceModel":
            self._follow_model(key, obj if present else None)
        if not (present and is_own_write(written, obj)):
            self._enqueue(names.fleet_key(key.split("/", 1)[0]))

    def _follow_model(self, key: str, obj: Obj | None) -> None:
        """Wake the runs of an InferenceModel whose run-facing status changed."""
        facing = run_facing(obj)
        with self._lock:
            moved = self._facing.get(key) != facing
            if obj is None:
                self._facing.pop(key, None)
            else:
                self._facing[key] = facing
            configs = sorted(self._configs.get(key, ())) if moved else []
        for config in configs:
            for run in self._runs_of_config(config):
                self._enqueue(run)

    def on_run_event(self, kind: str, obj: Obj, present: bool) -> None:
        """Index configs whose deploymentRef names an InferenceModel (a `KubeCluster`
        listener)."""
        if kind != "InferenceConfig":
            return
        key = object_key(obj)
        target = uses.target_of(obj) if present else None
        with self._lock:
            old = self._targets.pop(key, None)
            if old is not None:
                self._configs[old].discard(key)
            if target is not None and target.kind == "InferenceModel":
                self._targets[key] = target.key
                self._configs[target.key].add(key)

    def keys(self) -> list[str]:
        """The fleet key of every namespace with a host or an InferenceModel (the resync)."""
        found = {
            k.split("/", 1)[0]
            for kind in ("InferenceHost", "InferenceModel")
            for k in self._keys(kind)
        }
        return [names.fleet_key(ns) for ns in sorted(found)]

    # -- FleetCluster: reads ---------------------------------------------------------

    def _in(self, kind: str, namespace: str) -> list[Obj]:
        prefix = f"{namespace}/"
        found = [
            self._cached(kind, namespace, key.removeprefix(prefix))
            for key in sorted(self._keys(kind))
            if key.startswith(prefix)
        ]
        return [obj for obj in found if obj is not None]

    def hosts(self, namespace: str) -> list[Obj]:
        """The cached InferenceHosts of a namespace."""
        return self._in("InferenceHost", namespace)

    def inference_models(self, namespace: str) -> list[Obj]:
        """The cached InferenceModels of a namespace."""
        return self._in("InferenceModel", namespace)

    def get_inference_model(self, namespace: str, name: str) -> Obj | None:
        """The cached InferenceModel (a run's deploymentRef of that kind)."""
        return self._cached("InferenceModel", namespace, name)

    def get_model(self, namespace: str, name: str) -> Obj | None:
        """The cached Model."""
        return self._cached("Model", namespace, name)

    def children(self, namespace: str) -> FleetChildren:
        """The labelled Services and EndpointSlices of a namespace."""
        services = {s["metadata"]["name"]: s for s in self._in("Service", namespace)}
        return FleetChildren(services=services, slices=self._in("EndpointSlice", namespace))

    def read(self, kind: FleetKind, namespace: str, name: str) -> Obj | None:
        """A live GET; None on 404."""
        obj = self._get(kind, namespace, name)
        return trim(kind, obj) if obj is not None else None

    def host_credentials(self, namespace: str, name: str, key: str) -> str | Problem:
        """The token in a labelled Secret, or why it cannot be had (module doc)."""
        if not self.allow_credentials:
            return Problem("spec.credentials", "CredentialsNotAllowed", CREDENTIALS_OFF)
        try:
            secret = self.transport.request("GET", resource_path("Secret", namespace, name=name))
        except ApiError as exc:
            if exc.is_not_found:
                return Problem(
                    "spec.credentials", "SecretNotFound", f'Secret "{name}" does not exist'
                )
            if exc.status == 403:
                return Problem(
                    "spec.credentials",
                    "CredentialsForbidden",
                    f'reading Secret "{name}" is forbidden to the controller',
                )
            raise
        return _token(secret or {}, name=name, key=key)

    # -- FleetCluster: writes --------------------------------------------------------

    def patch_status(self, kind: StatusKind, namespace: str, name: str, status: Obj) -> Obj:
        """Merge patch of an InferenceHost's or InferenceModel's /status."""
        return self._patch_status(kind, namespace, name, status)

    def _wrote(self, kind: str, obj: Obj) -> Obj:
        obj = self._remember(kind, obj)
        if kind == "InferenceModel":  # our status write: runs see what changed at once
            self._follow_model(object_key(obj), obj)
        return obj

    def emit_event(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Record an Event about a host or an InferenceModel (posted in the background)."""
        self._events(obj, type_=type_, reason=reason, message=message)


def _token(secret: Obj, *, name: str, key: str) -> str | Problem:
    labels = (secret.get("metadata") or {}).get("labels") or {}
    if labels.get(CREDENTIALS_LABEL) != "true":
        return Problem(
            "spec.credentials",
            "CredentialsNotLabelled",
            f'Secret "{name}" lacks the label {CREDENTIALS_LABEL}: "true", by which its owner lets '
            "the controller send it to hosts; label it, or name another Secret",
        )
    value = (secret.get("data") or {}).get(key)
    try:
        token = base64.b64decode(value, validate=True).decode().strip() if value else ""
    except (binascii.Error, UnicodeDecodeError):
        token = ""
    if not token:
        return Problem(
            "spec.credentials.key", "SecretKeyMissing", f'Secret "{name}" has no key "{key}"'
        )
    return token
