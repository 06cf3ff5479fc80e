"""The token verifier (runners/tokencheck) against an issuer made here: what it lets through.

Real: the verifier as a subprocess (`python -m runners.tokencheck`) on a loopback port,
asked over HTTP as nginx's auth_request asks it; PyJWT and `cryptography` making and
checking real RS256/ES256 signatures; an issuer's discovery document and JWKS served by an
HTTP server in this process on 127.0.0.1 (http: the verifier allows it for loopback only).
Faked: the issuer itself (keys made here), and the clock never moves: expired and
not-yet-valid tokens are made with past and future times.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib
import json
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from e2e.tokencheck import VerifierProcess, free_port

AUDIENCE = "model-a"
CLAIMS = {"sub": ["alice", "bob"], "groups": ["ml"]}
UNAVAILABLE = "the issuer's signing keys are unavailable: "


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """An OpenID issuer on 127.0.0.1: discovery, a JWKS, and tokens signed with its keys."""

    def __init__(self, port: int = 0, *, serve: bool = True) -> None:
        self.keys: dict[str, tuple[Any, str]] = {
            "rsa-1": (_rsa(), "RS256"),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        }
        self.hits: dict[str, int] = {}
        self.discovered_issuer: str | None = None  # what discovery names; None: the truth
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: ThreadingHTTPServer | None = None
        if serve:
            self.serve()

    def serve(self) -> None:
        """Start answering on the issuer's port."""
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                issuer.hits[self.path] = issuer.hits.get(self.path, 0) + 1
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.discovered_issuer or issuer.url,
                            "jwks_uri": f"{issuer.url}/jwks"}  # fmt: skip
                elif self.path == "/jwks":
                    body = issuer.jwks()
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, (key, alg) in self.keys.items():
            jwk = json.loads(jwt.get_algorithm_by_name(alg).to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": keys}

    def token(self, kid: str = "rsa-1", *, key: Any = None, header: dict[str, Any] | None = None,
              **claims: Any) -> str:  # fmt: skip
        """A token signed with the key `kid` (or `key`), valid unless `claims` say otherwise."""
        own, alg = self.keys.get(kid, (None, "RS256"))
        now = int(time.time())
        payload = {"iss": self.url, "aud": AUDIENCE, "sub": "alice", "groups": "ml",
                   "iat": now, "exp": now + 600, **claims}  # fmt: skip
        payload = {name: value for name, value in payload.items() if value is not None}
        headers = {"kid": kid, **(header or {})}
        return jwt.encode(payload, key or own, algorithm=alg, headers=headers)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@dataclass(frozen=True)
class Ago:
    """A time `seconds` before the test runs (negative: after), in a parametrize table: a
    time computed when the table is made would be stale by the time a long session runs it."""

    seconds: int


def at_run_time(claims: dict[str, Any]) -> dict[str, Any]:
    """`claims` with each Ago made a Unix time now."""
    now = int(time.time())
    return {k: now - v.seconds if isinstance(v, Ago) else v for k, v in claims.items()}


def config(issuer_url: str, **changes: Any) -> dict[str, Any]:
    return {"issuer": issuer_url, "audiences": [AUDIENCE], "claims": CLAIMS, "jwksUri": None,
            **changes}  # fmt: skip


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    yield made
    made.stop()


@pytest.fixture(scope="module")
def verifier(issuer: Issuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VerifierProcess]:
    """One verifier that finds the issuer's keys through discovery."""
    process = VerifierProcess.start(config(issuer.url), tmp_path_factory.mktemp("verifier"))
    yield process
    process.stop()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    """Start verifiers of the test's own; stopped afterwards."""
    started: list[VerifierProcess] = []

    def _start(cfg: dict[str, Any]) -> VerifierProcess:
        started.append(VerifierProcess.start(cfg, tmp_path / str(len(started))))
        return started[-1]

    yield _start
    for process in started:
        process.stop()


def test_accepts_valid_rsa_and_ec_tokens(verifier: VerifierProcess, issuer: Issuer) -> None:
    assert verifier.check(issuer.token("rsa-1")) == (204, "")
    assert verifier.check(issuer.token("ec-1")) == (204, "")
    assert verifier.health() == {"keys": 2, "lastError": None}


def test_accepts_any_method_and_scheme_case(verifier: VerifierProcess, issuer: Issuer) -> None:
    token = issuer.token()
    assert verifier.check(token, method="POST") == (204, "")
    sent = {"Authorization": f"Bearer {token}", "Content-Length": "4"}
    assert verifier.request("PUT", "/check", sent, b"body")[0] == 204
    assert verifier.check(token, method="HEAD") == (204, "")
    assert verifier.check(None, headers={"Authorization": f"bearer {token}"}) == (204, "")


def test_refuses_with_the_reason_in_both_headers(verifier: VerifierProcess, issuer: Issuer) -> None:
    status, headers, _ = verifier.request(
        "GET", "/check", {"Authorization": f"Bearer {issuer.token(aud='other')}"}
    )
    assert status == 401
    assert headers["X-Longrun-Auth-Error"] == "wrong audience"
    assert headers["WWW-Authenticate"] == (
        'Bearer error="invalid_token", error_description="wrong audience"'
    )


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": Ago(120)}, "token expired"),
        ({"nbf": Ago(-300)}, "token not yet valid"),
        ({"aud": "other"}, "wrong audience"),
        ({"aud": ["other", "more"]}, "wrong audience"),
        ({"iss": "http://127.0.0.1:1"}, "wrong issuer"),
        ({"exp": None}, "token has no exp claim"),
        ({"sub": "mallory"}, "claim sub not allowed"),
        ({"groups": None}, "claim groups missing"),
        ({"groups": ["other", "more"]}, "claim groups not allowed"),
        ({"groups": 7}, "claim groups not allowed"),
    ],
)
def test_refuses_a_token_whose_claims_do_not_fit(
    verifier: VerifierProcess, issuer: Issuer, claims: dict[str, Any], reason: str
) -> None:
    assert verifier.check(issuer.token(**at_run_time(claims))) == (401, reason)


