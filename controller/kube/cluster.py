# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""`ports.Cluster` on the official client: informer caches for reads, REST for writes.

Everything else in the controller sees plain dicts and the `ports.Cluster`
protocol. The caches are kept here, with small indexes from a run to its
children and from a config to the runs that use it; which events wake which
runs is the core's policy (`controller.core.routing`). Our own writes are
remembered until the watch delivers them, so a read right after a write sees
it, and the watch echoing that write wakes nobody.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

from contracts.resources import GROUP, VERSION
from controller.core import names
from controller.core.ports import ApiError, Children, EventType, Kind, Obj, StatusKind
from controller.core.routing import (
    Generation,
    config_key,
    config_of,
    generation_of,
    is_own_write,
    is_spec_change,
    object_key,
    owner_kind,
    resource_version,
    run_of,
    wakes,
)
from controller.kube.informers import Index, LeanInformer, lister, trim
from controller.kube.transport import JSON_PATCH, MERGE_PATCH, Transport, resource_path

log = logging.getLogger(__name__)
CHILD_KINDS = ("ConfigMap", "Job", "CronJob", "Pod")
SPEC_KINDS = ("InferenceRun", "InferenceConfig")  # reconciled on spec changes only


Listener = Callable[[str, Obj, bool], None]


class Enqueue(Protocol):
    """Queues a run key; `urgent` keys go first (WorkQueue.add)."""

    def __call__(self, key: str, *, urgent: bool = False) -> None: ...


def _drop(record: logging.LogRecord) -> bool:
    """A logging filter that drops everything."""
    return False


