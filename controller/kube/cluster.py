# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""`ports.Cluster` on the official client: informer caches for reads, REST for writes.

Everything else in the controller sees plain dicts and the `ports.Cluster`
protocol. The caches (`cached.py`) hold only what the controller reads of each
object (`kept.py`), with small indexes from a run to its children and from a
config to the runs that use it; which events wake which runs is the core's policy
(`controller.core.routing`). Our own writes are remembered until the watch
delivers them, so a read right after a write sees it, and the watch echoing that
write wakes nobody; nor does a child's update that changes nothing kept of it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Protocol

from contracts.resources import GROUP, VERSION
from controller.core import names
from controller.core.jobs import runner_ended
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
    run_of,
    wakes,
)
from controller.kube.cached import CachedKinds
from controller.kube.informers import Index
from controller.kube.kept import is_news, kept
from controller.kube.transport import Transport, resource_path
from controller.kube.workloads import WorkloadIndex, serves_workloads

log = logging.getLogger(__name__)
CHILD_KINDS = ("ConfigMap", "Job", "CronJob", "Pod")
STOPPED_PODS_PER_RUN = 4  # the last deleted pods whose runner ended, kept per run
SPEC_KINDS = ("InferenceRun", "InferenceConfig")  # reconciled on spec changes only


Listener = Callable[[str, Obj, bool], None]


class Enqueue(Protocol):
    """Queues a run key; `urgent` keys go first, `batched` ones wait (WorkQueue.add)."""

    def __call__(self, key: str, *, urgent: bool = False, batched: bool = False) -> None: ...


