"""The whole system on one machine: API emulator, controller process, real runner pods.

Why a separate process for the controller: the end-to-end suite must prove what a
cluster would run — `longrun controller` with a kubeconfig, its informers, leader
election and HTTP probes — not a Manager object sharing the test's interpreter.
Pods the emulator's Job controller creates are run by `LocalPodExecutor`, i.e. the
real runner as a subprocess with the pod's env, contract and Secrets. Clients are
the real `kubectl` (what users type) and the official Python client (for reads).

Time: the emulator's clock drives CronJob ticks; the controller uses wall time.
A System whose clock starts in the past (`clock_start`) lets a test advance
through several schedule ticks without ever stamping objects in the future.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from controller.core.settings import DEFAULT_IMAGE
from e2e.emulator import Clock, Emulator, EmulatorConfig
from e2e.emulator.clock import Timers
from e2e.fixtures import EmulatorHandle, eventually, require_kubectl
from e2e.local_executor import LocalPodExecutor
from local.podspec import ImageMap

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "charts" / "longrun" / "crds"
# Krateo's runner images run our runner: it reads the same contract keys and storage shapes.
KRATEO_RUNNER = "ghcr.io/krateoplatformops/kserve-krateo-runner-test"
CONTROLLER_NAMESPACE = "longrun-system"
Obj = dict[str, Any]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class System:
    """An emulator running pods for real, the CRDs, and `longrun controller` as a process."""

    def __init__(self, workdir: Path, *, clock_start: datetime | None = None) -> None:
        self.workdir = workdir
        (workdir / "emulator").mkdir(parents=True, exist_ok=True)
        require_kubectl()  # before anything starts: skip locally, fail in CI
        images = ImageMap(DEFAULT_IMAGE, commands={KRATEO_RUNNER: ImageMap.runner_command})
        self.emulator = Emulator(
            EmulatorConfig(job_backoff_seconds=0.0, bookmark_interval=1.0),
            clock=Clock(start=clock_start),
            executor=self._executor_factory(images),
            workdir=workdir / "emulator",
        )
        self.handle = EmulatorHandle(self.emulator)
        self.health_port, self.metrics_port = free_port(), free_port()
        self.controller: subprocess.Popen[bytes] | None = None
        self.controller_log = workdir / "controller.log"

    def _executor_factory(self, images: ImageMap) -> Any:
        def factory(_timers: Timers) -> LocalPodExecutor:
            return LocalPodExecutor(
                store=lambda: self.emulator.store, workdir=self.workdir / "pods", images=images
            )

        return factory

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> System:
        """Start the emulator, install the CRDs with kubectl, start and await the controller."""
        self.emulator.start()
        self.kubectl("apply", "-f", str(CRDS))
        self.kubectl("create", "namespace", CONTROLLER_NAMESPACE)
        env = {
            **os.environ,
            "POLLING_INTERVAL": "10s",
            "MAX_RECONCILE_RATE": "2",
            "LEADER_ELECTION": "true",
            "POD_NAMESPACE": CONTROLLER_NAMESPACE,
            "LOG_FORMAT": "json",
        }
        argv = [sys.executable, "-m", "controller", "controller"]
        argv += ["--kubeconfig", str(self.emulator.kubeconfig_path)]
        argv += ["--health-port", str(self.health_port), "--metrics-port", str(self.metrics_port)]
        with self.controller_log.open("wb") as log:
            self.controller = subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=ROOT)
        eventually(self._is_ready, timeout=30, interval=0.1)
        return self

    def _is_ready(self) -> bool:
        assert self.controller is not None and self.controller.poll() is None, self.log_tail()
        return self.http_get(self.health_port, "/readyz")[0] == 200

    def stop(self) -> None:
        """SIGTERM the controller (it must exit 0), then stop the emulator and its pods."""
        code = None
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(signal.SIGTERM)
            code = self.controller.wait(timeout=30)
        self.emulator.stop()
        assert code in (None, 0), f"controller exited {code}:\n{self.log_tail()}"

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the controller logged (for assertion messages)."""
        try:
            text = self.controller_log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- clients -------------------------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        """Run the real kubectl (only --kubeconfig added); its stdout."""
        done = self.handle.kubectl(*args, input=input, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def get(self, kind: str, name: str, namespace: str) -> Obj | None:
        """`kubectl get KIND NAME -o json`, None when it does not exist."""
        out = self.kubectl(
            "get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found", check=True
        )
        return json.loads(out) if out.strip() else None

    def items(self, kind: str, namespace: str, *selector: str) -> list[Obj]:
        """`kubectl get KIND [-l SELECTOR] -o json` items."""
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", ",".join(selector)]
        return list(json.loads(self.kubectl(*args))["items"])

    def namespace(self, name: str) -> str:
        """Create a namespace with kubectl; returns its name."""
        self.kubectl("create", "namespace", name)
        return name

    @staticmethod
    def http_get(port: int, path: str) -> tuple[int, str]:
        """GET http://127.0.0.1:PORT/PATH: (status, body); (0, "") when nothing listens."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except OSError:
            return 0, ""

    def metrics(self) -> str:
        """The controller's /metrics text."""
        return self.http_get(self.metrics_port, "/metrics")[1]


def runner_pids(run_uid: str) -> list[int]:
    """PIDs of the local processes running pods of the run with this uid (env RUN_UID)."""
    marker = f"RUN_UID={run_uid}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if marker in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids
