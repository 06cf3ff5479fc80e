"""RBAC at the API: tokens, refusals word for word, access reviews, aggregation — both backends.

Real: both backends' authentication of ServiceAccount tokens (`kubectl create token`) and
their RBAC authorizers, over raw HTTP (every Status body compared as sent). Faked: nothing.
The expected refusals are the real kube-apiserver's (checked on v1.36.2); the emulator must
answer the same bytes of message, reason, code and details.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.backends import KubeHandle
from e2e.fixtures import eventually
from tests.security.chart_rbac import token_kubeconfig

Obj = dict[str, Any]
RBAC = "rbac.authorization.k8s.io"


@dataclass
class Caller:
    """A ServiceAccount `bot` of a fresh namespace, with its token, and the admin."""

    handle: KubeHandle
    ns: str
    admin: client.ApiClient
    api: client.ApiClient
    token: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.ns}:bot"

    def request(
        self, method: str, path: str, body: Any = None, *, token: str = ""
    ) -> tuple[int, Obj]:
        """One HTTP request with the bot's bearer token: (status, JSON body)."""
        headers = {"Authorization": f"Bearer {token or self.token}", "Accept": "application/json",
                   "Content-Type": "application/json"}  # fmt: skip
        data = None if body is None else json.dumps(body)
        url = self.api.configuration.host + path
        resp = self.api.rest_client.pool_manager.request(
            method, url, body=data, headers=headers, timeout=30
        )
        return resp.status, json.loads(resp.data or b"{}")

    def grant(self, name: str, rules: list[Obj], *, role_name: str = "") -> None:
        rbac: Any = client.RbacAuthorizationV1Api(self.admin)
        if rules:
            rbac.create_namespaced_role(self.ns, {"metadata": {"name": name}, "rules": rules})
        binding = {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": role_name or name},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": self.ns}],
        }
        rbac.create_namespaced_role_binding(self.ns, binding)


@pytest.fixture
def caller(kube_each_backend: KubeHandle, tmp_path: Path) -> Iterator[Caller]:
    handle = kube_each_backend
    handle.require_controllers()
    ns = handle.namespace("rbac")
    admin = handle.api_client()
    core: Any = client.CoreV1Api(admin)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "bot"}})
    done = handle.kubectl("create", "token", "bot", "-n", ns)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    cfg = client.Configuration()
    kubeconfig = token_kubeconfig(handle.kubeconfig_path, token, tmp_path / "kubeconfig", ns)
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=cfg
    )
    api = client.ApiClient(cfg)
    yield Caller(handle, ns, admin, api, token)
    api.close()  # type: ignore[no-untyped-call]


def _refused(caller: Caller, message: str, *, name: str, group: str, kind: str) -> Obj:
    details = {k: v for k, v in (("name", name), ("group", group), ("kind", kind)) if v}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": "Forbidden", "details": details, "code": 403}  # fmt: skip


def test_a_token_authenticates_as_its_service_account(caller: Caller) -> None:
    status, review = caller.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                    {"apiVersion": "authentication.k8s.io/v1",
                                     "kind": "SelfSubjectReview"})  # fmt: skip
    assert status == 201, review
    info = review["status"]["userInfo"]
    assert info["username"] == caller.user
    assert info["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{caller.ns}",
                              "system:authenticated"]  # fmt: skip


def test_an_unknown_token_is_unauthorized(caller: Caller) -> None:
    status, body = caller.request("GET", f"/api/v1/namespaces/{caller.ns}/pods", token="nope")
    assert (status, body) == (401, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Failure", "message": "Unauthorized",
                                    "reason": "Unauthorized", "code": 401})  # fmt: skip


