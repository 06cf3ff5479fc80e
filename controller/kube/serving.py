# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""`ServingCluster` (controller/core/serving/ports.py) on the official client.

A separate adapter beside `KubeCluster`, on the same `Transport` and `LeanInformer`:
informers for ModelDeployments, Models and the children labelled `longrun.dev/model-deployment`
(Deployments, Services, ConfigMaps, PVCs, NetworkPolicies, Ingresses, HPAs, Pods; cert-manager
Certificates once discovery shows them, at start or a later resync). Runs and configs are not
watched twice: `KubeCluster` hands its events to `on_run_event`, which keeps the index of which
runs use which deployment (a config's `model.deploymentRef`), for on-demand scaling, and wakes
the runs of a deployment whose endpoint or availability changed.

No Secret is ever watched, listed or read (docs/security.md): the API-key Secret is
created and patched, and what comes back from those writes is stripped of its data
before anyone sees it. As in `KubeCluster` (both on `cached.py`), our own writes are
remembered until the watch delivers them, so a read right after a write sees it and the
echo wakes nobody.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from contracts.serving import ROTATE_KEYS_ANNOTATION
from controller.core.ports import ApiError, EventType, Obj
from controller.core.routing import (
    Generation,
    generation_of,
    is_own_write,
    is_spec_change,
    object_key,
)
from controller.core.serving import names, uses
from controller.core.serving.catalog import model_of
from controller.core.serving.observed import ServingChildren
from controller.core.serving.ports import ReadKind, StatusKind, Usage
from controller.kube.cached import CachedKinds
from controller.kube.cluster import Enqueue
from controller.kube.serving_objects import (
    CHILD_KINDS,
    CHILD_NAMES,
    OWN_KINDS,
    deployment_of,
    run_facing,
    trim,
    without_data,
)
from controller.kube.transport import Transport
from controller.kube.usage import RunUse, UsageIndex

log = logging.getLogger(__name__)
CERTIFICATES = ("/apis/cert-manager.io/v1", "certificates")


class EventSink(Protocol):
    """Records a Kubernetes Event (`KubeCluster.emit_event`)."""

    def __call__(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None: ...


class KubeServing(CachedKinds):
    """`ServingCluster` on the official client: informer caches for reads, REST for writes."""

    def __init__(
        self,
        transport: Transport,
        *,
        namespaces: Iterable[str] = (),
        enqueue: Enqueue,
        events: EventSink,
        runs_of_config: Callable[[str], list[str]] = lambda _key: [],
    ) -> None:
        super().__init__(transport, namespaces=namespaces, trim=trim)
        self.usage_index = UsageIndex()
        self._enqueue = enqueue
        self._events = events
        self._runs_of_config = runs_of_config
        self._lock = threading.Lock()
        self._generations: dict[str, Generation] = {}
        self._facing: dict[str, tuple[Any, ...]] = {}
        self._rotations: dict[str, str | None] = {}
        self._pods: dict[str, set[str]] = defaultdict(set)  # deployment key -> pod keys
        self._users: dict[str, set[str]] = defaultdict(set)  # model key -> deployment keys
        self._model_of: dict[str, str] = {}  # deployment key -> model key
        for kind in OWN_KINDS:
            self._informers[kind] = self._watch(kind)
        for kind in CHILD_KINDS:
            self._informers[kind] = self._watch(kind, selector=names.DEPLOYMENT_LABEL)
        self._informers["Certificate"] = []  # filled once cert-manager is seen (discover)

    # -- informers ---------------------------------------------------------------

    def _on_event(self, kind: str, obj: Obj, *, present: bool) -> None:
        key = object_key(obj)
        written = self._delivered(kind, key, obj, present=present)
        if kind == "ModelDeployment":
            self._on_deployment(key, obj, present=present)
        elif kind == "Model":
            self._on_model(key, obj, present=present)
        else:
            self._on_child(kind, key, obj, present=present, own=is_own_write(written, obj))

    def _on_deployment(self, key: str, obj: Obj, *, present: bool) -> None:
        moved = self._index_deployment(key, obj if present else None)
        rotation = ((obj.get("metadata") or {}).get("annotations") or {}).get(
            ROTATE_KEYS_ANNOTATION
        )
        rotation_changed = self._rotation_changed(key, rotation if present else None)
        spec_changed = self._spec_changed(f"ModelDeployment/{key}", obj, present=present)
        if spec_changed or rotation_changed:
            new = present and not (obj.get("status") or {}).get("phase")
            self._enqueue(names.deployment_key(key), urgent=new)
        if moved:  # its endpoint or availability changed: the runs that use it look again
            for config in self.usage_index.configs_of(key):
                for run in self._runs_of_config(config):
                    self._enqueue(run)

    def _index_deployment(self, key: str, obj: Obj | None) -> bool:
        """Record a deployment's Model and run-facing status (None: it is gone); whether
        that status changed."""
        with self._lock:
            old_model = self._model_of.pop(key, None)
            if old_model is not None:
                self._users[old_model].discard(key)
            model = model_of(obj) if obj is not None else None
            if model is not None:
                self._model_of[key] = model
                self._users[model].add(key)
            facing = run_facing(obj)
            moved = self._facing.get(key) != facing
            if obj is None:
                self._facing.pop(key, None)
                self._pods.pop(key, None)
            else:
                self._facing[key] = facing
        return moved

    def _on_model(self, key: str, obj: Obj, *, present: bool) -> None:
        if self._spec_changed(f"Model/{key}", obj, present=present):
            self._enqueue(names.model_key(key))
            with self._lock:
                users = sorted(self._users.get(key, ()))
            for deployment in users:
                self._enqueue(names.deployment_key(deployment))

    def _on_child(self, kind: str, key: str, obj: Obj, *, present: bool, own: bool) -> None:
        owner = deployment_of(obj)
        if owner is None:
            return
        if kind == "Pod":
            with self._lock:
                (self._pods[owner].add if present else self._pods[owner].discard)(key)
        if not (present and own):  # the echo of our own write wakes nobody
            self._enqueue(names.deployment_key(owner))

    def _rotation_changed(self, key: str, value: str | None) -> bool:
        # A key rotation is an annotation: it changes no generation, yet must be seen.
        with self._lock:
            seen = self._rotations.pop(key, None)
            if value is not None:
                self._rotations[key] = value
        return seen != value

    def _spec_changed(self, key: str, obj: Obj, *, present: bool) -> bool:
        with self._lock:
            if not present:
                self._generations.pop(key, None)
                return True
            seen = self._generations.get(key)
            self._generations[key] = generation_of(obj)
        return is_spec_change(seen, obj)

    # -- runs and configs, from KubeCluster's events -------------------------------

    def on_run_event(self, kind: str, obj: Obj, present: bool) -> None:
        """Follow runs and configs (a `KubeCluster` listener) for on-demand scaling."""
        key = object_key(obj)
        if kind == "InferenceConfig":
            target = uses.target_of(obj) if present else None
            old, new = self.usage_index.set_config(key, target.key if target else None)
            if old != new:
                for deployment in {old, new} - {None}:
                    self._enqueue(names.deployment_key(str(deployment)))
        elif kind == "InferenceRun":
            use = RunUse(uses.deployment_of(obj), uses.is_active(obj), uses.finished_at(obj))
            for deployment in sorted(self.usage_index.set_run(key, use if present else None)):
                self._enqueue(names.deployment_key(deployment), urgent=use.active and present)

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start every informer, and the Certificate ones if cert-manager is served."""
        super().start()
        self.discover()

    def discover(self) -> bool:
        """Watch Certificates once cert-manager is served: at start and on every resync (it
        may come after the controller). True when this call started the informers."""
        if self._informers["Certificate"] or not self._serves_certificates():
            return False
        informers = self._watch("Certificate", selector=names.DEPLOYMENT_LABEL)
        for informer in informers:
            informer.start()
        self._informers["Certificate"] = informers
        return True

    def _serves_certificates(self) -> bool:
        prefix, plural = CERTIFICATES
        try:
            found = self.transport.request("GET", prefix)
        except ApiError as exc:
            if exc.is_not_found:
                return False
            raise
        return any(r.get("name") == plural for r in (found or {}).get("resources") or [])

    def keys(self) -> list[str]:
        """Work-queue keys of every cached ModelDeployment and Model (for the resync)."""
        found = [names.deployment_key(k) for k in self._keys("ModelDeployment")]
        return found + [names.model_key(k) for k in self._keys("Model")]

    # -- ServingCluster: reads ------------------------------------------------------

    def get_deployment(self, namespace: str, name: str) -> Obj | None:
        """The cached ModelDeployment."""
        return self._cached("ModelDeployment", namespace, name)

    def get_model(self, namespace: str, name: str) -> Obj | None:
        """The cached Model."""
        return self._cached("Model", namespace, name)

    def children(self, namespace: str, name: str) -> ServingChildren:
        """The cached children of a deployment, by name; its pods by the index."""
        found = {
            kind: self._cached(kind, namespace, child(name)) for kind, child in CHILD_NAMES.items()
        }
        with self._lock:
            pod_keys = sorted(self._pods.get(f"{namespace}/{name}", ()))
        pods = [p for k in pod_keys if (p := self._cached("Pod", *k.split("/", 1))) is not None]
        return ServingChildren(
            deployment=found["Deployment"],
            service=found["Service"],
            config_map=found["ConfigMap"],
            claim=found["PersistentVolumeClaim"],
            network_policy=found["NetworkPolicy"],
            hpa=found["HorizontalPodAutoscaler"],
            certificate=found["Certificate"],
            ingress=found["Ingress"],
            pods=pods,
        )

    def usage(self, namespace: str, name: str) -> Usage:
        """The runs using the deployment now."""
        return self.usage_index.usage(f"{namespace}/{name}")

    def read(self, kind: ReadKind, namespace: str, name: str) -> Obj | None:
        """A live GET (never of a Secret); None on 404."""
        obj = self._get(kind, namespace, name)
        return trim(kind, obj) if obj is not None else None

    # -- ServingCluster: writes -----------------------------------------------------

    def patch_status(self, kind: StatusKind, namespace: str, name: str, status: Obj) -> Obj:
        """Merge patch of a ModelDeployment's or Model's /status."""
        return self._patch_status(kind, namespace, name, status)

    def _wrote(self, kind: str, obj: Obj) -> Obj:
        # create and patch (CachedKinds) answer with this: a Secret without its data.
        if kind == "Secret":
            return without_data(obj)
        obj = self._remember(kind, obj)
        if kind == "ModelDeployment":  # our status write: runs see what changed at once
            self._on_deployment(object_key(obj), obj, present=True)
        return obj

    def emit_event(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Record an Event about a ModelDeployment (posted in the background)."""
        self._events(obj, type_=type_, reason=reason, message=message)
