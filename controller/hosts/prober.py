"""The host prober: health checks on an interval, admin calls in the background.

Implements the core's `HostAgent` port (controller/core/fleets/ports.py). The fleet
reconciler tells it which hosts exist (`track`) and what to load or unload; it checks each
host every FLEET_HEALTH_INTERVAL (`health` then `list` of the host's admin protocol, one
worker per check from a small pool), keeps what it saw as `HostHealth`, and wakes the
namespace's reconcile (`notify`) when that changes in a way a status shows, or when
`lastSeen` is due for a refresh. A host turns NotReady after FLEET_FAILURE_THRESHOLD failed
checks in a row, ready again after one that passes. An address the guard refuses is
recorded as `refused`, which no retry changes (the spec must).

Admin calls run on their own pool (a pull can take minutes, FLEET_LOAD_TIMEOUT): one per
host and model at a time; a finished load is not asked again until two intervals have
passed without the host listing the model; a failed one is retried after a backoff
doubling from the interval up to five minutes. After each call the host is checked again
at once. Everything is in memory: a new leader starts from unchecked hosts, and the hosts'
`status.assignments` (the placement) survive in the API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime

from controller.core.fleets.health import HostHealth, HostTarget, OpKind, OpState, ProtocolInfo
from controller.core.fleets.settings import FleetSettings
from controller.hosts.client import HostClient, HostError
from controller.hosts.guard import AddressRefused, HostGuard
from controller.hosts.protocols import AdminProtocol, installed

log = logging.getLogger(__name__)
MAX_BACKOFF = 300.0


class HostProber:
    """Checks the tracked hosts and runs admin calls; thread-safe."""

    def __init__(
        self,
        settings: FleetSettings,
        *,
        notify: Callable[[str], None],
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        protocols: Mapping[str, AdminProtocol] | None = None,
        check_workers: int = 8,
        op_workers: int = 4,
    ) -> None:
        self.settings = settings
        self.guard = HostGuard(settings.denied_cidrs, settings.allowed_cidrs)
        self._notify, self._now = notify, now
        self._protocols = dict(protocols if protocols is not None else installed())
        self._lock = threading.Lock()
        self._targets: dict[str, dict[str, HostTarget]] = {}
        self._health: dict[str, HostHealth] = {}
        self._due: dict[str, float] = {}
        self._checking: set[str] = set()
        self._ops: dict[str, dict[str, OpState]] = {}
        self._attempts: dict[tuple[str, str], int] = {}
        self._told: dict[str, float] = {}
        self._wake, self._stop = threading.Event(), threading.Event()
        self._checks = ThreadPoolExecutor(check_workers, thread_name_prefix="host-check")
        self._calls = ThreadPoolExecutor(op_workers, thread_name_prefix="host-admin")
        self._thread: threading.Thread | None = None

    # -- HostAgent -------------------------------------------------------------------------

    def protocols(self) -> dict[str, ProtocolInfo]:
        """The installed admin protocols, as the core sees them."""
        return {
            name: ProtocolInfo(name, p.can_load, p.normalize) for name, p in self._protocols.items()
        }

    def track(self, namespace: str, targets: Sequence[HostTarget]) -> None:
        """Check exactly `targets` in `namespace`; a changed target starts unchecked."""
        with self._lock:
            old = self._targets.get(namespace, {})
            new = {t.name: t for t in targets}
            for name, target in new.items():
                if old.get(name) != target:
                    self._forget(target.key)
                    self._due[target.key] = 0.0
            for name in old.keys() - new.keys():
                self._forget(f"{namespace}/{name}")
            self._targets[namespace] = new
        self._wake.set()

    def _forget(self, key: str) -> None:
        self._health.pop(key, None)
        self._due.pop(key, None)
        self._ops.pop(key, None)
        for pair in [p for p in self._attempts if p[0] == key]:
            del self._attempts[pair]

    def health(self, namespace: str, host: str) -> HostHealth | None:
        """What the checks of a host found so far."""
        with self._lock:
            return self._health.get(f"{namespace}/{host}")

    def ops(self, namespace: str, host: str) -> dict[str, OpState]:
        """The last admin call per model on a host."""
        with self._lock:
            return dict(self._ops.get(f"{namespace}/{host}", {}))

    def load(self, target: HostTarget, model: str, *, source: str | None) -> None:
        """Load `model` on the host in the background (see the module doc)."""
        self._call(target, "load", model, source)

    def unload(self, target: HostTarget, model: str) -> None:
        """Unload `model` from the host in the background."""
        self._call(target, "unload", model, None)

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start checking (the leader only: followers do not call hosts)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="host-prober", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop checking; calls in flight end on their own timeouts."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._checks.shutdown(wait=False, cancel_futures=True)
        self._calls.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for target in self._take_due():
                self._checks.submit(self._check, target)
            self._wake.wait(self._next_wait())
            self._wake.clear()

    def _take_due(self) -> list[HostTarget]:
        now = time.monotonic()
        with self._lock:
            due = [
                t
                for group in self._targets.values()
                for t in group.values()
                if self._due.get(t.key, 0.0) <= now and t.key not in self._checking
            ]
            for target in due:
                self._checking.add(target.key)
        return due

    def _next_wait(self) -> float:
        with self._lock:
            pending = [d for k, d in self._due.items() if k not in self._checking]
        if not pending:
            return 1.0
        return max(0.05, min(1.0, min(pending) - time.monotonic()))

    # -- checks ----------------------------------------------------------------------------

    def _check(self, target: HostTarget) -> None:
        try:
            self._record(target, self._probe(target))
        except Exception:  # never lose the host: log, and check again next interval
            log.exception("health check of InferenceHost %s failed unexpectedly", target.key)
            self._record(target, self._failed(target, "the health check failed unexpectedly"))

    def _probe(self, target: HostTarget) -> HostHealth:
        protocol = self._protocols.get(target.protocol)
        if protocol is None:
            return HostHealth(checked=True)  # the reconciler reports ProtocolUnknown
        client = self._client(target, self.settings.request_timeout)
        try:
            protocol.health(client)
            models = tuple(protocol.list(client))
        except AddressRefused as exc:
            return HostHealth(checked=True, refused=str(exc), refused_reason="AddressNotAllowed")
        except (HostError, OSError) as exc:
            return self._failed(target, _text(exc))
        return HostHealth(
            checked=True,
            ready=True,
            address=client.address,
            port=client.port,
            models=models,
            last_seen=self._now().replace(microsecond=0),
        )

    def _failed(self, target: HostTarget, error: str) -> HostHealth:
        with self._lock:
            before = self._health.get(target.key) or HostHealth()
        failures = before.failures + 1
        return replace(
            before,
            checked=True,
            ready=before.ready and failures < self.settings.failure_threshold,
            failures=failures,
            last_error=error,
            refused=None,
        )

    def _client(self, target: HostTarget, timeout: float) -> HostClient:
        return HostClient(target.endpoint, guard=self.guard, timeout=timeout, token=target.token)

    def _record(self, target: HostTarget, health: HostHealth) -> None:
        now = time.monotonic()
        with self._lock:
            self._checking.discard(target.key)
            if self._targets.get(target.namespace, {}).get(target.name) != target:
                return  # untracked or changed meanwhile: this result is stale
            before = self._health.get(target.key)
            self._health[target.key] = health
            self._due[target.key] = now + self.settings.health_interval
            told = self._told.get(target.namespace, 0.0)
            tell = _shown(before) != _shown(health) or now - told >= self.settings.last_seen_refresh
            if tell:
                self._told[target.namespace] = now
        if tell:
            self._notify(target.namespace)

    # -- admin calls -----------------------------------------------------------------------

    def _call(self, target: HostTarget, kind: OpKind, model: str, source: str | None) -> None:
        with self._lock:
            if self._stop.is_set() or not self._should_call(target.key, kind, model):
                return
            self._ops.setdefault(target.key, {})[model] = OpState(kind, "running", at=self._now())
            try:
                self._calls.submit(self._run_call, target, kind, model, source)
            except RuntimeError:  # stopping: the pool takes no more work
                del self._ops[target.key][model]

    def _should_call(self, key: str, kind: OpKind, model: str) -> bool:
        state = self._ops.get(key, {}).get(model)
        if state is None:
            return True
        if state.phase == "running":
            return False
        if state.kind != kind:
            return True
        age = (self._now() - state.at).total_seconds() if state.at else 1e9
        if state.phase == "done":
            return kind == "load" and age >= 2 * self.settings.health_interval
        attempts = self._attempts.get((key, model), 1)
        backoff = min(self.settings.health_interval * float(2**attempts), MAX_BACKOFF)
        return bool(age >= backoff)

    def _run_call(self, target: HostTarget, kind: OpKind, model: str, source: str | None) -> None:
        protocol = self._protocols[target.protocol]
        client = self._client(target, self.settings.load_timeout)
        try:
            if kind == "load":
                protocol.load(client, model, source=source)
            else:
                protocol.unload(client, model)
            state = OpState(kind, "done", at=self._now())
        except (HostError, AddressRefused, OSError) as exc:
            state = OpState(kind, "failed", _text(exc)[:1024], at=self._now())
        except Exception as exc:  # a plug-in's bug must not kill the worker
            log.exception("%s of %s on InferenceHost %s failed", kind, model, target.key)
            state = OpState(
                kind, "failed", f"unexpected error: {type(exc).__name__}", at=self._now()
            )
        self._finish(target, model, state)

    def _finish(self, target: HostTarget, model: str, state: OpState) -> None:
        pair = (target.key, model)
        with self._lock:
            if target.key in self._health or target.key in self._due:
                self._ops.setdefault(target.key, {})[model] = state
                attempts = self._attempts.get(pair, 0) + 1 if state.phase == "failed" else 0
                self._attempts[pair] = attempts
                self._due[target.key] = 0.0  # check again now: the model list changed
        self._wake.set()
        self._notify(target.namespace)


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:1024] or type(exc).__name__


def _shown(health: HostHealth | None) -> tuple[object, ...]:
    """What of a host's health a status shows (lastSeen aside, refreshed on its own)."""
    if health is None:
        return ()
    return (health.ready, health.address, health.models, health.last_error, health.refused)
