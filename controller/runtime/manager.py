"""The running controller: informers feed a work queue, workers reconcile, one leader acts.

Like controller-runtime's manager: caches start (and stay warm) on every
replica, but only the Lease holder runs workers. The resync every
POLLING_INTERVAL replays the cache into the queue, as client-go's resync does,
instead of relisting everything from the API server.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from controller.core.fleets.names import fleet_key, split_fleet_key
from controller.core.fleets.settings import FleetSettings, fleet_settings_from_env
from controller.core.ports import ApiError
from controller.core.routing import BATCH_SECONDS, split_config_key
from controller.core.serving.names import split_serving_key
from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from controller.core.settings import Settings
from controller.hosts.prober import HostProber
from controller.kube import Elector, KubeCluster, Transport, with_pool_size
from controller.kube.fleets import KubeFleets
from controller.kube.serving import KubeServing
from controller.reconcile.configs import ConfigReconciler
from controller.reconcile.deployments import DeploymentReconciler, ModelReconciler
from controller.reconcile.fleets import FleetReconciler
from controller.reconcile.runs import Reconciler, Result
from controller.runtime.logs import reconcile_context
from controller.runtime.metrics import Metrics
from controller.runtime.workqueue import WorkQueue

log = logging.getLogger(__name__)
SYNC_TIMEOUT = 120.0  # controller-runtime's CacheSyncTimeout


class CacheSyncError(RuntimeError):
    """The informers could not list everything within SYNC_TIMEOUT."""


class Manager:
    """One controller replica."""

    def __init__(
        self,
        api_client: Any,
        settings: Settings,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        identity: str | None = None,
        metrics: Metrics | None = None,
        serving_settings: ServingSettings | None = None,
        fleet_settings: FleetSettings | None = None,
        base_delay: float = 0.05,
    ) -> None:
        self.settings = settings
        self.identity = identity or f"longrun-{uuid.uuid4().hex[:8]}"
        self.metrics = metrics or Metrics()
        self.queue = WorkQueue(
            metrics=self.metrics, base_delay=base_delay, batch_period=BATCH_SECONDS
        )
        # runs' 8, serving's 11, fleets' 5
        informers = 24 * max(1, len(settings.watch_namespaces))
        pooled = with_pool_size(api_client, informers + settings.max_reconcile_rate + 4)
        self.transport = Transport(pooled, on_request=self._count_request)
        self.cluster = KubeCluster(
            self.transport,
            namespaces=settings.watch_namespaces,
            enqueue=self.queue.add,
            identity=self.identity,
            now=now,
        )
        # The serving half: its own adapter beside the run cluster, fed the runs' events.
        self.serving = KubeServing(
            self.transport,
            namespaces=settings.watch_namespaces,
            enqueue=self.queue.add,
            events=self.cluster.emit_event,
            runs_of_config=self.cluster.index.users,
        )
        self.cluster.add_listener(self.serving.on_run_event)
        # External hosts: a third adapter, the prober (health checks, admin calls) and their
        # reconciler, one work-queue key per namespace.
        fleet = (fleet_settings or fleet_settings_from_env()).with_denied(settings.denied_cidrs)
        self.fleets = KubeFleets(
            self.transport,
            namespaces=settings.watch_namespaces,
            enqueue=self.queue.add,
            events=self.cluster.emit_event,
            runs_of_config=self.cluster.index.users,
            allow_credentials=fleet.host_credentials,
        )
        self.cluster.add_listener(self.fleets.on_run_event)
        self.prober = HostProber(fleet, notify=lambda ns: self.queue.add(fleet_key(ns)), now=now)
        self.fleet_reconciler = FleetReconciler(self.fleets, self.prober, fleet, now=now)
        serving = serving_settings or serving_settings_from_env()
        self.deployment_reconciler = DeploymentReconciler(self.serving, serving, now=now)
        self.model_reconciler = ModelReconciler(self.serving, now=now)
        self.reconciler = Reconciler(
            self.cluster,
            settings,
            now=now,
            deployments=self.serving.get_deployment,
            inference_models=self.fleets.get_inference_model,
        )
        self.config_reconciler = ConfigReconciler(self.cluster, settings, now=now)
        self._workers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._elector = self._make_elector(api_client) if settings.leader_election else None
        self.on_lost_leadership: Callable[[], None] = lambda: None

    def _count_request(self, method: str) -> None:
        self.metrics.rest_requests.inc(method=method)

    def _make_elector(self, api_client: Any) -> Elector:
        s = self.settings
        return Elector(
            api_client,
            name=s.lease_name,
            namespace=s.leader_election_namespace,
            identity=self.identity,
            timing=(s.lease_duration, s.renew_deadline, s.retry_period),
            on_started=self._start_leading,
            on_stopped=self._stop_leading,
        )

    # -- life cycle --------------------------------------------------------------

    def start(self) -> None:
        """Start caches, then campaign (or lead at once without leader election)."""
        self.cluster.start()
        self.serving.start()
        self.fleets.start()
        synced = all(
            part.wait_synced(SYNC_TIMEOUT) for part in (self.cluster, self.serving, self.fleets)
        )
        if not synced:
            # Leading on a partial cache would report missing configs that exist and miss
            # Jobs to clean up: fail like controller-runtime, and let the pod restart.
            raise CacheSyncError(
                f"caches did not sync within {SYNC_TIMEOUT:.0f}s: check that the API server "
                "is reachable, the CRDs are installed and RBAC lets the controller list and "
                "watch inferenceruns, inferenceconfigs, jobs, cronjobs, configmaps, pods and "
                "the serving and fleet kinds (charts/longrun/templates/rbac.yaml)"
            )
        threading.Thread(target=self._resync_loop, name="resync", daemon=True).start()
        if self._elector is not None:
            self._elector.start()
        else:
            self._start_leading()

    def stop(self) -> None:
        """Stop leading, working and watching."""
        self._stop.set()
        if self._elector is not None:
            self._elector.stop()
        self._leading.clear()
        self.metrics.leader.set(0)
        self.queue.shutdown()
        self.prober.stop()
        for worker in self._workers:
            worker.join(timeout=10)
        self.cluster.stop()
        self.serving.stop()
        self.fleets.stop()

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the Lease (or runs without election)."""
        return self._leading.is_set()

    def is_ready(self) -> bool:
        """True once the caches have synced."""
        return self.cluster.is_synced() and self.serving.is_synced() and self.fleets.is_synced()

    def _start_leading(self) -> None:
        if self._stop.is_set():
            return
        log.info("started leading", extra={"identity": self.identity})
        self._leading.set()
        self.metrics.leader.set(1)
        self.prober.start()  # only the leader calls hosts
        for index in range(self.settings.max_reconcile_rate):
            worker = threading.Thread(target=self._work, name=f"worker-{index}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._enqueue_all()

    def _stop_leading(self) -> None:
        log.warning("lost leadership", extra={"identity": self.identity})
        self._leading.clear()
        self.metrics.leader.set(0)
        self.queue.shutdown()
        self.on_lost_leadership()

    def _enqueue_all(self) -> None:
        keys = [*self.cluster.run_keys(), *self.cluster.config_keys(), *self.serving.keys()]
        for key in [*keys, *self.fleets.keys()]:
            self.queue.add(key)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.settings.polling_interval):
            try:
                self.serving.discover()  # cert-manager installed since the last look
            except ApiError as exc:
                log.warning("discovery of cert-manager failed: %s", exc)
            try:
                self.cluster.discover()  # Kueue installed since the last look
            except ApiError as exc:
                log.warning("discovery of Kueue failed: %s", exc)
            if self.is_leader:
                self._enqueue_all()

    # -- workers -----------------------------------------------------------------

    def _work(self) -> None:
        while self._leading.is_set():
            key = self.queue.get()
            if key is None:
                return
            try:
                self.process(key)
            finally:
                self.queue.done(key)

    def process(self, key: str) -> None:
        """Reconcile one key, with metrics, logging context and retry on error."""
        started = time.monotonic()
        with reconcile_context(key):
            try:
                result = self._reconcile(key)
            except ApiError as exc:
                self._retry(key, exc)
                return
            except Exception:
                log.exception("reconcile failed")
                self._retry(key, None)
                return
            finally:
                self.metrics.reconcile_time.observe(time.monotonic() - started)
        self.queue.forget(key)
        if result.requeue_after is not None:
            self.metrics.reconcile_total.inc(result="requeue_after")
            self.queue.add_after(key, result.requeue_after)
        else:
            self.metrics.reconcile_total.inc(result="success")

    def _reconcile(self, key: str) -> Result:
        namespace = split_fleet_key(key)  # Fleet/<ns>: every host and InferenceModel of it
        if namespace is not None:
            return self.fleet_reconciler.reconcile(namespace)
        serving = split_serving_key(key)  # ModelDeployment/<ns>/<name>, Model/<ns>/<name>
        if serving is not None:
            kind, rest = serving
            if kind == "Model":
                return self.model_reconciler.reconcile(rest)
            return self.deployment_reconciler.reconcile(rest)
        config = split_config_key(key)
        if config is not None:
            return self.config_reconciler.reconcile(config)
        return self.reconciler.reconcile(key)

    def _retry(self, key: str, exc: ApiError | None) -> None:
        self.metrics.reconcile_total.inc(result="error")
        self.metrics.reconcile_errors.inc()
        if exc is not None:
            log.info("transient error, retrying: %s", exc)
        if exc is not None and exc.retry_after:
            self.queue.add_after(key, exc.retry_after)
            return
        self.queue.add_rate_limited(key)
