"""The Kubernetes a controller benchmark runs on: a real control plane when present, else the
API emulator; and a client-side clock of when each Job appeared.

- **real**: etcd, kube-apiserver and kube-controller-manager v1.36 from `KUBEBUILDER_ASSETS`
  (or setup-envtest's directory; `e2e/real`), with the test node agent (`e2e/nodeagent`)
  as the only kubelet. The bench image is mapped to `sh`, which writes the runner's summary
  as the termination message and exits 0, so a Job completes as fast as the real Job
  controller and a kubelet let it. kube-controller-manager runs with `--kube-api-qps=200
  --kube-api-burst=400` (its defaults, 20/30, make the Job controller the bottleneck of
  1,000 simultaneous Jobs; the run->Job latency measured here does not depend on it).
- **emulator**: `e2e/emulator/child.py` in its own process, scripting every pod to exit 0
  with the same summary.

`JobClock` watches Jobs from its own process and stamps each on receipt (CLOCK_MONOTONIC is
system-wide, so its stamps compare with the creating process's).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_IMAGE = "bench.longrun.dev/noop-runner:1"
SUMMARY = '{"recordsRead": 100, "recordsWritten": 100, "durationSeconds": 0.1}'
SERVER_PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager")


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class BenchCluster:
    """One backend for one phase: where clients connect, what its servers cost, how it stops."""

    backend: str  # "real v1.36.2" or "emulator"
    kubeconfig_path: str
    _server_cpu: Any
    _stop: Any
    extra: dict[str, Any] = field(default_factory=dict)

    def server_cpu(self) -> float:
        """CPU seconds the API server side (and, real, kube-controller-manager) used so far."""
        return float(self._server_cpu())

    def stop(self) -> None:
        self._stop()


def real_available() -> tuple[bool, str]:
    """Whether the real control plane's binaries are here, and where or why not."""
    from e2e.real.assets import AssetsNotFound, find_assets

    try:
        assets = find_assets()
    except AssetsNotFound as exc:
        return False, str(exc)
    return assets.has_controller_manager, f"v{assets.version} from {assets.directory}"


def start(backend: str) -> BenchCluster:
    """A fresh cluster of `backend` ("real" or "emulator"), CRDs installed, namespace made."""
    return _real() if backend == "real" else _emulator()


def _emulator() -> BenchCluster:
    from e2e.emulator.child import Child

    emu = Child(summary=SUMMARY)
    cluster = BenchCluster("emulator", emu.kubeconfig_path, lambda: sum(emu.cpu()), emu.stop)
    _prepare(cluster.kubeconfig_path)
    return cluster


def _real() -> BenchCluster:
    from e2e.real.controlplane import ControlPlane, ControlPlaneOptions

    flags = ("--kube-api-qps=200", "--kube-api-burst=400")
    plane = ControlPlane(options=ControlPlaneOptions(controller_manager_flags=flags)).start()
    try:
        _prepare(str(plane.kubeconfig_path))
        ready = plane.workdir / "nodeagent.ready"
        script = f'printf %s {shlex.quote(SUMMARY)} > "$TERMINATION_MESSAGE_PATH"'
        command = f"sh -c {shlex.quote(script)}"
        argv = [
            sys.executable, "-m", "e2e.nodeagent", "--kubeconfig", str(plane.kubeconfig_path),
            "--workdir", str(plane.workdir / "node"), "--log-level", "WARNING",
            "--image-map", f"{BENCH_IMAGE}={command}", "--ready-file", str(ready),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        plane.launch("nodeagent", argv, ready=ready.exists, env=env)
    except BaseException:
        plane.stop()
        raise
    pids = [p.pid for p in plane.processes if p.name in SERVER_PROCESSES and p.pid]
    version = f"real v{plane.assets.version}"
    return BenchCluster(
        version, str(plane.kubeconfig_path), lambda: sum(map(cpu_of, pids)), plane.stop
    )


def _prepare(kubeconfig: str) -> None:
    from kubernetes import client, config

    from e2e.backends import install_crds

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    try:
        install_crds(api)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})  # type: ignore[arg-type]
        _wait_default_service_account(client.CoreV1Api(api))
    finally:
        api.close()


def _wait_default_service_account(core: Any) -> None:
    """Pods need it on a real server (ServiceAccount admission); the emulator makes it at once."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account("bench").items
        ):
            return
        time.sleep(0.1)
    raise TimeoutError("namespace bench has no default ServiceAccount after 60 s")


WATCHER = """
import json, sys, time
from kubernetes import client, config
api = config.new_client_from_config(config_file=sys.argv[1])
resp = client.BatchV1Api(api).list_namespaced_job(
    sys.argv[2], watch=True, timeout_seconds=3600, _preload_content=False)
print("ready", flush=True)
for line in resp:
    event = json.loads(line)
    if event.get("type") == "ADDED":
        meta = event["object"]["metadata"]
        owners = meta.get("ownerReferences") or [{"name": meta["name"]}]
        print(owners[0]["name"], time.monotonic(), flush=True)
"""


class JobClock:
    """A watch on the namespace's Jobs in its own process: run name -> time its Job arrived."""

    def __init__(self, kubeconfig: str, namespace: str = "bench") -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-c", WATCHER, kubeconfig, namespace]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the Job watcher did not start")
        self.seen: dict[str, float] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            owner, stamp = line.split()
            with self._lock:
                self.seen.setdefault(owner, float(stamp))

    def times(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seen)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)


def to_json(rows: dict[str, Any]) -> str:
    return json.dumps(rows, indent=1)
