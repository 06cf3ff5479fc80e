"""The RBAC objects a cluster starts with, the aggregation controller, roleRef immutability.

kube-apiserver's bootstrap policy creates `cluster-admin` (bound to system:masters),
`system:discovery`, `system:basic-user` and `system:public-info-viewer` (bound to every
authenticated user), `system:service-account-issuer-discovery` (the issuer's discovery
document and JWKS, bound to every ServiceAccount), and the aggregated `admin`, `edit` and
`view` roles; the clusterrole-aggregation controller of kube-controller-manager fills an
aggregated role's `rules` with the rules of every ClusterRole its
`aggregationRule.clusterRoleSelectors` select. Both are emulated here; the rule lists of
`system:aggregate-to-*` are shortened to the resources the emulator serves (see "Known
divergences" in e2e/README.md).
"""

from __future__ import annotations

from typing import Any

from .api import Api
from .errors import FieldError, invalid, not_supported, required
from .rbac import GROUP, KEYS
from .selectors import Requirement, match_labels
from .store import Event

Obj = dict[str, Any]
BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                  "/openapi/*", "/readyz", "/version", "/version/"]  # fmt: skip
PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
ISSUER_URLS = ["/.well-known/openid-configuration", "/.well-known/openid-configuration/",
               "/openid/v1/jwks", "/openid/v1/jwks/"]  # fmt: skip
READ = ["get", "list", "watch"]
WRITE = ["create", "delete", "deletecollection", "patch", "update"]
CORE_READ = ["pods", "pods/log", "pods/status", "configmaps", "endpoints",
             "persistentvolumeclaims", "persistentvolumeclaims/status", "services",
             "services/status", "serviceaccounts", "events", "namespaces",
             "namespaces/status"]  # fmt: skip
CORE_WRITE = ["pods", "configmaps", "secrets", "services", "persistentvolumeclaims",
              "serviceaccounts"]  # fmt: skip
BATCH = ["jobs", "cronjobs"]
APPS = ["deployments"]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> Obj:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _role(
    name: str, rules: list[Obj], *, aggregate: str = "", labels: dict[str, str] | None = None
) -> Obj:
    meta = {"name": name, **BOOTSTRAP_META}
    meta["labels"] = {**BOOTSTRAP_META["labels"], **(labels or {})}
    role: Obj = {"metadata": meta, "rules": rules}
    if aggregate:
        selector = {"matchLabels": {f"{GROUP}/aggregate-to-{aggregate}": "true"}}
        role["aggregationRule"] = {"clusterRoleSelectors": [selector]}
        role["rules"] = []
    return role


