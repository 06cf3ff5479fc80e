"""ModelDeployments end to end on a real control plane: a deployment of llama.cpp and one of
KServe become Running with their real runtime processes, a run through each succeeds, and
the deployment refuses a request without its API key; an on-demand deployment (idleReplicas
0) is scaled up for a run and back down after it, and deleting it cascades to its children.

Real: etcd, kube-apiserver and kube-controller-manager (e2e/real: its Deployment and
ReplicaSet controllers make the pods, its EndpointSlice controller follows their
readiness), `longrun controller` as a process, the node agent (e2e/nodeagent) running
each pod's containers as local processes: `longrun-fetch` downloading the model (with
its sha256) from a local HTTP server into the pod's cache, llama-cpp-python's server
(checking the key itself) or KServe's Python server behind nginx (the auth sidecar),
probed as a kubelet probes them; the runner pod, whose contract names the deployment's
Service, reaching it at a ready pod's address; `kubectl` for every user action. Faked:
nothing; the GGUF model is a tiny random one (scripts/quickstart-serving's writer).
Skips with `real control plane:` when its binaries are absent, and when a peer env
(llama, kserve) or nginx is missing (fails in CI).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from controller.core.serving import names
from e2e.fixtures import eventually
from e2e.nodeagent.network import ServiceResolver
from e2e.system import System
from tests.local.test_serving import (
    IRIS_ROWS,
    answers,
    status_of,
    write_iris_model,
    write_tiny_gguf,
)

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]
Obj = dict[str, Any]
PROMPTS = 6
DENIED = "127.0.0.77"  # stands for the cloud's metadata address in DENIED_CIDRS
LONG = 300  # seconds: a model download, a server start and a probe period on a loaded machine


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A plain HTTP server for the model files (`http://` sources need a sha256)."""
    with _file_server(tmp_path_factory.mktemp("models"), "127.0.0.1") as served:
        yield served


@contextmanager
def _file_server(folder: Path, host: str) -> Iterator[tuple[str, Path]]:
    handler = partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """One control plane, controller and node agent for the module (each test has its own
    namespace); the wall time of it all is printed at the end."""
    from e2e.peers.fixtures import skip_or_fail
    from local.deployment import ServeError, nginx_binary

    try:
        nginx_binary()
    except ServeError as exc:
        skip_or_fail(str(exc))
    began = time.monotonic()
    started = System(tmp_path_factory.mktemp("system"), backend="real")
    try:
        with pytest.MonkeyPatch.context() as env:
            # The controller denies model downloads (and runners) this address: no pod has it
            # (the node agent's pods are 127.a.b.c outside 127.0.0.0/16).
            env.setenv("DENIED_CIDRS", f"169.254.0.0/16,{DENIED}/32")
            started.start()
        yield started
    finally:
        started.stop()
        print(f"\nserving e2e on the real control plane: {time.monotonic() - began:.0f} s")


def deployment(name: str, source: str, sha256: str, fmt: str, runtime: str) -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: {name}
spec:
  model:
    source: {source}
    sha256: {sha256}
    format: {fmt}
  runtime:
    {runtime}
"""


def run_through(name: str, deployment: str, model: str, tmp: Path) -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata:
  name: {name}
spec:
  model:
    deploymentRef:
      name: {deployment}
{model}
  storage:
    input:
      file:
        path: {tmp / name / "in.jsonl"}
        idField: id
    output:
      file:
        path: {tmp / name / "out"}
  runner:
    batchSize: 2
    maxFailedRecords: 0
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata:
  name: {name}
spec:
  configRef:
    name: {name}
  timeoutSeconds: 600
"""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def running(system: System, ns: str, name: str) -> Obj:
    """The deployment once it is Running with one ready replica."""

    def check() -> Obj | None:
        obj = system.get("modeldeployment", name, ns)
        status = (obj or {}).get("status") or {}
        ok = status.get("phase") == "Running" and status.get("readyReplicas") == 1
        return obj if ok else None

    found: Obj = eventually(check, timeout=LONG, interval=1.0)
    return found


def succeeded(system: System, ns: str, name: str) -> Obj:
    def check() -> Obj | None:
        run = system.get("inferencerun", name, ns) or {}
        phase = (run.get("status") or {}).get("phase")
        assert phase != "Failed", json.dumps(run.get("status"), indent=1)
        return run if phase == "Succeeded" else None

    found: Obj = eventually(check, timeout=LONG, interval=1.0)
    return found


