"""Who may use the Batch API, with real tokens, reviews and RBAC: both backends.

Real: both backends (the emulator, and the real kube-apiserver when its binaries are found)
authenticating ServiceAccount tokens and answering TokenReview and SubjectAccessReview;
`longrun batch-api` as a process whose only credential is a token of the chart's batch-api
ServiceAccount under the chart's rendered RBAC (Helm); tenants' tokens from `kubectl create
token`, an expired one (e2e/tokens.py); the official `openai` client. Faked: nothing; no run
executes (no controller), the attacks are on the API.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import openai
import pytest
import yaml

from e2e.backends import KubeHandle
from e2e.tokens import expired_token, service_account_token
from tests.e2e.batch_api import ENDPOINT, MODEL, BatchApiProcess, requests_file
from tests.security.chart_rbac import CHART, token_kubeconfig

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
TENANT_VERBS = ["create", "get", "list", "patch", "delete"]


def chart_rbac(release: str, namespace: str) -> list[dict[str, Any]]:
    """The batch-api ServiceAccount and roles of a release, as Helm renders them."""
    values = {
        "rbac": {"aggregateToDefaultRoles": False},
        "batchApi": {"enabled": True, "storage": {"s3": {"bucket": "unused"}}},
    }
    chart = helm_python.Chart.load(str(CHART))
    try:
        files = chart.render(values, name=release, namespace=namespace)
    finally:
        chart.close()
    texts = [text for path, text in files.items() if path.endswith(".yaml")]
    docs = [d for text in texts for d in yaml.safe_load_all(text) if d]
    return [
        d
        for d in docs
        if d["kind"] in RBAC_KINDS
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "batch-api"
    ]


def tenant_objects(ns: str, *, role: bool) -> list[dict[str, Any]]:
    """A ServiceAccount `client` (allowed TENANT_VERBS on InferenceRuns when `role`) and a
    template serving MODEL."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "client"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}},
        {
            "apiVersion": "longrun.dev/v1alpha1",
            "kind": "InferenceConfig",
            "metadata": {"name": "llm", "annotations": {"longrun.dev/openai-model": MODEL}},
            "spec": {
                "model": {"protocol": "openai-chat", "url": "http://llm:8000/v1", "name": MODEL},
                "storage": {
                    "input": {"file": {"path": "/in.jsonl"}},
                    "output": {"file": {"path": "/out"}},
                },
            },
        },
    ]
    if role:
        objects += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "batch-user"},
                "rules": [
                    {
                        "apiGroups": ["longrun.dev"],
                        "resources": ["inferenceruns"],
                        "verbs": TENANT_VERBS,
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "batch-user"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "batch-user",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "client", "namespace": ns}],
            },
        ]
    return objects


class World:
    """Two tenants and the server, on one backend."""

    def __init__(self, handle: KubeHandle, tmp: Path) -> None:
        self.handle = handle
        self.release = f"lr{uuid.uuid4().hex[:6]}"
        self.system_ns = handle.namespace("batch-system")
        self.a = handle.namespace("tenant-a")
        self.b = handle.namespace("tenant-b")
        self.rbac = chart_rbac(self.release, self.system_ns)
        self.apply(self.system_ns, self.rbac)
        for ns in (self.a, self.b):
            self.apply(ns, tenant_objects(ns, role=True))
        account = next(d for d in self.rbac if d["kind"] == "ServiceAccount")["metadata"]["name"]
        token = service_account_token(handle, self.system_ns, account)
        kubeconfig = token_kubeconfig(
            handle.kubeconfig_path, token, tmp / "kubeconfig", self.system_ns
        )
        self.api = BatchApiProcess(kubeconfig, tmp / "batch-api").start()
        self.keys = {ns: service_account_token(handle, ns, "client") for ns in (self.a, self.b)}

    def apply(self, ns: str, objects: list[dict[str, Any]]) -> None:
        done = self.handle.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objects))
        assert done.returncode == 0, done.stderr

    def close(self) -> None:
        self.api.stop()
        for doc in self.rbac:
            if doc["kind"].startswith("Cluster"):
                self.handle.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"])

    def raw(self, method: str, path: str, token: str | None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.api.url + path, method=method, data=b"" if method == "POST" else None
        )
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


@pytest.fixture
def world(kube_each_backend: KubeHandle, tmp_path: Path) -> Iterator[World]:
    kube_each_backend.require_controllers()
    made = World(kube_each_backend, tmp_path)
    yield made
    made.close()


def test_attacks_on_another_tenants_batch_answer_404(world: World) -> None:
    a, b = world.a, world.b
    with world.api.client(world.keys[a], a) as alice:
        file_id = alice.files.create(file=("r.jsonl", requests_file(3)), purpose="batch").id
        batch = alice.batches.create(
            input_file_id=file_id, endpoint=ENDPOINT, completion_window="24h"
        )
        assert batch.status == "validating"  # run and config made under the chart's RBAC
    config = world.handle.kubectl("get", "inferenceconfig", "batch-" + batch.id[6:], "-n", a)
    assert config.returncode == 0, config.stderr
    attackers = {
        "B's token": world.keys[b],
        "no token": None,
        "an expired token of A": expired_token(world.handle, a, "client"),
        "a token of A without RBAC": service_account_token(world.handle, a, "nobody"),
        "not a token": "sk-guess",
    }
    missing = "batch_" + "0" * 32
    _, absent = world.raw("GET", f"/namespaces/{a}/v1/batches/{missing}", world.keys[a])
    for who, token in attackers.items():
        for ns in (a, b):
            for method, path in (
                ("GET", f"batches/{batch.id}"),
                ("POST", f"batches/{batch.id}/cancel"),
                ("GET", f"files/{file_id}/content"),
                ("DELETE", f"files/{file_id}"),
            ):
                status, body = world.raw(method, f"/namespaces/{ns}/v1/{path}", token)
                assert status == 404, (who, ns, path, body)
            status, body = world.raw("GET", f"/namespaces/{ns}/v1/batches/{batch.id}", token)
            assert json.dumps(body).replace(batch.id, missing) == json.dumps(absent), who
    with world.api.client(world.keys[a], a) as alice:
        assert alice.batches.retrieve(batch.id).status == "validating"  # not cancelled
        assert alice.files.retrieve(file_id).id == file_id  # not deleted


def test_collections_refuse_without_an_accepted_token_or_the_permission(world: World) -> None:
    a = world.a
    for token in (None, expired_token(world.handle, a, "client")):
        status, body = world.raw("GET", f"/namespaces/{a}/v1/batches", token)
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
    nobody = service_account_token(world.handle, a, "nobody")
    with world.api.client(nobody, a) as client, pytest.raises(openai.PermissionDeniedError):
        client.files.create(file=("r.jsonl", requests_file(1)), purpose="batch")
    with (
        world.api.client(world.keys[world.b], a) as client,
        pytest.raises(openai.PermissionDeniedError),
    ):
        client.batches.list()
