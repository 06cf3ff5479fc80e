"""The one storage layer: objects, one global resourceVersion, bounded history.

It plays etcd + the watch cache. Every write gets the next integer
resourceVersion and is appended to a bounded event history; watches replay from
that history and then follow live events. A resourceVersion older than the
oldest retained event is "compacted" and answers 410 Gone, so clients' relist
path is exercised with a small history window. Stored dicts are never mutated
after they are written (writers always store a fresh top-level dict and metadata;
nested values may be shared with the previous version, which is just as
immutable), so readers can share them without copying, which keeps list/watch
linear. `audit=True` checks that promise: it remembers every stored version's
JSON and `verify_unchanged()` reports any that changed since (the emulator's
tests turn it on through KUBE_EMULATOR_AUDIT).
"""

from __future__ import annotations

import json
import queue
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import gone

Obj = dict[str, Any]
ObjKey = tuple[str, str, str]  # (resource key, namespace, name)


@dataclass(frozen=True)
class Event:
    """One change: ADDED / MODIFIED / DELETED of a stored object.

    `encoded` caches the watch-stream bytes of this event per presentation, so an
    event delivered to many watchers is encoded once (watching.py).
    """

    type: str
    key: str
    obj: Obj
    old: Obj | None
    rv: int
    encoded: dict[Hashable, bytes] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace", ""))


class Watcher:
    """A subscriber queue; `None` in the queue means "stream is over"."""

    def __init__(self, key: str, namespace: str | None) -> None:
        self.key = key
        self.namespace = namespace
        self.queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self.closed = threading.Event()

    def wants(self, event: Event) -> bool:
        return event.key == self.key and self.namespace in (None, event.namespace)

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.queue.put(None)


class Store:
    """Thread-safe object store with watch fan-out. Callers may hold `lock` across steps."""

    def __init__(self, *, history_size: int = 1000, audit: bool = False) -> None:
        self.lock = threading.RLock()
        # id -> (stored version, its JSON when stored); holding the version keeps ids unique.
        self._audit: dict[int, tuple[Obj, str]] | None = {} if audit else None
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._uids: dict[str, ObjKey] = {}
        self._owners: dict[str, set[ObjKey]] = {}
        self._history: deque[Event] = deque(maxlen=max(1, history_size))
        self._compacted = 0
        self._watchers: dict[str, set[Watcher]] = {}  # by resource key
        self._listeners: list[Callable[[Event], None]] = []

    # -- reads -------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    @property
    def compacted_rv(self) -> int:
        with self.lock:
            return self._compacted

    def get(self, key: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self._objects.get(key, {}).get((namespace, name))

    def snapshot(self, key: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        """Objects sorted like etcd keys (namespace, name), plus the list resourceVersion."""
        with self.lock:
            bucket = self._objects.get(key, {})
            keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
            return [bucket[k] for k in keys], self._rv

    def by_uid(self, uid: str) -> Obj | None:
        with self.lock:
            where = self._uids.get(uid)
            return self.get(*where) if where else None

    def key_of_uid(self, uid: str) -> str | None:
        with self.lock:
            where = self._uids.get(uid)
            return where[0] if where else None

    def dependents(self, owner_uid: str) -> list[tuple[str, Obj]]:
        """(resource key, object) of everything with an ownerReference to owner_uid."""
        with self.lock:
            out = []
            for key, ns, name in sorted(self._owners.get(owner_uid, ())):
                obj = self.get(key, ns, name)
                if obj is not None:
                    out.append((key, obj))
            return out

    def keys(self) -> list[str]:
        with self.lock:
            return list(self._objects)

    # -- writes ------------------------------------------------------------------
    def put(self, key: str, obj: Obj) -> Obj:
        """Store obj with the next resourceVersion; emits ADDED/MODIFIED.

        obj's top level and metadata must be fresh dicts (metadata gets the
        resourceVersion); nested values may be shared with stored versions.
        """
        with self.lock:
            self._rv += 1
            meta = obj["metadata"]
            meta["resourceVersion"] = str(self._rv)
            where = (meta.get("namespace", ""), meta["name"])
            bucket = self._objects.setdefault(key, {})
            old = bucket.get(where)
            bucket[where] = obj
            self._record(obj)
            self._index(key, old, obj)
            self._emit(Event("MODIFIED" if old else "ADDED", key, obj, old, self._rv))
            return obj

    def remove(self, key: str, namespace: str, name: str) -> Obj | None:
        """Delete an object; the DELETED event carries a new resourceVersion."""
        with self.lock:
            old = self._objects.get(key, {}).pop((namespace, name), None)
            if old is None:
                return None
            self._rv += 1
            gone_obj = {
                **old,
                "metadata": {**old["metadata"], "resourceVersion": str(self._rv)},
            }
            self._record(gone_obj)
            self._index(key, old, None)
            self._emit(Event("DELETED", key, gone_obj, old, self._rv))
            return gone_obj

    def _record(self, obj: Obj) -> None:
        if self._audit is not None:
            self._audit[id(obj)] = (obj, json.dumps(obj, sort_keys=True))

    def verify_unchanged(self) -> list[str]:
        """With `audit`: "namespace/name@resourceVersion" of stored versions changed since."""
        with self.lock:
            entries = list((self._audit or {}).values())
        changed = []
        for obj, text in entries:
            if json.dumps(obj, sort_keys=True) != text:
                meta = json.loads(text)["metadata"]
                where = f"{meta.get('namespace', '')}/{meta['name']}"
                changed.append(f"{where}@{meta.get('resourceVersion')}")
        return changed

    def _index(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            meta = obj["metadata"]
            where = (key, meta.get("namespace", ""), meta["name"])
            if add:
                self._uids[meta["uid"]] = where
            else:
                self._uids.pop(meta["uid"], None)
            for ref in meta.get("ownerReferences") or []:
                deps = self._owners.setdefault(ref.get("uid", ""), set())
                if add:
                    deps.add(where)
                else:
                    deps.discard(where)
                    if not deps:
                        self._owners.pop(ref.get("uid", ""), None)

    def _emit(self, event: Event) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(event)
        for w in self._watchers.get(event.key, ()):
            if w.wants(event):
                w.queue.put(event)
        for listener in self._listeners:
            listener(event)

    # -- watch -------------------------------------------------------------------
    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """In-process observers (controllers); called under the lock, must only enqueue."""
        with self.lock:
            self._listeners.append(listener)

    def watch(self, key: str, namespace: str | None, since: int | None) -> Watcher:
        """Subscribe from `since` (replaying history) or from now; 410 if compacted."""
        with self.lock:
            w = Watcher(key, namespace)
            if since is not None:
                if since < self._compacted:
                    raise gone(f"too old resource version: {since} ({self._compacted + 1})")
                for ev in self._replay(since):
                    if w.wants(ev):
                        w.queue.put(ev)
            self._watchers.setdefault(key, set()).add(w)
            return w

    def _replay(self, since: int) -> Iterator[Event]:
        for ev in self._history:
            if ev.rv > since:
                yield ev

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            watchers = self._watchers.get(watcher.key, set())
            watchers.discard(watcher)
            if not watchers:
                self._watchers.pop(watcher.key, None)
        watcher.close()

    def close_watches(self) -> None:
        """End every open watch stream (fault injection, restart, shutdown)."""
        with self.lock:
            watchers = [w for ws in self._watchers.values() for w in ws]
            self._watchers.clear()
        for w in watchers:
            w.close()