def api_key(system: System, ns: str, deployment: str) -> str:
    secret = system.get("secret", names.api_key_secret_name(deployment), ns) or {}
    import base64

    return base64.b64decode(secret["data"]["api-key"]).decode()


def endpoint(system: System, ns: str, deployment: str) -> str:
    """Where a pod in the cluster reaches the deployment's Service (a ready pod's address)."""
    assert system.agent is not None
    resolver = ServiceResolver(system.agent.kube)
    # The EndpointSlice follows the pod's readiness a moment after the Deployment counts it.
    found = eventually(
        lambda: resolver.resolve(names.service_name(deployment), ns, None), timeout=60
    )
    assert found is not None
    return f"http://{found[0]}:{found[1]}"


def assert_no_key_outside_its_secret(system: System, ns: str, key: str) -> None:
    for kind in ("configmaps", "events", "modeldeployments", "inferenceruns", "deployments"):
        assert key not in system.kubectl("get", kind, "-n", ns, "-o", "json"), kind


def test_llamacpp_deployment_checks_keys_itself_and_serves_a_chat_run(
    system: System, models: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = models
    write_tiny_gguf(folder / "tiny.gguf")
    ns = system.namespace("serving-llama")
    source, sha = f"{base}/tiny.gguf", digest(folder / "tiny.gguf")
    yaml = deployment("tiny-chat", source, sha, "gguf", "llamacpp: {contextSize: 512}")
    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml)

    obj = running(system, ns, "tiny-chat")

    assert_pod_ran(system, ns, "tiny-chat", containers={"server"})

    assert obj["status"]["endpoint"].startswith(
        f"http://{names.service_name('tiny-chat')}.{ns}.svc"
    )
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    url = f"{endpoint(system, ns, 'tiny-chat')}/v1/chat/completions"
    key = api_key(system, ns, "tiny-chat")
    assert status_of(url, chat) == 401  # llama.cpp checks the key itself
    assert status_of(url, chat, key) == 200
    prompts = [{"id": str(i), "prompt": f"say {i}"} for i in range(PROMPTS)]
    write_input(tmp_path / "chat", prompts)
    system.kubectl("apply", "-n", ns, "-f", "-", input=run_through(
        "chat", "tiny-chat", "    maxTokens: 4", tmp_path))  # fmt: skip

    run = succeeded(system, ns, "chat")

    assert run["status"]["result"]["recordsWritten"] == PROMPTS
    chats = answers(tmp_path / "chat" / "out")
    assert sorted(str(a["id"]) for a in chats) == sorted(p["id"] for p in prompts)
    assert all(isinstance(a["prediction"], str) for a in chats)  # the completion's text
    assert_no_key_outside_its_secret(system, ns, key)


def test_kserve_deployment_checks_keys_in_its_sidecar_and_serves_a_run(
    system: System, models: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = models
    write_iris_model(folder / "iris.joblib")
    ns = system.namespace("serving-kserve")
    source, sha = f"{base}/iris.joblib", digest(folder / "iris.joblib")
    yaml = deployment("iris", source, sha, "sklearn", "kserve: {protocol: v1}")
    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml)

    running(system, ns, "iris")

    assert_pod_ran(system, ns, "iris", containers={"server", "auth-proxy"})

    predict: dict[str, object] = {"instances": [IRIS_ROWS[1]["f"]]}
    url = f"{endpoint(system, ns, 'iris')}/v1/models/iris:predict"
    key = api_key(system, ns, "iris")
    assert status_of(url, predict) == 401  # nginx, in front of KServe's server
    assert status_of(url, predict, "lrk_wrong") == 401
    assert status_of(url, predict, key) == 200
    write_input(tmp_path / "classify", [{"id": r["id"], "x": r["f"]} for r in IRIS_ROWS])
    system.kubectl("apply", "-n", ns, "-f", "-", input=run_through(
        "classify", "iris", "    inputFields: [x]", tmp_path))  # fmt: skip

    run = succeeded(system, ns, "classify")

    assert run["status"]["result"]["recordsWritten"] == len(IRIS_ROWS)
    classes = {str(a["id"]): a["prediction"] for a in answers(tmp_path / "classify" / "out")}
    assert classes == {"1": 0, "2": 2, "3": 1}  # setosa, virginica, versicolor
    assert_no_key_outside_its_secret(system, ns, key)


