"""The auth sidecar with `auth.oidc`, as the controller renders it: the real nginx asks the real
token verifier about each request (auth_request), beside the API keys or instead of them.

Real: the rendered nginx.conf and oidc.json (`controller.core.serving`), nginx, the verifier
(`python -m runners.tokencheck`, a subprocess, e2e/tokencheck.py), a locally made issuer
(tests/runners/test_tokencheck.py: keys of its own, its discovery document and JWKS served over
HTTP on 127.0.0.1, which the verifier accepts on loopback only), PyJWT signing its tokens, a
stdlib HTTP server standing for the runtime.
Faked: nothing. Skips locally without nginx; fails in CI.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from controller.core.serving import auth, builders, names
from e2e.tokencheck import VerifierProcess
from local.podspec import local_path
from local.ports import free_port
from local.sidecars import local_nginx_conf
from tests.controller.unit.serving.objects import for_runtime, resolved
from tests.local.test_auth_sidecar import KEY, nginx, nginx_test, runtime, serving
from tests.runners.test_tokencheck import AUDIENCE, Issuer

pytestmark = pytest.mark.requires_service
__all__ = ["nginx"]  # the fixture, used by name
KID = "rsa-1"  # the key the test issuer signs with unless told otherwise


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    try:
        yield made
    finally:
        made.stop()


@contextmanager
def verifier(config: str, root: Path) -> Iterator[int]:
    """The verifier on a free loopback port, its oidc.json the rendered one."""
    process = VerifierProcess.start(json.loads(config), root / "token-check")
    try:
        yield process.port
    finally:
        process.stop()


def call(url: str, authorization: str | None) -> tuple[int, str, str]:
    """Status, body and WWW-Authenticate of a GET."""
    headers = {"Authorization": authorization} if authorization is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return int(r.status), r.read().decode(), ""
    except urllib.error.HTTPError as exc:
        with exc:
            challenges = exc.headers.get_all("WWW-Authenticate") or []
            assert len(challenges) <= 1, challenges
            return exc.code, exc.read().decode(), "".join(challenges)


@contextmanager
def sidecar(
    nginx: str,
    tmp: Path,
    issuer: Issuer,
    *,
    kind: str = "kserve",
    moves: dict[int, int] | None = None,
    **auth_spec: Any,
) -> Iterator[str]:
    """nginx and the verifier of a deployment of runtime `kind` with `auth` = auth_spec, in
    front of a runtime stand-in (and the ports in `moves`); yields the public base URL."""
    oidc = {"issuer": issuer.url.replace("http://", "https://"), "audiences": [AUDIENCE]}
    obj = for_runtime(kind, auth={**auth_spec, "oidc": {**oidc, **auth_spec.get("oidc", {})}})
    r = resolved(obj)
    data = builders.build_auth_config_map(r)["data"]
    # The contract takes https issuers only; the test's issuer speaks HTTP on loopback, which
    # the verifier accepts there (and only there).
    config = data[names.OIDC_CONFIG_KEY].replace(oidc["issuer"], issuer.url)
    keys = local_path(tmp, f"/etc/longrun/keys/{names.NGINX_KEYS_KEY}")
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_bytes(base64.b64decode(auth.secret_data((KEY,))[names.NGINX_KEYS_KEY]))
    with runtime() as upstream, verifier(config, tmp) as check_port:
        port = free_port()
        moved = {
            auth.PROXY_HTTP_PORT: port,
            r.plan.http_port or 0: upstream,
            auth.TOKEN_CHECK_PORT: check_port,
            **(moves or {}),
        }
        conf = tmp / "nginx.conf"
        conf.write_text(local_nginx_conf(data[names.NGINX_CONF_KEY], root=tmp, ports=moved))
        tested = nginx_test(nginx, conf)
        assert tested.returncode == 0, tested.stderr
        with serving(nginx, conf, port) as base:
            yield base


def test_a_valid_token_or_a_key_passes_and_the_runtime_sees_no_credential(
    nginx: str, tmp_path: Path, issuer: Issuer
) -> None:
    with sidecar(nginx, tmp_path, issuer) as base:
        assert call(f"{base}/v1/models/kserve:predict", f"Bearer {issuer.token()}")[0] == 200
        assert call(f"{base}/v1/models/kserve:predict", f"bearer {issuer.token()}")[0] == 200
        assert call(f"{base}/v1/models/kserve:predict", f"Bearer {KEY}")[0] == 200
        # the health path stays open for the kubelet's probes
        assert call(f"{base}/v1/models/kserve", None)[0] == 200


def test_bad_tokens_get_401_with_the_reason_and_a_bearer_challenge(
    nginx: str, tmp_path: Path, issuer: Issuer
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    public_pem = (
        issuer.keys[KID][0]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    unsigned = jwt.encode({"iss": issuer.url, "aud": AUDIENCE, "exp": now + 60}, None, "none")
    hmac = jwt.encode(
        {"iss": issuer.url, "aud": AUDIENCE, "exp": now + 60},
        base64.b64encode(public_pem).decode(),
        algorithm="HS256",
        headers={"kid": KID},
    )
    cases = {
        "expired": (issuer.token(exp=now - 120, iat=now - 600), "token expired"),
        "wrong audience": (issuer.token(aud="api://other"), "wrong audience"),
        "wrong issuer": (issuer.token(iss="https://evil.example.com"), "wrong issuer"),
        "wrong signature": (issuer.token(key=other), "bad signature"),
        "alg none": (unsigned, "algorithm none is not accepted"),
        "hmac with the public key": (hmac, ""),
        "garbage": ("not.a.token", "malformed token"),
        "missing": (None, "missing bearer token"),
        "a wrong key": (f"Bearer {KEY}x", ""),
    }
    with sidecar(nginx, tmp_path, issuer) as base:
        for name, (token, reason) in cases.items():
            header = token if token is None or token.startswith("Bearer ") else f"Bearer {token}"
            code, body, challenge = call(f"{base}/v1/models/kserve:predict", header)
            assert code == 401, name
            assert challenge.startswith("Bearer error="), name  # the verifier's, once
            assert json.loads(body)["error"], name
            if reason:
                assert json.loads(body) == {"error": reason}, name


def test_required_claims_pick_who_may_call(nginx: str, tmp_path: Path, issuer: Issuer) -> None:
    with sidecar(nginx, tmp_path, issuer, oidc={"claims": {"groups": ["ml"]}}) as base:
        url = f"{base}/v1/models/kserve:predict"
        assert call(url, f"Bearer {issuer.token(groups=['web', 'ml'])}")[0] == 200
        code, body, _ = call(url, f"Bearer {issuer.token(groups=['web'])}")
        assert (code, json.loads(body)) == (401, {"error": "claim groups not allowed"})
        assert call(url, f"Bearer {issuer.token(groups=None)}")[0] == 401  # no groups claim


def test_tokens_only_refuses_the_keys(nginx: str, tmp_path: Path, issuer: Issuer) -> None:
    with sidecar(nginx, tmp_path, issuer, apiKeys=False) as base:
        url = f"{base}/v1/models/kserve:predict"
        assert call(url, f"Bearer {KEY}")[0] == 401
        assert call(url, f"Bearer {issuer.token()}")[0] == 200


def test_a_client_cannot_say_its_key_was_valid_or_call_the_check_itself(
    nginx: str, tmp_path: Path, issuer: Issuer
) -> None:
    with sidecar(nginx, tmp_path, issuer) as base:
        forged = urllib.request.Request(
            f"{base}/v1/models/kserve:predict", headers={"X-Longrun-Key-Ok": "1"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(forged, timeout=10)
        refused.value.close()
        assert refused.value.code == 401
        assert call(f"{base}{auth.TOKEN_LOCATION}", None)[0] == 404  # internal only


def test_longrun_serve_runs_the_verifier_beside_nginx(
    nginx: str, tmp_path: Path, issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`longrun serve` of a KServe deployment with auth.oidc: keys and tokens both pass. The
    issuer's keys are on an HTTPS server with a private CA, trusted through SSL_CERT_FILE (the
    way docs/serving.md tells a local user; caConfigMapRef is the cluster's way)."""
    from e2e.peers.stores import serve_files, tls_files
    from tests.local.test_serving import (
        IRIS_ROWS,
        deployment_yaml,
        serving,
        status_of,
        write_iris_model,
    )

    write_iris_model(tmp_path / "claims" / "models" / "iris" / "model.joblib")
    tls = tls_files(tmp_path / "tls")
    jwks = json.dumps(issuer.jwks()).encode()
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_bundle))
    with serve_files({"/jwks": jwks}, tls=tls) as keys_at:
        yaml_text = deployment_yaml(
            "iris", "pvc://models/iris/model.joblib", "sklearn", "kserve: {protocol: v1}"
        )
        yaml_text += (
            "  auth:\n    oidc:\n      issuer: https://issuer.example.com\n"
            f"      audiences: [{AUDIENCE}]\n      jwksUri: {keys_at}/jwks\n"
        )
        (tmp_path / "iris.yaml").write_text(yaml_text)
        pvc = f"models={tmp_path / 'claims' / 'models'}"
        with serving(["-f", str(tmp_path / "iris.yaml"), "--pvc", pvc], tmp_path / "w") as state:
            url = f"{state['endpoint']}/v1/models/iris:predict"
            body = {"instances": [IRIS_ROWS[1]["f"]]}
            key = Path(state["apiKeyFile"]).read_text().strip()
            token = issuer.token(iss="https://issuer.example.com")
            assert status_of(url, body) == 401
            assert status_of(url, body, key) == 200
            assert status_of(url, body, token) == 200
            assert (
                status_of(url, body, issuer.token(iss="https://issuer.example.com", aud="x")) == 401
            )


