"""The emulator as a ServiceAccount token issuer: tokens signed for real, keys published.

Real: the emulator over HTTP, TokenRequest tokens from the real kubectl, PyJWT checking their
RS256 signatures against the emulator's /openid/v1/jwks. Faked: nothing. (tests/security
checks the same documents and a JWT verifier against both backends.)
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from e2e.fixtures import EmulatorHandle

ISSUER = "https://kubernetes.default.svc.cluster.local"


def _get(handle: EmulatorHandle, path: str, token: str = "") -> tuple[int, str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(handle.url + path, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.headers["Content-Type"], json.loads(answer.read())


def _token(handle: EmulatorHandle, ns: str, *extra: str) -> str:
    handle.kubectl("create", "serviceaccount", "bot", "-n", ns)
    done = handle.kubectl("create", "token", "bot", "-n", ns, *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _int(text: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), "big")


def test_tokens_verify_against_the_published_key(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("issuer")
    token = _token(kube_emulator, ns, "--audience", "model-a")
    status, ctype, jwks = _get(kube_emulator, "/openid/v1/jwks")
    assert (status, ctype) == (200, "application/jwk-set+json")
    [key] = jwks["keys"]
    public = jwt.PyJWK(key).key
    claims = jwt.decode(token, public, algorithms=["RS256"], audience="model-a", issuer=ISSUER)
    assert claims["sub"] == f"system:serviceaccount:{ns}:bot"
    assert claims["kubernetes.io"]["serviceaccount"]["name"] == "bot"
    assert jwt.get_unverified_header(token) == {"alg": "RS256", "kid": key["kid"]}


def test_the_key_id_is_kube_apiservers(kube_emulator: EmulatorHandle) -> None:
    """kid: the SHA-256 of the public key's DER (SubjectPublicKeyInfo), base64url."""
    [key] = _get(kube_emulator, "/openid/v1/jwks")[2]["keys"]
    public = rsa.RSAPublicNumbers(_int(key["e"]), _int(key["n"])).public_key()
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert key["kid"] == base64.urlsafe_b64encode(hashlib.sha256(der).digest()).decode().rstrip("=")


def test_every_service_account_may_read_the_issuer_documents(
    kube_emulator: EmulatorHandle,
) -> None:
    """The bootstrap binding system:service-account-issuer-discovery (group
    system:serviceaccounts), which the verifier's in-cluster fetch relies on."""
    ns = kube_emulator.namespace("issuer")
    token = _token(kube_emulator, ns)
    status, _, document = _get(kube_emulator, "/.well-known/openid-configuration", token)
    assert status == 200 and document["issuer"] == ISSUER
    host, port = kube_emulator.url.removeprefix("http://").rsplit(":", 1)
    assert document["jwks_uri"] == f"https://{host}:{port}/openid/v1/jwks"
    assert _get(kube_emulator, "/openid/v1/jwks/", token)[0] == 200


def test_a_pod_bound_token_names_its_pod_and_dies_with_it(kube_emulator: EmulatorHandle) -> None:
    ns = kube_emulator.namespace("bound")
    kube_emulator.kubectl("create", "serviceaccount", "bot", "-n", ns)
    pod = kube_emulator.kubectl("run", "holder", "--image=busybox", "-n", ns, "-o", "json")
    assert pod.returncode == 0, pod.stderr
    uid = json.loads(pod.stdout)["metadata"]["uid"]
    bound = ("--bound-object-kind", "Pod", "--bound-object-name", "holder")
    done = kube_emulator.kubectl("create", "token", "bot", "-n", ns, *bound,
                                 "--bound-object-uid", uid)  # fmt: skip
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["kubernetes.io"]["pod"] == {"name": "holder", "uid": uid}
    assert _get(kube_emulator, "/openid/v1/jwks", token)[0] == 200
    wrong = kube_emulator.kubectl("create", "token", "bot", "-n", ns, *bound,
                                  "--bound-object-uid", "not-its-uid")  # fmt: skip
    assert wrong.returncode != 0 and "does not match the UID in record" in wrong.stderr
    kube_emulator.kubectl("delete", "pod", "holder", "-n", ns, "--grace-period=0", "--force")
    try:
        _get(kube_emulator, "/openid/v1/jwks", token)
        raise AssertionError("a token bound to a deleted pod still authenticated")
    except urllib.error.HTTPError as exc:
        exc.close()
        assert exc.code == 401
