"""The issuer's signing keys, cached and refreshed without letting tokens hammer the issuer.

Refreshes: at start (a failure does not stop the process: tokens are then refused as
"the issuer's signing keys are unavailable: <reason>"), then every 5 minutes, every 10
seconds while the last fetch failed, and at once when a token names a `kid` the set does
not hold (an issuer rotating its key signs with the new one before our next periodic
fetch). That last kind is what an attacker controls, since anyone can send tokens with
made-up kids: it happens at most once per 10 seconds, so a flood of them costs the issuer
one request per 10 s per pod.

Which keys are kept: only asymmetric signature keys (kty RSA, EC, OKP; `use` absent or
"sig"). An `oct` key would be an HMAC secret, and the verifier never accepts HMAC: a
published key used as an HMAC secret is the algorithm-confusion attack (verify.py). A key
that PyJWT cannot load is skipped rather than failing the whole set.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from runners.tokencheck.fetch import FetchError

PERIOD_SECONDS = 300.0
RETRY_SECONDS = 10.0
ON_DEMAND_SECONDS = 10.0
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
OKP_CURVES = frozenset({"Ed25519", "Ed448"})


@dataclass(frozen=True)
class SigningKey:
    """One public key of the issuer and the algorithms a token signed with it may name."""

    kid: str | None
    algorithms: frozenset[str]
    key: Any  # the `cryptography` public key PyJWT verifies with


def usable_keys(jwks: dict[str, Any]) -> tuple[SigningKey, ...]:
    """The signature keys of a JWK Set document (module docstring says which)."""
    entries = jwks.get("keys")
    if not isinstance(entries, list):
        raise FetchError("the JWKS has no 'keys' list")
    keys = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        algorithms = _algorithms(entry)
        if not algorithms:
            continue
        try:
            loaded = jwt.PyJWK(entry, algorithm=min(algorithms))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        kid = entry.get("kid")
        keys.append(SigningKey(kid if isinstance(kid, str) else None, algorithms, loaded.key))
    if not keys:
        raise FetchError("the JWKS holds no usable signature key")
    return tuple(keys)


def _algorithms(entry: dict[str, Any]) -> frozenset[str]:
    """The algorithms that fit the key's type (and its `alg`, when the JWK names one)."""
    kty = entry.get("kty")
    if kty == "RSA":
        fits = RSA_ALGORITHMS
    elif kty == "EC" and entry.get("crv") in EC_ALGORITHMS:
        fits = frozenset({EC_ALGORITHMS[entry["crv"]]})
    elif kty == "OKP" and entry.get("crv") in OKP_CURVES:
        fits = frozenset({"EdDSA"})
    else:
        return frozenset()
    named = entry.get("alg")
    return fits & {named} if isinstance(named, str) else fits


class KeySet:
    """The cached keys; `load` fetches a JWKS document (discovery included)."""

    def __init__(
        self, load: Callable[[], dict[str, Any]], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._load = load
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: tuple[SigningKey, ...] = ()
        self.last_error: str | None = "not fetched yet"
        self._fetched_at = float("-inf")
        self._on_demand_at = float("-inf")

    @property
    def count(self) -> int:
        return len(self._keys)

    def refresh(self) -> None:
        """Fetch the keys now; on failure keep the old ones and remember why."""
        with self._lock:
            self._fetched_at = self._clock()
            try:
                self._keys = usable_keys(self._load())
                self.last_error = None
            except FetchError as exc:
                self.last_error = str(exc)

    def find(self, kid: str | None) -> SigningKey | None:
        """The key a token names (by kid; without one: the only key, if there is one),
        refreshing at most once per ON_DEMAND_SECONDS when it is not known."""
        key = self._pick(kid)
        if key is None and self._may_fetch_on_demand():
            self.refresh()
            key = self._pick(kid)
        return key

    def _pick(self, kid: str | None) -> SigningKey | None:
        keys = self._keys
        if kid is None:
            return keys[0] if len(keys) == 1 else None
        return next((key for key in keys if key.kid == kid), None)

    def _may_fetch_on_demand(self) -> bool:
        with self._lock:
            now = self._clock()
            if now - self._on_demand_at < ON_DEMAND_SECONDS:
                return False
            self._on_demand_at = now
            return True

    def next_refresh_in(self) -> float:
        """Seconds until the periodic refresh is due (sooner while fetching fails)."""
        period = PERIOD_SECONDS if self.last_error is None else RETRY_SECONDS
        return max(0.0, self._fetched_at + period - self._clock())

    def run_refresher(self, stop: threading.Event) -> None:
        """Refresh on schedule until `stop` is set (the server's background thread)."""
        while not stop.wait(self.next_refresh_in()):
            self.refresh()
