"""The whole system on one machine: a Kubernetes, the controller process, real runner pods.

Two backends, chosen by `LONGRUN_KUBE_BACKEND` (e2e/backends.py) or per System: the API
emulator (its built-in kubelet off), or a private real control plane (etcd,
kube-apiserver, kube-controller-manager; e2e/real) when its binaries are found. On both,
pods are run by the same node agent (e2e/nodeagent): it binds them, runs the real runner
(`python -m runners`) as a local process with the pod's env, contract and Secrets, and
writes their status as a kubelet does; the Job, CronJob and garbage-collector
controllers are the emulator's or the real kube-controller-manager's.

Why a separate process for the controller: the end-to-end suite must prove what a
cluster would run — `longrun controller` with a kubeconfig, its informers, leader
election and HTTP probes — not a Manager object sharing the test's interpreter.
Clients are the real `kubectl` (what users type) and the official Python client.

Time: on the emulator, its clock drives CronJob ticks; the controller uses wall time.
A System whose clock starts in the past (`clock_start`, emulator only) lets a test
advance through several schedule ticks without stamping objects in the future.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.backends import KubeHandle, selected_backend, skip_real
from e2e.emulator import Clock, Emulator, EmulatorConfig
from e2e.fixtures import EmulatorHandle, eventually, require_kubectl
from e2e.nodeagent import AgentConfig, Kube, NodeAgent
from e2e.nodeagent.config import DEFAULT_NODE_NAME as NODE_NAME
from e2e.nodeagent.logs import KubeletTLS

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "charts" / "longrun" / "crds"
CONTROLLER_NAMESPACE = "longrun-system"
# The node agent's quick restarts and heartbeats, as in its own tests.
AGENT_TIMING = {"restart_backoff": 0.5, "restart_backoff_max": 5.0, "renew_seconds": 2.0}
Obj = dict[str, Any]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class System:
    """A Kubernetes whose pods run for real, the CRDs, and `longrun controller` as a process."""

    def __init__(
        self,
        workdir: Path,
        *,
        clock_start: datetime | None = None,
        backend: str | None = None,
        env: dict[str, str] | None = None,
        before_controller: Callable[[System], None] | None = None,
    ) -> None:
        self.workdir = workdir
        self._env = dict(env or {})  # the controller's settings, over the defaults below
        self._before_controller = before_controller  # e.g. start Kueue (e2e/kueue)
        self.backend = backend or selected_backend()
        workdir.mkdir(parents=True, exist_ok=True)
        require_kubectl()  # before anything starts: skip locally, fail in CI
        self._clock_start = clock_start
        if clock_start is not None and self.backend != "emulator":
            raise ValueError("clock_start needs the emulator's clock (backend='emulator')")
        self.emulator: Emulator | None = None
        self.plane: Any = None  # e2e.real.controlplane.ControlPlane on the real backend
        self.handle: KubeHandle | None = None
        self.agent: NodeAgent | None = None
        self.health_port, self.metrics_port = free_port(), free_port()
        self.controller: subprocess.Popen[bytes] | None = None
        self.controller_log = workdir / "controller.log"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> System:
        """Start the backend and the node agent, install the CRDs with kubectl, start and await
        the controller."""
        self.handle = self._start_backend()
        self.agent = NodeAgent(
            AgentConfig(
                workdir=self.workdir / "node",
                kubelet_tls=self._kubelet_tls(),
                **AGENT_TIMING,  # type: ignore[arg-type]
            ),
            Kube(self.handle.api_client()),
        ).start()
        self.kubectl("apply", "-f", str(CRDS))
        self.kubectl("create", "namespace", CONTROLLER_NAMESPACE)
        if self._before_controller is not None:
            self._before_controller(self)
        env = {
            **os.environ,
            "POLLING_INTERVAL": "10s",
            "MAX_RECONCILE_RATE": "2",
            "LEADER_ELECTION": "true",
            "POD_NAMESPACE": CONTROLLER_NAMESPACE,
            "LOG_FORMAT": "json",
            # A controller killed by a signal (CI once saw SIGABRT at exit, with no message)
            # leaves every thread's traceback in its log.
            "PYTHONFAULTHANDLER": "1",
            **self._env,
        }
        self._start_controller(env)
        return self

    def _start_controller(self, env: dict[str, str]) -> None:
        """Start `longrun controller` and wait until it is ready. Its two ports were free when
        picked (`free_port`), but another process may bind one before it does (CI saw
        `Address already in use`): then it starts again on new ports, at most three times."""
        assert self.handle is not None
        for attempt in range(3):
            argv = [sys.executable, "-m", "controller", "controller"]
            argv += ["--kubeconfig", str(self.handle.kubeconfig_path)]
            argv += ["--health-port", str(self.health_port)]
            argv += ["--metrics-port", str(self.metrics_port)]
            with self.controller_log.open("wb") as log:
                self.controller = subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=ROOT)
            deadline = time.monotonic() + 60
            while self.controller.poll() is None and time.monotonic() < deadline:
                if self.http_get(self.health_port, "/readyz")[0] == 200:
                    return
                time.sleep(0.1)
            if attempt == 2 or "Address already in use" not in self.log_tail():
                break
            self.health_port, self.metrics_port = free_port(), free_port()
        eventually(self._is_ready, timeout=1, interval=0.1)  # fails with the log's tail

    def _start_backend(self) -> KubeHandle:
        if self.backend == "emulator":
            config = EmulatorConfig(job_backoff_seconds=0.0, bookmark_interval=1.0)
            (self.workdir / "emulator").mkdir(exist_ok=True)
            self.emulator = Emulator(
                config, clock=Clock(start=self._clock_start), workdir=self.workdir / "emulator"
            )
            self.emulator.start()
            return EmulatorHandle(self.emulator, agent=False)  # its own agent runs the pods
        from e2e.real.assets import AssetsNotFound, find_assets
        from e2e.real.controlplane import ControlPlane
        from e2e.real.handle import RealClusterHandle

        try:
            assets = find_assets()
        except AssetsNotFound as exc:
            skip_real(str(exc))
        self.plane = ControlPlane(assets, workdir=self.workdir / "plane").start()
        handle = RealClusterHandle(self.plane)
        handle.require_controllers()
        return handle

    def _kubelet_tls(self) -> KubeletTLS | None:
        """On the real backend, the node agent's log server (`pods/log`, the controller's
        progress reads) needs a serving certificate the API server trusts; the emulator
        accepts the agent's own."""
        if self.plane is None:
            return None
        pair = self.plane.issue_kubelet_certificate(NODE_NAME, hostname=socket.gethostname())
        return KubeletTLS(pair.cert, pair.key, self.plane.ca_cert_path)

    def _is_ready(self) -> bool:
        assert self.controller is not None and self.controller.poll() is None, self.log_tail()
        return self.http_get(self.health_port, "/readyz")[0] == 200

    def stop(self) -> None:
        """SIGTERM the controller (it must exit 0), then stop the node agent and the backend."""
        code = None
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(signal.SIGTERM)
            code = self.controller.wait(timeout=30)
        if self.agent is not None:
            self.agent.stop()
        if self.handle is not None:
            self.handle.close()
        if self.emulator is not None:
            self.emulator.stop()
        if self.plane is not None:
            self.plane.stop()
        assert code in (None, 0), f"controller exited {code}:\n{self.log_tail()}"

    @property
    def clock(self) -> Clock:
        """The emulator's clock (CronJob ticks); emulator only."""
        assert self.emulator is not None, "the real backend has no fake clock"
        return self.emulator.clock

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
        assert self.handle is not None, "start() first"
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
