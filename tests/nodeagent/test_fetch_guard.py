"""The model download of a ModelDeployment's pod, as the controller renders it, run by the node
agent on both backends: a source on a denied network is refused before anything is sent,
the init container ends with exit 2 and its termination message, and the deployment's
status names the refusal (issue 26, finding 4).

Real: the controller's serving core (`resolve_deployment`, `build_pod_template` with the
controller's DENIED_CIDRS in its settings, `pod_issue` reading the pod back), the node agent
running the init container as `longrun-fetch` (a local process), the API (emulator with its
kubelet off, or kube-apiserver + etcd + kube-controller-manager when found), a stdlib HTTP
server on 127.0.0.1 holding the model. Loopback stands for the denied network: the test's
settings deny 127.0.0.1/32. Faked: nothing.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contracts.serving import ModelDeploymentSpec
from controller.core.serving import names
from controller.core.serving.builders import build_pod_template
from controller.core.serving.pods import pod_issue
from controller.core.serving.resolve import ServingResolved, resolve_deployment
from controller.core.serving.settings import ServingSettings
from tests.nodeagent.conftest import Cluster

MODEL = b"ONNX" + bytes(range(256)) * 16


@contextmanager
def model_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(MODEL)))
            self.end_headers()
            self.wfile.write(MODEL)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def open_settings(*, denied_cidrs: tuple[str, ...]) -> ServingSettings:
    """The controller's settings with the generic server below allowed (image, command)."""
    return ServingSettings(
        denied_cidrs=denied_cidrs, allowed_images=("*",), allow_custom_commands=True
    )


def resolved(cluster: Cluster, source: str, settings: ServingSettings) -> ServingResolved:
    # A generic server this machine has (the agent starts no container whose image it cannot
    # run), without keys: the test is about the download in front of it.
    server = {"image": "python:3.11-slim", "command": ["python3", "-m", "http.server", "8000"]}
    spec = {
        "model": {"source": source, "format": "onnx", "sha256": hashlib.sha256(MODEL).hexdigest()},
        "runtime": {"generic": {**server, "port": 8000, "protocol": "kserve-v2"}},
        "auth": {"enabled": False},
    }
    obj = {"metadata": {"name": "chat", "namespace": cluster.ns, "uid": "u1"}, "spec": spec}
    found = resolve_deployment(obj, ModelDeploymentSpec.model_validate(spec), None, settings)
    assert isinstance(found, ServingResolved), found
    return found


def create_pod(cluster: Cluster, r: ServingResolved, settings: ServingSettings) -> None:
    template = build_pod_template(r, settings, keys_version=None)
    spec = {**template["spec"], "restartPolicy": "Never", "schedulerName": cluster.node_name}
    body = {"metadata": {"name": "chat-0", **template["metadata"]}, "spec": spec}
    cluster.core.create_namespaced_pod(cluster.ns, body, _preload_content=False)


def test_a_download_from_a_denied_network_fails_the_pod_and_names_the_setting(
    cluster: Cluster,
) -> None:
    settings = open_settings(denied_cidrs=("169.254.0.0/16", "127.0.0.1/32"))
    with model_server() as (base, seen):
        create_pod(cluster, resolved(cluster, f"{base}/tiny.onnx", settings), settings)
        pod = cluster.wait_phase("chat-0", "Failed", "Running", "Succeeded", timeout=60)
        assert seen == []  # refused before anything was sent
    (fetch,) = pod["status"]["initContainerStatuses"]
    assert fetch["name"] == names.FETCH_CONTAINER
    ended = fetch["state"]["terminated"]
    assert ended["exitCode"] == 2
    assert ended["message"].startswith(f"exit 2: {base}/tiny.onnx: connection to 127.0.0.1")
    assert "DENIED_CIDRS" in ended["message"]
    issue = pod_issue([pod])
    assert issue is not None and issue.reason == "ModelDownloadFailed"
    assert issue.message.startswith(
        "downloading the model failed (exit code 2: the download was refused"
    )
    assert "127.0.0.1 is in 127.0.0.1/32, a network the controller setting DENIED_CIDRS" in (
        issue.message
    )


def test_the_same_download_succeeds_where_its_network_is_not_denied(cluster: Cluster) -> None:
    settings = open_settings(denied_cidrs=("169.254.0.0/16",))
    with model_server() as (base, seen):
        create_pod(cluster, resolved(cluster, f"{base}/tiny.onnx", settings), settings)
        pod = cluster.wait_pod(
            "chat-0",
            lambda p: (
                bool((p.get("status") or {}).get("initContainerStatuses"))
                and "terminated" in p["status"]["initContainerStatuses"][0]["state"]
            ),
            timeout=60,
        )
        assert seen == ["/tiny.onnx"]
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
