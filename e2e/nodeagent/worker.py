"""One pod on this machine: its containers as processes, from the first status to the last.

The pod's volumes become one directory and each container an argv and env
(containers.py, images.py); each container runs through `local.executor.PodProcess`
(lifecycle.py), exactly as for `longrun run`. This module adds what a kubelet does around
them, for the pod as a whole:

- init containers run first, one at a time and each to completion; a failed one is
  restarted after back-off (`restartPolicy` OnFailure/Always) or fails the pod (Never),
  and the pod stays Pending (`Initialized` False) until all have completed;
- then every container starts, each on a thread of its own, restarted in place per
  `restartPolicy` with `restartCount` and `lastState` (volumes survive); the pod is
  Running once one has started, Ready when all are ready (their probes, probes.py);
- the pod has an address of its own (network.py), which its containers bind, and the
  Services named in its runner contract are resolved to ready endpoints;
- a setup error (a missing Secret, an unmapped image) leaves the pod Pending with the
  container waiting (`CreateContainerConfigError`, `ErrImagePull` → `ImagePullBackOff`),
  retried with back-off, as on a cluster;
- `activeDeadlineSeconds` counts from the pod's start; past it the pod is stopped and
  Failed with reason `DeadlineExceeded`; stopping stops every container at once.

A worker reports through a `Reporter` and never decides about the pod object itself
(deleting it is the agent's reconcile, which sees the terminal status).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from local.podspec import PodSetupError

from .config import AgentConfig
from .containers import all_containers, container_files, localize_argv, write_pod_volumes
from .images import launch, serving_images
from .kube import Kube
from .lifecycle import ContainerLife
from .logs import log_folder
from .network import POOL, ResolvingSource, ServiceResolver
from .source import ApiSource
from .status import (
    DEADLINE_MESSAGE,
    LOST_MESSAGE,
    PodReport,
    phase_of,
    restart_delay,
    rfc3339,
    terminated,
    waiting,
)

Obj = dict[str, Any]
log = logging.getLogger(__name__)
# What a pod sets itself; the rest of the agent's environment (PATH, HOME...) is inherited.
POD_OWN_ENV = ("CONTRACT_PATH", "TERMINATION_MESSAGE_PATH", "JOB_NAME", "POD_UID")


class Reporter(Protocol):
    def report(self, pod: Obj, report: PodReport) -> bool:
        """Write the pod's status; False when the pod is gone (stop reporting)."""
        ...


class Stopped(Exception):
    """The pod is being stopped (deleted, past its deadline, or the agent stops)."""


