# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""What both adapters (`cluster.py` for runs, `serving.py` for deployments) are built on.

`CachedKinds` keeps one informer per watched kind and namespace, reads objects from their
caches, and sends the writes. Our own writes are remembered until the watch delivers them:
a read right after a write sees it, and the watch echoing exactly that write can be told
from someone else's change (`is_own_write`), so it wakes nobody. The echo may also come
before the API server's answer to the write: an event for an object while our write of it
is in flight is held, and handled once the answer is remembered, so that echo, too, is
known for ours instead of waking the run a second time. Events are handled one at a time,
in the order they came. A subclass says what an event means (`_on_event`) and what else a
write of its own changes (`_wrote`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer

from controller.core.ports import ApiError, Obj
from controller.core.routing import object_key, resource_version
from controller.kube.informers import LeanInformer, Trim, lister
from controller.kube.transport import JSON_PATCH, MERGE_PATCH, Transport, resource_path

Held = list[tuple[Obj, bool]]  # (object, present) of events held while our write is in flight


def _drop(record: logging.LogRecord) -> bool:
    """A logging filter that drops everything."""
    return False


class CachedKinds:
    """Informer caches of some kinds in the watched namespaces, and REST writes."""

    def __init__(self, transport: Transport, *, namespaces: Iterable[str], trim: Trim) -> None:
        self.transport = transport
        self._namespaces = tuple(namespaces) or (None,)
        self._trim = trim
        self._informers: dict[str, list[LeanInformer]] = {}
        self._synced: dict[int, threading.Event] = {}
        # Our writes that the watch has not delivered yet: newer than the cache until then.
        self._fresh: dict[tuple[str, str], Obj] = {}
        self._fresh_lock = threading.Lock()
        self._event_lock = threading.RLock()  # informers' events and held ones, one at a time
        self._in_flight: dict[tuple[str, str], Held] = {}

    # -- informers ---------------------------------------------------------------

    def _watch(self, kind: str, *, selector: str | None = None) -> list[LeanInformer]:
        """One informer of `kind` per watched namespace (not started)."""
        return [self._informer(kind, ns, selector) for ns in self._namespaces]

    def _informer(self, kind: str, namespace: str | None, selector: str | None) -> LeanInformer:
        list_func = lister(
            self.transport, kind, namespace=namespace, selector=selector, trim=self._trim
        )
        synced = threading.Event()

        def tracking(**kwargs: Any) -> Any:
            """List or watch, noting when the first list has been cached.

            :rtype: object
            """
            # The `:rtype: object` line is read by kubernetes.watch.Watch: it makes the watch
            # hand raw dicts to LeanWatch.unmarshal_event, which trims them (kept.py). Without
            # it every event is decoded into the client's models and cached untrimmed.
            if kwargs.get("watch"):
                synced.set()  # the informer watches only after caching its first list
            return list_func(**kwargs)

        informer = LeanInformer(tracking, keep=lambda obj: self._trim(kind, obj))
        self._synced[id(informer)] = synced
        for event in (ADDED, MODIFIED):
            informer.add_event_handler(event, self._handler(kind, present=True))
        informer.add_event_handler(DELETED, self._handler(kind, present=False))
        return informer

    def _handler(self, kind: str, *, present: bool) -> Callable[[Any], None]:
        def handle(obj: Any) -> None:
            if not isinstance(obj, dict):
                return
            with self._event_lock:
                held = self._in_flight.get((kind, object_key(obj)))
                if held is not None:  # our write of it is in flight: this may be its echo
                    held.append((obj, present))
                else:
                    self._on_event(kind, obj, present=present)

        return handle

    def _on_event(self, kind: str, obj: Obj, *, present: bool) -> None:
        """React to one informer event (the cache already holds it)."""
        raise NotImplementedError

    def _delivered(self, kind: str, key: str, obj: Obj, *, present: bool) -> Obj | None:
        """Forget our write of `key` once the watch delivers it (or a newer version, or its
        deletion); the write, when this event is exactly it."""
        with self._fresh_lock:
            written = self._fresh.get((kind, key))
            if written is None or (present and resource_version(obj) < resource_version(written)):
                return None
            del self._fresh[(kind, key)]
        return written

    def start(self) -> None:
        """Start every informer."""
        for informer in self._all():
            informer.start()

    def stop(self) -> None:
        """Stop every informer (joins their threads)."""
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

    # -- reads -------------------------------------------------------------------

    def _keys(self, kind: str) -> list[str]:
        """`namespace/name` of every cached object of `kind`."""
        return [k for i in self._informers.get(kind, ()) for k in i.cache.list_keys()]

    def _cached(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A copy of the cached object, or of our newer write of it."""
        key = f"{namespace}/{name}"
        found = next(
            (o for i in self._informers.get(kind, ()) if (o := i.cache.get_by_key(key))), None
        )
        with self._fresh_lock:
            written = self._fresh.get((kind, key))
        if written is not None and resource_version(written) > resource_version(found):
            found = written
        return dict(found) if found is not None else None

    def _get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A live GET; None on 404."""
        try:
            obj = self.transport.request("GET", resource_path(kind, namespace, name=name))
        except ApiError as exc:
            if exc.is_not_found:
                return None
            raise
        return obj if isinstance(obj, dict) else None

    # -- writes ------------------------------------------------------------------

    def create(self, kind: str, body: Obj) -> Obj:
        """POST an object."""
        meta = body["metadata"]
        path = resource_path(kind, meta["namespace"])
        return self._write(kind, meta, lambda: self.transport.request("POST", path, body=body))

    def patch(self, kind: str, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        """Merge patch (dict) or JSON patch (list)."""
        ctype = JSON_PATCH if isinstance(body, list) else MERGE_PATCH
        path = resource_path(kind, namespace, name=name)
        return self._write(
            kind,
            {"namespace": namespace, "name": name},
            lambda: self.transport.request("PATCH", path, body=body, content_type=ctype),
        )

    def _patch_status(self, kind: str, namespace: str, name: str, status: Obj) -> Obj:
        """Merge patch of an object's /status."""
        path = resource_path(kind, namespace, name=name, sub="status")
        body = {"status": status}
        return self._write(
            kind,
            {"namespace": namespace, "name": name},
            lambda: self.transport.request("PATCH", path, body=body, content_type=MERGE_PATCH),
        )

    def _write(self, kind: str, meta: Obj, send: Callable[[], Obj]) -> Obj:
        """Send a write of the object `meta` names, holding its events until the answer is
        remembered (or the write failed), then handling them in order."""
        key = (kind, object_key({"metadata": meta}))
        with self._event_lock:
            self._in_flight.setdefault(key, [])
        try:
            answer = send()
        except BaseException:
            self._release(key)
            raise
        with self._event_lock:
            written = self._wrote(kind, answer)
            self._release(key)
        return written

    def _release(self, key: tuple[str, str]) -> None:
        """Handle the events held while our write of `key` was in flight."""
        with self._event_lock:
            for obj, present in self._in_flight.pop(key, []):
                self._on_event(key[0], obj, present=present)

    def delete(self, kind: str, namespace: str, name: str, *, uid: str) -> None:
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

    def _wrote(self, kind: str, obj: Obj) -> Obj:
        """What the API server answered to our write, as the caches keep it; a subclass adds
        what else the write changes."""
        return self._remember(kind, obj)

    def _remember(self, kind: str, obj: Obj) -> Obj:
        """Keep our write (trimmed) as newer than the cache until the watch delivers it; not
        outside the watched namespaces, where no watch ever will. The trimmed object."""
        kept = self._trim(kind, obj)
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        if self._namespaces == (None,) or namespace in self._namespaces:
            with self._fresh_lock:
                self._fresh[(kind, object_key(kept))] = kept
        return kept
