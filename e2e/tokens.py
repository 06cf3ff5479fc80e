"""Tokens for tests of who may call: a ServiceAccount's token, and one that has expired.

An expired token cannot be asked for (TokenRequest's minimum lifetime is 10 minutes), so it
is made: on a real control plane, a ServiceAccount JWT signed with the plane's own signing key
(`pki/sa.key`, the key kube-apiserver verifies ServiceAccount tokens with) whose `exp` has
passed, so the API server refuses it for that reason alone; on the emulator, which knows its
tokens by remembering them, a token it issues already expired, signed with its own key
(`Authenticator.expired_token`), so a JWT verifier refuses it for the same reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from e2e.backends import KubeHandle

ISSUER = "https://kubernetes.default.svc.cluster.local"


def service_account_token(handle: KubeHandle, namespace: str, account: str) -> str:
    """A fresh token of the ServiceAccount (`kubectl create token`)."""
    done = handle.kubectl("create", "token", account, "-n", namespace)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def expired_token(handle: KubeHandle, namespace: str, account: str) -> str:
    """A token of the ServiceAccount whose lifetime has passed (module docstring)."""
    if handle.backend == "emulator":
        authn = handle.emulator.security.authn  # type: ignore[attr-defined]
        return str(authn.expired_token(namespace, account))
    plane: Any = handle.plane  # type: ignore[attr-defined]
    key = serialization.load_pem_private_key((plane.pki_dir / "sa.key").read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey)  # e2e/real/certs.py: the ServiceAccount key is RSA
    uid = _account_uid(handle, namespace, account)
    now = int(time.time())
    claims = {
        "aud": [ISSUER],
        "exp": now - 60,
        "iat": now - 3600,
        "nbf": now - 3600,
        "iss": ISSUER,
        "jti": hashlib.sha256(str(now).encode()).hexdigest()[:32],
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": account, "uid": uid}},
        "sub": f"system:serviceaccount:{namespace}:{account}",
    }
    header = {"alg": "RS256", "kid": _key_id(key)}
    signing = ".".join(
        _b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing}.{_b64(signature)}"


def _account_uid(handle: KubeHandle, namespace: str, account: str) -> str:
    done = handle.kubectl("get", "serviceaccount", account, "-n", namespace, "-o", "json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["metadata"]["uid"])


def _key_id(key: Any) -> str:
    """kube-apiserver's key id: the SHA-256 of the public key's DER form, base64url."""
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _b64(hashlib.sha256(der).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
