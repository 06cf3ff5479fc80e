"""The node agent's networking and image mapping as plain functions: pod addresses, Service
names in a runner contract, probes against a real socket, and each serving image mapped
to its local program through local/runtimes.py (the mapping `longrun serve` uses).

Real: the functions, a stdlib HTTP server on a pod address for the probes, the pod
templates the controller's serving core renders. Faked: the Service lookup (a dict) and
the runtimes' interpreters (`pythons` overrides naming this Python).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.serving import ModelDeploymentSpec
from controller.core.serving.builders import build_pod_template
from controller.core.serving.resolve import ServingResolved, resolve_deployment
from controller.core.serving.runtimes import ServingImages
from controller.core.serving.settings import ServingSettings
from e2e.nodeagent.network import AddressPool, pod_address, rewrite_services
from e2e.nodeagent.probes import ContainerProbes, probe_once
from local.deployment import local_nginx_conf
from local.runtimes import local_server, runtime_of_image

Obj = dict[str, Any]
TABLE = {("iris", "team", 8080): ("127.9.8.7", 9080), ("chat", "team", 80): ("127.1.2.3", 8080)}


def resolve(name: str, namespace: str, port: int | None) -> tuple[str, int] | None:
    return TABLE.get((name, namespace, port or 0))


def test_service_names_in_a_contract_become_ready_pod_addresses() -> None:
    text = json.dumps(
        {
            "model": {"url": "http://iris.team.svc.cluster.local:8080/v1/models/iris:predict"},
            "other": "http://chat.team.svc/v1/chat",  # no port: the scheme's
            "grpc": "iris.team.svc:8080",
            "elsewhere": "http://minio.storage.svc:9000/bucket",  # no such Service: kept
            "text": "see https://example.com/iris.team.svc.txt",
        }
    )

    out = json.loads(rewrite_services(text, namespace="team", resolve=resolve))

    assert out["model"]["url"] == "http://127.9.8.7:9080/v1/models/iris:predict"
    assert out["other"] == "http://127.1.2.3:8080/v1/chat"
    assert out["grpc"] == "127.9.8.7:9080"
    assert out["elsewhere"] == "http://minio.storage.svc:9000/bucket"
    assert out["text"] == "see https://example.com/iris.team.svc.txt"


def test_pod_addresses_are_loopback_off_the_hosts_own_and_unique() -> None:
    pool = AddressPool()
    addresses = {pool.claim(f"uid-{i}") for i in range(2000)}

    assert len(addresses) == 2000
    assert all(a.startswith("127.") and not a.startswith("127.0.") for a in addresses)
    assert pool.claim("uid-7") in addresses  # the same pod keeps its address
    assert pod_address("x") == pod_address("x")


@pytest.fixture
def server_on_pod_address() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/ready" else 503)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    address = pod_address("probe-test")
    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"{address}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_probes_resolve_ports_by_the_probed_containers_own_names(
    server_on_pod_address: str,
) -> None:
    host, port = server_on_pod_address.split(":")
    container = {"ports": [{"name": "web", "containerPort": int(port)}]}

    assert probe_once(
        {"httpGet": {"path": "/ready", "port": "web"}}, container=container, host=host
    )
    assert not probe_once(
        {"httpGet": {"path": "/x", "port": "web"}}, container=container, host=host
    )
    assert not probe_once(
        {"httpGet": {"path": "/ready", "port": "http"}}, container=container, host=host
    )
    assert probe_once({"tcpSocket": {"port": int(port)}}, container={}, host=host)
    assert not probe_once({"tcpSocket": {"port": int(port)}}, container={}, host="127.0.0.2")


def test_readiness_waits_for_the_startup_probe_then_follows_its_thresholds() -> None:
    answers = {"startup": [False, True], "ready": [True, False, False, True]}
    seen: list[str] = []

    def check(probe: Obj) -> bool:
        kind = probe["kind"]
        seen.append(kind)
        return answers[kind].pop(0)

    container = {
        "startupProbe": {"kind": "startup", "periodSeconds": 1e-6},
        "readinessProbe": {"kind": "ready", "periodSeconds": 1e-6, "failureThreshold": 2},
    }
    probes = ContainerProbes(container, "127.1.1.1", check=check)
    states = []
    for _ in range(5):
        probes.tick()
        states.append((probes.started, probes.ready))

    assert seen[:3] == ["startup", "startup", "ready"]
    assert states == [(False, False), (True, True), (True, True), (True, False), (True, True)]


def rendered(runtime: Obj, source: str = "https://h/m.gguf", fmt: str = "gguf") -> Obj:
    obj = {"metadata": {"name": "dep", "namespace": "ns", "uid": "u", "generation": 1}}
    spec = ModelDeploymentSpec.model_validate(
        {"model": {"source": source, "format": fmt}, "runtime": runtime}
    )
    resolved = resolve_deployment(obj, spec, None, ServingSettings())
    assert isinstance(resolved, ServingResolved), resolved
    spec_: Obj = build_pod_template(resolved, ServingSettings(), keys_version="1")["spec"]
    return spec_


def test_every_default_runtime_image_maps_to_its_runtime() -> None:
    images = ServingImages()

    assert runtime_of_image(images.llamacpp, images) == "llamacpp"
    assert runtime_of_image("ghcr.io/ggml-org/llama.cpp:b4000", images) == "llamacpp"
    assert runtime_of_image(images.kserve_xgboost, images) == "kserve"
    assert runtime_of_image(images.mlserver, images) == "mlserver"
    assert runtime_of_image(images.triton, images) == "triton"
    assert runtime_of_image(images.auth_proxy, images) == "auth-proxy"
    assert runtime_of_image("ghcr.io/longrun/runner:1", images) is None


def test_llamacpp_binds_the_pod_address_reads_its_key_secret_and_probes_the_port() -> None:
    pod = rendered({"llamacpp": {}})
    server = pod["containers"][0]

    local = local_server(
        "llamacpp", server, volumes=pod["volumes"], host="127.4.5.6", port=8080,
        pythons={"llamacpp": "/usr/bin/python3"},
    )  # fmt: skip

    args = local.container["args"]
    assert args[args.index("--host") + 1] == "127.4.5.6"
    assert args[args.index("--port") + 1] == "8080"
    key = next(v for v in local.container["env"] if v["name"] == "API_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "dep-api-keys", "key": "api-key"}
    assert local.container["readinessProbe"]["tcpSocket"] == {"port": 8080}
    assert "httpGet" not in local.container["startupProbe"]


def test_kserve_binds_the_pod_address_and_keeps_its_probe_path(tmp_path: Path) -> None:
    pod = rendered({"kserve": {"protocol": "v1"}}, "https://h/model.joblib", "sklearn")
    server = pod["containers"][0]

    local = local_server(
        "kserve", server, volumes=pod["volumes"], host="127.4.5.6", port=8080,
        pythons={"kserve": "/usr/bin/python3"},
    )  # fmt: skip

    assert "--host=127.4.5.6" in local.container["args"]
    assert local.container["readinessProbe"]["httpGet"]["path"] == "/v1/models/dep"


def test_the_sidecar_listens_on_the_pod_address_and_proxies_to_it(tmp_path: Path) -> None:
    from controller.core.serving import auth
    from controller.core.serving.runtimes import RuntimePlan

    plan = RuntimePlan(kind="kserve", image="i", protocol="kserve-v1", health_path="/h")

    conf = local_nginx_conf(auth.nginx_conf(plan), root=tmp_path, host="127.4.5.6")

    assert "listen 127.4.5.6:9080;" in conf
    assert "server 127.4.5.6:8080;" in conf and "127.0.0.1" not in conf
    assert f"include {tmp_path}/etc/longrun/keys/" in conf
