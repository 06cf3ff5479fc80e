"""The auth sidecar's nginx.conf, as the controller renders it, run by the real nginx: keys
compare exactly, and no text of a spec can make it serve a path without the key check.

Real: `controller.core.serving.auth` (the rendered nginx.conf and key map), `nginx -t` and
nginx serving on 127.0.0.1 (the config made local by `local.deployment.local_nginx_conf`,
as `longrun serve` and the node agent do), a stdlib HTTP server standing for the runtime,
the contract's validators. Faked: nothing. Skips locally without nginx; fails in CI.
"""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contracts.serving import ModelDeploymentSpec
from controller.core.serving import auth, names
from controller.core.serving.runtimes import KEYS_MOUNT, RuntimePlan
from e2e.fixtures import eventually
from e2e.peers.fixtures import skip_or_fail
from local.deployment import ServeError, local_nginx_conf, nginx_binary
from local.podspec import local_path
from local.ports import free_port
from tests.controller.unit.serving.objects import for_runtime, resolved

pytestmark = pytest.mark.requires_service
KEY = auth.generate_keys(1, lambda n: bytes(range(n)))[0]
# Values of `spec.runtime.generic.healthPath` (and, through servedName, of KServe's health
# path) written to break out of the `location` they are pasted into. The first is issue 26's:
# it passed `nginx -t` and served every path without a key.
HOSTILE = [
    "/health { proxy_pass http://127.0.0.1:8000; } location ~ ^/ { proxy_pass "
    "http://127.0.0.1:8000; } location = /unused",
    '/health" { return 200; } location ~ ^/ { proxy_pass http://127.0.0.1:8000; } location = "/x',
    "/h;\n    }\n  }\n  server { listen 9080; location / { proxy_pass http://127.0.0.1:8000; } "
    "}\n  server {\n    location = /h",
    "/$http_authorization",
    "/health\\",
    "/a/../b",
    "/v1/models/x?y=1",
]


@pytest.fixture(scope="module")
def nginx() -> str:
    try:
        return nginx_binary()
    except ServeError as exc:
        skip_or_fail(str(exc))
        raise


@contextmanager
def runtime() -> Iterator[int]:
    """A stand-in for the model server: 200 and the path it was asked, on every path."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"runtime {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def write_conf(plan: RuntimePlan, root: Path, *, upstream: int, port: int) -> Path:
    """The rendered nginx.conf and key map, made local as `longrun serve` makes them."""
    keys = local_path(root, f"{KEYS_MOUNT}/{names.NGINX_KEYS_KEY}")
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_bytes(base64.b64decode(auth.secret_data((KEY,))[names.NGINX_KEYS_KEY]))
    moved = {auth.PROXY_HTTP_PORT: port, plan.http_port or 0: upstream}
    conf = root / "nginx.conf"
    conf.write_text(local_nginx_conf(auth.nginx_conf(plan), root=root, ports=moved))
    return conf


def nginx_test(nginx: str, conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [nginx, "-e", "stderr", "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30
    )


@contextmanager
def serving(nginx: str, conf: Path, port: int) -> Iterator[str]:
    log = conf.with_name("nginx.log")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [nginx, "-e", "stderr", "-c", str(conf), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: status(f"{base}/", None) != 0 or process.poll() is not None)
        assert process.poll() is None, log.read_text()
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)


def status(url: str, authorization: str | None) -> int:
    headers = {"Authorization": authorization} if authorization is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def generic_plan(health: str) -> RuntimePlan:
    obj = for_runtime("generic")
    return dataclasses.replace(resolved(obj).plan, health_path=health)


def test_a_key_in_another_letter_case_is_refused(nginx: str, tmp_path: Path) -> None:
    plan = resolved(for_runtime("kserve")).plan
    port = free_port()
    with runtime() as upstream:
        conf = write_conf(plan, tmp_path, upstream=upstream, port=port)
        assert nginx_test(nginx, conf).returncode == 0
        with serving(nginx, conf, port) as base:
            predict = f"{base}/v1/models/kserve:predict"
            assert status(predict, f"Bearer {KEY}") == 200
            assert KEY.swapcase() != KEY
            assert status(predict, f"Bearer {KEY.swapcase()}") == 401
            assert status(predict, f"Bearer {KEY.upper()}") == 401
            assert status(predict, f"Bearer {KEY}x") == 401
            assert status(predict, f"Bearer {KEY[:-1]}") == 401
            assert status(predict, None) == 401
            assert status(predict, f"bearer {KEY}") == 200  # the scheme's case does not matter


def test_only_the_health_path_passes_without_a_key(nginx: str, tmp_path: Path) -> None:
    plan = generic_plan("/v1/health.ready_1~x")
    port = free_port()
    with runtime() as upstream:
        conf = write_conf(plan, tmp_path, upstream=upstream, port=port)
        with serving(nginx, conf, port) as base:
            assert status(f"{base}/v1/health.ready_1~x", None) == 200
            assert status(f"{base}/v1/health.ready_1~x/more", None) == 401
            assert status(f"{base}/v1/chat/completions", None) == 401


@pytest.mark.parametrize("health", HOSTILE, ids=range(len(HOSTILE)))
def test_no_health_path_makes_the_sidecar_serve_without_a_key(
    nginx: str, tmp_path: Path, health: str
) -> None:
    plan = generic_plan(health)
    try:
        auth.nginx_conf(plan)
    except ValueError:
        return  # refused when rendered: nothing to serve
    port = free_port()
    with runtime() as upstream:
        conf = write_conf(plan, tmp_path, upstream=upstream, port=port)
        if nginx_test(nginx, conf).returncode != 0:
            return  # nginx refuses the config: the sidecar does not start, nothing is served
        with serving(nginx, conf, port) as base:
            for path in ("/", "/v1/chat/completions", "/secret"):
                assert status(f"{base}{path}", None) == 401, path


@pytest.mark.parametrize("health", HOSTILE, ids=range(len(HOSTILE)))
def test_the_contract_refuses_a_hostile_health_path_naming_the_field(health: str) -> None:
    generic = {"image": "x", "port": 8000, "protocol": "openai-chat", "healthPath": health}
    spec = {"model": {"source": "s3://bucket/m.onnx", "format": "onnx"}}
    with pytest.raises(ValidationError) as err:
        ModelDeploymentSpec.model_validate({**spec, "runtime": {"generic": generic}})
    (error,) = err.value.errors()
    assert error["loc"] == ("runtime", "generic", "healthPath")
    assert "must be a URL path" in error["msg"]


@pytest.mark.parametrize("name", ["../../etc", "a/b", "x y", "-hf", "a..b", "", ".hidden", "m$"])
def test_the_contract_refuses_a_served_name_that_is_not_a_plain_name(name: str) -> None:
    spec = {"model": {"source": "s3://bucket/m.onnx", "format": "onnx"}, "servedName": name}
    with pytest.raises(ValidationError) as err:
        ModelDeploymentSpec.model_validate({**spec, "runtime": {"triton": {}}})
    assert err.value.errors()[0]["loc"] == ("servedName",)


@pytest.mark.parametrize("runtime_kind", ["kserve", "mlserver", "triton", "generic"])
def test_every_runtimes_sidecar_config_passes_nginx_t(
    nginx: str, tmp_path: Path, runtime_kind: str
) -> None:
    plan = resolved(for_runtime(runtime_kind, servedName="iris-v2.1_a")).plan
    conf = write_conf(plan, tmp_path, upstream=free_port(), port=free_port())
    done = nginx_test(nginx, conf)
    assert done.returncode == 0, done.stderr