class PodWorker:
    """Runs one pod on a thread of its own; `terminate` and `abandon` may come any time."""

    def __init__(
        self,
        pod: Obj,
        *,
        kube: Kube,
        config: AgentConfig,
        reporter: Reporter,
        on_done: Callable[[PodWorker], None] = lambda _w: None,
    ) -> None:
        self.pod = pod
        meta = pod["metadata"]
        self.key, self.uid = f"{meta['namespace']}/{meta['name']}", meta["uid"]
        self.root = config.workdir / "pods" / meta["namespace"] / f"{meta['name']}-{self.uid[:8]}"
        self.log_dir = log_folder(config.workdir, pod)
        self.pod_ip = POOL.claim(self.uid)
        resolver = ServiceResolver(kube)
        self._source = ResolvingSource(
            ApiSource(kube, namespace=meta["namespace"], root=self.root),
            namespace=meta["namespace"],
            resolve=resolver.resolve,
        )
        self._service_env = api_server_env(kube.api.configuration.host)
        self.config, self._reporter, self._on_done = config, reporter, on_done
        spec = pod["spec"]
        self._init = [
            ContainerLife(c, True, waiting("PodInitializing"))
            for c in spec.get("initContainers") or []
        ]
        first = "PodInitializing" if self._init else "ContainerCreating"
        self._main = [ContainerLife(c, False, waiting(first)) for c in spec["containers"]]
        self._start_time = rfc3339(config.now())
        self._started = time.monotonic()
        deadline = spec.get("activeDeadlineSeconds")
        self._deadline = None if deadline is None else self._started + float(deadline)
        self._deadline_exceeded = False
        self._init_failed = False
        self._stop = threading.Event()
        self._grace = float(spec.get("terminationGracePeriodSeconds", 30))
        self._silent = False
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-{self.key}", daemon=True)

    @property
    def pid(self) -> int | None:
        """The process of the pod's first container (None before it started)."""
        return self._main[0].pid

    @property
    def grace(self) -> float:
        return self._grace

    # -- what the agent calls ------------------------------------------------------------
    def start(self) -> PodWorker:
        self._thread.start()
        return self

    def terminate(self, grace: float) -> None:
        """The pod is deleting: stop its containers (SIGTERM, SIGKILL after `grace` seconds)
        and report how they ended. Safe to repeat; the first grace period stands."""
        self._request_stop(grace, silent=False)

    def abandon(self, grace: float) -> None:
        """Stop the containers and report nothing (the pod is gone, or the agent stops)."""
        self._request_stop(grace, silent=True)

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def remove_files(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _request_stop(self, grace: float, *, silent: bool) -> None:
        if self.config.scripted is not None:
            self.config.scripted.stopping(self.pod)
        with self._lock:
            self._silent = self._silent or silent
            if not self._stop.is_set():
                self._grace = max(grace, self.config.min_kill_grace)
                self._stop.set()

    # -- the pod's life --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._live()
        except Exception:  # a bug here must not take the agent down; the log says which pod
            log.exception("pod %s: worker failed", self.key)
        finally:
            POOL.release(self.uid)
            self.done.set()
            self._on_done(self)

    def _live(self) -> None:
        self.changed()
        try:
            self._prepare()
            for init in self._init:
                if init.run(self) != 0 or self.is_stopping():
                    self._init_failed = not self.is_stopping()
                    raise Stopped
            threads = [
                threading.Thread(target=self._run_main, args=(c,), name=f"{self.key}/{c.name}")
                for c in self._main
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        except Stopped:
            pass
        self._finish()

    def _run_main(self, container: ContainerLife) -> None:
        try:
            container.run(self)
        except Stopped:
            return
        except Exception:  # as in _run: the pod then reports the container lost
            log.exception("pod %s: container %s failed", self.key, container.name)
            return
        # It ended for good: say so now if others run on (else the last status does).
        if any(c is not container and "terminated" not in c.state for c in self._main):
            self.changed()

    def _prepare(self) -> None:
        """The pod materialized under its root; setup errors are retried with back-off."""
        attempt = 0
        while True:
            self.check_stop()
            try:
                return self._prepared()
            except PodSetupError as exc:
                attempt += 1
                again = exc.reason == "ErrImagePull" and attempt > 1
                blamed = getattr(exc, "container", None) or self._everyone()[0]
                blamed.state = waiting("ImagePullBackOff" if again else exc.reason, str(exc))
                self.changed()
                config = self.config
                delay = restart_delay(
                    attempt, base=config.restart_backoff, cap=config.restart_backoff_max
                )
                self.sleep(delay)

    def _prepared(self) -> None:
        write_pod_volumes(
            self.pod, source=self._source, root=self.root, claims_root=self.config.claims_root
        )
        images = serving_images()
        for life, spec in zip(self._everyone(), all_containers(self.pod), strict=True):
            try:
                found = launch(
                    spec,
                    pod=self.pod,
                    root=self.root,
                    host=self.pod_ip,
                    config=self.config,
                    images=images,
                )
                files = container_files(
                    self.pod,
                    found.container,
                    source=self._source,
                    root=self.root,
                    base_env={**host_env(), **self._service_env},
                    pod_ip=self.pod_ip,
                )
            except PodSetupError as exc:
                exc.container = life  # type: ignore[attr-defined]
                raise
            args = localize_argv(found.args, files=files, root=self.root)
            life.launch = dataclasses.replace(found, args=args)
            life.files = files

    def _everyone(self) -> list[ContainerLife]:
        return [*self._init, *self._main]

    def _finish(self) -> None:
        """The last status: how each container ended (or that it never ran)."""
        now = rfc3339(self.config.now())
        for c in self._everyone():
            if "waiting" in c.state and "terminated" in c.last_state:  # stopped in back-off
                c.state, c.last_state = c.last_state, {}
            if "terminated" not in c.state and not self._init_failed and not c.init:
                c.state = terminated(
                    137,
                    "ContainerStatusUnknown",
                    started_at=self._start_time,
                    finished_at=now,
                    message=LOST_MESSAGE,
                )
            c.ready = c.started = False
        if self._deadline_exceeded:
            self._report("Failed", reason="DeadlineExceeded", message=DEADLINE_MESSAGE)
        elif self._init_failed:
            self._report("Failed")
        else:
            codes = [int(c.state["terminated"]["exitCode"]) for c in self._main]
            self._report(phase_of(codes))

    # -- what containers call --------------------------------------------------------------
    def is_stopping(self) -> bool:
        past = self._deadline is not None and time.monotonic() >= self._deadline
        if past and not self._stop.is_set():
            self._deadline_exceeded = True
            spec_grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
            self._request_stop(spec_grace, silent=False)
        return self._stop.is_set()

    def check_stop(self) -> None:
        if self.is_stopping():
            raise Stopped

    def sleep(self, seconds: float) -> None:
        """Sleep, woken by a stop request or the deadline (then Stopped)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check_stop()
            until_deadline = (self._deadline or end) - time.monotonic()
            self._stop.wait(max(0.0, min(left, until_deadline, 1.0)))
        self.check_stop()

    def changed(self) -> None:
        self._report(self._phase())

    def _phase(self) -> str:
        if any(not c.succeeded for c in self._init):
            return "Pending"
        return "Running" if any(c.has_run for c in self._main) else "Pending"

    def _report(self, phase: str, *, reason: str = "", message: str = "") -> None:
        with self._report_lock:
            if self._silent:
                return
            report = PodReport(
                phase,
                tuple(c.report() for c in self._main),
                self._start_time,
                reason,
                message,
                init_containers=tuple(c.report() for c in self._init),
                pod_ip=self.pod_ip,
            )
            if not self._reporter.report(self.pod, report):
                self._request_stop(self._grace, silent=True)  # the pod is gone


def api_server_env(url: str) -> dict[str, str]:
    """What the kubelet tells every container about the API server (the `kubernetes` Service
    of `default`): KUBERNETES_SERVICE_HOST/PORT, here the address this agent uses. Only for an
    HTTPS server: in-cluster clients speak TLS, and the emulator serves plain HTTP."""
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname is None:
        return {}
    port = str(parts.port or 443)
    return {"KUBERNETES_SERVICE_HOST": parts.hostname, "KUBERNETES_SERVICE_PORT": port}


def host_env() -> dict[str, str]:
    """The agent's environment minus what a pod sets itself."""
    return {k: v for k, v in os.environ.items() if k not in POD_OWN_ENV}
