"""Deciding whether a bearer token is a valid token of the configured issuer.

PyJWT checks the signature and the registered claims; this module decides which key and
which algorithm it may use, because that is where JWT verifiers get attacked:

- `alg: none` (an unsigned token) and HMAC algorithms are refused before any key is looked
  at. Accepting HS256 would let anyone sign with the issuer's *public* key as the HMAC
  secret and pass (algorithm confusion); only RS*, PS*, ES* and EdDSA are accepted.
- The algorithm must fit the key's type (RSA: RS*/PS*; EC: the ES* of its curve; OKP:
  EdDSA) and the key's own `alg` when the JWK names one; PyJWT is handed that one
  algorithm, so the token cannot pick a weaker one.
- The key is the JWKS key with the token's `kid`; a token without a kid is checked against
  the only key when the set holds one key. An unknown kid refreshes the set at most once
  per 10 s (keys.py), so made-up kids cannot flood the issuer.

Registered claims: `exp` required and checked, `nbf` and `iat` checked when present, 30 s
leeway for clock skew; `iss` equal to the issuer; `aud` (a string or a list) must share a
value with the configured audiences. Configured claims: the token's top-level claim, a
string or a list of strings, must hold one of the allowed values; a missing claim fails.

Reasons are short fixed phrases, safe to show a client: they never contain the token, and
nothing the token says is echoed except through a fixed list (the names of algorithms).

Accepted tokens are remembered by their SHA-256 (at most 10,000) until their `exp`, but no
longer than CACHE_SECONDS (the key refresh period), so a client that sends one token with
every request costs one hash per request, and a key the issuer withdraws stops vouching for
the tokens it signed within minutes rather than at their expiry.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt

from runners.tokencheck.config import OidcConfig
from runners.tokencheck.keys import KeySet

LEEWAY_SECONDS = 30
CACHE_SIZE = 10_000
CACHE_SECONDS = 300.0
ACCEPTED = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
NAMED_REFUSED = frozenset({"HS256", "HS384", "HS512"})  # refused, and named when refused
_REASONS: list[tuple[type[Exception], str]] = [  # most specific first (they subclass)
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.InvalidAlgorithmError, "algorithm does not fit the signing key"),
    (jwt.DecodeError, "malformed token"),
]


class Verifier:
    """`check(token)`: None when the token is valid, else the reason it is not."""

    def __init__(
        self, config: OidcConfig, keys: KeySet, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.keys = keys
        self._clock = clock
        self._accepted: dict[str, float] = {}  # sha256 of the token -> remembered until
        self._lock = threading.Lock()

    def check(self, token: str) -> str | None:
        """The reason `token` is refused, or None when it is accepted."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            expires = self._accepted.get(digest)
        if expires is not None and self._clock() < expires:
            return None
        claims, refused = self._decode(token)
        if claims is None:
            return refused
        reason = self._claims_reason(claims)
        if reason is None:
            self._remember(digest, min(float(claims["exp"]), self._clock() + CACHE_SECONDS))
        return reason

    def _decode(self, token: str) -> tuple[dict[str, Any] | None, str]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return None, "malformed token"
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in ACCEPTED:
            return None, _algorithm_refused(alg)
        if kid is not None and not isinstance(kid, str):
            return None, "malformed token"
        key = self.keys.find(kid)
        if key is None:
            if self.keys.count == 0:
                return None, f"the issuer's signing keys are unavailable: {self.keys.last_error}"
            return None, "unknown signing key"
        if alg not in key.algorithms:
            return None, "algorithm does not fit the signing key"
        return self._decode_with(token, key.key, alg)

    def _decode_with(self, token: str, key: Any, alg: str) -> tuple[dict[str, Any] | None, str]:
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=list(self.config.audiences),
                issuer=self.config.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.MissingRequiredClaimError as exc:
            return None, f"token has no {exc.claim} claim"
        except jwt.InvalidTokenError as exc:
            return None, next((r for kind, r in _REASONS if isinstance(exc, kind)), "invalid token")
        if claims.get("iss") != self.config.issuer:  # exact, whatever PyJWT's rule
            return None, "wrong issuer"
        return claims, ""

    def _claims_reason(self, claims: dict[str, Any]) -> str | None:
        for name, allowed in self.config.claims.items():
            if name not in claims:
                return f"claim {name} missing"
            value = claims[name]
            values = value if isinstance(value, list) else [value]
            if not any(isinstance(v, str) and v in allowed for v in values):
                return f"claim {name} not allowed"
        return None

    def _remember(self, digest: str, expires: float) -> None:
        with self._lock:
            if len(self._accepted) >= CACHE_SIZE:
                now = self._clock()
                self._accepted = {d: e for d, e in self._accepted.items() if e > now}
            while len(self._accepted) >= CACHE_SIZE:  # all still valid: drop the oldest
                del self._accepted[next(iter(self._accepted))]
            self._accepted[digest] = expires


def _algorithm_refused(alg: object) -> str:
    if isinstance(alg, str) and alg.lower() == "none":
        return "algorithm none is not accepted"
    if alg in NAMED_REFUSED:
        return f"algorithm {alg} is not accepted"
    return "algorithm not accepted"
