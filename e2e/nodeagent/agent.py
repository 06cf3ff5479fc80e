"""The node agent: the kubelet's part of a cluster, over the API only.

No kubelet and no scheduler run beside our control planes, and the API emulator
should stop running pods itself: this agent is both, for pods. It registers a
Ready Node and keeps its Lease (node.py), binds every pending pod of the
namespaces it serves to that Node, runs each bound pod's container as a local
process (worker.py), writes `pods/status` as a kubelet does (status.py), and
finishes a deleted pod as the kubelet does: stop the process, report how it
ended, then delete the pod with grace 0, which is what lets a real API server
remove a pod that was bound to a node.

Reconciling is level-based and single-threaded: informer events only queue a
key, and `reconcile(key)` reads the cached pod and decides (controller-runtime's
rule). Each running pod has a worker thread; the reconcile never waits for one.

Stopping the agent stops watching, kills its processes and writes nothing: the
Node is not marked NotReady and no pod gets a last status (a kubelet that is
shut down says nothing either; the node lifecycle controller notices).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from .config import AgentConfig
from .informer import PodInformers, WorkQueue
from .kube import ApiError, Kube
from .logfiles import PodLogs, log_folder
from .logs import LogServer, self_signed
from .node import HOST_IP, Heartbeat
from .status import PodReport, is_terminal, lost_report, pod_status, rfc3339
from .worker import PodWorker

Obj = dict[str, Any]
log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0
WRITE_ATTEMPTS = 5
TRANSIENT = (0, 429, 500, 502, 503, 504)


class StatusWriter:
    """PUT `pods/status` from a PodReport, on top of the newest pod we know.

    The base is the object our last write returned, else the informer's copy; a
    409 (someone else wrote: the Job controller removing its finalizer, the API
    server adding a condition) means read the pod again and rebuild. Nothing is
    written once the agent stops.
    """

    def __init__(self, kube: Kube, config: AgentConfig, *, cached: Any, stopping: Any) -> None:
        self._kube, self._config = kube, config
        self._cached, self._stopping = cached, stopping
        self._last: dict[str, Obj] = {}
        self._lock = threading.Lock()

    def report(self, pod: Obj, report: PodReport) -> bool:
        meta = pod["metadata"]
        uid, key = meta["uid"], f"{meta['namespace']}/{meta['name']}"
        base = self._base(uid, key)
        for attempt in range(WRITE_ATTEMPTS):
            if self._stopping.is_set() or base is None or base["metadata"]["uid"] != uid:
                return False
            try:
                written = self._kube.replace_pod_status(self._with_status(base, report))
            except ApiError as exc:
                if exc.status == 404:
                    return False
                if exc.status not in (409, *TRANSIENT):
                    log.error("pod %s: status refused: %s", key, exc)
                    return True
                time.sleep(0 if exc.status == 409 else 0.2 * (attempt + 1))
                base = self._kube.get_pod(meta["namespace"], meta["name"])
                continue
            with self._lock:
                self._last[uid] = written
            return True
        log.error("pod %s: status not written after %d attempts", key, WRITE_ATTEMPTS)
        return True

    def forget(self, uid: str) -> None:
        with self._lock:
            self._last.pop(uid, None)

    def _base(self, uid: str, key: str) -> Obj | None:
        with self._lock:
            last = self._last.get(uid)
        cached: Obj | None = self._cached(key)
        return last if last is not None else cached

    def _with_status(self, base: Obj, report: PodReport) -> Obj:
        now = rfc3339(self._config.now())
        status = pod_status(report, current=base.get("status") or {}, now=now, host_ip=HOST_IP)
        return {**base, "status": status}


@dataclass
class _Tracked:
    """What the agent did about one pod (by uid), so stale cache reads never redo it."""

    key: str
    worker: PodWorker | None = None
    bound: bool = False
    settled: bool = False  # a terminal status written without a worker
    deleted: bool = False

    @property
    def occupies(self) -> bool:
        """Takes one of the node's pod slots: running, or bound here and not started yet."""
        if self.worker is not None:
            return not self.worker.done.is_set()
        return self.bound and not self.settled


class NodeAgent:
    """A kubelet stand-in: `start()`, then pods run until `stop()`."""

    def __init__(self, config: AgentConfig, kube: Kube) -> None:
        self.config = config
        self.kube = kube
        if config.scripted is not None:
            config.scripted.attach(config.workdir / "scripted", kube)
        self.queue = WorkQueue()
        self.informers = PodInformers(
            kube.pod_lister,
            namespaces=config.namespaces,
            queue=self.queue,
            on_event=self._saw,
        )
        self.heartbeat = Heartbeat(kube, config)
        self._stopping = threading.Event()
        self.status = StatusWriter(kube, config, cached=self.informers.get, stopping=self._stopping)
        self._pods: dict[str, dict[str, _Tracked]] = {}  # key → uid → notes
        self._workers: dict[str, PodWorker] = {}  # uid → worker, until its pod is gone
        self._unplaced: set[str] = set()  # pod keys not bound for want of a free slot
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="node-agent", daemon=True)
        self.seen: set[str] = set()  # every pod key an event was received for (for tests)
        self.logs: LogServer | None = None  # the kubelet's HTTPS log endpoint, once started

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, *, timeout: float = 30.0) -> NodeAgent:
        """Serve logs, register the Node, list the pods, start reconciling; ready when this
        returns."""
        config = self.config
        tls = config.kubelet_tls or self_signed(
            config.workdir / "kubelet-pki", config.node_name, hostname=config.hostname
        )
        self.logs = LogServer(self.pod_logs, tls, host=HOST_IP, port=config.kubelet_port)
        self.heartbeat.kubelet_port = self.logs.start().port
        self.heartbeat.register()
        self.heartbeat.start()
        self.informers.start()
        if not self.informers.wait_synced(timeout):
            self.stop()
            raise TimeoutError(f"pods not listed within {timeout}s")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, kill every process, write nothing. Safe to repeat."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self.logs is not None:
            self.logs.stop()
        self.queue.close()
        self.informers.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.heartbeat.stop()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.abandon(min(_grace(worker.pod), self.config.shutdown_grace))
        for worker in workers:
            worker.join(timeout=self.config.shutdown_grace + 5)

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def workers(self) -> list[PodWorker]:
        """The workers of pods that still exist (finished ones too)."""
        with self._lock:
            return list(self._workers.values())

    def pod_logs(self, namespace: str, name: str) -> PodLogs | None:
        """What the log server needs of a pod bound to this node: the pod as last seen, its
        log folder, and whether its worker is done (None: not a pod of this node)."""
        pod = self.informers.get(f"{namespace}/{name}")
        if pod is None or pod["spec"].get("nodeName") != self.config.node_name:
            return None
        with self._lock:
            worker = self._workers.get(pod["metadata"]["uid"])
        done = worker.done.is_set if worker is not None else (lambda: True)
        return PodLogs(pod, log_folder(self.config.workdir, pod), done)

    def unplaced(self) -> list[str]:
        """Keys of the pods waiting for a free pod slot on this node."""
        with self._lock:
            return sorted(self._unplaced)

    # -- the reconcile loop ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                self.reconcile(key)
            except ApiError as exc:
                log.warning("pod %s: %s; retrying", key, exc)
                self.queue.add_after(key, RETRY_SECONDS)
            except Exception:
                log.exception("pod %s: reconcile failed", key)
                self.queue.add_after(key, RETRY_SECONDS)

    def reconcile(self, key: str) -> None:
        """Bring one pod key to what a kubelet (and a scheduler) would make of it."""
        pod = self.informers.get(key)
        self._forget_others(key, pod)
        if pod is None:
            return
        node = pod["spec"].get("nodeName")
        if not node:
            self._bind(pod)
        elif node == self.config.node_name:
            self._sync(pod, self._tracked(pod))

    def _bind(self, pod: Obj) -> None:
        """The scheduler's part: a pending pod of a served namespace goes to this node."""
        meta, spec = pod["metadata"], pod["spec"]
        wanted = (
            self.config.serves(meta["namespace"])
            and not meta.get("deletionTimestamp")
            and not is_terminal(pod)
            and not spec.get("schedulingGates")
            and spec.get("schedulerName", "default-scheduler") in self.config.scheduler_names
        )
        tracked = self._tracked(pod)
        if not wanted or tracked.bound:
            return
        if self._free_slots() <= 0:  # as a scheduler would: the node is full, wait
            self._unplaced.add(tracked.key)
            return
        try:
            self.kube.bind(pod, self.config.node_name)
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or bound meanwhile (maybe by us)
                raise
        tracked.bound = True

    def _sync(self, pod: Obj, tracked: _Tracked) -> None:
        """The kubelet's part for a pod bound to this node."""
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        worker = tracked.worker
        if worker is not None:
            if deleting:
                worker.terminate(_grace(pod))
            if worker.done.is_set() and deleting and is_terminal(pod):
                self._delete_now(pod, tracked)
        elif is_terminal(pod):
            if deleting:
                self._delete_now(pod, tracked)
        elif deleting or _has_started(pod):
            self._settle_lost(pod, tracked)
        elif not self._stopping.is_set():
            self._start_worker(pod, tracked)

    def _start_worker(self, pod: Obj, tracked: _Tracked) -> None:
        worker = PodWorker(
            pod,
            kube=self.kube,
            config=self.config,
            reporter=self.status,
            on_done=self._worker_done,
        )
        tracked.worker = worker
        with self._lock:
            self._workers[worker.uid] = worker
        worker.start()

    def _worker_done(self, worker: PodWorker) -> None:
        """A slot is free: look at the pod again (to delete it if it is deleting), and at
        the pods that waited for a slot."""
        self.queue.add(worker.key)
        self._requeue_unplaced()

    def _requeue_unplaced(self) -> None:
        with self._lock:
            waiting, self._unplaced = self._unplaced, set()
        for key in waiting:
            self.queue.add(key)

    def _free_slots(self) -> int:
        with self._lock:
            used = sum(t.occupies for notes in self._pods.values() for t in notes.values())
        return int(self.config.capacity.get("pods", "110")) - used

    def _settle_lost(self, pod: Obj, tracked: _Tracked) -> None:
        """A pod bound here that no worker runs: deleted before it started, or started by an
        agent that is gone. Report it Failed, as a kubelet reports a container it lost."""
        if tracked.settled:
            return
        now = rfc3339(self.config.now())
        if self.status.report(pod, lost_report(pod, now=now)):
            tracked.settled = True
            self._requeue_unplaced()

    def _delete_now(self, pod: Obj, tracked: _Tracked) -> None:
        if tracked.deleted:
            return
        try:
            self.kube.delete_pod_now(pod)
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone already, or a new pod of that name
                raise
        tracked.deleted = True

    def _forget_others(self, key: str, pod: Obj | None) -> None:
        """Pods of this key that no longer exist: stop their processes at once (nobody will
        read their status; the kubelet's minimum grace), drop their notes."""
        uid = pod["metadata"]["uid"] if pod is not None else None
        with self._lock:
            notes = self._pods.get(key, {})
            stale = [(u, notes.pop(u)) for u in list(notes) if u != uid]
            if not notes:
                self._pods.pop(key, None)
        for u, tracked in stale:
            self.status.forget(u)
            if tracked.worker is not None:
                tracked.worker.abandon(self.config.min_kill_grace)
                threading.Thread(
                    target=self._clean_after, args=(tracked.worker,), daemon=True
                ).start()
        if pod is None:
            with self._lock:
                self._unplaced.discard(key)

    def _clean_after(self, worker: PodWorker) -> None:
        """Once its process is gone, a worker of a gone pod leaves no files and no trace."""
        worker.done.wait()
        worker.remove_files()
        with self._lock:
            self._workers.pop(worker.uid, None)

    def _tracked(self, pod: Obj) -> _Tracked:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        with self._lock:
            return self._pods.setdefault(key, {}).setdefault(meta["uid"], _Tracked(key))

    def _saw(self, _kind: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        self.seen.add(f"{meta.get('namespace')}/{meta.get('name')}")


def _grace(pod: Obj) -> float:
    """The kubelet's grace period: the deletion's, else the pod's own (default 30 s)."""
    meta, spec = pod["metadata"], pod["spec"]
    given = meta.get("deletionGracePeriodSeconds")
    return float(given if given is not None else spec.get("terminationGracePeriodSeconds", 30))


def _has_started(pod: Obj) -> bool:
    status = pod.get("status") or {}
    states = [cs.get("state") or {} for cs in status.get("containerStatuses") or []]
    return status.get("phase") == "Running" or any(
        "running" in s or "terminated" in s for s in states
    )
