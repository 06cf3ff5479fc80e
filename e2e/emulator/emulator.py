"""The Emulator: one instance owns a store, its controllers and its HTTP server.

Nothing is global, so several emulators can run in one process (one per test).
`restart()` replaces only the HTTP server (same port, same state), which is
what a client sees when kube-apiserver restarts: connections and watches drop,
objects and resourceVersions survive.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .api import Api
from .clock import Clock, Timers
from .codec import EncodingCache
from .crd import resource_types
from .cronjobs import CronJobController
from .faults import Faults
from .gc import GarbageCollector
from .jobs import JobController
from .kubeletproxy import KubeletClient
from .manager import Manager
from .podgc import PodGC
from .rbacpolicy import ClusterRoleAggregator, bootstrap
from .registry import Registry
from .security import Security
from .server import EmulatorHTTPServer, Handler
from .store import Event, Store, Watcher

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Obj = dict[str, Any]
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class EmulatorConfig:
    """Knobs; tests shrink history_size and bookmark_interval to exercise edge paths."""

    host: str = "127.0.0.1"
    port: int = 0
    history_size: int = 10_000
    bookmark_interval: float = 60.0
    watch_max_seconds: float = 1800.0
    # Base of the Job controller's exponential delay before replacing failed pods.
    job_backoff_seconds: float = 10.0
    seed: int | None = None
    # Pods are not run here but by a node agent over the API (e2e/nodeagent), which
    # registers a Node, binds pods (pods/binding) and writes their status.
    # How `pods/log` reaches a node agent's kubelet endpoint (kube-apiserver's --kubelet-*).
    kubelet_client: KubeletClient | None = None


def awaits_kubelet(pod: Obj) -> bool:
    """kube-apiserver's rule for a graceful pod deletion: the pod is bound to a node and not
    finished, so its kubelet must stop it and confirm (a delete with grace 0)."""
    phase = (pod.get("status") or {}).get("phase")
    return bool(pod["spec"].get("nodeName")) and phase not in ("Succeeded", "Failed")


class ServiceAccounts:
    """The ServiceAccount controller's visible effect: a `default` SA per namespace."""

    name = "serviceaccounts"

    def __init__(self, api: Api) -> None:
        self.api = api

    def keys_for(self, event: Event) -> list[str]:
        if event.key == "namespaces" and event.type == "ADDED":
            return [event.obj["metadata"]["name"]]
        return []

    def reconcile(self, key: str) -> None:
        rt = self.api.registry.get("", "v1", "serviceaccounts")
        assert rt is not None
        ns = self.api.store.get("namespaces", "", key)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if self.api.store.get(rt.key, key, "default") is None:
            self.api.create(rt, key, {"metadata": {"name": "default"}})


class Emulator:
    """A Kubernetes API emulator on 127.0.0.1 with built-in controllers."""

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        clock: Clock | None = None,
        workdir: str | Path | None = None,
    ) -> None:
        self.config = config or EmulatorConfig()
        self.clock = clock or Clock()
        # KUBE_EMULATOR_AUDIT=1 (the emulator's own tests): stop() fails if a stored
        # version was changed in place, which would corrupt what other readers hold.
        self.store = Store(
            history_size=self.config.history_size,
            audit=bool(os.environ.get("KUBE_EMULATOR_AUDIT")),
        )
        self.registry = Registry()
        self.api = Api(
            store=self.store, registry=self.registry, clock=self.clock, seed=self.config.seed
        )
        self.timers = Timers(self.clock)
        self.encodings = EncodingCache()  # answers and watch events share encodings
        self.manager = Manager(timers=self.timers)
        self.faults = Faults(drop_watches=self.drop_watches)
        # Authentication, RBAC and validating admission (PodSecurity): security.py.
        self.security = Security(self.api)
        self.api.validate_admission = self.security.admit
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kube-emulator-"))
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self._server: EmulatorHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._watches: dict[Watcher, Handler] = {}
        self._watch_lock = threading.Lock()
        self._port = self.config.port
        self.api.on_crd_write = self._register_crd
        # Pods are run by a node agent (e2e/nodeagent), never by the emulator itself.
        self.api.on_pod_graceful_delete = awaits_kubelet
        for ctrl in (
            GarbageCollector(self.api),
            JobController(
                self.api, manager=self.manager, backoff_seconds=self.config.job_backoff_seconds
            ),
            CronJobController(self.api, manager=self.manager),
            PodGC(self.api),
            ServiceAccounts(self.api),
            ClusterRoleAggregator(self.api),
        ):
            self.manager.add(ctrl)
        self.store.add_listener(self.manager.on_event)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Emulator:
        self.timers.start()
        self.manager.start()
        ns_rt = self.registry.get("", "v1", "namespaces")
        assert ns_rt is not None
        for name in SYSTEM_NAMESPACES:
            if self.store.get("namespaces", "", name) is None:
                self.api.create(ns_rt, "", {"metadata": {"name": name}})
        bootstrap(self.api)  # RBAC's bootstrap roles and bindings
        self._serve()
        return self

    def _serve(self) -> None:
        self._server = EmulatorHTTPServer((self.config.host, self._port), self)
        self._port = self._server.server_address[1]
        self._serve_thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="emulator-http",
            daemon=True,
        )
        self._serve_thread.start()
        self._write_kubeconfig()

    def _shutdown_server(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        self.store.close_watches()
        server.close_connections()
        server.server_close()
        if self._serve_thread is not None:
            self._serve_thread.join(timeout=5)

    def restart(self) -> None:
        """Restart the HTTP server on the same port; state and controllers survive."""
        self._shutdown_server()
        self._serve()

    def stop(self) -> None:
        self._shutdown_server()
        self.manager.stop()
        self.timers.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        changed = self.store.verify_unchanged()
        if changed:
            raise AssertionError(f"stored objects were changed in place: {changed[:10]}")

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- client access ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self._port}"

    def _write_kubeconfig(self) -> None:
        self.kubeconfig_path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: emulator\n  cluster:\n    server: {self.url}\n"
            "contexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: emulator\n"
            "    namespace: default\n"
            "current-context: emulator\n"
            "users:\n- name: emulator\n  user: {}\n"
            "preferences: {}\n"
        )

    def api_client(self) -> ApiClient:
        """A kubernetes.client.ApiClient for this emulator; the caller closes it."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until the built-in controllers have nothing queued."""
        return self.manager.wait_idle(timeout)

    # -- watches and CRDs -------------------------------------------------------------------
    def register_watch(self, watcher: Watcher, handler: Handler) -> None:
        with self._watch_lock:
            self._watches[watcher] = handler

    def open_watches(self) -> list[Watcher]:
        """Watches currently streaming over HTTP (lets tests wait for a client to be watching)."""
        with self._watch_lock:
            return list(self._watches)

    def unregister_watch(self, watcher: Watcher) -> None:
        with self._watch_lock:
            self._watches.pop(watcher, None)
        self.store.unwatch(watcher)

    def drop_watches(self) -> None:
        """Abruptly close every watch connection."""
        with self._watch_lock:
            pairs = list(self._watches.items())
        for watcher, handler in pairs:
            if self._server is not None:
                self._server.drop(handler)
            watcher.close()

    def _register_crd(self, crd: Obj) -> None:
        group = crd["spec"]["group"]
        plural = crd["spec"]["names"]["plural"]
        if crd["metadata"].get("deletionTimestamp"):
            return
        self.registry.remove_group_resource(group, plural)
        for rt in resource_types(crd):
            self.registry.add(rt)
