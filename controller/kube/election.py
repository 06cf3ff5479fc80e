# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""Leader election on a coordination.k8s.io Lease, with `kubernetes.leaderelection`.

The stock `LeaseLock` builds its client from the global default configuration;
ours is handed the controller's `ApiClient`, and can stop the election loop.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock


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