def test_accepts_list_claims_holding_an_allowed_value(
    verifier: VerifierProcess, issuer: Issuer
) -> None:
    token = issuer.token(aud=["other", AUDIENCE], groups=["other", "ml"])
    assert verifier.check(token) == (204, "")


def test_refuses_a_signature_by_another_key_with_the_same_kid(
    verifier: VerifierProcess, issuer: Issuer
) -> None:
    assert verifier.check(issuer.token("rsa-1", key=_rsa())) == (401, "bad signature")


def test_refuses_an_unsigned_token(verifier: VerifierProcess, issuer: Issuer) -> None:
    signed = jwt.decode(issuer.token(), options={"verify_signature": False})
    parts = [{"alg": "none", "typ": "JWT", "kid": "rsa-1"}, signed]
    token = ".".join(_b64(json.dumps(p).encode()) for p in parts) + "."
    assert verifier.check(token) == (401, "algorithm none is not accepted")


def test_refuses_hs256_keyed_with_the_public_key(verifier: VerifierProcess, issuer: Issuer) -> None:
    """The algorithm-confusion forgery: the issuer's public key PEM as an HMAC secret."""
    public = issuer.keys["rsa-1"][0].public_key()
    secret = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    claims = jwt.decode(issuer.token(), options={"verify_signature": False})
    header = {"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}
    signing = ".".join(_b64(json.dumps(p).encode()) for p in (header, claims))
    mac = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    assert verifier.check(f"{signing}.{_b64(mac)}") == (401, "algorithm HS256 is not accepted")


def test_refuses_an_algorithm_that_does_not_fit_the_key(
    verifier: VerifierProcess, issuer: Issuer
) -> None:
    ec_key = issuer.keys["ec-1"][0]
    token = jwt.encode({"iss": issuer.url}, ec_key, algorithm="ES256", headers={"kid": "rsa-1"})
    assert verifier.check(token) == (401, "algorithm does not fit the signing key")


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "missing bearer token"),
        ("Bearer ", "missing bearer token"),
        ("Basic dXNlcjpwYXNz", "missing bearer token"),
        ("Bearer not-a-jwt", "malformed token"),
    ],
)
def test_refuses_requests_without_a_usable_token(
    verifier: VerifierProcess, authorization: str | None, reason: str
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    assert verifier.check(None, headers=headers) == (401, reason)


def test_lets_through_what_nginx_matched_as_an_api_key(verifier: VerifierProcess) -> None:
    assert verifier.check(None, headers={"X-Longrun-Key-Ok": "1"}) == (204, "")
    headers = {"X-Longrun-Key-Ok": "1", "Authorization": "Bearer lrk_static"}
    assert verifier.check(None, headers=headers) == (204, "")
    assert verifier.check(None, headers={"X-Longrun-Key-Ok": "0"}) == (401, "missing bearer token")


def test_refreshes_once_for_a_new_kid_and_not_for_a_flood(start: Any, tmp_path: Path) -> None:
    """Key rotation: the new key's tokens pass at once; made-up kids fetch nothing more."""
    issuer = Issuer()
    try:
        process = start(config(issuer.url, jwksUri=f"{issuer.url}/jwks"))
        assert issuer.hits == {"/jwks": 1}
        issuer.keys["rsa-2"] = (_rsa(), "RS256")
        assert process.check(issuer.token("rsa-2")) == (204, "")
        assert issuer.hits == {"/jwks": 2}
        for _ in range(30):
            token = issuer.token(f"made-up-{uuid.uuid4().hex}", key=issuer.keys["rsa-1"][0])
            assert process.check(token) == (401, "unknown signing key")
        assert issuer.hits == {"/jwks": 2}  # at most one on-demand fetch per 10 s
    finally:
        issuer.stop()


def test_starts_without_the_issuer_and_passes_tokens_once_it_is_up(start: Any) -> None:
    issuer = Issuer(serve=False)
    try:
        process = start(config(issuer.url))
        health = process.health()
        assert health["keys"] == 0 and "127.0.0.1" in health["lastError"]
        token = issuer.token()
        status, reason = process.check(token)
        assert status == 401 and reason.startswith(UNAVAILABLE), reason
        issuer.serve()
        deadline = time.monotonic() + 30
        while process.check(token)[0] != 204:  # the retry comes within 10 s
            assert time.monotonic() < deadline, process.health()
            time.sleep(0.5)
        assert process.health() == {"keys": 2, "lastError": None}
    finally:
        issuer.stop()


def test_refuses_keys_of_a_discovery_document_naming_another_issuer(start: Any) -> None:
    issuer = Issuer()
    issuer.discovered_issuer = f"{issuer.url}/someone-else"
    try:
        process = start(config(issuer.url))
        status, reason = process.check(issuer.token())
        assert status == 401
        assert reason.startswith(UNAVAILABLE)
        assert "names issuer" in reason and "someone-else" in reason
        assert "someone-else" in process.health()["lastError"]
    finally:
        issuer.stop()


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"issuer": "https://x", "audiences": ["a"], "jwksUri": None, "audience": "a"},
         "audience: Extra inputs are not permitted"),
        ({"issuer": "http://example.com", "audiences": ["a"]}, "must use https"),
        ({"issuer": "https://x", "audiences": []}, "audiences"),
        ({"issuer": "https://x", "audiences": "a"}, "audiences"),
        ({"issuer": "https://x", "audiences": ["a"], "claims": {"sub": []}}, "claim 'sub'"),
        ("not json", "Invalid JSON"),
    ],
)  # fmt: skip
def test_refuses_a_bad_config_with_one_line_and_status_2(
    tmp_path: Path, document: Any, words: str
) -> None:
    path = tmp_path / "oidc.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    done = subprocess.run(
        [sys.executable, "-m", "runners.tokencheck", "--config", str(path), "--listen",
         f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("longrun-token-check: bad config: ")
    assert words in lines[0]


def test_the_console_script_is_the_module_entry_point() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    target = pyproject["project"]["scripts"]["longrun-token-check"]
    module, function = target.split(":")
    assert target == "runners.tokencheck:console"
    assert callable(getattr(importlib.import_module(module), function))


def test_an_issuer_with_a_private_ca_needs_its_ca_file(tmp_path: Path) -> None:
    from e2e.peers.stores import serve_files, tls_files

    issuer = Issuer(serve=False)
    tls = tls_files(tmp_path / "tls")
    jwks = json.dumps(issuer.jwks()).encode()
    with serve_files({"/jwks": jwks}, tls=tls) as base:
        cfg = config(issuer.url, jwksUri=f"{base}/jwks")
        untrusted = VerifierProcess.start(cfg, tmp_path / "untrusted")
        try:
            status, reason = untrusted.check(issuer.token())
            assert status == 401 and reason.startswith(UNAVAILABLE)
            assert "CERTIFICATE_VERIFY_FAILED" in reason
        finally:
            untrusted.stop()
        trusted = VerifierProcess.start(cfg, tmp_path / "trusted", ca_file=tls.ca_bundle)
        try:
            assert trusted.check(issuer.token()) == (204, "")
        finally:
            trusted.stop()