def test_refusals_name_the_user_verb_resource_group_and_scope(caller: Caller) -> None:
    ns, who = caller.ns, f'User "{caller.user}"'
    status, body = caller.request("GET", f"/api/v1/namespaces/{ns}/pods")
    message = (
        f'pods is forbidden: {who} cannot list resource "pods" in API group "" in the '
        f'namespace "{ns}"'
    )
    assert (status, body) == (403, _refused(caller, message, name="", group="", kind="pods"))
    status, body = caller.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", {})
    message = (
        f'jobs.batch is forbidden: {who} cannot create resource "jobs" in API group '
        f'"batch" in the namespace "{ns}"'
    )
    assert (status, body) == (403, _refused(caller, message, name="", group="batch", kind="jobs"))
    path = f"/apis/longrun.dev/v1alpha1/namespaces/{ns}/inferenceruns/r1/status"
    status, body = caller.request("PATCH", path, {})
    message = (
        f'inferenceruns.longrun.dev "r1" is forbidden: {who} cannot patch resource '
        f'"inferenceruns/status" in API group "longrun.dev" in the namespace "{ns}"'
    )
    assert (status, body) == (
        403,
        _refused(caller, message, name="r1", group="longrun.dev", kind="inferenceruns"),
    )
    status, body = caller.request("GET", "/api/v1/namespaces")
    message = (
        f'namespaces is forbidden: {who} cannot list resource "namespaces" in API group '
        '"" at the cluster scope'
    )
    assert (status, body) == (403, _refused(caller, message, name="", group="", kind="namespaces"))
    status, body = caller.request("GET", "/metrics")
    assert (status, body["message"]) == (403, f'forbidden: {who} cannot get path "/metrics"')
    assert caller.request("GET", "/apis")[0] == 200  # discovery: every authenticated user
    assert caller.request("GET", "/version")[0] == 200  # fmt: skip


def test_rules_match_verbs_subresources_and_resource_names(caller: Caller) -> None:
    ns = caller.ns
    caller.grant("reader", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"],
             "resourceNames": ["a"]},
        {"apiGroups": ["batch"], "resources": ["*/status"], "verbs": ["*"]},
        {"apiGroups": ["longrun.dev"], "resources": ["inferenceruns/status"], "verbs": ["patch"]},
    ])  # fmt: skip
    pods = f"/api/v1/namespaces/{ns}/pods"
    assert eventually(lambda: caller.request("GET", f"{pods}/a")[0] == 404, timeout=10)
    status, body = caller.request("GET", f"{pods}/b")
    assert (status, body["details"]) == (403, {"name": "b", "kind": "pods"})
    # A list selecting one name by field is a request for that name (RequestInfo).
    assert caller.request("GET", f"{pods}?fieldSelector=metadata.name%3Da")[0] == 200
    assert caller.request("GET", f"{pods}?fieldSelector=metadata.name%3Db")[0] == 403
    status, body = caller.request("GET", f"{pods}/a/log")
    assert status == 403 and 'cannot get resource "pods/log"' in body["message"], body
    assert caller.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j/status")[0] == 404
    assert caller.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j")[0] == 403
    runs = f"/apis/longrun.dev/v1alpha1/namespaces/{ns}/inferenceruns"
    assert caller.request("PATCH", f"{runs}/r1/status", {})[0] != 403
    assert caller.request("PATCH", f"{runs}/r1", {})[0] == 403


def test_a_binding_to_a_missing_role_says_so_in_the_refusal(caller: Caller) -> None:
    caller.grant("ghost", [], role_name="missing")
    message = (f'configmaps is forbidden: User "{caller.user}" cannot list resource "configmaps" '
               f'in API group "" in the namespace "{caller.ns}": RBAC: '
               'role.rbac.authorization.k8s.io "missing" not found')  # fmt: skip
    path = f"/api/v1/namespaces/{caller.ns}/configmaps"
    assert eventually(lambda: caller.request("GET", path)[1]["message"] == message, timeout=10)


def test_access_reviews_answer_for_the_caller_and_for_others(caller: Caller) -> None:
    caller.grant("lister", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}])
    attrs = {"namespace": caller.ns, "verb": "list", "resource": "configmaps"}
    review = {"apiVersion": "authorization.k8s.io/v1", "spec": {"resourceAttributes": attrs}}
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

    def allowed() -> bool:
        status, body = caller.request("POST", path, {**review, "kind": "SelfSubjectAccessReview"})
        return status == 201 and bool(body["status"]["allowed"])

    assert eventually(allowed, timeout=10)
    authz: Any = client.AuthorizationV1Api(caller.admin)
    spec = {"user": caller.user, "groups": ["system:serviceaccounts"], "resourceAttributes": attrs}
    status = authz.create_subject_access_review({"spec": spec}).status
    assert (status.allowed, status.reason) == (
        True,
        f'RBAC: allowed by RoleBinding "lister/{caller.ns}" of Role "lister" to ServiceAccount '
        f'"bot/{caller.ns}"',
    )
    spec["resourceAttributes"] = {**attrs, "verb": "delete"}
    assert not authz.create_subject_access_review({"spec": spec}).status.allowed


