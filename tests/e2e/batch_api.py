"""The Batch API server as a process beside the whole system, and a tenant to call it.

`BatchApiProcess` runs `python -m controller batch-api` (what the chart's Deployment runs)
with a kubeconfig and a file store, reads the URL from its first line, and can be stopped,
killed (SIGKILL, for the fault tests) and started again on the same port, store and cluster.
`tenant` makes a namespace with a template serving the llama.cpp peer's model (annotated
`longrun.dev/openai-model`) and a ServiceAccount allowed to use the Batch API there; its
token is the API key.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import yaml

from e2e.fixtures import eventually
from e2e.peers.server import PeerServer
from e2e.system import ROOT, System, free_port
from e2e.tokens import service_account_token
from tests.support import service_unavailable

Obj = dict[str, Any]
MODEL = "tiny-llama"
ENDPOINT = "/v1/chat/completions"
VERBS = ["create", "get", "list", "patch", "delete"]
NODE_OPENAI = "7.59.0"  # the npm `openai` package the Node test drives the API with
NPM_CACHE = Path.home() / ".cache" / "longrun" / "npm"


@dataclass
class BatchApiProcess:
    """`longrun batch-api` as a process (module docstring)."""

    kubeconfig: Path
    workdir: Path
    store_args: list[str] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    url: str = ""

    @property
    def log(self) -> Path:
        return self.workdir / "batch-api.log"

    def start(self) -> BatchApiProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        store = self.store_args or ["--files-dir", str(self.workdir / "files")]
        argv = [
            sys.executable,
            "-m",
            "controller",
            "batch-api",
            "--kubeconfig",
            str(self.kubeconfig),
            "--port",
            str(self.port),
            *store,
            *self.extra_args,
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, cwd=ROOT, env={**os.environ, **self.env}
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"batch-api did not start:\n{self.log.read_text()[-3000:]}"
        self.url = json.loads(line)["url"].removesuffix("/v1")
        return self

    def kill(self) -> None:
        """SIGKILL: nothing runs after it (no cleanup, no finished writes)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            code = self.process.wait(timeout=30)
            assert code == 0, f"batch-api exited {code}:\n{self.log.read_text()[-3000:]}"
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def client(self, token: str, namespace: str) -> openai.OpenAI:
        """The official client, only base_url and key changed."""
        return openai.OpenAI(
            base_url=f"{self.url}/namespaces/{namespace}/v1",
            api_key=token,
            max_retries=0,
            timeout=60,
        )


def template(namespace: str, server: PeerServer, **runner: object) -> Obj:
    """An InferenceConfig serving MODEL on `server` to the Batch API (its storage is replaced
    per batch), with the server's API key from the Secret `model-key` when it asks for one."""
    made: Obj = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {
            "name": "llm",
            "namespace": namespace,
            "annotations": {"longrun.dev/openai-model": MODEL},
        },
        "spec": {
            "model": {"protocol": "openai-chat", "url": f"{server.http_url}/v1", "name": MODEL},
            "storage": {
                "input": {"file": {"path": "/unused.jsonl"}},
                "output": {"file": {"path": "/unused"}},
            },
            "runner": {"concurrency": 2, "chunkSize": 10, "progressIntervalSeconds": 1, **runner},
        },
    }
    if getattr(server, "api_key", None):  # vLLM's peer asks for a key (issue 27's peers)
        made["spec"]["model"]["auth"] = {"secretRef": {"name": "model-key", "key": "api-key"}}
    return made


def key_secret(server: PeerServer) -> list[Obj]:
    """The Secret holding the server's API key, when it asks for one."""
    key = getattr(server, "api_key", None)
    if not key:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "model-key"},
            "stringData": {"api-key": key},
        }
    ]


def tenant(
    system: System, name: str, server: PeerServer, *, verbs: list[str] = VERBS, **runner: object
) -> tuple[str, str]:
    """(namespace, API key): a namespace serving MODEL, and a ServiceAccount's token allowed
    `verbs` on InferenceRuns there."""
    ns = system.namespace(name)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "batch-user", "namespace": ns},
        "rules": [{"apiGroups": ["longrun.dev"], "resources": ["inferenceruns"], "verbs": verbs}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "batch-user", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "batch-user"},
        "subjects": [{"kind": "ServiceAccount", "name": "client", "namespace": ns}],
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "client", "namespace": ns},
    }
    objects = [account, role, binding, *key_secret(server), template(ns, server, **runner)]
    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objects))
    assert system.handle is not None
    return ns, service_account_token(system.handle, ns, "client")


def requests_file(count: int, *, max_tokens: int = 4) -> bytes:
    """`count` chat requests for MODEL, one per line."""
    lines = []
    for index in range(count):
        body = {
            "model": MODEL,
            "max_tokens": max_tokens,
            "temperature": 0,
            "messages": [{"role": "user", "content": f"Count to {index}."}],
        }
        line = {"custom_id": f"req-{index}", "method": "POST", "url": ENDPOINT, "body": body}
        lines.append(json.dumps(line))
    return ("\n".join(lines) + "\n").encode()


def wait_status(client: openai.OpenAI, batch_id: str, *wanted: str, timeout: float = 180) -> Any:
    """Poll the batch (as a client would) until its status is one of `wanted`."""
    seen: list[str] = []

    def reached() -> Any:
        batch = client.batches.retrieve(batch_id)
        if not seen or seen[-1] != batch.status:
            seen.append(batch.status)
        if batch.status in ("failed", "expired") and batch.status not in wanted:
            raise RuntimeError(f"the batch ended {batch.status}: {batch}")  # stop polling
        return batch if batch.status in wanted else None

    started = time.monotonic()
    try:
        return eventually(reached, timeout=timeout, interval=0.5)
    except AssertionError as exc:
        waited = round(time.monotonic() - started)
        raise AssertionError(f"after {waited} s, statuses {seen}: {exc}") from None


def serve_batch_api(system: System, tmp_path: Path) -> Iterator[BatchApiProcess]:
    """`longrun batch-api` on the system's cluster (admin kubeconfig), files in a directory,
    stopped after (the `batch_api` fixture of the test modules)."""
    assert system.handle is not None
    api = BatchApiProcess(system.handle.kubeconfig_path, tmp_path / "batch-api").start()
    yield api
    api.stop()


def node_openai() -> Path:
    """The node_modules holding the pinned npm `openai` (installed once, outside the repo)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        service_unavailable("node and npm (the Node client test)")
    folder = NPM_CACHE / f"openai-{NODE_OPENAI}"
    modules = folder / "node_modules"
    if not (modules / "openai" / "package.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", f"openai@{NODE_OPENAI}"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            service_unavailable(f"npm install openai@{NODE_OPENAI}: {done.stderr[-500:]}")
    return modules