class KubeCluster:
    """`ports.Cluster` on the official client: informer caches for reads, REST for writes."""

    def __init__(
        self,
        transport: Transport,
        *,
        namespaces: Iterable[str] = (),
        enqueue: Enqueue,
        identity: str = "longrun-controller",
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.transport = transport
        self.index = Index()
        self._enqueue = enqueue
        self._identity = identity
        self._now = now
        self._namespaces = tuple(namespaces) or (None,)
        self._informers: dict[str, list[LeanInformer]] = {}
        self._synced: dict[int, threading.Event] = {}
        self._generations: dict[str, Generation] = {}
        # Our writes that the watch has not delivered yet: newer than the cache until then.
        self._fresh: dict[tuple[str, str], Obj] = {}
        self._fresh_lock = threading.Lock()
        self._events: queue.Queue[Obj | None] = queue.Queue()
        self._event_thread = threading.Thread(target=self._post_events, name="events", daemon=True)
        self._listeners: list[Listener] = []
        for kind in ("InferenceRun", "InferenceConfig", *CHILD_KINDS):
            self._informers[kind] = [self._informer(kind, ns) for ns in self._namespaces]

    # -- informers ---------------------------------------------------------------

    def _informer(self, kind: str, namespace: str | None) -> LeanInformer:
        selector = None if kind in ("InferenceRun", "InferenceConfig") else names.MANAGED_SELECTOR
        list_func = lister(self.transport, kind, namespace=namespace, selector=selector)
        synced = threading.Event()

        def tracking(**kwargs: Any) -> Any:
            """List or watch, noting when the first list has been cached.

            :rtype: object
            """
            if kwargs.get("watch"):
                synced.set()  # the informer watches only after caching its first list
            return list_func(**kwargs)

        informer = LeanInformer(tracking)
        self._synced[id(informer)] = synced
        for event in (ADDED, MODIFIED):
            informer.add_event_handler(event, self._handler(kind, present=True))
        informer.add_event_handler(DELETED, self._handler(kind, present=False))
        return informer

    def _handler(self, kind: str, *, present: bool) -> Callable[[Any], None]:
        def handle(obj: Any) -> None:
            if not isinstance(obj, dict):
                return
            trim(kind, obj)
            self._on_event(kind, obj, present=present)

        return handle

    def _on_event(self, kind: str, obj: Obj, *, present: bool) -> None:
        key = object_key(obj)
        if kind == "InferenceRun":
            self.index.set_use(key, config_of(obj) if present else None)
        elif (run := run_of(obj)) is not None:
            self.index.set_child(kind, run, key, present=present)
        written = self._delivered(kind, key, obj, present=present)
        found = wakes(
            kind,
            obj,
            present=present,
            spec_changed=kind in SPEC_KINDS
            and self._spec_changed(f"{kind}/{key}", obj, present=present),
            own_write=is_own_write(written, obj),
            users=self.index.users,
        )
        for wake in found:
            self._enqueue(wake.key, urgent=wake.urgent)
        for listener in self._listeners:
            listener(kind, obj, present)

    def add_listener(self, listener: Listener) -> None:
        """Also hand every informer event (kind, object, present) to `listener`: the serving
        adapter follows runs and configs this way, on the same watches (before start)."""
        self._listeners.append(listener)

    def _delivered(self, kind: str, key: str, obj: Obj, *, present: bool) -> Obj | None:
        """Forget our write of `key` once the watch delivers it (or a newer version, or its
        deletion); the write, when this event is exactly it."""
        with self._fresh_lock:
            written = self._fresh.get((kind, key))
            if written is None or (present and resource_version(obj) < resource_version(written)):
                return None
            del self._fresh[(kind, key)]
        return written

    def _spec_changed(self, key: str, obj: Obj, *, present: bool) -> bool:
        if not present:
            self._generations.pop(key, None)
            return True
        seen = self._generations.get(key)
        self._generations[key] = generation_of(obj)
        return is_spec_change(seen, obj)

    def start(self) -> None:
        """Start every informer and the event recorder."""
        self._event_thread.start()
        for informer in self._all():
            informer.start()

    def stop(self) -> None:
        """Stop every informer (joins their threads) after posting queued events."""
        self._events.put(None)
        if self._event_thread.is_alive():
            self._event_thread.join(timeout=10)
        # Stopping an informer closes its watch under its reader, which the client library
        # logs as an unexpected error with a traceback: not an error while we stop.
        informer_log = logging.getLogger(SharedInformer.__module__)
        informer_log.addFilter(_drop)
        try:
            for informer in self._all():
                informer.stop()
        finally:
            informer_log.removeFilter(_drop)

    def wait_synced(self, timeout: float) -> bool:
        """True once every informer has cached its first list."""
        return all(self._synced[id(i)].wait(timeout) for i in self._all())

    def is_synced(self) -> bool:
        """True when every informer has cached its first list."""
        return all(self._synced[id(i)].is_set() for i in self._all())

    def _all(self) -> list[LeanInformer]:
        return [i for group in self._informers.values() for i in group]

    def _cached(self, kind: str, namespace: str, name: str) -> Obj | None:
        key = names.run_key(namespace, name)
        found = next(
            (o for i in self._informers[kind] if (o := i.cache.get_by_key(key)) is not None), None
        )
        with self._fresh_lock:
            written = self._fresh.get((kind, key))
        if written is not None and resource_version(written) > resource_version(found):
            found = written
        return dict(found) if found is not None else None

    def _write_through(self, kind: str, obj: Obj) -> None:
        # Our own write is newer than the cache until the watch delivers it.
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        if self._namespaces != (None,) and namespace not in self._namespaces:
            return
        key = object_key(obj)
        with self._fresh_lock:
            self._fresh[(kind, key)] = trim(kind, obj)
        if kind in CHILD_KINDS and (run := run_of(obj)) is not None:
            self.index.set_child(kind, run, key, present=True)

    def run_keys(self) -> list[str]:
        """Every cached run's key."""
        return [k for i in self._informers["InferenceRun"] for k in i.cache.list_keys()]

    def config_keys(self) -> list[str]:
        """Every cached config's work-queue key (`InferenceConfig/namespace/name`)."""
        informers = self._informers["InferenceConfig"]
        return [config_key(k) for i in informers for k in i.cache.list_keys()]

    def phase_counts(self) -> dict[str, int]:
        """Cached runs per status phase (for `longrun_runs`)."""
        counts: dict[str, int] = defaultdict(int)
        for informer in self._informers["InferenceRun"]:
            for run in informer.cache.list():
                counts[str((run.get("status") or {}).get("phase") or "Unknown")] += 1
        return dict(counts)

    # -- ports.Cluster: reads --------------------------------------------------------

    def get_run(self, namespace: str, name: str) -> Obj | None:
        """The cached InferenceRun."""
        return self._cached("InferenceRun", namespace, name)

    def get_config(self, namespace: str, name: str) -> Obj | None:
        """The cached InferenceConfig."""
        return self._cached("InferenceConfig", namespace, name)

    def children(self, namespace: str, run_name: str) -> Children:
        """The cached objects made for a run."""
        run = names.run_key(namespace, run_name)
        found: dict[str, list[Obj]] = {}
        for kind in CHILD_KINDS:
            objs = (self._cached(kind, *names.split_key(k)) for k in self.index.children(kind, run))
            found[kind] = [o for o in objs if o is not None]
        jobs = found["Job"]
        return Children(
            config_map=next(iter(found["ConfigMap"]), None),
            job=next((j for j in jobs if owner_kind(j) == "InferenceRun"), None),
            cron_job=next(iter(found["CronJob"]), None),
            jobs=[j for j in jobs if owner_kind(j) == "CronJob"],
            pods=found["Pod"],
        )

    def job_pods(self, namespace: str, job_name: str) -> list[Obj]:
        """A live list of a Job's pods."""
        query = [("labelSelector", f"batch.kubernetes.io/job-name={job_name}")]
        data = self.transport.request("GET", resource_path("Pod", namespace), query=query)
        return [trim("Pod", item) for item in (data or {}).get("items") or []]

    def pod_log(
        self, namespace: str, name: str, *, container: str, tail_lines: int, limit_bytes: int
    ) -> str:
        """The tail of a container's log (`pods/log`, read-only)."""
        query = [
            ("container", container),
            ("tailLines", tail_lines),
            ("limitBytes", limit_bytes),
        ]
        return self.transport.request_text(
            resource_path("Pod", namespace, name=name, sub="log"), query=query
        )

    def read(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """A live GET; None on 404."""
        try:
            obj = self.transport.request("GET", resource_path(kind, namespace, name=name))
        except ApiError as exc:
            if exc.is_not_found:
                return None
            raise
        return obj if isinstance(obj, dict) else None

    # -- ports.Cluster: writes ------------------------------------------------------

    def create(self, kind: Kind, body: Obj) -> Obj:
        """POST an object."""
        namespace = body["metadata"]["namespace"]
        obj: Obj = self.transport.request("POST", resource_path(kind, namespace), body=body)
        self._write_through(kind, obj)
        return obj

    def patch(self, kind: Kind, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        """Merge patch (dict) or JSON patch (list)."""
        ctype = JSON_PATCH if isinstance(body, list) else MERGE_PATCH
        path = resource_path(kind, namespace, name=name)
        obj: Obj = self.transport.request("PATCH", path, body=body, content_type=ctype)
        self._write_through(kind, obj)
        return obj

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, kind: StatusKind = "InferenceRun"
    ) -> Obj:
        """Merge patch of a run's (or a config's) /status."""
        path = resource_path(kind, namespace, name=name, sub="status")
        body = {"status": status}
        obj: Obj = self.transport.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        self._write_through(kind, obj)
        return obj

    def delete(self, kind: Kind, namespace: str, name: str, *, uid: str) -> None:
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
        """Queue a core/v1 Event about a run or config; a background thread posts it (as
        client-go's EventBroadcaster does), so events never slow a reconcile down."""
        self._events.put(self._event_body(obj, type_=type_, reason=reason, message=message))

    def _post_events(self) -> None:
        while (body := self._events.get()) is not None:
            try:
                namespace = body["metadata"]["namespace"]
                self.transport.request("POST", resource_path("Event", namespace), body=body)
            except ApiError as exc:
                log.warning("could not record event %s: %s", body.get("reason"), exc)

    def _event_body(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> Obj:
        meta = obj.get("metadata") or {}
        stamp = self._now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": obj.get("kind") or "InferenceRun",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "longrun-controller"},
            "reportingComponent": "longrun.dev/controller",
            "reportingInstance": self._identity[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        return body
