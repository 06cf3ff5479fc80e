# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""The one door to Kubernetes: requests, informers and leader election on the official client.

Everything else in the controller sees plain dicts and the `ports.Cluster`
protocol. Choices made here, and why:
- Requests go through the client's `ApiClient` serialisation/auth/transport but
  skip its model classes: objects stay dicts (a third of the memory, and the
  reconciler wants dicts anyway).
- `kubernetes.informer.SharedInformer` does list+watch, reconnects, and relists
  after 410 Gone. Its cache holds dicts; handlers trim what we never read
  (managedFields, pod and job specs) in place and keep small indexes from a run
  to its children and from a config to the runs that use it.
- Leader election is `kubernetes.leaderelection` on a `LeaseLock` whose client
  is ours (the stock lock builds one from the global default configuration).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import queue
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer
from kubernetes.informer import informer as informer_module
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
from kubernetes.watch import Watch

from contracts.resources import GROUP, VERSION
from controller import names
from controller.ports import ApiError, Children, EventType, Kind, Obj

log = logging.getLogger(__name__)
CRD_PREFIX = f"/apis/{GROUP}/{VERSION}"
PATHS: dict[str, tuple[str, str]] = {
    "InferenceRun": (CRD_PREFIX, "inferenceruns"),
    "InferenceConfig": (CRD_PREFIX, "inferenceconfigs"),
    "Job": ("/apis/batch/v1", "jobs"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Pod": ("/api/v1", "pods"),
    "Event": ("/api/v1", "events"),
}
CHILD_KINDS = ("ConfigMap", "Job", "CronJob", "Pod")
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CONNECT_TIMEOUT, READ_TIMEOUT = 10.0, 60.0  # seconds, for every request but watches


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> Any:
    """An ApiClient from a kubeconfig file, else the in-cluster service account."""
    if kubeconfig:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
        return k8s.ApiClient(configuration)
    try:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(context=context, client_configuration=configuration)
    return k8s.ApiClient(configuration)


def with_pool_size(api_client: Any, size: int) -> Any:
    """A copy of `api_client` whose connection pool fits every watch plus every worker, with
    TCP keepalive on its sockets.

    Each informer holds one connection open for its watch; with the default pool
    (5 per CPU) the workers' requests would keep opening and discarding connections.
    Keepalive (the client's `keep_alive`: client-go's timings, 30 s idle, then 9 probes
    15 s apart) ends a watch whose peer vanished without a FIN or RST (a node lost, an idle
    connection dropped by a load balancer), so the informer reconnects instead of waiting
    on a dead socket for ever; watches have no read timeout (see `Transport.stream`).
    """
    configuration = copy.deepcopy(api_client.configuration)
    configuration.connection_pool_maxsize = max(size, configuration.connection_pool_maxsize or 0)
    configuration.keep_alive = True
    return k8s.ApiClient(configuration)


def resource_path(
    kind: str, namespace: str | None = None, *, name: str | None = None, sub: str | None = None
) -> str:
    """The REST path of a collection or an object."""
    prefix, plural = PATHS[kind]
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    if name:
        path += f"/{name}"
    return f"{path}/{sub}" if sub else path


class Transport:
    """Raw JSON requests through the official client's ApiClient (auth, TLS, pooling)."""

    def __init__(
        self,
        api_client: Any,
        *,
        on_request: Callable[[str], None] | None = None,
        timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT),
    ):
        self.api_client = api_client
        self._on_request = on_request
        self.timeout = timeout  # (connect, read) seconds, for every request but watches

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send a request; the decoded JSON body, or ApiError."""
        resp = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=self.timeout
        )
        data = resp.read()
        if not 200 <= resp.status < 300:
            raise _api_error(resp.status, data, headers=resp.headers)
        return json.loads(data) if data else None

    def stream(self, path: str, *, query: list[tuple[str, Any]]) -> Any:
        """An open watch response (urllib3), for `kubernetes.watch.Watch`.

        No client-side timeout: the server ends the watch (`timeoutSeconds`). A socket
        read timeout here broke resumption when the server restarted mid-watch
        (tests/controller/emulated/test_resilience.py caught it).
        """
        resp = self._send(
            "GET", path, query=query, body=None, content_type="application/json", timeout=None
        )
        if not 200 <= resp.status < 300:
            data = resp.read()
            raise ApiException(status=resp.status, reason=str(data[:200]))
        return resp.response

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Any,
        body: Any,
        content_type: str,
        timeout: tuple[float, float] | None,
    ) -> Any:
        if self._on_request is not None:
            self._on_request(method)
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            # Timeouts: a half-open connection must fail, not hang a worker forever.
            return self.api_client.call_api(*params, _request_timeout=timeout)
        except ApiException as exc:
            raise ApiError(int(exc.status or 0), str(exc.reason)) from exc
        except Exception as exc:  # connection refused, reset, timeouts
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc


def _api_error(status: int, data: bytes, *, headers: Any) -> ApiError:
    message = data.decode("utf-8", "replace")[:500] if data else ""
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(data).get("message", message)
    retry = headers.get("Retry-After") if headers is not None else None
    try:
        retry_after = float(retry) if retry else None
    except ValueError:
        retry_after = None
    return ApiError(status, message, retry_after=retry_after)


def trim(kind: str, obj: Obj) -> Obj:
    """Drop in place what the controller never reads, to keep the caches small."""
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    if kind == "Pod":
        obj.pop("spec", None)
        status = obj.get("status") or {}
        for key in ("conditions", "podIPs", "podIP", "hostIP", "hostIPs", "initContainerStatuses"):
            status.pop(key, None)
    elif kind == "Job":
        (obj.get("spec") or {}).pop("template", None)
    return obj


def lister(transport: Transport, kind: str, *, namespace: str | None, selector: str | None) -> Any:
    """A list/watch function in the shape SharedInformer and Watch expect."""
    path = resource_path(kind, namespace)

    def list_or_watch(**kwargs: Any) -> Any:
        """List or watch `kind`.

        :rtype: object
        """
        query = [(k, v) for k, v in kwargs.items() if not k.startswith("_") and v is not None]
        if selector:
            query.append(("labelSelector", selector))
        query = [(_camel(k), v) for k, v in query]
        if kwargs.get("watch"):
            # client-go's reflector: the server ends every watch after 5-10 minutes (randomised
            # so replicas do not reconnect in step); the informer resumes from its version.
            seconds = int(kwargs.get("timeout_seconds") or random.randint(300, 600))
            query = [(k, v) for k, v in query if k != "timeoutSeconds"]
            query += [("timeoutSeconds", seconds), ("allowWatchBookmarks", True)]
            return transport.stream(path, query=query)
        try:
            data = transport.request("GET", path, query=query)
        except ApiError as exc:
            raise ApiException(status=exc.status, reason=exc.message) from exc
        items = [trim(kind, item) for item in data.get("items") or []]
        meta = SimpleNamespace(resource_version=(data.get("metadata") or {}).get("resourceVersion"))
        return SimpleNamespace(items=items, metadata=meta)

    return list_or_watch


class LeanWatch(Watch):
    """`kubernetes.watch.Watch` that decodes each event of an untyped watch once.

    For a list function typed `object` (ours: the informers keep plain dicts), the client's
    `unmarshal_event` decodes the line, encodes the object again and decodes that copy
    (`ApiClient.deserialize`), which yields an equal dict: three times the JSON work on the
    controller's hottest path, every watch event of every Pod and Job. Here: one decode, the
    same event dict, the same resourceVersion bookkeeping. Typed watches are left as they are.
    """

    def unmarshal_event(self, data: str, return_type: Any) -> Any:
        if return_type != "object":
            return super().unmarshal_event(data, return_type)
        if not data or data.isspace():
            return None
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            return None
        event["raw_object"] = obj = event.get("object")
        if event.get("type") != "ERROR" and isinstance(obj, dict):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = version
        return event


# SharedInformer creates its Watch itself, by this module-level name.
setattr(informer_module, "Watch", LeanWatch)  # noqa: B010 (not re-exported there)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def owner_kind(obj: Obj) -> str | None:
    """The kind of the controller owner reference, if any."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


