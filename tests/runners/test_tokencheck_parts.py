"""The token verifier's parts in-process: fetching keys, choosing them, deciding on tokens.

Real: PyJWT and `cryptography` signing and checking (RS256, PS256, ES384, EdDSA), HTTPS
servers on 127.0.0.1 with a certificate made by the `openssl` CLI (http_stub.py) standing in
for the in-cluster API server. Faked: the environment (KUBERNETES_SERVICE_HOST/PORT), the
service-account directory (a CA file and a token file written here), and the clocks of the
key set and the accepted-token cache (plain functions the tests move).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from http_stub import make_certificate, serve

from runners.tokencheck.config import OidcConfig
from runners.tokencheck.fetch import MAX_BYTES, Fetcher, FetchError
from runners.tokencheck.keys import KeySet, usable_keys
from runners.tokencheck.verify import Verifier
from tests.runners.test_tokencheck import Ago, at_run_time

ISSUER = "https://issuer.example"


def _jwk(key: Any, kind: str, kid: str | None, **extra: Any) -> dict[str, Any]:
    """The public JWK of `key`, written by PyJWT's algorithm `kind`, plus `extra` members."""
    jwk = json.loads(jwt.get_algorithm_by_name(kind).to_jwk(key.public_key()))
    return {**jwk, **({"kid": kid} if kid else {}), **extra}


def _token(key: Any, alg: str, kid: str | None, **claims: Any) -> str:
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": "a", "iat": now, "exp": now + 600, **claims}
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid} if kid else {})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _verifier(*jwks: dict[str, Any], clock: Clock | None = None) -> Verifier:
    keys = KeySet(lambda: {"keys": list(jwks)})
    keys.refresh()
    config = OidcConfig.model_validate_json(json.dumps({"issuer": ISSUER, "audiences": ["a"]}))
    return Verifier(config, keys, clock=clock or time.time)


# -- fetching ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


def _account_dir(folder: Path, ca: Path, token: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "ca.crt").write_bytes(ca.read_bytes())
    (folder / "token").write_text(token + "\n")
    return folder


def test_in_cluster_names_go_to_the_service_host_with_the_pods_credentials(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    seen: list[tuple[str, str]] = []

    def handler(method: str, path: str, query: Any, body: Any, headers: dict[str, str]) -> Any:
        seen.append((path, headers.get("Authorization", "")))
        return 200, {}, {"keys": []}

    accounts = _account_dir(tmp_path / "sa", certificate[0], "first")
    with serve(handler, tls=certificate) as url:
        port = url.rsplit(":", 1)[1]
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
        fetcher = Fetcher(service_account_dir=accounts, environ=env)
        assert fetcher.get_json("https://kubernetes.default.svc/openid/v1/jwks") == {"keys": []}
        (accounts / "token").write_text("rotated")  # the kubelet rotates it: read every time
        fetcher.get_json("https://kubernetes/openid/v1/jwks?x=1")
    assert seen == [("/openid/v1/jwks", "Bearer first"), ("/openid/v1/jwks", "Bearer rotated")]


def test_in_cluster_fetch_checks_the_pods_ca(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    other_ca, _ = make_certificate(tmp_path)
    accounts = _account_dir(tmp_path / "sa", other_ca, "t")
    with serve(lambda *_: (200, {}, {}), tls=certificate) as url:
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": url.rsplit(":", 1)[1],
        }
        fetcher = Fetcher(service_account_dir=accounts, environ=env)
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED"):
            fetcher.get_json("https://kubernetes.default.svc.cluster.local/openid/v1/jwks")


def test_other_hosts_get_no_credentials_and_the_system_cas(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """A self-signed server is refused: the pod's CA is only for the API server."""
    accounts = _account_dir(tmp_path / "sa", certificate[0], "secret")
    with serve(lambda *_: (200, {}, {}), tls=certificate) as url:
        fetcher = Fetcher(service_account_dir=accounts, environ={})
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED"):
            fetcher.get_json(f"{url}/jwks")


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ((302, {"Location": "http://127.0.0.1:1/"}, None), "answered HTTP 302"),
        ((200, {}, "x" * MAX_BYTES), "more than 1 MiB"),
        ((200, {}, ["a", "list"]), "not answer a JSON object"),
    ],
)
def test_refuses_redirects_big_and_odd_answers(reply: Any, words: str) -> None:
    with serve(lambda *_: reply) as url, pytest.raises(FetchError, match=words):
        Fetcher(environ={}).get_json(f"{url}/jwks")


