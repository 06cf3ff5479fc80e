"""Fixtures for `longrun run` tests: run files, a fake runner image, a slow KServe v1 stub.

The stub is a real HTTP server speaking KServe v1 (`POST /v1/models/NAME:predict`) that
answers class 0 for every instance after a configurable delay: enough for the real runner,
slow enough to interrupt. Tests that need the real model server use `kserve_server`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from e2e.peers.fixtures import kserve_server

__all__ = ["kserve_server"]

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")
FAKE_IMAGE = "example.com/fake-runner:1.0"


class ModelStub:
    """A KServe v1 server on 127.0.0.1 that counts instances and can be slowed down."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.instances = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(stub.delay)
                stub.instances += len(body["instances"])
                answer = json.dumps({"predictions": [0] * len(body["instances"])}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def model_stub() -> Iterator[ModelStub]:
    """A fresh KServe v1 stub per test."""
    stub = ModelStub()
    yield stub
    stub.close()


def fake_image_map() -> str:
    """The --image-map entry running the committed fake runner in this Python."""
    return f"{FAKE_IMAGE}={sys.executable} {FAKE_RUNNER}"


def fake_run_yaml(
    *, out: Path, mode: str, backoff_limit: int = 2, timeout: int | None = None, name: str = "fake"
) -> str:
    """An InferenceConfig + InferenceRun + Secret whose pod runs the fake runner."""
    timeout_line = f"  timeoutSeconds: {timeout}\n" if timeout else ""
    return f"""\
apiVersion: v1
kind: Secret
metadata: {{name: db}}
stringData: {{url: "sqlite:///{out}/db.sqlite"}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {{name: {name}}}
spec:
  image: {FAKE_IMAGE}
  backoffLimit: {backoff_limit}
  model: {{protocol: kserve-v1, url: "http://127.0.0.1:9", name: iris}}
  storage:
    input: {{sql: {{urlSecretRef: {{name: db, key: url}}, table: t}}}}
    output: {{file: {{path: {out}/predictions}}}}
  pod:
    env:
      - {{name: FAKE_MODE, value: {mode}}}
      - {{name: FAKE_OUT, value: {out}/seen}}
      - {{name: TOKEN, secretKeyRef: {{name: token, key: token}}}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata: {{name: {name}-run}}
spec:
  configRef: {{name: {name}}}
{timeout_line}"""
