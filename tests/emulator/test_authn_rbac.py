"""The emulator's authentication and RBAC where only the emulator can show it.

Real: the emulator over HTTP, the real kubectl (create token, create role/rolebinding
through protobuf bodies, auth can-i/whoami, --as impersonation), the emulator clock.
Faked: nothing. What both backends share (refusal wording, access reviews, aggregation,
the controller under the chart's RBAC) is in tests/security, against kube-apiserver too.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from e2e.fixtures import EmulatorHandle

Obj = dict[str, Any]


def _call(
    handle: EmulatorHandle,
    path: str,
    *,
    token: str = "",
    method: str = "GET",
    body: Obj | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Obj]:
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(handle.url + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            data = resp.read()
            return resp.status, json.loads(data) if data.startswith(b"{") else {"text": data}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _bot(handle: EmulatorHandle, ns: str, *extra: str) -> str:
    handle.kubectl("create", "serviceaccount", "bot", "-n", ns)
    done = handle.kubectl("create", "token", "bot", "-n", ns, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_requests_without_credentials_are_the_admin(kube_emulator: EmulatorHandle) -> None:
    status, review = _call(kube_emulator, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           method="POST", body={})  # fmt: skip
    assert status == 201
    assert review["status"]["userInfo"]["groups"] == ["system:masters", "system:authenticated"]


def test_kubectl_create_token_gives_a_token_of_the_service_account(
    kube_emulator: EmulatorHandle,
) -> None:
    ns = kube_emulator.namespace("authn")
    token = _bot(kube_emulator, ns)
    assert token.count(".") == 2  # JWT-shaped, as kubectl users expect
    status, review = _call(kube_emulator, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           method="POST", body={}, token=token)  # fmt: skip
    assert status == 201
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:bot"


def test_a_token_expires_on_the_emulator_clock(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("authn")
    token = _bot(kube_emulator, ns, "--duration=10m")
    assert _call(kube_emulator, "/version", token=token)[0] == 200
    kube_emulator.clock.advance(601)
    assert _call(kube_emulator, "/version", token=token) == (401, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401})  # fmt: skip


def test_a_token_dies_with_its_service_account_even_if_one_of_the_same_name_returns(
    kube_emulator: EmulatorHandle,
) -> None:
    ns = kube_emulator.namespace("authn")
    token = _bot(kube_emulator, ns)
    kube_emulator.kubectl("delete", "serviceaccount", "bot", "-n", ns)
    kube_emulator.kubectl("create", "serviceaccount", "bot", "-n", ns)
    assert _call(kube_emulator, "/version", token=token)[0] == 401


def test_a_token_shorter_than_ten_minutes_is_refused(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("authn")
    kube_emulator.kubectl("create", "serviceaccount", "bot", "-n", ns)
    done = kube_emulator.kubectl("create", "token", "bot", "-n", ns, "--duration=5m")
    assert done.returncode != 0
    assert "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 " \
        "minutes" in done.stderr  # fmt: skip


def test_a_token_for_a_missing_service_account_is_not_found(kube_emulator: EmulatorHandle) -> None:
    done = kube_emulator.kubectl("create", "token", "ghost", "-n", "default")
    assert 'serviceaccounts "ghost" not found' in done.stderr


def test_a_static_token_authenticates_a_user_bound_by_name(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("authn")
    kube_emulator.emulator.security.authn.add_token("alice-token", "alice", ("devs",))
    path = f"/api/v1/namespaces/{ns}/configmaps"
    assert _call(kube_emulator, path, token="alice-token")[0] == 403
    done = kube_emulator.kubectl("create", "rolebinding", "devs-view", "--clusterrole=view",
                                 "--group=devs", "-n", ns)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _call(kube_emulator, path, token="alice-token")[0] == 200


def test_kubectl_roles_bindings_can_i_and_impersonation(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("authn")
    kube_emulator.kubectl("create", "serviceaccount", "bot", "-n", ns)
    as_bot = f"--as=system:serviceaccount:{ns}:bot"
    assert (
        kube_emulator.kubectl("auth", "can-i", "delete", "jobs", "-n", ns, as_bot).stdout == "no\n"
    )
    for args in (("role", "jobs", "--verb=delete", "--resource=jobs.batch"),
                 ("rolebinding", "jobs", "--role=jobs", f"--serviceaccount={ns}:bot")):  # fmt: skip
        done = kube_emulator.kubectl("create", *args, "-n", ns)
        assert done.returncode == 0, done.stderr
    assert (
        kube_emulator.kubectl("auth", "can-i", "delete", "jobs", "-n", ns, as_bot).stdout == "yes\n"
    )
    refused = kube_emulator.kubectl("get", "jobs", "-n", ns, as_bot).stderr
    assert f'User "system:serviceaccount:{ns}:bot" cannot list resource "jobs"' in refused
    whoami = kube_emulator.kubectl("auth", "whoami", "--as=alice", "--as-group=devs").stdout
    assert "alice" in whoami and "[devs system:authenticated]" in whoami


def test_impersonating_needs_the_impersonate_verb(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("authn")
    token = _bot(kube_emulator, ns)
    status, body = _call(kube_emulator, "/version", token=token,
                         headers={"Impersonate-User": "alice"})  # fmt: skip
    assert (status, body["message"]) == (
        403,
        f'users "alice" is forbidden: User "system:serviceaccount:{ns}:bot" cannot impersonate '
        'resource "users" in API group "" at the cluster scope',
    )


def test_the_bootstrap_roles_are_there_and_view_is_aggregated(
    kube_emulator: EmulatorHandle,
) -> None:
    done = kube_emulator.kubectl("get", "clusterrole", "view", "-o", "json")
    view = json.loads(done.stdout)
    assert view["aggregationRule"]["clusterRoleSelectors"] == [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}
    ]
    assert any("pods/log" in r["resources"] for r in view["rules"])
    bindings = json.loads(kube_emulator.kubectl("get", "clusterrolebindings", "-o", "json").stdout)
    names = {b["metadata"]["name"] for b in bindings["items"]}
    assert {"cluster-admin", "system:discovery", "system:basic-user"} <= names


@pytest.mark.parametrize(("path", "allowed"), [("/apis", True), ("/openapi/v3", True),
                                               ("/healthz", True), ("/logs", False)])  # fmt: skip
def test_discovery_is_open_to_every_authenticated_user(
    kube_emulator: EmulatorHandle, path: str, allowed: bool
) -> None:
    token = _bot(kube_emulator, kube_emulator.namespace("authn"))
    assert (_call(kube_emulator, path, token=token)[0] != 403) is allowed
