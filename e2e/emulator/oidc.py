"""ServiceAccount tokens signed for real, and the two documents that let others check them.

kube-apiserver signs ServiceAccount tokens with RS256 (`--service-account-signing-key-file`)
and publishes the public half as an OpenID issuer would: `GET
/.well-known/openid-configuration` and `GET /openid/v1/jwks` (ServiceAccountIssuerDiscovery;
the bootstrap role `system:service-account-issuer-discovery` lets every ServiceAccount read
them). The emulator does the same, so a verifier of JWTs (runners/tokencheck) can be tested
against either backend: one RSA key per emulator, made when first needed (tens of
milliseconds, which most emulators never spend), and kube-apiserver's key id, the SHA-256 of
the public key's DER form, base64url (as e2e/tokens.py computes it for the real plane).

The signature is for outside verifiers only: the emulator itself still accepts exactly the
tokens it issued (authn.py), by remembering them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

Obj = dict[str, Any]
ISSUER = "https://kubernetes.default.svc.cluster.local"
DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
JWKS_CONTENT_TYPE = "application/jwk-set+json"
DISCOVERY_CONTENT_TYPE = "application/json"


class Signer:
    """The emulator's ServiceAccount signing key (made on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: rsa.RSAPrivateKey | None = None
        self._kid = ""

    def _private(self) -> rsa.RSAPrivateKey:
        with self._lock:
            if self._key is None:
                self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                der = self._key.public_key().public_bytes(
                    serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
                )
                self._kid = _b64(hashlib.sha256(der).digest())
            return self._key

    @property
    def kid(self) -> str:
        """kube-apiserver's key id of the signing key."""
        self._private()
        return self._kid

    def sign(self, claims: Obj) -> str:
        """A compact RS256 JWS of `claims`, with the key's kid in its header."""
        header = {"alg": "RS256", "kid": self.kid}
        signing = ".".join(
            _b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        signature = self._private().sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"

    def jwks(self) -> Obj:
        """GET /openid/v1/jwks: the public key, as kube-apiserver lists it."""
        numbers = self._private().public_key().public_numbers()
        key = {"use": "sig", "kty": "RSA", "kid": self.kid, "alg": "RS256",
               "n": _b64(_unsigned(numbers.n)), "e": _b64(_unsigned(numbers.e))}  # fmt: skip
        return {"keys": [key]}


def discovery(address: str) -> Obj:
    """GET /.well-known/openid-configuration for an API server reached at `address`
    (host:port): kube-apiserver's default jwks_uri is https on its external address."""
    return {
        "issuer": ISSUER,
        "jwks_uri": f"https://{address}{JWKS_PATH}",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }


def acceptable(accept: str | None, mime: str) -> bool:
    """Whether an Accept header allows `mime`: kube-apiserver (go-restful) answers 406
    otherwise, e.g. to `Accept: application/json` for the JWKS."""
    if not accept:
        return True
    wanted = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(wanted & {mime, "*/*", mime.split("/")[0] + "/*"})


def not_acceptable(mime: str) -> str:
    """The message of kube-apiserver's 406 Status."""
    return f"406: Not Acceptable\n\nAvailable representations: {mime}"


def _unsigned(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