@contextmanager
def grpc_echo() -> Iterator[int]:
    """A real gRPC server (grpcio, h2c) whose one method `/echo.Echo/Say` returns what it is
    sent and the Authorization metadata it saw (the sidecar must strip it)."""
    import grpc

    def say(request: bytes, context: Any) -> bytes:
        seen = dict(context.invocation_metadata()).get("authorization", "")
        return request + b"|" + seen.encode()

    handler = grpc.method_handlers_generic_handler(
        "echo.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None)


def test_grpc_callers_pass_with_a_key_or_a_token_and_get_unauthenticated_otherwise(
    nginx: str, tmp_path: Path, issuer: Issuer
) -> None:
    import grpc

    public = free_port()
    with grpc_echo() as upstream:
        moves = {auth.PROXY_GRPC_PORT: public, 8001: upstream}
        with (
            sidecar(nginx, tmp_path, issuer, kind="triton", moves=moves),
            grpc.insecure_channel(f"127.0.0.1:{public}") as channel,
        ):
            say = channel.unary_unary("/echo.Echo/Say")

            def call_with(authorization: str | None) -> Any:
                metadata = [("authorization", authorization)] if authorization else None
                return say(b"hi", metadata=metadata, timeout=10)

            assert call_with(f"Bearer {KEY}") == b"hi|"  # passed on, credential stripped
            assert call_with(f"Bearer {issuer.token()}") == b"hi|"
            for refused in (None, f"Bearer {issuer.token(aud='other')}", "Bearer lrk_x"):
                with pytest.raises(grpc.RpcError) as failed:
                    call_with(refused)
                assert failed.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused
