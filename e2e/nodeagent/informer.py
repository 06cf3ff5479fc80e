# SharedInformer is untyped.
# mypy: disable-error-code="no-untyped-call"
"""Pods into a cache and their keys into a queue: the client's SharedInformer, unmodified.

`kubernetes.informer.SharedInformer` lists, watches, resumes from its last
resourceVersion and relists on 410 Gone; what it lacks is added around it, not
patched into it: a `synced` flag (its first watch starts only after the first
list has filled the cache and fired its handlers), a pause after an error (its
loop reconnects at once, which would spin while the API server is away), and a
de-duplicating work queue, so the agent reconciles a key (`namespace/name`),
never an event. Stopping a SharedInformer cuts its watch's socket, which its loop
logs as an "Unexpected error" with a traceback; `_QuietStop` drops that one
record, from our informers' threads only, once they are stopping.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from kubernetes.informer import ADDED, DELETED, ERROR, MODIFIED, SharedInformer

Obj = dict[str, Any]
log = logging.getLogger(__name__)
INFORMER_LOG = logging.getLogger("kubernetes.informer.informer")
ERROR_PAUSE = 1.0


class WorkQueue:
    """Keys to reconcile: each at most once in the queue, later ones after a delay."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._order: deque[str] = deque()
        self._queued: set[str] = set()
        self._timers: set[threading.Timer] = set()
        self._closed = False

    def add(self, key: str) -> None:
        with self._cond:
            if self._closed or key in self._queued:
                return
            self._queued.add(key)
            self._order.append(key)
            self._cond.notify()

    def add_after(self, key: str, seconds: float) -> None:
        def fire() -> None:
            with self._cond:
                self._timers.discard(timer)
            self.add(key)

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        with self._cond:
            if self._closed:
                return
            self._timers.add(timer)
        timer.start()

    def get(self, timeout: float) -> str | None:
        """The next key, or None after `timeout` seconds or once closed."""
        with self._cond:
            if not self._order and not self._closed:
                self._cond.wait(timeout)
            if self._closed or not self._order:
                return None
            key = self._order.popleft()
            self._queued.discard(key)
            return key

    def close(self) -> None:
        with self._cond:
            self._closed = True
            timers, self._timers = list(self._timers), set()
            self._cond.notify_all()
        for timer in timers:
            timer.cancel()


class PodInformers:
    """One SharedInformer per served namespace (or one for all), feeding `queue`."""

    def __init__(
        self,
        lister: Callable[[str | None], Callable[..., Any]],
        *,
        namespaces: tuple[str, ...] | None,
        queue: WorkQueue,
        on_event: Callable[[str, Obj], None] = lambda _type, _pod: None,
    ) -> None:
        self._queue = queue
        self._on_event = on_event
        self._stop = threading.Event()
        self._threads: set[int] = set()  # idents of our informers' threads
        self._synced: list[threading.Event] = []
        self._by_namespace: dict[str | None, SharedInformer] = {}
        for namespace in namespaces if namespaces is not None else (None,):
            synced = threading.Event()
            self._synced.append(synced)
            informer = SharedInformer(self._marking(lister(namespace), synced))
            for kind in (ADDED, MODIFIED, DELETED):
                informer.add_event_handler(kind, self._handler(kind))
            informer.add_event_handler(ERROR, self._pause)
            self._by_namespace[namespace] = informer

    def start(self) -> None:
        INFORMER_LOG.addFilter(self._quiet)
        for informer in self._by_namespace.values():
            informer.start()

    def wait_synced(self, timeout: float) -> bool:
        """True once every informer has listed and started to watch."""
        return all(event.wait(timeout) for event in self._synced)

    def stop(self) -> None:
        self._stop.set()
        for informer in self._by_namespace.values():
            informer.stop()
        INFORMER_LOG.removeFilter(self._quiet)

    def get(self, key: str) -> Obj | None:
        """The cached pod `namespace/name`, or None."""
        namespace = key.partition("/")[0]
        informer = self._by_namespace.get(namespace, self._by_namespace.get(None))
        if informer is None:
            return None
        pod: Obj | None = informer.cache.get_by_key(key)
        return pod

    def keys(self) -> list[str]:
        return [k for informer in self._by_namespace.values() for k in informer.cache.list_keys()]

    def _handler(self, kind: str) -> Callable[[Obj], None]:
        def handle(pod: Obj) -> None:
            meta = pod.get("metadata") or {}
            self._on_event(kind, pod)
            self._queue.add(f"{meta.get('namespace')}/{meta.get('name')}")

        return handle

    def _pause(self, exc: Any) -> None:
        """Runs on the informer's thread before it reconnects: a short pause, not a spin."""
        if not self._stop.is_set():
            log.warning("pod watch failed (%s); reconnecting", exc)
        self._stop.wait(ERROR_PAUSE)

    def _quiet(self, record: logging.LogRecord) -> bool:
        return not (self._stop.is_set() and record.thread in self._threads)

    def _marking(self, lister: Callable[..., Any], synced: threading.Event) -> Callable[..., Any]:
        def list_or_watch(**kwargs: Any) -> Any:
            """List or watch; the first watch means the first list is in the cache.

            :rtype: object
            """
            self._threads.add(threading.get_ident())  # called on the informer's thread
            if kwargs.get("watch"):
                synced.set()
            return lister(**kwargs)

        return list_or_watch
