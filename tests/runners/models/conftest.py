"""Fixtures for the model client tests.

Faked: Secrets, as files under a temporary `secretsDir`. Real: the TLS certificate (made by the
`openssl` CLI), local HTTP servers (`model_fakes.LocalServer`), and the session-scoped model
servers of `e2e.peers.fixtures` (registered in tests/conftest.py).
"""

from __future__ import annotations

import http.server
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runners.api import RunContext

# Test modules import their fakes by this unique top-level name (pytest runs with importlib).
sys.path.insert(0, str(Path(__file__).parent))
from model_fakes import Answer, Certificate, LocalServer, handler_class


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    return tmp_path / "secrets"


@pytest.fixture
def ctx(secrets_dir: Path) -> RunContext:
    return RunContext(run_uid="uid-1", job_name="job-1", secrets_dir=str(secrets_dir))


@pytest.fixture
def put_secret(secrets_dir: Path) -> Callable[..., Path]:
    """Mount a Secret key as the controller would: <secretsDir>/<name>/<key>."""

    def put(name: str, key: str, value: str | bytes) -> Path:
        path = secrets_dir / name / key
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, bytes):
            path.write_bytes(value)
        else:
            path.write_text(value)
        return path

    return put


@pytest.fixture(scope="session")
def certificate(server_certificate: tuple[Path, Path]) -> Certificate:
    """Made with the real `openssl` CLI (tests/runners/conftest.py); it is its own CA."""
    return Certificate(*server_certificate)


@pytest.fixture
def local_server() -> Iterator[Callable[..., LocalServer]]:
    """Start real local HTTP servers (optionally TLS); all are shut down after the test."""
    started: list[http.server.ThreadingHTTPServer] = []

    def start(answer: Callable[..., Answer], *, tls: Certificate | None = None) -> LocalServer:
        local = LocalServer(answer)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class(local))
        httpd.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.cert, tls.key)
            httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        local.port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return local

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()
