"""Watch streams: replay from a resourceVersion, follow live events, bookmarks, 410.

A watch is a chunked HTTP/1.1 response of JSON lines. It starts either from a
resourceVersion (replayed from the store's bounded history; too old means one
ERROR event carrying a 410 Expired Status, as the watch cache answers) or from
"now" (synthetic ADDED events for the current objects). Selectors are applied
to old and new object so objects leaving or entering the selection are reported
as DELETED or ADDED, like the real server does.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from . import codec, discovery
from .errors import ApiError, bad_request
from .registry import ResourceType
from .selectors import match_labels, parse_field_selector, parse_label_selector
from .store import Event, Obj
from .wire import chunk_frame

if TYPE_CHECKING:
    from .server import Handler, Route

_BURST = 256  # events per write at most
_ENCODING = threading.Lock()


class WatchStream:
    """One watch request, served on the handler's connection."""

    def __init__(self, handler: Handler, route: Route) -> None:
        self.handler = handler
        self.route = route
        self.table = False

    def serve(self) -> None:
        h, route = self.handler, self.route
        emu = h.server.emulator
        rt, ns = route.rt, route.namespace or None
        labels = parse_label_selector(h.query.get("labelSelector"))
        fields = parse_field_selector(
            h.query.get("fieldSelector"), allowed=emu.api.field_labels(rt)
        )
        timeout = float(h.query.get("timeoutSeconds") or emu.config.watch_max_seconds)
        bookmarks = h.query.get("allowWatchBookmarks") in ("true", "1")
        table = self.table = discovery.wants_table(h.headers.get("Accept", ""))
        rv = h.query.get("resourceVersion") or ""
        initial: list[Obj] = []
        try:
            with emu.store.lock:
                if rv in ("", "0"):
                    initial, cur = emu.store.snapshot(rt.key, ns)
                    watcher = emu.store.watch(rt.key, ns, since=cur)
                else:
                    watcher = emu.store.watch(rt.key, ns, since=int(rv))
        except ApiError as err:
            h.start_stream()
            h.chunk({"type": "ERROR", "object": err.status()})
            h.end_stream()
            return
        except ValueError:
            raise bad_request(f"invalid resource version: {rv}") from None

        def matches(obj: Obj | None) -> bool:
            return (
                obj is not None
                and match_labels(labels, obj["metadata"].get("labels"))
                and fields(obj)
            )

        def render(obj: Obj) -> Obj:
            obj = emu.api.present(rt, obj)
            if table:
                return discovery.table(
                    rt,
                    [obj],
                    rv=obj["metadata"]["resourceVersion"],
                    now=emu.clock.now(),
                    include=h.query.get("includeObject", "Metadata"),
                )
            return obj

        emu.register_watch(watcher, h)
        try:
            h.start_stream()
            for obj in initial:
                if matches(obj):
                    h.chunk({"type": "ADDED", "object": render(obj)})
            self._stream_events(
                watcher, matches, render, timeout=timeout, bookmarks=bookmarks, rt=rt
            )
            if h.dropped:
                h.close_connection = True
            else:
                h.end_stream()
        finally:
            emu.unregister_watch(watcher)

    def _stream_events(
        self,
        watcher: Any,
        matches: Any,
        render: Any,
        *,
        timeout: float,
        bookmarks: bool,
        rt: ResourceType,
    ) -> None:
        emu = self.handler.server.emulator
        deadline = time.monotonic() + timeout
        interval = emu.config.bookmark_interval
        next_bookmark = time.monotonic() + interval
        while True:
            now = time.monotonic()
            if now >= deadline or self.handler.server.stopping.is_set():
                return
            wait = min(deadline, next_bookmark if bookmarks else deadline, now + 1.0) - now
            try:
                ev: Event | None = watcher.queue.get(timeout=max(wait, 0.001))
            except queue.Empty:
                if bookmarks and time.monotonic() >= next_bookmark:
                    self._bookmark(watcher, rt)
                    next_bookmark = time.monotonic() + interval
                continue
            if not self._send_burst(watcher, ev, matches, render):
                return

    def _send_burst(self, watcher: Any, first: Event | None, matches: Any, render: Any) -> bool:
        """Send `first` and up to _BURST - 1 more already queued events in one write.

        A busy store queues events faster than one write per event drains them;
        writing what is there at once costs one syscall per burst, not per event.
        Returns False once the stream is over (the queue's `None`).
        """
        events = [first]
        while len(events) < _BURST and events[-1] is not None:
            try:
                events.append(watcher.queue.get_nowait())
            except queue.Empty:
                break
        frames = []
        for ev in events:
            if ev is None:
                break
            out = _transition(ev, matches)
            if out:
                frames.append(self._frame(ev, out, render))
        if frames:
            self.handler.write_chunks(frames)
        return events[-1] is not None

    def _frame(self, ev: Event, out: str, render: Any) -> bytes:
        """The chunk for one event; encoded once per presentation and shared by all watchers."""
        if self.table:  # tables carry the watcher's options and "now": never shared
            return chunk_frame(
                codec.encode({"type": out, "object": render(_shown(ev, out))}) + b"\n"
            )
        rt = self.route.rt
        key = (out, rt.group, rt.api_version, rt.kind)
        frame = ev.encoded.get(key)
        if frame is None:
            # Watch threads wake together for an event: one encodes, the others wait.
            with _ENCODING:
                frame = ev.encoded.get(key)
                if frame is None:
                    # {"type":...,"object":...} as codec.encode writes it, with the object's
                    # bytes shared with the write's answer (EncodingCache).
                    obj = self.handler.server.emulator.encodings.encode(render(_shown(ev, out)))
                    data = b'{"type":%b,"object":%b}\n' % (codec.encode(out), obj)
                    frame = ev.encoded[key] = chunk_frame(data)
        return frame

    def _bookmark(self, watcher: Any, rt: ResourceType) -> None:
        store = self.handler.server.emulator.store
        with store.lock:
            if not watcher.queue.empty():
                return
            rv = store.resource_version
        self.handler.chunk(
            {
                "type": "BOOKMARK",
                "object": {
                    "kind": rt.kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(rv)},
                },
            }
        )


def _shown(ev: Event, out: str) -> Obj:
    """The object a watcher is sent: for one leaving its selector (a MODIFIED seen as
    DELETED), the previous version at the event's resourceVersion, as the watch cache
    sends it (cacheWatcher.convertToWatchEvent); otherwise the new version."""
    if out == "DELETED" and ev.type == "MODIFIED" and ev.old is not None:
        rv = ev.obj["metadata"]["resourceVersion"]
        return {**ev.old, "metadata": {**ev.old["metadata"], "resourceVersion": rv}}
    return ev.obj


def _transition(ev: Event, matches: Any) -> str | None:
    """Event type as seen through a selector (objects entering/leaving the selection)."""
    now, before = matches(ev.obj), matches(ev.old)
    if ev.type == "ADDED":
        return "ADDED" if now else None
    if ev.type == "DELETED":
        return "DELETED" if before else None
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None
