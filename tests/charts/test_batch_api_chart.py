"""The chart's optional Batch API server: Deployment, Service, ServiceAccount and RBAC.

Real: Helm v4's lint and template engine (helm-python-sdk) and the chart's values schema; the
rendered objects checked against the official kubernetes client's models. Faked: no cluster
(tests/e2e/test_batch_api_auth.py runs the server under these rendered roles).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import helm_python
import pytest

from tests.charts.test_chart import CHART, _assert_valid, _render

S3 = {
    "batchApi": {
        "enabled": True,
        "storage": {
            "s3": {
                "bucket": "batches",
                "endpointUrl": "http://minio.storage:9000",
                "forcePathStyle": True,
                "credentialsSecret": "batch-s3",
                "runnerSecret": "runner-s3",
            }
        },
    }
}
PVC = {"batchApi": {"enabled": True, "storage": {"pvc": {"claimName": "batch-files"}}}}
# Exactly what controller/kube/batchapi.py sends.
GRANTS = {
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
    ("longrun.dev", "inferenceruns"): {"get", "list", "create", "patch"},
    ("longrun.dev", "inferenceconfigs"): {"get", "list", "create"},
    ("longrun.dev", "modeldeployments"): {"list"},
}


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    loaded = helm_python.Chart.load(str(CHART))
    yield loaded
    loaded.close()


def batch_api(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "batch-api"
    ]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in batch_api(docs) if d["kind"] == "Deployment"]
    (found,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(found)


def test_it_is_off_by_default(chart: Any) -> None:
    assert batch_api(_render(chart)) == []


def test_lint_passes_with_it_on() -> None:
    for values in (S3, PVC):
        assert helm_python.lint(str(CHART), values, strict=True)["errors"] == []


def test_its_objects_are_valid_and_run_the_batch_api_command(chart: Any) -> None:
    docs = batch_api(_render(chart, S3))
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "ServiceAccount",
    ]
    for doc in docs:
        _assert_valid(doc)
    found = container(docs)
    assert found["args"][:3] == ["batch-api", "--host=0.0.0.0", "--port=8000"]
    assert "--max-file-bytes=200000000" in found["args"]
    assert {
        "--s3-bucket=batches",
        "--s3-endpoint-url=http://minio.storage:9000",
        "--s3-path-style",
        "--s3-runner-secret=runner-s3",
    } <= set(found["args"])
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in found["env"]}
    assert refs == {"AWS_ACCESS_KEY_ID": "batch-s3", "AWS_SECRET_ACCESS_KEY": "batch-s3"}
    assert found["securityContext"]["readOnlyRootFilesystem"] is True


def test_its_roles_grant_exactly_the_requests_it_sends(chart: Any) -> None:
    rules = [
        r for d in batch_api(_render(chart, S3)) if d["kind"] == "ClusterRole" for r in d["rules"]
    ]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == GRANTS  # no Secret, no Pod, no delete


def test_watched_namespaces_bound_one_by_one_and_served_alone(chart: Any) -> None:
    values = {**S3, "controller": {"watchNamespaces": ["team-a", "team-b"]}}
    docs = batch_api(_render(chart, values))
    bindings = [
        (d["kind"], d["metadata"].get("namespace"))
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
    ]
    assert sorted(bindings, key=str) == sorted(
        [("ClusterRoleBinding", None), ("RoleBinding", "team-a"), ("RoleBinding", "team-b")],
        key=str,
    )
    args = container(docs)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args


def test_files_on_a_claim_serve_the_release_namespace_alone(chart: Any) -> None:
    docs = batch_api(_render(chart, PVC))
    found = container(docs)
    assert {
        "--files-dir=/var/lib/longrun-batch",
        "--files-claim=batch-files",
        "--namespace=longrun-system",
    } <= set(found["args"])
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "files", "persistentVolumeClaim": {"claimName": "batch-files"}} in volumes
    bound = [d["metadata"].get("namespace") for d in docs if d["kind"] == "RoleBinding"]
    assert bound == ["longrun-system"]


def test_it_needs_exactly_one_place_for_files(chart: Any) -> None:
    with pytest.raises(helm_python.HelmError, match="name where files live"):
        _render(chart, {"batchApi": {"enabled": True}})
    both = {
        "batchApi": {"enabled": True, "storage": {"s3": {"bucket": "b"}, "pvc": {"claimName": "c"}}}
    }
    with pytest.raises(helm_python.HelmError, match="not both"):
        _render(chart, both)
