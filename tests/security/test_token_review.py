"""TokenReview, the question the Batch API server asks about every API key: both backends.

Real: both backends' authentication of ServiceAccount tokens: tokens from `kubectl create
token`, and an expired one (e2e/tokens.py: on the real control plane a JWT signed with its own
ServiceAccount key, whose `exp` has passed). Faked: nothing; the emulator's answers must be
the real kube-apiserver's where the Batch API reads them (status.authenticated, status.user).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from e2e.backends import KubeHandle
from e2e.tokens import expired_token, service_account_token

PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


def review(handle: KubeHandle, token: str) -> dict[str, Any]:
    api = handle.api_client()
    try:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        answer: Any = api.call_api(
            *api.param_serialize("POST", PATH, body=body, auth_settings=["BearerToken"])
        )
        answer.read()
        assert answer.status == 201, answer.data
        return dict(json.loads(answer.data)["status"])
    finally:
        api.close()  # type: ignore[no-untyped-call]


def test_a_service_account_token_is_its_account(kube_each_backend: KubeHandle) -> None:
    handle = kube_each_backend
    handle.require_controllers()
    ns = handle.namespace("review")
    core: Any = client.CoreV1Api(handle.api_client())
    core.create_namespaced_service_account(ns, {"metadata": {"name": "bot"}})
    status = review(handle, service_account_token(handle, ns, "bot"))
    assert status["authenticated"] is True
    user = status["user"]
    assert user["username"] == f"system:serviceaccount:{ns}:bot"
    assert user["groups"] == [
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    ]
    assert user["uid"]


def test_unknown_and_expired_tokens_are_not_accepted(kube_each_backend: KubeHandle) -> None:
    handle = kube_each_backend
    handle.require_controllers()
    ns = handle.namespace("review")
    core: Any = client.CoreV1Api(handle.api_client())
    core.create_namespaced_service_account(ns, {"metadata": {"name": "bot"}})
    assert review(handle, "not-a-token") == {"user": {}, "error": "invalid bearer token"}
    assert review(handle, expired_token(handle, ns, "bot")) == {
        "user": {},
        "error": "[invalid bearer token, service account token has expired]",
    }
