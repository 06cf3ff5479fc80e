"""The token verifier (runners/tokencheck) against a Kubernetes ServiceAccount issuer: both
backends.

Real: the verifier as a subprocess; the API server's `/openid/v1/jwks` and its signed
TokenRequest tokens (`kubectl create token`). On the real control plane the verifier goes
the in-cluster way a sidecar would: jwksUri `https://kubernetes.default.svc/openid/v1/jwks`,
KUBERNETES_SERVICE_HOST/PORT pointing at kube-apiserver, and a service-account dir holding
the plane's `ca.crt` and a token of a ServiceAccount (the JWKS needs credentials; the default
RBAC lets every ServiceAccount read it). The emulator serves plain HTTP, so there the
verifier reads `http://127.0.0.1:<port>/openid/v1/jwks` directly (loopback http is allowed).
Expired tokens come from e2e/tokens.py (on the real plane signed with its own key).
Faked: nothing; the discovery documents of both backends are compared field by field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from e2e.backends import KubeHandle
from e2e.tokencheck import VerifierProcess
from e2e.tokens import ISSUER, expired_token, service_account_token

AUDIENCE = "model-a"
IN_CLUSTER_JWKS = "https://kubernetes.default.svc/openid/v1/jwks"


def _get(handle: KubeHandle, path: str, *, accept: str = "", status: int = 200) -> dict[str, Any]:
    api = handle.api_client()
    try:
        headers = {"Accept": accept} if accept else None
        request = api.param_serialize(
            "GET", path, header_params=headers, auth_settings=["BearerToken"]
        )
        answer: Any = api.call_api(*request)
        answer.read()
        assert answer.status == status, answer.data
        return dict(json.loads(answer.data))
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _token(handle: KubeHandle, ns: str, account: str, audience: str) -> str:
    done = handle.kubectl("create", "token", account, "-n", ns, "--audience", audience)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _account(handle: KubeHandle, ns: str, name: str) -> None:
    core: Any = client.CoreV1Api(handle.api_client())
    core.create_namespaced_service_account(ns, {"metadata": {"name": name}})


@pytest.fixture
def start(kube_each_backend: KubeHandle, tmp_path: Path) -> Iterator[Any]:
    """Start verifiers of `handle`'s issuer (module docstring says how each backend's)."""
    handle = kube_each_backend
    started: list[VerifierProcess] = []

    def _start(ns: str, claims: dict[str, list[str]]) -> VerifierProcess:
        cfg: dict[str, Any] = {"issuer": ISSUER, "audiences": [AUDIENCE, ISSUER], "claims": claims}
        workdir = tmp_path / str(len(started))
        if handle.backend == "emulator":
            cfg["jwksUri"] = f"{handle.url}/openid/v1/jwks"
            started.append(VerifierProcess.start(cfg, workdir))
            return started[-1]
        cfg["jwksUri"] = IN_CLUSTER_JWKS
        accounts = workdir / "serviceaccount"
        accounts.mkdir(parents=True)
        _account(handle, ns, "verifier")
        (accounts / "token").write_text(service_account_token(handle, ns, "verifier"))
        (accounts / "ca.crt").write_bytes(handle.plane.ca_cert_path.read_bytes())  # type: ignore[attr-defined]
        server = urlsplit(handle.url)
        env = {"KUBERNETES_SERVICE_HOST": str(server.hostname),
               "KUBERNETES_SERVICE_PORT": str(server.port)}  # fmt: skip
        started.append(VerifierProcess.start(cfg, workdir, service_account_dir=accounts, env=env))
        return started[-1]

    yield _start
    for process in started:
        process.stop()


def test_the_issuer_documents_match_kube_apiserver(kube_each_backend: KubeHandle) -> None:
    handle = kube_each_backend
    document = _get(handle, "/.well-known/openid-configuration")
    assert document["issuer"] == ISSUER
    assert document["jwks_uri"].startswith("https://")
    assert document["jwks_uri"].endswith("/openid/v1/jwks")
    assert document["response_types_supported"] == ["id_token"]
    assert document["subject_types_supported"] == ["public"]
    assert document["id_token_signing_alg_values_supported"] == ["RS256"]
    keys = _get(handle, "/openid/v1/jwks")["keys"]
    assert len(keys) == 1
    assert set(keys[0]) == {"use", "kty", "kid", "alg", "n", "e"}
    assert (keys[0]["use"], keys[0]["kty"], keys[0]["alg"]) == ("sig", "RSA", "RS256")


def test_each_issuer_document_has_one_media_type(kube_each_backend: KubeHandle) -> None:
    """go-restful's 406 for an Accept without the document's type (a JWKS is not
    application/json): what made the verifier send both types."""
    handle = kube_each_backend
    refused = _get(handle, "/openid/v1/jwks", accept="application/json", status=406)
    assert refused == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "406: Not Acceptable\n\nAvailable representations: application/jwk-set+json",
        "reason": "NotAcceptable",
        "details": {},
        "code": 406,
    }
    _get(handle, "/openid/v1/jwks", accept="application/json, application/jwk-set+json")
    _get(handle, "/.well-known/openid-configuration", accept="application/jwk-set+json", status=406)


def test_accepts_service_account_tokens_for_the_audience_only(
    kube_each_backend: KubeHandle, start: Any
) -> None:
    handle = kube_each_backend
    ns = handle.namespace("tokencheck")
    _account(handle, ns, "bot")
    verifier = start(ns, {})
    assert verifier.health()["keys"] == 1, verifier.log.read_text()
    assert verifier.check(_token(handle, ns, "bot", AUDIENCE)) == (204, "")
    assert verifier.check(_token(handle, ns, "bot", "elsewhere")) == (401, "wrong audience")
    assert verifier.check(expired_token(handle, ns, "bot")) == (401, "token expired")


def test_a_sub_claim_admits_one_service_account(kube_each_backend: KubeHandle, start: Any) -> None:
    handle = kube_each_backend
    ns = handle.namespace("tokencheck")
    _account(handle, ns, "bot")
    _account(handle, ns, "intruder")
    verifier = start(ns, {"sub": [f"system:serviceaccount:{ns}:bot"]})
    assert verifier.check(_token(handle, ns, "bot", AUDIENCE)) == (204, "")
    intruder = _token(handle, ns, "intruder", AUDIENCE)
    assert verifier.check(intruder) == (401, "claim sub not allowed")