class KubeCluster(CachedKinds):
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
        super().__init__(transport, namespaces=namespaces, trim=kept)
        self.index = Index()
        self._enqueue = enqueue
        self._identity = identity
        self._now = now
        self._generations: dict[str, Generation] = {}
        self._children: dict[tuple[str, str], Obj] = {}  # the last event's child, as kept
        # run key -> pod key -> the pod's last state, for pods deleted after their runner
        # ended (Children.stopped_pods); forgotten with the run.
        self._stopped: dict[str, dict[str, Obj]] = {}
        self._stopped_lock = threading.Lock()
        self._events: queue.Queue[Obj | None] = queue.Queue()
        self._event_thread = threading.Thread(target=self._post_events, name="events", daemon=True)
        self._listeners: list[Listener] = []
        for kind in SPEC_KINDS:
            self._informers[kind] = self._watch(kind)
        for kind in CHILD_KINDS:
            self._informers[kind] = self._watch(kind, selector=names.MANAGED_SELECTOR)
        self.workloads = WorkloadIndex()
        self._informers["Workload"] = []  # filled once Kueue is seen (discover)

    # -- informers ---------------------------------------------------------------

    def _on_event(self, kind: str, obj: Obj, *, present: bool) -> None:
        key = object_key(obj)
        if kind == "Workload":
            self._on_workload(key, obj, present=present)
            return
        if kind == "InferenceRun":
            self.index.set_use(key, config_of(obj) if present else None)
            if not present:
                with self._stopped_lock:
                    self._stopped.pop(key, None)
        elif (run := run_of(obj)) is not None:
            self.index.set_child(kind, run, key, present=present)
            if kind == "Pod" and not present and runner_ended(obj):
                self._keep_stopped(run, key, obj)
        written = self._delivered(kind, key, obj, present=present)
        found = wakes(
            kind,
            obj,
            present=present,
            spec_changed=kind in SPEC_KINDS
            and self._spec_changed(f"{kind}/{key}", obj, present=present),
            own_write=is_own_write(written, obj),
            news=kind in SPEC_KINDS or self._is_news(kind, key, obj, present=present),
            users=self.index.users,
        )
        for wake in found:
            self._enqueue(wake.key, urgent=wake.urgent, batched=wake.batched)
        for listener in self._listeners:
            listener(kind, obj, present)

    def _keep_stopped(self, run: str, key: str, pod: Obj) -> None:
        with self._stopped_lock:
            pods = self._stopped.setdefault(run, {})
            pods[key] = pod
            while len(pods) > STOPPED_PODS_PER_RUN:  # the first deleted go first
                del pods[next(iter(pods))]

    def _on_workload(self, key: str, obj: Obj, *, present: bool) -> None:
        """A Kueue Workload wakes the run of the Job that owns it (batched, like a child)."""
        job_key = self.workloads.set(obj, present=present)
        written = self._delivered("Workload", key, obj, present=present)
        news = self._is_news("Workload", key, obj, present=present)
        job = self._cached("Job", *names.split_key(job_key)) if job_key else None
        run = run_of(job) if job is not None else None
        if run is not None and not (present and (is_own_write(written, obj) or not news)):
            self._enqueue(run, batched=True)

    def add_listener(self, listener: Listener) -> None:
        """Also hand every informer event (kind, object, present) to `listener`: the serving
        adapter follows runs and configs this way, on the same watches (before start)."""
        self._listeners.append(listener)

    def _is_news(self, kind: str, key: str, obj: Obj, *, present: bool) -> bool:
        """Whether a child's event changes what the cache keeps of it (kept.py)."""
        if not present:
            self._children.pop((kind, key), None)
            return True
        previous = self._children.get((kind, key))
        self._children[(kind, key)] = obj
        return is_news(previous, obj)

    def _spec_changed(self, key: str, obj: Obj, *, present: bool) -> bool:
        if not present:
            self._generations.pop(key, None)
            return True
        seen = self._generations.get(key)
        self._generations[key] = generation_of(obj)
        return is_spec_change(seen, obj)

    def start(self) -> None:
        """Start every informer and the event recorder, and the Workload ones if Kueue is
        served."""
        self._event_thread.start()
        super().start()
        self.discover()

    def discover(self) -> bool:
        """Watch Kueue's Workloads once its API is served: at start and on every resync (it
        may come after the controller). True when this call started the informers."""
        if self._informers["Workload"] or not serves_workloads(self.transport):
            return False
        informers = self._watch("Workload")
        for informer in informers:
            informer.start()
        self._informers["Workload"] = informers
        return True

    def stop(self) -> None:
        """Stop every informer (joins their threads) after posting queued events."""
        self._events.put(None)
        if self._event_thread.is_alive():
            self._event_thread.join(timeout=10)
        super().stop()

    def _wrote(self, kind: str, obj: Obj) -> Obj:
        obj = self._remember(kind, obj)
        if kind in CHILD_KINDS and (run := run_of(obj)) is not None:
            self.index.set_child(kind, run, object_key(obj), present=True)
        return obj

    def run_keys(self) -> list[str]:
        """Every cached run's key."""
        return self._keys("InferenceRun")

    def config_keys(self) -> list[str]:
        """Every cached config's work-queue key (`InferenceConfig/namespace/name`)."""
        return [config_key(k) for k in self._keys("InferenceConfig")]

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
        job = next((j for j in jobs if owner_kind(j) == "InferenceRun"), None)
        workload = self.workloads.of_job(object_key(job)) if job is not None else None
        return Children(
            config_map=next(iter(found["ConfigMap"]), None),
            job=job,
            workload=self._cached("Workload", *names.split_key(workload)) if workload else None,
            cron_job=next(iter(found["CronJob"]), None),
            jobs=[j for j in jobs if owner_kind(j) == "CronJob"],
            pods=found["Pod"],
            stopped_pods=self._stopped_of(run, {object_key(p) for p in found["Pod"]}),
        )

    def _stopped_of(self, run: str, cached: set[str]) -> list[Obj]:
        with self._stopped_lock:
            pods = self._stopped.get(run) or {}
            return [pod for key, pod in pods.items() if key not in cached]

    def job_pods(self, namespace: str, job_name: str) -> list[Obj]:
        """A live list of a Job's pods."""
        query = [("labelSelector", f"batch.kubernetes.io/job-name={job_name}")]
        data = self.transport.request("GET", resource_path("Pod", namespace), query=query)
        return [kept("Pod", item) for item in (data or {}).get("items") or []]

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
        return self._get(kind, namespace, name)

    # -- ports.Cluster: writes ------------------------------------------------------

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, kind: StatusKind = "InferenceRun"
    ) -> Obj:
        """Merge patch of a run's (or a config's) /status."""
        return self._patch_status(kind, namespace, name, status)

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