@pytest.mark.parametrize(
    ("url", "env", "words"),
    [
        ("http://issuer.example/jwks", {}, "must use https"),
        ("https://kubernetes.default.svc/openid/v1/jwks", {}, "KUBERNETES_SERVICE_HOST is not set"),
    ],
)
def test_refuses_urls_it_may_not_fetch(url: str, env: dict[str, str], words: str) -> None:
    with pytest.raises(FetchError, match=words):
        Fetcher(service_account_dir=Path("/nonexistent"), environ=env).get_json(url)


# -- choosing keys ----------------------------------------------------------------------------


def test_keeps_only_asymmetric_signature_keys() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
                     _jwk(key, "RS256", "enc", use="enc"), _jwk(key, "RS256", "sig")]}  # fmt: skip
    assert [k.kid for k in usable_keys(jwks)] == ["sig"]
    with pytest.raises(FetchError, match="no usable signature key"):
        usable_keys({"keys": jwks["keys"][:2]})


def test_an_unknown_kid_refetches_at_most_once_per_10_seconds() -> None:
    clock, loads = Clock(), []
    keys = KeySet(lambda: loads.append(1) or {"keys": []}, clock=clock)
    keys.refresh()
    assert keys.find("nope") is None and keys.find("nope") is None
    assert len(loads) == 2  # the start, one on demand
    clock.now += 10
    keys.find("nope")
    assert len(loads) == 3
    assert keys.last_error == "the JWKS holds no usable signature key"


def test_a_failed_refresh_keeps_the_keys_it_had() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    answers: list[Any] = [{"keys": [_jwk(key, "RS256", "k")]}, {"keys": "broken"}]
    keys = KeySet(lambda: answers.pop(0))
    keys.refresh()
    keys.refresh()
    assert keys.count == 1 and keys.last_error == "the JWKS has no 'keys' list"
    assert keys.next_refresh_in() <= 10


# -- deciding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "alg"),
    [
        (rsa.generate_private_key(public_exponent=65537, key_size=2048), "PS256"),
        (ec.generate_private_key(ec.SECP384R1()), "ES384"),
        (ed25519.Ed25519PrivateKey.generate(), "EdDSA"),
    ],
)
def test_accepts_each_asymmetric_key_type(key: Any, alg: str) -> None:
    verifier = _verifier(_jwk(key, "RS256" if alg == "PS256" else alg, "k", alg=alg))
    assert verifier.check(_token(key, alg, "k")) is None


def test_a_token_without_kid_needs_a_single_key_set() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = _token(key, "RS256", None)
    assert _verifier(_jwk(key, "RS256", "k")).check(token) is None
    two = _verifier(_jwk(key, "RS256", "k"), _jwk(other, "RS256", "o"))
    assert two.check(token) == "unknown signing key"


def test_the_jwk_alg_binds_the_token_alg() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    verifier = _verifier(_jwk(key, "RS256", "k", alg="RS256"))
    assert verifier.check(_token(key, "PS256", "k")) == "algorithm does not fit the signing key"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": Ago(10)}, None),  # within the 30 s leeway
        ({"iat": Ago(-300)}, "token not yet valid"),
        ({"aud": None}, "token has no aud claim"),
        ({"exp": "soon"}, "malformed token"),
    ],
)
def test_registered_claims(claims: dict[str, Any], reason: str | None) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = _token(key, "RS256", "k", **at_run_time(claims))
    if claims.get("aud", "") is None:
        payload = jwt.decode(token, options={"verify_signature": False})
        del payload["aud"]
        token = jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k"})
    assert _verifier(_jwk(key, "RS256", "k")).check(token) == reason


def test_an_accepted_token_is_remembered_for_5_minutes_at_most() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    published = {"keys": [_jwk(key, "RS256", "k")]}
    keys = KeySet(lambda: published)
    keys.refresh()
    clock = Clock()
    clock.now = time.time()
    config = OidcConfig.model_validate_json(json.dumps({"issuer": ISSUER, "audiences": ["a"]}))
    verifier = Verifier(config, keys, clock=clock)
    token = _token(key, "RS256", "k")
    assert verifier.check(token) is None
    published["keys"] = [_jwk(rotated, "RS256", "new")]
    keys.refresh()  # the key is gone, the token is still in the cache
    assert verifier.check(token) is None
    clock.now += 299
    assert verifier.check(token) is None
    clock.now += 2  # the token's exp is 10 minutes away, the cache lets go after 5
    assert verifier.check(token) == "unknown signing key"