def _binding(name: str, role: str, groups: list[str]) -> Obj:
    subjects = [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups]
    return {
        "metadata": {"name": name, **BOOTSTRAP_META},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def bootstrap_cluster_roles() -> list[Obj]:
    """The bootstrap ClusterRoles (abridged aggregate-to-* rules)."""
    to = f"{GROUP}/aggregate-to-"
    return [
        _role("cluster-admin", [_rule(["*"], ["*"], ["*"]),
                                {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        _role("system:discovery", [{"nonResourceURLs": DISCOVERY_URLS, "verbs": ["get"]}]),
        _role("system:public-info-viewer", [{"nonResourceURLs": PUBLIC_URLS, "verbs": ["get"]}]),
        _role("system:service-account-issuer-discovery",
              [{"nonResourceURLs": ISSUER_URLS, "verbs": ["get"]}]),
        _role(
            "system:basic-user",
            [
                _rule(["authorization.k8s.io"],
                      ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], ["create"]),
                _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"]),
            ],
        ),
        _role("admin", [], aggregate="admin"),
        _role("edit", [], aggregate="edit", labels={f"{to}admin": "true"}),
        _role("view", [], aggregate="view", labels={f"{to}edit": "true"}),
        _role(
            "system:aggregate-to-admin",
            [_rule([GROUP], ["roles", "rolebindings"], [*READ, *WRITE])],
            labels={f"{to}admin": "true"},
        ),
        _role(
            "system:aggregate-to-edit",
            [_rule([""], CORE_WRITE, WRITE), _rule([""], ["secrets"], READ),
             _rule(["batch"], BATCH, WRITE), _rule(["apps"], APPS, WRITE)],
            labels={f"{to}edit": "true"},
        ),
        _role(
            "system:aggregate-to-view",
            [_rule([""], CORE_READ, READ),
             _rule(["batch"], [*BATCH, "jobs/status", "cronjobs/status"], READ),
             _rule(["apps"], [*APPS, "deployments/status"], READ)],
            labels={f"{to}view": "true"},
        ),
    ]  # fmt: skip


def bootstrap_bindings() -> list[Obj]:
    return [
        _binding("cluster-admin", "cluster-admin", ["system:masters"]),
        _binding("system:discovery", "system:discovery", ["system:authenticated"]),
        _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            ["system:authenticated", "system:unauthenticated"],
        ),
        _binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            ["system:serviceaccounts"],
        ),
    ]


def bootstrap(api: Api) -> None:
    """Create the bootstrap policy (skipping what exists, as a restarted server does)."""
    for plural, objs in (("clusterroles", bootstrap_cluster_roles()),
                         ("clusterrolebindings", bootstrap_bindings())):  # fmt: skip
        rt = api.registry.get(GROUP, "v1", plural)
        assert rt is not None
        for obj in objs:
            if api.store.get(rt.key, "", obj["metadata"]["name"]) is None:
                api.create(rt, "", obj, owned=True)


def validate(kind: str, new: Obj, old: Obj | None) -> list[FieldError]:
    """What rbac/validation.go checks that a test can trip: rules that cannot match, a roleRef
    of the wrong kind, and a binding's roleRef changing (delete and recreate it instead)."""
    if kind in ("Role", "ClusterRole"):
        rules = enumerate(new.get("rules") or [])
        return [e for i, rule in rules for e in _rule_errors(i, rule, namespaced=kind == "Role")]
    if kind not in ("RoleBinding", "ClusterRoleBinding"):
        return []
    ref = new.get("roleRef") or {}
    if old is not None and ref != old.get("roleRef"):
        go_struct = {"APIGroup": ref.get("apiGroup", ""), "Kind": ref.get("kind", ""),
                     "Name": ref.get("name", "")}  # fmt: skip
        return [invalid("roleRef", go_struct, "cannot change roleRef")]
    kinds = ["Role", "ClusterRole"] if kind == "RoleBinding" else ["ClusterRole"]
    errors = []
    if ref.get("apiGroup") != GROUP:
        errors.append(not_supported("roleRef.apiGroup", ref.get("apiGroup", ""), [GROUP]))
    if ref.get("kind") not in kinds:
        errors.append(not_supported("roleRef.kind", ref.get("kind", ""), kinds))
    return errors + ([] if ref.get("name") else [required("roleRef.name")])


def _rule_errors(i: int, rule: Obj, *, namespaced: bool) -> list[FieldError]:
    path = f"rules[{i}]"
    errors = (
        []
        if rule.get("verbs")
        else [required(f"{path}.verbs", "verbs must contain at least one value")]
    )
    if rule.get("nonResourceURLs"):
        if namespaced:
            detail = "namespaced rules cannot apply to non-resource URLs"
            errors.append(invalid(f"{path}.nonResourceURLs", rule["nonResourceURLs"], detail))
        if rule.get("apiGroups") or rule.get("resources"):
            detail = "rules cannot apply to both regular resources and non-resource URLs"
            errors.append(invalid(f"{path}.nonResourceURLs", rule["nonResourceURLs"], detail))
        return errors
    if not rule.get("apiGroups"):
        errors.append(
            required(f"{path}.apiGroups", "resource rules must supply at least one api group")
        )
    if not rule.get("resources"):
        errors.append(
            required(f"{path}.resources", "resource rules must supply at least one resource")
        )
    return errors


class ClusterRoleAggregator:
    """kube-controller-manager's clusterrole-aggregation controller."""

    name = "clusterrole-aggregation"

    def __init__(self, api: Api) -> None:
        self.api = api

    def keys_for(self, event: Event) -> list[str]:
        if event.key != KEYS["ClusterRole"]:
            return []
        roles, _ = self.api.store.snapshot(KEYS["ClusterRole"])
        return [r["metadata"]["name"] for r in roles if r.get("aggregationRule")]

    def reconcile(self, key: str) -> None:
        role = self.api.store.get(KEYS["ClusterRole"], "", key)
        if role is None or not role.get("aggregationRule"):
            return
        selectors = [
            _requirements(s) for s in role["aggregationRule"].get("clusterRoleSelectors") or []
        ]
        roles, _ = self.api.store.snapshot(KEYS["ClusterRole"])  # sorted by name, as the real one
        rules: list[Obj] = []
        for other in roles:
            labels = other["metadata"].get("labels") or {}
            if other["metadata"]["name"] == key or not any(
                match_labels(s, labels) for s in selectors
            ):
                continue
            rules += [r for r in other.get("rules") or [] if r not in rules]
        if rules == (role.get("rules") or []):
            return
        rt = self.api.registry.get(GROUP, "v1", "clusterroles")
        assert rt is not None
        self.api.update(rt, "", key, {**role, "rules": rules}, owned=True)


def _requirements(selector: Obj) -> list[Requirement]:
    """A metav1.LabelSelector as selector requirements."""
    reqs = [Requirement(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(
            Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ()))
        )
    return reqs
