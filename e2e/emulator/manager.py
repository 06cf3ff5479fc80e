"""A tiny controller-manager: one worker thread, a de-duplicating queue, timers.

All built-in controllers (garbage collector, namespace and CRD cleanup, kubelet,
Job, CronJob, TTL) share one worker so their effects are serialised like a
single kube-controller-manager process and the emulator stays deterministic.
Controllers observe the store through a listener that only enqueues keys, in
the level-triggered style of the real controllers.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from datetime import datetime
from typing import Protocol

from .clock import Timers
from .errors import ApiError
from .store import Event

log = logging.getLogger(__name__)
WorkKey = tuple[str, str]  # (controller name, object key)


class Controller(Protocol):
    name: str

    def keys_for(self, event: Event) -> list[str]:
        """Keys to reconcile because of a store event (must be cheap)."""
        ...

    def reconcile(self, key: str) -> None: ...


class Manager:
    """Runs controllers' reconciles on one thread."""

    def __init__(self, *, timers: Timers) -> None:
        self._timers = timers
        self._cond = threading.Condition()
        self._queue: deque[WorkKey] = deque()
        self._queued: set[WorkKey] = set()
        self._busy = False
        self._stopped = False
        self._controllers: dict[str, Controller] = {}
        self._thread = threading.Thread(target=self._run, name="emulator-controllers", daemon=True)

    def add(self, controller: Controller) -> None:
        self._controllers[controller.name] = controller

    def on_event(self, event: Event) -> None:
        for ctrl in self._controllers.values():
            for key in ctrl.keys_for(event):
                self.enqueue(ctrl.name, key)

    def enqueue(self, name: str, key: str) -> None:
        with self._cond:
            item = (name, key)
            if item not in self._queued:
                self._queued.add(item)
                self._queue.append(item)
                self._cond.notify_all()

    def enqueue_at(self, when: datetime, name: str, key: str) -> None:
        self._timers.call_at(when, lambda: self.enqueue(name, key))

    def enqueue_after(self, seconds: float, name: str, key: str) -> None:
        self._timers.call_later(seconds, lambda: self.enqueue(name, key))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until the queue is empty and no reconcile runs (test helper)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopped)
                if self._stopped:
                    return
                item = self._queue.popleft()
                self._queued.discard(item)
                self._busy = True
            try:
                self._controllers[item[0]].reconcile(item[1])
            except ApiError as exc:
                log.debug("reconcile %s retry after error: %s", item, exc.message)
                self.enqueue_after(0.05, *item)
            except Exception:
                log.exception("reconcile %s failed", item)
                self.enqueue_after(0.5, *item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
