"""The token verifier (runners/tokencheck) as a real process, for tests that ask it things.

`VerifierProcess.start` writes the config file, runs `python -m runners.tokencheck` on a
free loopback port and waits for its /healthz; `check` asks /check as nginx's auth_request
would and returns the status with the reason header.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ERROR_HEADER = "X-Longrun-Auth-Error"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VerifierProcess:
    """A running `longrun-token-check`."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @classmethod
    def start(
        cls,
        config: dict[str, Any],
        workdir: Path,
        *,
        service_account_dir: Path | None = None,
        ca_file: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> VerifierProcess:
        """Start the verifier with `config` as its oidc.json; ready when /healthz answers."""
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "oidc.json"
        path.write_text(json.dumps(config))
        port = free_port()
        argv = [sys.executable, "-m", "runners.tokencheck", "--config", str(path),
                "--listen", f"127.0.0.1:{port}"]  # fmt: skip
        if service_account_dir is not None:
            argv += ["--service-account-dir", str(service_account_dir)]
        if ca_file is not None:
            argv += ["--ca-file", str(ca_file)]
        log = workdir / f"verifier-{port}.log"
        environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ)
        verifier = cls(process, port, log)
        verifier.wait_ready()
        return verifier

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"the verifier exited: {self.log.read_text()}")
            try:
                self.health()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of one request on a connection of its own."""
        conn = HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()

    def check(
        self, token: str | None, *, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """(status, X-Longrun-Auth-Error) of /check for a request carrying `token`."""
        sent = dict(headers or {})
        if token is not None:
            sent.setdefault("Authorization", f"Bearer {token}")
        status, answer, _ = self.request(method, "/check", sent)
        return status, answer.get(ERROR_HEADER, "")

    def health(self) -> dict[str, Any]:
        status, _, body = self.request("GET", "/healthz", {})
        assert status == 200, body
        document: dict[str, Any] = json.loads(body)
        return document

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
