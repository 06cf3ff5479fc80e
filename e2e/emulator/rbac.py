"""RBAC authorization: Roles, ClusterRoles and their bindings decide every request.

The rules are kube-apiserver's (`plugin/pkg/auth/authorizer/rbac`): a request is allowed
when any rule of any role bound to the user (ClusterRoleBindings everywhere, RoleBindings
in the request's namespace) matches its verb, API group, resource (`pods/log`,
`*/status`, `*`), resource name, or its non-resource path (`/apis/*`). Nothing denies;
a binding whose role is missing contributes nothing but the reason of the refusal
(`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`). `system:masters` is
allowed before RBAC is asked. The refusal is the real 403 Status, word for word.

The roles are read from the store on every request: a test that creates or edits a role
sees it take effect at once (the real authorizer reads an informer cache, so it is
eventually consistent within milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .authn import Identity
from .errors import ApiError, qualified
from .store import Store

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"
KEYS = {kind: f"{plural}.{GROUP}" for kind, plural in
        (("Role", "roles"), ("ClusterRole", "clusterroles"), ("RoleBinding", "rolebindings"),
         ("ClusterRoleBinding", "clusterrolebindings"))}  # fmt: skip


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (the apiserver's authorizer.Attributes)."""

    user: Identity
    verb: str
    namespace: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""  # set for non-resource requests (/api, /healthz...)

    @property
    def is_resource(self) -> bool:
        return not self.path

    @property
    def combined(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class Authorizer:
    """Answers (allowed, reason) from the RBAC objects in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason): the reason names the binding that allowed (`RBAC: allowed by
        RoleBinding "b/ns" of ClusterRole "view" to User "u"`), or the missing roles."""
        if attrs.user.is_admin:
            return True, ""
        errors: list[str] = []
        for rules, error, source in self.rules_for(attrs.user, attrs.namespace):
            if error:
                errors.append(error)
            elif any(rule_allows(rule, attrs) for rule in rules):
                return True, f"RBAC: allowed by {source}"
        if not errors:
            return False, ""
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return False, f"RBAC: {joined}"

    def rules_for(self, user: Identity, namespace: str) -> Iterator[tuple[list[Obj], str, str]]:
        """(rules, "", source) per role bound to user, or ([], error, "") for a missing role."""
        bindings, _ = self.store.snapshot(KEYS["ClusterRoleBinding"])
        for binding in bindings:
            subject = _subject_for(binding, user, "")
            if subject is not None:
                rules, error = self._role_rules(binding.get("roleRef") or {}, "")
                yield rules, error, _describe(binding, subject, "")
        if not namespace:
            return
        bindings, _ = self.store.snapshot(KEYS["RoleBinding"], namespace)
        for binding in bindings:
            subject = _subject_for(binding, user, namespace)
            if subject is not None:
                rules, error = self._role_rules(binding.get("roleRef") or {}, namespace)
                yield rules, error, _describe(binding, subject, namespace)

    def _role_rules(self, ref: Obj, namespace: str) -> tuple[list[Obj], str]:
        kind, name = ref.get("kind", ""), ref.get("name", "")
        if kind == "ClusterRole":
            role = self.store.get(KEYS["ClusterRole"], "", name)
            what = f'clusterrole.{GROUP} "{name}" not found'
        elif kind == "Role" and namespace:
            role = self.store.get(KEYS["Role"], namespace, name)
            what = f'role.{GROUP} "{name}" not found'
        else:
            return [], f"unknown role kind {kind!r}"
        if role is None:
            return [], what
        return list(role.get("rules") or []), ""


def _subject_for(binding: Obj, user: Identity, namespace: str) -> Obj | None:
    return next(
        (s for s in binding.get("subjects") or [] if subject_matches(s, user, namespace)), None
    )


def _describe(binding: Obj, subject: Obj, namespace: str) -> str:
    """rbac's describer: `RoleBinding "name/ns" of Role "r" to ServiceAccount "sa/ns"`."""
    ref, name = binding.get("roleRef") or {}, binding["metadata"]["name"]
    what = f'RoleBinding "{name}/{namespace}"' if namespace else f'ClusterRoleBinding "{name}"'
    who = subject.get("name", "")
    if subject.get("kind") == "ServiceAccount":
        who = f"{who}/{subject.get('namespace') or namespace}"
    return f'{what} of {ref.get("kind")} "{ref.get("name")}" to {subject.get("kind")} "{who}"'


def subject_matches(subject: Obj, user: Identity, namespace: str) -> bool:
    """rbac's appliesToUser: a User by name, a Group by membership, a ServiceAccount by its
    user name (a RoleBinding's subject without a namespace means the binding's own)."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(user.user == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.user == f"system:serviceaccount:{sa_namespace}:{name}"
    return False


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    """One PolicyRule against one request (rbac/v1 evaluation_helpers.go)."""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.is_resource:
        return any(_url_matches(url, attrs.path) for url in rule.get("nonResourceURLs") or [])
    if not _has(rule.get("apiGroups"), attrs.group):
        return False
    if not _resource_matches(rule.get("resources") or [], attrs):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _has(values: Any, wanted: str) -> bool:
    return any(v == "*" or v == wanted for v in values or [])


def _resource_matches(resources: list[str], attrs: Attributes) -> bool:
    for resource in resources:
        if resource in ("*", attrs.combined):
            return True
        if attrs.subresource and resource == f"*/{attrs.subresource}":
            return True
    return False


def _url_matches(pattern: str, path: str) -> bool:
    if pattern in ("*", path):
        return True
    return pattern.endswith("*") and path.startswith(pattern[:-1])


def forbidden(attrs: Attributes, reason: str) -> ApiError:
    """The 403 kube-apiserver answers (responsewriters.Forbidden + apierrors.NewForbidden)."""
    who = f"User {_quote(attrs.user.user)} cannot {attrs.verb}"
    if not attrs.is_resource:
        text = f"{who} path {_quote(attrs.path)}"
    elif attrs.namespace:
        text = (
            f"{who} resource {_quote(attrs.combined)} in API group {_quote(attrs.group)} "
            f"in the namespace {_quote(attrs.namespace)}"
        )
    else:
        text = (
            f"{who} resource {_quote(attrs.combined)} in API group {_quote(attrs.group)} "
            "at the cluster scope"
        )
    if reason:
        text = f"{text}: {reason}"
    if not attrs.is_resource:
        return ApiError(403, f"forbidden: {text}")
    target = qualified(attrs.resource, attrs.group)
    head = f"{target} {_quote(attrs.name)}" if attrs.name else target
    details = {"name": attrs.name, "group": attrs.group, "kind": attrs.resource}
    return ApiError(403, f"{head} is forbidden: {text}", details=details)


def _quote(text: str) -> str:
    """Go's %q for the plain strings of names and paths."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- SubjectAccessReview / SelfSubjectAccessReview (kubectl auth can-i) -------------------
def access_review(authorizer: Authorizer, caller: Identity, kind: str, body: Any) -> Obj:
    """The review with status.allowed (and reason) filled in; `Self…` asks about the caller."""
    review = dict(body) if isinstance(body, dict) else {}
    spec = dict(review.get("spec") or {})
    if kind == "SelfSubjectAccessReview":
        user = caller
    else:
        groups = tuple(spec.get("groups") or ())
        user = Identity(spec.get("user", ""), groups, spec.get("uid", ""))
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(res, dict):
        attrs = Attributes(
            user,
            res.get("verb", ""),
            namespace=res.get("namespace", ""),
            group=res.get("group", ""),
            resource=res.get("resource", ""),
            subresource=res.get("subresource", ""),
            name=res.get("name", ""),
        )
    elif isinstance(non, dict):
        attrs = Attributes(user, non.get("verb", ""), path=non.get("path", "") or "/")
    else:
        kind_q = f"{kind}.authorization.k8s.io"
        raise ApiError(
            422,
            f'{kind_q} "" is invalid: spec.resourceAttributes: Invalid value: "null": exactly one '
            "of nonResourceAttributes or resourceAttributes must be specified",
        )
    allowed, reason = authorizer.authorize(attrs)
    status: Obj = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    meta = dict(review.get("metadata") or {})
    meta.setdefault("creationTimestamp", None)
    return {
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def rules_review(authorizer: Authorizer, user: Identity, body: Any) -> Obj:
    """SelfSubjectRulesReview (`kubectl auth can-i --list`): every rule bound to the caller in
    spec.namespace; `incomplete` with the evaluation error when a binding's role is missing."""
    spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
    resource_rules, url_rules, errors = [], [], []
    for rules, error, _source in authorizer.rules_for(user, spec.get("namespace", "")):
        errors += [error] if error else []
        for rule in rules:
            if rule.get("nonResourceURLs"):
                url_rules.append({"verbs": rule.get("verbs") or [],
                                  "nonResourceURLs": rule["nonResourceURLs"]})  # fmt: skip
            else:
                kept = ("verbs", "apiGroups", "resources", "resourceNames")
                resource_rules.append({k: rule[k] for k in kept if rule.get(k)})
    status: Obj = {"resourceRules": resource_rules, "nonResourceRules": url_rules,
                   "incomplete": bool(errors)}  # fmt: skip
    if errors:
        status["evaluationError"] = ", ".join(errors)
    return {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}  # fmt: skip
