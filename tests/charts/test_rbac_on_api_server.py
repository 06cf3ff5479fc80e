"""The chart's roles for people, applied to a real control plane and asked about.

Real: kube-apiserver and kube-controller-manager (whose clusterrole-aggregation controller
copies the rules into the built-in `view`, `edit` and `admin` roles), Helm's render of the
chart, SubjectAccessReviews answered by the API server's RBAC authorizer. Faked: the people
(user names in RoleBindings; nobody logs in). Skipped, naming KUBEBUILDER_ASSETS, when the
control plane's binaries are absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from kubernetes import client

from e2e.fixtures import kube_real_session  # noqa: F401 - the session's control plane
from e2e.real.handle import RealClusterHandle

CHART = Path(__file__).resolve().parents[2] / "charts" / "longrun"
PEOPLE_ROLES = ("longrun-view", "longrun-edit")
PATIENCE = 30.0


@pytest.fixture
def people_roles(kube_real_session: RealClusterHandle) -> Iterator[client.ApiClient]:  # noqa: F811
    kube_real_session.require_controllers()
    chart = helm_python.Chart.load(str(CHART))
    try:
        rendered = chart.render({}, name="lr", namespace="longrun-system")
    finally:
        chart.close()
    texts = [text for path, text in rendered.items() if path.endswith(".yaml")]
    docs = [d for text in texts for d in yaml.safe_load_all(text) if d]
    roles = [d for d in docs if d["metadata"]["name"] in PEOPLE_ROLES]
    api = kube_real_session.api_client()
    rbac = client.RbacAuthorizationV1Api(api)
    for role in roles:
        rbac.create_cluster_role(role)
    try:
        yield api
    finally:
        for role in roles:
            rbac.delete_cluster_role(role["metadata"]["name"])


def _bind(api: client.ApiClient, namespace: str, user: str, cluster_role: str) -> None:
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{user}-{cluster_role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": cluster_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )  # fmt: skip


def _allowed(api: client.ApiClient, user: str, verb: str, resource: str, namespace: str) -> bool:
    resource, _, sub = resource.partition("/")
    attributes = {"namespace": namespace, "verb": verb, "group": "longrun.dev",
                  "resource": resource, "subresource": sub}  # fmt: skip
    review: Any = client.AuthorizationV1Api(api).create_subject_access_review(
        {"spec": {"user": user, "resourceAttributes": attributes}}
    )
    return bool(review.status.allowed)


def _eventually_allowed(api: client.ApiClient, *args: str) -> bool:
    # The aggregation controller copies the rules in a moment after the roles are created.
    deadline = time.monotonic() + PATIENCE
    while not _allowed(api, *args):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_namespace_viewers_and_editors_get_longrun_through_the_built_in_roles(
    people_roles: client.ApiClient,
    kube_real_session: RealClusterHandle,  # noqa: F811
) -> None:
    api, ns = people_roles, kube_real_session.namespace("rbac")
    _bind(api, ns, "viewer", "view")
    _bind(api, ns, "editor", "edit")
    _bind(api, ns, "owner", "admin")
    assert _eventually_allowed(api, "viewer", "list", "inferenceruns", ns)
    assert _eventually_allowed(api, "editor", "create", "inferenceconfigs", ns)
    assert _eventually_allowed(api, "owner", "deletecollection", "inferenceruns", ns)
    assert _allowed(api, "viewer", "get", "inferenceruns/status", ns)
    assert not _allowed(api, "viewer", "create", "inferenceruns", ns)
    for user in ("editor", "owner"):
        assert not _allowed(api, user, "patch", "inferenceruns/status", ns)
        assert not _allowed(api, user, "update", "inferenceconfigs/status", ns)
    assert not _allowed(api, "editor", "create", "inferenceruns", "default")  # bound in ns only
    # The serving kinds the same way (their allow-lists keep them from being any Pod).
    assert _eventually_allowed(api, "editor", "create", "modeldeployments", ns)
    assert _allowed(api, "editor", "delete", "models", ns)
    assert _allowed(api, "viewer", "watch", "modeldeployments", ns)
    assert _allowed(api, "viewer", "get", "models/status", ns)
    assert not _allowed(api, "viewer", "create", "models", ns)
    assert not _allowed(api, "owner", "patch", "modeldeployments/status", ns)
