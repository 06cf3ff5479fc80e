# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""Informers on `kubernetes.informer.SharedInformer`: list+watch, reconnects, relist on 410.

The caches hold plain dicts, trimmed of what the controller never reads (`kept.py`,
`serving_objects.py`): listed items by the list function, watched ones as each event
is decoded, once (`LeanWatch`), before the informer caches it. The informer is handed
that watch explicitly (`LeanInformer`): no module of the client library is patched.
"""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.informer import SharedInformer
from kubernetes.watch import Watch

from controller.core.ports import ApiError, Obj
from controller.kube.transport import Transport, resource_path

Trim = Callable[[str, Obj], Obj]


def lister(
    transport: Transport,
    kind: str,
    *,
    namespace: str | None,
    selector: str | None,
    trim: Trim,
) -> Any:
    """A list/watch function in the shape SharedInformer and Watch expect; listed items are
    trimmed with `trim`."""
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
    same event dict, the same resourceVersion bookkeeping, and the object handed through
    `keep` (what the cache is to hold of it) before the informer sees it. Typed watches are
    left as they are.
    """

    def __init__(self, keep: Callable[[Obj], Obj] | None = None) -> None:
        super().__init__()
        self._keep = keep

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
            if self._keep is not None and event.get("type") != "BOOKMARK":
                event["raw_object"] = event["object"] = self._keep(obj)
        return event


class LeanInformer(SharedInformer):
    """A SharedInformer whose watches are made by `watch_factory` (by default a LeanWatch
    handing each object through `keep`).

    SharedInformer builds a stock `Watch()` itself and keeps it in `self._watch` for its
    loop and for `stop()`. This class owns that slot: whatever the loop stores there is
    replaced by a watch of our own, so the choice is explicit and per informer.
    """

    def __init__(
        self,
        list_func: Any,
        *,
        keep: Callable[[Obj], Obj] | None = None,
        watch_factory: Callable[[], Watch] | None = None,
    ) -> None:
        self._watch_factory = watch_factory or (lambda: LeanWatch(keep))
        self._own_watch: Watch | None = None
        super().__init__(list_func, namespace=None)

    @property
    def _watch(self) -> Watch | None:
        return self._own_watch

    @_watch.setter
    def _watch(self, value: Watch | None) -> None:
        if value is not None and type(value) is Watch:
            value = self._watch_factory()
        self._own_watch = value


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


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
