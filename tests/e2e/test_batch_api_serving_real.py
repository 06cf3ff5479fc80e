"""A batch for a model served on demand: the ModelDeployment comes up for it and goes back
down after it, on a real control plane.

Real: etcd, kube-apiserver and kube-controller-manager (its Deployment controller), `longrun
controller` and `longrun batch-api` as processes, the node agent running the model server
pod (longrun-fetch downloading the GGUF model, llama-cpp-python's server checking its key)
and the runner pod, the official `openai` client. Faked: nothing; the model is a tiny random
GGUF one. Skips with `real control plane:` when its binaries are absent, and without the
llama env (fails in CI).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import yaml

from controller.core.serving import names
from e2e.fixtures import eventually
from e2e.system import System
from tests.e2e.batch_api import ENDPOINT, BatchApiProcess, serve_batch_api, wait_status
from tests.e2e.test_serving_real import LONG, _replicas, deployment, digest
from tests.local.test_serving import write_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]
MODEL = "tiny-chat"


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    started = System(tmp_path / "system", backend="real")
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.fixture
def batch_api(system: System, tmp_path: Path) -> Iterator[BatchApiProcess]:
    yield from serve_batch_api(system, tmp_path)


def test_an_on_demand_deployment_comes_up_for_a_batch_and_goes_down_after(
    system: System, batch_api: BatchApiProcess, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_gguf(folder / "tiny.gguf")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    models = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=models.serve_forever, daemon=True).start()
    try:
        run_batch_on_demand(system, batch_api, folder, models.server_address[1])
    finally:
        models.shutdown()
        models.server_close()


def run_batch_on_demand(system: System, api: BatchApiProcess, folder: Path, port: int) -> None:
    ns = system.namespace("batch-on-demand")
    source = f"http://127.0.0.1:{port}/tiny.gguf"
    text = deployment(
        MODEL, source, digest(folder / "tiny.gguf"), "gguf", "llamacpp: {contextSize: 512}"
    )
    served = yaml.safe_load(text)
    served["metadata"]["annotations"] = {"longrun.dev/openai-model": MODEL}
    served["spec"].update(replicas=1, idleReplicas=0, scaleDownDelaySeconds=5)
    user = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "client"}}
    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all([served, user]))
    eventually(lambda: _replicas(system, ns, MODEL) == 0, timeout=LONG, interval=1.0)
    assert not system.items("pods", ns, f"{names.DEPLOYMENT_LABEL}={MODEL}")
    token = system.kubectl("create", "token", "client", "-n", ns).strip()
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "batch-user"},
        "rules": [
            {
                "apiGroups": ["longrun.dev"],
                "resources": ["inferenceruns"],
                "verbs": ["create", "get", "list", "patch", "delete"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "batch-user"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "batch-user"},
        "subjects": [{"kind": "ServiceAccount", "name": "client", "namespace": ns}],
    }
    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all([role, binding]))
    lines = [
        {
            "custom_id": f"q{i}",
            "method": "POST",
            "url": ENDPOINT,
            "body": {
                "model": MODEL,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": f"say {i}"}],
            },
        }
        for i in range(10)
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with api.client(token, ns) as client:
        uploaded = client.files.create(file=("q.jsonl", data), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        eventually(lambda: _replicas(system, ns, MODEL) == 1, timeout=LONG, interval=1.0)
        done = wait_status(client, batch.id, "completed", timeout=LONG)
        assert done.request_counts.completed == 10
        output = client.files.content(done.output_file_id).read().splitlines()
        assert sorted(json.loads(x)["custom_id"] for x in output) == sorted(
            f"q{i}" for i in range(10)
        )
    # No batch uses it any more: back to idleReplicas after scaleDownDelaySeconds.
    eventually(lambda: _replicas(system, ns, MODEL) == 0, timeout=LONG, interval=1.0)
