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
before anyone sees it. As in `KubeCluster`, our own writes are remembered until the
watch delivers them, so a read right after a write sees it and the echo wakes nobody.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

from contracts.serving import ROTATE_KEYS_ANNOTATION
from controller.core.ports import ApiError, EventType, Obj
from controller.core.routing import (
    Generation,
    config_of,
    generation_of,
    is_own_write,
    is_spec_change,
    object_key,
    resource_version,
)
from controller.core.serving import names, uses
from controller.core.serving.observed import ServingChildren
from controller.core.serving.ports import ReadKind, StatusKind, Usage
from controller.core.serving.writes import ServingKind
from controller.kube.cluster import Enqueue
from controller.kube.informers import LeanInformer, lister
from controller.kube.serving_objects import (
    CHILD_KINDS,
    CHILD_NAMES,
    OWN_KINDS,
    deployment_of,
    model_of,
    run_facing,
    trim,
    without_data,
)
from controller.kube.transport import JSON_PATCH, MERGE_PATCH, Transport, resource_path
from controller.kube.usage import RunUse, UsageIndex

log = logging.getLogger(__name__)
CERTIFICATES = ("/apis/cert-manager.io/v1", "certificates")


class EventSink(Protocol):
    """Records a Kubernetes Event (`KubeCluster.emit_event`)."""

    def __call__(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None: ...


class KubeServing:
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
        self.transport = transport
        self.usage_index = UsageIndex()
        self._enqueue = enqueue
        self._events = events
        self._runs_of_config = runs_of_config
        self._namespaces = tuple(namespaces) or (None,)
        self._informers: dict[str, list[LeanInformer]] = {}
        self._synced: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._generations: dict[str, Generation] = {}
        self._facing: dict[str, tuple[Any, ...]] = {}
        self._rotations: dict[str, str | None] = {}
        self._pods: dict[str, set[str]] = defaultdict(set)  # deployment key -> pod keys
        self._users: dict[str, set[str]] = defaultdict(set)  # model key -> deployment keys
        self._model_of: dict[str, str] = {}  # deployment key -> model key
        self._fresh: dict[tuple[str, str], Obj] = {}
        for kind in (*OWN_KINDS, *CHILD_KINDS):
            self._informers[kind] = [self._informer(kind, ns) for ns in self._namespaces]
        self._informers["Certificate"] = []  # filled once cert-manager is seen (discover)

    # -- informers ---------------------------------------------------------------

    def _informer(self, kind: str, namespace: str | None) -> LeanInformer:
        selector = None if kind in OWN_KINDS else names.DEPLOYMENT_LABEL
        list_func = lister(self.transport, kind, namespace=namespace, selector=selector)
        synced = threading.Event()

        def tracking(**kwargs: Any) -> Any:
            """List or watch, noting when the first list has been cached.

            :rtype: object
            """
            if kwargs.get("watch"):
                synced.set()
            result = list_func(**kwargs)
            if not kwargs.get("watch"):
                for item in result.items:
                    trim(kind, item)
            return result

        informer = LeanInformer(tracking)
        self._synced[id(informer)] = synced
        for event in (ADDED, MODIFIED):
            informer.add_event_handler(event, self._handler(kind, present=True))
        informer.add_event_handler(DELETED, self._handler(kind, present=False))
        return informer

    def _handler(self, kind: str, *, present: bool) -> Callable[[Any], None]:
        def handle(obj: Any) -> None:
            if isinstance(obj, dict):
                self._on_event(kind, trim(kind, obj), present=present)

        return handle

    def _on_event(self, kind: str, obj: Obj, *, present: bool) -> None:
        key = object_key(obj)
        written = self._delivered(kind, key, obj, present=present)
        if kind == "ModelDeployment":
            self._on_deployment(key, obj, present=present)
        elif kind == "Model":
            self._on_model(key, obj, present=present)
        else:
            self._on_child(kind, key, obj, present=present, own=is_own_write(written, obj))

    def _delivered(self, kind: str, key: str, obj: Obj, *, present: bool) -> Obj | None:
        """Forget our write of `key` once the watch delivers it (or a newer version, or its
        deletion); the write, when this event is exactly it."""
        with self._lock:
            written = self._fresh.get((kind, key))
            if written is None or (present and resource_version(obj) < resource_version(written)):
                return None
            del self._fresh[(kind, key)]
        return written

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
            use = RunUse(config_of(obj), uses.is_active(obj), uses.finished_at(obj))
            deployment, changed = self.usage_index.set_run(key, use if present else None)
            if deployment is not None and changed:
                self._enqueue(names.deployment_key(deployment), urgent=use.active and present)

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start every informer, and the Certificate ones if cert-manager is served."""
        for informer in self._all():
            informer.start()
        self.discover()

    def discover(self) -> bool:
        """Watch Certificates once cert-manager is served: at start and on every resync (it
        may come after the controller). True when this call started the informers."""
        if self._informers["Certificate"] or not self._serves_certificates():
            return False
        informers = [self._informer("Certificate", ns) for ns in self._namespaces]
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

    def stop(self) -> None:
        """Stop every informer (joins their threads)."""
        informer_log = logging.getLogger(SharedInformer.__module__)
        informer_log.addFilter(lambda _record: False)
        for informer in self._all():
            informer.stop()

    def wait_synced(self, timeout: float) -> bool:
        """True once every informer has cached its first list."""
        return all(self._synced[id(i)].wait(timeout) for i in self._all())

    def is_synced(self) -> bool:
        """True when every informer has cached its first list."""
        return all(self._synced[id(i)].is_set() for i in self._all())

    def _all(self) -> list[LeanInformer]:
        return [i for group in self._informers.values() for i in group]

    def keys(self) -> list[str]:
        """Work-queue keys of every cached ModelDeployment and Model (for the resync)."""
        found = [names.deployment_key(k) for k in self._keys("ModelDeployment")]
        return found + [names.model_key(k) for k in self._keys("Model")]

    def _keys(self, kind: str) -> list[str]:
        return [k for i in self._informers[kind] for k in i.cache.list_keys()]

    def _cached(self, kind: str, namespace: str, name: str) -> Obj | None:
        key = f"{namespace}/{name}"
        found = next(
            (o for i in self._informers.get(kind, ()) if (o := i.cache.get_by_key(key))), None
        )
        with self._lock:
            written = self._fresh.get((kind, key))
        if written is not None and resource_version(written) > resource_version(found):
            found = written
        return dict(found) if found is not None else None

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
        try:
            obj = self.transport.request("GET", resource_path(kind, namespace, name=name))
        except ApiError as exc:
            if exc.is_not_found:
                return None
            raise
        return trim(kind, obj) if isinstance(obj, dict) else None

    # -- ServingCluster: writes -----------------------------------------------------

    def create(self, kind: ServingKind, body: Obj) -> Obj:
        """POST an object; a Secret comes back without its data."""
        namespace = body["metadata"]["namespace"]
        obj: Obj = self.transport.request("POST", resource_path(kind, namespace), body=body)
        return self._written(kind, obj)

    def patch(self, kind: ServingKind, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        """Merge patch (dict) or JSON patch (list); a Secret comes back without its data."""
        ctype = JSON_PATCH if isinstance(body, list) else MERGE_PATCH
        path = resource_path(kind, namespace, name=name)
        obj: Obj = self.transport.request("PATCH", path, body=body, content_type=ctype)
        return self._written(kind, obj)

    def patch_status(self, kind: StatusKind, namespace: str, name: str, status: Obj) -> Obj:
        """Merge patch of a ModelDeployment's or Model's /status."""
        path = resource_path(kind, namespace, name=name, sub="status")
        body = {"status": status}
        obj: Obj = self.transport.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        return self._written(kind, obj)

    def _written(self, kind: str, obj: Obj) -> Obj:
        if kind == "Secret":
            return without_data(obj)
        trim(kind, obj)
        with self._lock:
            self._fresh[(kind, object_key(obj))] = obj
        if kind == "ModelDeployment":  # our status write: runs see what changed at once
            self._on_deployment(object_key(obj), obj, present=True)
        return obj

    def delete(self, kind: ServingKind, namespace: str, name: str, *, uid: str) -> None:
        """DELETE with Background propagation and a UID precondition; 404 is success."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": uid},
        }
        try:
            self.transport.request("DELETE", resource_path(kind, namespace, name=name), body=body)
        except ApiError as exc:
            if not exc.is_not_found:
                raise

    def emit_event(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Record an Event about a ModelDeployment (posted in the background)."""
        self._events(obj, type_=type_, reason=reason, message=message)