def test_an_aggregated_cluster_role_collects_the_rules_of_the_roles_it_selects(
    caller: Caller,
) -> None:
    rbac: Any = client.RbacAuthorizationV1Api(caller.admin)
    label = f"test.longrun.dev/aggregate-{caller.ns}"
    rule = {"apiGroups": ["longrun.dev"], "resources": ["inferenceruns"], "verbs": ["get"]}
    rbac.create_cluster_role({"metadata": {"name": f"{caller.ns}-all"},
                              "aggregationRule": {"clusterRoleSelectors": [
                                  {"matchLabels": {label: "true"}}]}})  # fmt: skip
    rbac.create_cluster_role({"metadata": {"name": f"{caller.ns}-part", "labels": {label: "true"}},
                              "rules": [rule]})  # fmt: skip
    try:
        got = eventually(lambda: rbac.read_cluster_role(f"{caller.ns}-all").rules, timeout=30)
        assert [(r.api_groups, r.resources, r.verbs) for r in got] == [
            (["longrun.dev"], ["inferenceruns"], ["get"])
        ]
    finally:
        rbac.delete_cluster_role(f"{caller.ns}-all")
        rbac.delete_cluster_role(f"{caller.ns}-part")


_G = RBAC
INVALID = [
    ("Role", {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}]},
     "rules[0].verbs: Required value: verbs must contain at least one value"),
    ("Role", {"rules": [{"verbs": ["get"]}]},
     "[rules[0].apiGroups: Required value: resource rules must supply at least one api group, "
     "rules[0].resources: Required value: resource rules must supply at least one resource]"),
    ("Role", {"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"], "apiGroups": [""],
                         "resources": ["pods"]}]},
     '[rules[0].nonResourceURLs: Invalid value: ["/x"]: namespaced rules cannot apply to '
     'non-resource URLs, rules[0].nonResourceURLs: Invalid value: ["/x"]: rules cannot apply to '
     "both regular resources and non-resource URLs]"),
    ("RoleBinding", {"roleRef": {"apiGroup": _G, "kind": "Foo", "name": "x"}},
     'roleRef.kind: Unsupported value: "Foo": supported values: "Role", "ClusterRole"'),
    ("RoleBinding", {"roleRef": {"apiGroup": "x", "kind": "Role", "name": ""}},
     '[roleRef.apiGroup: Unsupported value: "x": supported values: "rbac.authorization.k8s.io", '
     "roleRef.name: Required value]"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "body", "error"), INVALID, ids=range(len(INVALID)))
def test_rules_and_role_refs_that_cannot_work_are_refused_as_the_real_server_words_it(
    caller: Caller, kind: str, body: Obj, error: str
) -> None:
    rbac: Any = client.RbacAuthorizationV1Api(caller.admin)
    create = rbac.create_namespaced_role if kind == "Role" else rbac.create_namespaced_role_binding
    with pytest.raises(ApiException) as caught:
        create(caller.ns, {"metadata": {"name": "bad"}, **body})
    assert (caught.value.status, json.loads(caught.value.body or "{}")["message"]) == (
        422,
        f'{kind}.rbac.authorization.k8s.io "bad" is invalid: {error}',
    )


def test_a_bindings_role_ref_cannot_change(caller: Caller) -> None:
    rbac: Any = client.RbacAuthorizationV1Api(caller.admin)
    caller.grant("viewer", [], role_name="view")
    patch = {"roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "other"}}
    with pytest.raises(ApiException) as caught:
        rbac.patch_namespaced_role_binding("viewer", caller.ns, patch)
    assert (caught.value.status, json.loads(caught.value.body or "{}")["message"]) == (
        422,
        'RoleBinding.rbac.authorization.k8s.io "viewer" is invalid: roleRef: Invalid value: '
        '{"APIGroup":"rbac.authorization.k8s.io","Kind":"Role","Name":"other"}: cannot change '
        "roleRef",
    )


def test_a_rules_review_lists_what_the_caller_may_do_in_a_namespace(caller: Caller) -> None:
    rule = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]}
    caller.grant("pod-a", [rule])
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": caller.ns}}  # fmt: skip
    path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"

    def status() -> Obj:
        code, body = caller.request("POST", path, review)
        assert code == 201, body
        return dict(body["status"]) if rule in body["status"]["resourceRules"] else {}

    got: Obj = eventually(status, timeout=10)
    basic = ["selfsubjectreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews"]
    assert sorted(r for x in got["resourceRules"] for r in x["resources"]) == sorted(
        [*basic, "pods"]
    )
    urls = {u for x in got["nonResourceRules"] for u in x["nonResourceURLs"]}
    assert {"/api", "/apis/*", "/healthz", "/version"} <= urls
    assert got["incomplete"] is False
