"""The chart's RBAC and controller settings, rendered by Helm and applied to a backend.

Why render instead of copying rules: the tests must run the controller under exactly the
RBAC the chart ships (charts/longrun/templates/rbac.yaml), with the settings its Deployment
passes (the container's env), so that a verb the controller needs and the chart lacks
shows up as a 403.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

CHART = Path(__file__).resolve().parents[2] / "charts" / "longrun"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
Obj = dict[str, Any]


@dataclass
class Rendered:
    """What a release of the chart would create, split by use."""

    namespace: str
    rbac: list[Obj]  # ServiceAccounts, roles and bindings, in apply order
    env: dict[str, str]  # the controller container's env (literal values only)
    service_account: str

    def without_verb(self, resource: str, verb: str) -> Rendered:
        """A copy whose controller roles no longer grant `verb` on `resource`."""
        docs = copy.deepcopy(self.rbac)
        removed = 0
        for doc in docs:
            for rule in doc.get("rules") or []:
                if resource in rule.get("resources", []) and verb in rule.get("verbs", []):
                    rule["verbs"].remove(verb)
                    removed += 1
            # A rule needs a verb (the API server refuses an empty list).
            if "rules" in doc:
                doc["rules"] = [r for r in doc["rules"] if r["verbs"]]
        assert removed, f"no rule grants {verb} on {resource}"
        return Rendered(self.namespace, docs, dict(self.env), self.service_account)


def render(release: str, namespace: str, values: Obj) -> Rendered:
    """Render the chart (people's aggregated roles off: their names are cluster-wide)."""
    chart = helm_python.Chart.load(str(CHART))
    values = {**values, "rbac": {"aggregateToDefaultRoles": False}}
    try:
        files = chart.render(values, name=release, namespace=namespace)
    finally:
        chart.close()
    docs = [d for path, text in sorted(files.items()) if path.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]  # fmt: skip
    rbac = sorted((d for d in docs if d["kind"] in RBAC_KINDS),
                  key=lambda d: RBAC_KINDS.index(d["kind"]))  # fmt: skip
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "controller")
    env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
    return Rendered(namespace, rbac, env, pod["serviceAccountName"])


def apply(api: client.ApiClient, rendered: Rendered) -> list[tuple[str, str]]:
    """Create every RBAC object as an admin; returns the cluster-scoped ones (kind, name)."""
    core: Any = client.CoreV1Api(api)  # dict bodies: sent as they are
    rbac: Any = client.RbacAuthorizationV1Api(api)
    cluster_scoped = []
    for doc in rendered.rbac:
        kind, ns = doc["kind"], doc["metadata"].get("namespace") or rendered.namespace
        if kind == "ServiceAccount":
            _create(core.create_namespaced_service_account, ns, doc)
        elif kind == "Role":
            _create(rbac.create_namespaced_role, ns, doc)
        elif kind == "RoleBinding":
            _create(rbac.create_namespaced_role_binding, ns, doc)
        elif kind == "ClusterRole":
            rbac.create_cluster_role(doc)
            cluster_scoped.append((kind, doc["metadata"]["name"]))
        else:
            rbac.create_cluster_role_binding(doc)
            cluster_scoped.append((kind, doc["metadata"]["name"]))
    return cluster_scoped


def _create(call: Any, namespace: str, doc: Obj) -> None:
    try:
        call(namespace, doc)
    except ApiException as exc:  # the runner ServiceAccount may be rendered twice
        if exc.status != 409:
            raise


def remove_cluster_scoped(api: client.ApiClient, objects: list[tuple[str, str]]) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    for kind, name in objects:
        delete = rbac.delete_cluster_role if kind == "ClusterRole" else None
        (delete or rbac.delete_cluster_role_binding)(name)


def token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path, namespace: str) -> Path:
    """The admin kubeconfig's cluster (server, CA) with a bearer token as the only user."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": cluster["name"], "user": "token",
                                                   "namespace": namespace}}],
        "current-context": "token",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path