def _rv(obj: Obj | None) -> int:
    try:
        return int(_meta(obj or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Index:
    """Run key -> child keys per kind, and config key -> run keys; kept by event handlers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._children: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._users: dict[str, set[str]] = defaultdict(set)
        self._uses: dict[str, str] = {}

    def set_child(self, kind: str, run: str, key: str, *, present: bool) -> None:
        """Record (or forget) that `key` of `kind` belongs to run `run`."""
        with self._lock:
            bucket = self._children[(kind, run)]
            if present:
                bucket.add(key)
            else:
                bucket.discard(key)
                if not bucket:
                    del self._children[(kind, run)]

    def children(self, kind: str, run: str) -> list[str]:
        """Keys of `kind` belonging to `run`."""
        with self._lock:
            return sorted(self._children.get((kind, run), ()))

    def set_use(self, run: str, config: str | None) -> None:
        """Record which config a run references (None: forget the run)."""
        with self._lock:
            old = self._uses.pop(run, None)
            if old is not None:
                self._users[old].discard(run)
            if config is not None:
                self._uses[run] = config
                self._users[config].add(run)

    def users(self, config: str) -> list[str]:
        """Runs referencing `config`."""
        with self._lock:
            return sorted(self._users.get(config, ()))


def run_of(obj: Obj) -> str | None:
    """The key of the run an object was made for (from our annotation)."""
    meta = _meta(obj)
    name = (meta.get("annotations") or {}).get(names.RUN_ANNOTATION)
    return names.run_key(meta.get("namespace", ""), name) if name else None


def config_of(run: Obj) -> str:
    """The key of the config a run references."""
    meta, spec = _meta(run), run.get("spec") or {}
    ref = spec.get("configRef") or {}
    return names.run_key(ref.get("namespace") or meta.get("namespace", ""), ref.get("name", ""))


class Enqueue(Protocol):
    """Queues a run key; `urgent` keys go first (WorkQueue.add)."""

    def __call__(self, key: str, *, urgent: bool = False) -> None: ...


def is_new_run(run: Obj) -> bool:
    """True for a run no controller has reported on yet: it has no status phase."""
    return not (run.get("status") or {}).get("phase")


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
        self._informers: dict[str, list[SharedInformer]] = {}
        self._synced: dict[int, threading.Event] = {}
        self._generations: dict[str, tuple[str, int]] = {}
        self._written: dict[tuple[str, str], int] = {}
        self._written_lock = threading.Lock()
        self._events: queue.Queue[Obj | None] = queue.Queue()
        self._event_thread = threading.Thread(target=self._post_events, name="events", daemon=True)
        for kind in ("InferenceRun", "InferenceConfig", *CHILD_KINDS):
            self._informers[kind] = [self._informer(kind, ns) for ns in self._namespaces]

    # -- informers ---------------------------------------------------------------

    def _informer(self, kind: str, namespace: str | None) -> SharedInformer:
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

        informer = SharedInformer(tracking, namespace=None)
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
        meta = _meta(obj)
        key = names.run_key(meta.get("namespace", ""), meta.get("name", ""))
        if kind == "InferenceRun":
            self.index.set_use(key, config_of(obj) if present else None)
            if self._is_spec_change(key, obj, present=present):
                # A new run waits for nothing but its Job: it goes before the others.
                self._enqueue(key, urgent=present and is_new_run(obj))
        elif kind == "InferenceConfig":
            for user in self.index.users(key):
                self._enqueue(user)
        elif run := run_of(obj):
            self.index.set_child(kind, run, key, present=present)
            if not (present and self._is_own_write(kind, key, obj)):
                self._enqueue(run)

    def _is_own_write(self, kind: str, key: str, obj: Obj) -> bool:
        # The watch echoing an object we wrote (and already reconciled with) needs no pass.
        with self._written_lock:
            written = self._written.pop((kind, key), None)
        return written is not None and written == _rv(obj)

    def _is_spec_change(self, key: str, obj: Obj, *, present: bool) -> bool:
        # controller-runtime's GenerationChangedPredicate: a status-only update (most
        # often our own) needs no reconcile; the periodic resync covers the rest.
        meta = _meta(obj)
        generation = int(meta.get("generation") or 0)
        seen = self._generations.get(key)
        if not present:
            self._generations.pop(key, None)
            return True
        self._generations[key] = (uid := meta.get("uid", ""), generation)
        # A run deleted and created again under the same name (seen through a relist as one
        # MODIFIED) has a new uid but may have the same generation.
        return seen != (uid, generation) or bool(meta.get("deletionTimestamp"))

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

    def _all(self) -> list[SharedInformer]:
        return [i for group in self._informers.values() for i in group]

    def _cached(self, kind: str, namespace: str, name: str) -> Obj | None:
        key = names.run_key(namespace, name)
        for informer in self._informers[kind]:
            found = informer.cache.get_by_key(key)
            if found is not None:
                return dict(found)
        return None

    def _write_through(self, kind: str, obj: Obj) -> None:
        # Our own write is newer than the cache until the watch delivers it.
        meta = _meta(obj)
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        informer = self._informer_for(kind, namespace)
        current = self._cached(kind, namespace, name)
        if informer is None or (current is not None and _rv(obj) <= _rv(current)):
            return
        informer.cache._put(trim(kind, obj))
        if (run := run_of(obj)) and kind in CHILD_KINDS:
            key = names.run_key(namespace, name)
            self.index.set_child(kind, run, key, present=True)
            with self._written_lock:
                self._written[(kind, key)] = _rv(obj)

    def _informer_for(self, kind: str, namespace: str) -> SharedInformer | None:
        if self._namespaces == (None,):
            return self._informers[kind][0]
        if namespace not in self._namespaces:
            return None
        return self._informers[kind][self._namespaces.index(namespace)]

    def run_keys(self) -> list[str]:
        """Every cached run's key."""
        return [k for i in self._informers["InferenceRun"] for k in i.cache.list_keys()]

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

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        """Merge patch of an InferenceRun's /status."""
        path = resource_path("InferenceRun", namespace, name=name, sub="status")
        body = {"status": status}
        obj: Obj = self.transport.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        self._write_through("InferenceRun", obj)
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

    def emit_event(self, run: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Queue a core/v1 Event about a run; a background thread posts it (as client-go's
        EventBroadcaster does), so events never slow a reconcile down."""
        self._events.put(self._event_body(run, type_=type_, reason=reason, message=message))

    def _post_events(self) -> None:
        while (body := self._events.get()) is not None:
            try:
                namespace = body["metadata"]["namespace"]
                self.transport.request("POST", resource_path("Event", namespace), body=body)
            except ApiError as exc:
                log.warning("could not record event %s: %s", body.get("reason"), exc)

    def _event_body(self, run: Obj, *, type_: EventType, reason: str, message: str) -> Obj:
        meta = _meta(run)
        stamp = self._now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "InferenceRun",
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


class _Stopped(Exception):
    """Raised inside the election loop to end it."""


class _Lock(LeaseLock):
    """The stock LeaseLock with our ApiClient and a way to stop the election loop."""

    def __init__(self, name: str, namespace: str, identity: str, api_client: Any) -> None:
        super().__init__(name, namespace, identity)
        self.api_instance = k8s.CoordinationV1Api(api_client)
        self.stopped = threading.Event()

    def get(self, name: str, namespace: str) -> Any:
        if self.stopped.is_set():
            raise _Stopped()
        return super().get(name, namespace)

    def update(self, name: str, namespace: str, updated_record: Any) -> Any:
        if self.stopped.is_set():
            raise _Stopped()
        return super().update(name, namespace, updated_record)


class Elector:
    """Leader election on a coordination.k8s.io Lease (`kubernetes.leaderelection`)."""

    def __init__(
        self,
        api_client: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        timing: tuple[int, int, int],
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self._lock = _Lock(name, namespace, identity, api_client)
        lease, renew, retry = timing
        self._config = electionconfig.Config(
            self._lock, lease, renew, retry, on_started, on_stopped
        )
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def _run(self) -> None:
        with contextlib.suppress(_Stopped):
            leaderelection.LeaderElection(self._config).run()

    def start(self) -> None:
        """Campaign in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning or renewing (the lease then expires for the others)."""
        self._lock.stopped.set()