def assert_pod_ran(system: System, ns: str, deployment: str, *, containers: set[str]) -> None:
    """The deployment's one pod: the download completed, then every container ready."""
    (pod,) = system.items("pods", ns, f"{names.DEPLOYMENT_LABEL}={deployment}")
    status = pod["status"]
    (fetch,) = status["initContainerStatuses"]
    assert fetch["state"]["terminated"]["reason"] == "Completed", fetch
    ready = {
        c["name"] for c in status["containerStatuses"] if c["ready"] and "running" in c["state"]
    }
    assert ready == containers, status["containerStatuses"]


def write_input(folder: Path, rows: list[Obj]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_an_on_demand_deployment_serves_a_run_then_idles_and_its_deletion_cascades(
    system: System, models: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = models
    write_iris_model(folder / "iris.joblib")
    ns = system.namespace("serving-on-demand")
    source, sha = f"{base}/iris.joblib", digest(folder / "iris.joblib")
    yaml = deployment("iris", source, sha, "sklearn", "kserve: {protocol: v1}")
    yaml += "  replicas: 1\n  idleReplicas: 0\n  scaleDownDelaySeconds: 5\n"
    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml)
    # Idle: the real Deployment exists with no replica and no pod runs.
    eventually(lambda: _replicas(system, ns, "iris") == 0, timeout=LONG, interval=1.0)
    assert not system.items("pods", ns, f"{names.DEPLOYMENT_LABEL}=iris")
    write_input(tmp_path / "wake", [{"id": r["id"], "x": r["f"]} for r in IRIS_ROWS])
    system.kubectl("apply", "-n", ns, "-f", "-", input=run_through(
        "wake", "iris", "    inputFields: [x]", tmp_path))  # fmt: skip

    run = succeeded(system, ns, "wake")  # the run waited until the deployment was Available

    assert run["status"]["result"]["recordsWritten"] == len(IRIS_ROWS)
    classes = {str(a["id"]): a["prediction"] for a in answers(tmp_path / "wake" / "out")}
    assert classes == {"1": 0, "2": 2, "3": 1}
    # No run uses it any more: back to idleReplicas after scaleDownDelaySeconds.
    eventually(lambda: _replicas(system, ns, "iris") == 0, timeout=LONG, interval=1.0)
    eventually(lambda: not system.items("pods", ns, f"{names.DEPLOYMENT_LABEL}=iris"), timeout=LONG)
    # Deleting the ModelDeployment: kube-controller-manager's garbage collector removes
    # every child through their owner references.
    children = [
        ("deployment", names.deployment_name("iris")),
        ("service", names.service_name("iris")),
        ("secret", names.api_key_secret_name("iris")),
    ]
    assert all(system.get(kind, name, ns) for kind, name in children)
    system.kubectl("delete", "modeldeployment", "iris", "-n", ns)
    eventually(
        lambda: all(system.get(kind, name, ns) is None for kind, name in children),
        timeout=LONG,
        interval=1.0,
    )


def _replicas(system: System, ns: str, name: str) -> int | None:
    """The replicas the controller asks of the real Deployment (None before it exists)."""
    found = system.get("deployment", names.deployment_name(name), ns)
    return None if found is None else int(found["spec"].get("replicas", 1))


def test_a_model_on_a_denied_network_is_refused_and_the_status_says_why(
    system: System, tmp_path: Path
) -> None:
    # Issue 26: the download reached any address. The model is served from an address the
    # controller's DENIED_CIDRS lists; the init container refuses it before sending anything.
    write_iris_model(tmp_path / "iris.joblib")
    with _file_server(tmp_path, DENIED) as (base, _):
        ns = system.namespace("serving-denied")
        source, sha = f"{base}/iris.joblib", digest(tmp_path / "iris.joblib")
        yaml = deployment("iris", source, sha, "sklearn", "kserve: {protocol: v1}")
        system.kubectl("apply", "-n", ns, "-f", "-", input=yaml)

        def failed() -> Obj | None:
            status = (system.get("modeldeployment", "iris", ns) or {}).get("status") or {}
            return status if status.get("phase") == "Failed" else None

        status: Obj = eventually(failed, timeout=LONG, interval=1.0)
    message = status["message"]
    assert "downloading the model failed (exit code 2: the download was refused" in message
    assert f"{DENIED} is in {DENIED}/32, a network the controller setting DENIED_CIDRS" in message
