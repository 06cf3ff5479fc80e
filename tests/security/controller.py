"""`longrun controller` as a process, authenticated by a ServiceAccount token, for RBAC tests.

The process is what the chart runs: `python -m controller controller` with the chart's
env, a kubeconfig that holds only a bearer token from `kubectl create token`, and its JSON
log in a file, so a test can read every API refusal the controller met.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(r"\b403\b|Forbidden|forbidden")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ControllerProcess:
    """One controller process; `stop()` SIGTERMs it and returns its exit code."""

    def __init__(self, kubeconfig: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.health_port = free_port()
        settings = {
            **env,
            "HEALTH_PORT": str(self.health_port),
            "METRICS_PORT": str(free_port()),
            "HEALTH_BIND_ADDRESS": "127.0.0.1",
            "METRICS_BIND_ADDRESS": "127.0.0.1",
            "POD_NAME": "longrun-controller-test",
            "POD_NAMESPACE": env["LEADER_ELECTION_NAMESPACE"],
            "POLLING_INTERVAL": "5s",
            "LOG_FORMAT": "json",
        }
        argv = [sys.executable, "-m", "controller", "controller", "--kubeconfig", str(kubeconfig)]
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, env={**os.environ, **settings}, stdout=out, stderr=out, cwd=ROOT
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready():
            assert self.process.poll() is None, f"controller exited:\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"controller not ready:\n{self.text()[-3000:]}"
            time.sleep(0.1)

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def refusals(self) -> list[str]:
        """Log lines that report a 403 (the API server refused a request)."""
        return [line for line in self.text().splitlines() if FORBIDDEN.search(line)]

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return None
        return self.process.returncode
