"""Authentication: ServiceAccount tokens from the TokenRequest API, static tokens, the admin.

RBAC only means something once a request carries an identity. A real cluster gives a
ServiceAccount a signed JWT (`kubectl create token SA`, i.e. POST
serviceaccounts/<name>/token) and checks it on every request; the emulator issues a
JWT signed with its own RS256 key (oidc.py: verifiers outside can check it against the
emulator's /openid/v1/jwks), remembers it, and accepts exactly the tokens it issued while
their ServiceAccount (same uid) exists and they have not expired on the emulator clock.

A request without credentials is the cluster admin (`system:masters`), as before RBAC
existed here, so every existing test and a kubeconfig without a user keep working. A real
server answers such a request as `system:anonymous` (a listed divergence). A token the
emulator does not know answers 401, as on a real server.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .clock import Clock, rfc3339
from .errors import ApiError, conflict, invalid, invalid_object, not_found
from .oidc import ISSUER, Signer
from .store import Store

Obj = dict[str, Any]
AUTHENTICATED = "system:authenticated"
MIN_EXPIRATION, DEFAULT_EXPIRATION = 600, 3600


@dataclass(frozen=True)
class Identity:
    """Who sends a request: user name and groups (client-go's user.Info)."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    @property
    def is_admin(self) -> bool:
        """system:masters is allowed everything, before RBAC is asked (as on a real server)."""
        return "system:masters" in self.groups


ADMIN = Identity("system:admin", ("system:masters", AUTHENTICATED))


def service_account_identity(namespace: str, name: str, uid: str = "") -> Identity:
    """The user a ServiceAccount token authenticates as."""
    return Identity(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        uid,
    )


@dataclass(frozen=True)
class _Issued:
    identity: Identity
    expires: datetime | None
    # The ServiceAccount the token is bound to ((namespace, name, uid)); None: static.
    account: tuple[str, str, str] | None = None
    pod: tuple[str, str] | None = None  # a pod-bound token's pod (name, uid), same namespace


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", reason="Unauthorized")


class Authenticator:
    """Bearer tokens -> identities; no Authorization header -> the admin."""

    def __init__(self, *, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, _Issued] = {}
        self.signer = Signer()

    def add_token(self, token: str, user: str, groups: tuple[str, ...] = ()) -> None:
        """A static token (kube-apiserver's --token-auth-file) for a user of the test's choice."""
        identity = Identity(user, (*groups, AUTHENTICATED))
        with self._lock:
            self._tokens[token] = _Issued(identity, None)

    def expired_token(self, namespace: str, name: str) -> str:
        """An issued token of the ServiceAccount whose lifetime (its signed `exp` too) ended a
        minute ago: what waiting out its expirationSeconds would give (a real server's minimum
        is 10 minutes; e2e/tokens.py, for tests of expired tokens)."""
        account = self.store.get("serviceaccounts", namespace, name)
        if account is None:
            raise not_found("serviceaccounts", "", name)
        uid = account["metadata"]["uid"]
        now = self.clock.now()
        expires = now - timedelta(seconds=60)
        issued_at = now - timedelta(hours=1)
        claims = _claims(namespace, name, uid, audiences=[ISSUER], now=issued_at, expires=expires)
        token = self.signer.sign(claims)
        issued = _Issued(
            service_account_identity(namespace, name, uid), expires, (namespace, name, uid)
        )
        with self._lock:
            self._tokens[token] = issued
        return token

    def authenticate(self, authorization: str | None) -> Identity:
        """The identity of a request's Authorization header; 401 for a token not issued here."""
        if not authorization:
            return ADMIN
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized()
        with self._lock:
            issued = self._tokens.get(token.strip())
        if issued is None or not self._valid(issued):
            raise unauthorized()
        return issued.identity

    def token_review(self, body: Any) -> Obj:
        """POST tokenreviews: who spec.token is (status.user), or why it is not accepted, in
        kube-apiserver's words."""
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        token = str(spec.get("token") or "").strip()
        with self._lock:
            issued = self._tokens.get(token) if token else None
        status: Obj = {"user": {}, "error": "invalid bearer token"}
        if issued is not None and self._valid(issued):
            identity = issued.identity
            user: Obj = {"username": identity.user, "groups": list(identity.groups)}
            user.update({"uid": identity.uid} if identity.uid else {})
            audiences = list(spec.get("audiences") or [ISSUER])
            status = {"authenticated": True, "user": user, "audiences": audiences}
        elif (
            issued is not None and issued.expires is not None and self.clock.now() >= issued.expires
        ):
            status["error"] = "[invalid bearer token, service account token has expired]"
        return {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def _valid(self, issued: _Issued) -> bool:
        if issued.expires is not None and self.clock.now() >= issued.expires:
            return False
        if issued.account is None:
            return True
        namespace, name, uid = issued.account
        account = self.store.get("serviceaccounts", namespace, name)
        if account is None or account["metadata"]["uid"] != uid:
            return False
        return issued.pod is None or self._pod_uid(namespace, issued.pod[0]) == issued.pod[1]

    def _pod_uid(self, namespace: str, name: str) -> str | None:
        pod = self.store.get("pods", namespace, name)
        return None if pod is None else str(pod["metadata"]["uid"])

    def _bound_pod(self, namespace: str, ref: Any) -> tuple[str, str] | None:
        """A TokenRequest's boundObjectRef to a Pod, checked as kube-apiserver checks it (the
        pod exists, with that uid when one is given); None for no reference."""
        if not isinstance(ref, dict) or not ref:
            return None
        if ref.get("kind") != "Pod":
            detail = "only Pod references are supported by this emulator"
            raise invalid_object(
                "TokenRequest", "authentication.k8s.io", "", [invalid("spec.boundObjectRef.kind",
                                                                      ref.get("kind"), detail)]
            )  # fmt: skip
        name = str(ref.get("name") or "")
        uid = self._pod_uid(namespace, name)
        if uid is None:
            raise not_found("pods", "", name)
        if ref.get("uid") and ref["uid"] != uid:
            raise conflict(
                "pods", "", name, f"the UID in the bound object reference ({ref['uid']}) does "
                "not match the UID in record. The object might have been deleted and then "
                "recreated",
            )  # fmt: skip
        return name, uid

    def token_request(self, namespace: str, name: str, body: Any) -> Obj:
        """POST serviceaccounts/<name>/token: a TokenRequest with status.token filled in."""
        account = self.store.get("serviceaccounts", namespace, name)
        if account is None:
            raise not_found("serviceaccounts", "", name)
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        seconds = int(spec.get("expirationSeconds") or DEFAULT_EXPIRATION)
        if seconds < MIN_EXPIRATION:
            detail = "may not specify a duration less than 10 minutes"
            raise invalid_object(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [invalid("spec.expirationSeconds", seconds, detail)],
            )
        audiences = list(spec.get("audiences") or [ISSUER])
        now = self.clock.now()
        expires = now + timedelta(seconds=seconds)
        uid = account["metadata"]["uid"]
        pod = self._bound_pod(namespace, spec.get("boundObjectRef"))
        claims = _claims(namespace, name, uid, audiences=audiences, now=now, expires=expires)
        if pod is not None:
            claims["kubernetes.io"]["pod"] = {"name": pod[0], "uid": pod[1]}
        token = self.signer.sign(claims)
        issued = _Issued(
            service_account_identity(namespace, name, uid), expires, (namespace, name, uid), pod
        )
        with self._lock:
            self._tokens[token] = issued
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {
                "audiences": audiences,
                "expirationSeconds": seconds,
                "boundObjectRef": spec.get("boundObjectRef"),
            },
            "status": {"token": token, "expirationTimestamp": rfc3339(expires)},
        }


def _claims(
    namespace: str, name: str, uid: str, *, audiences: list[str], now: datetime, expires: datetime
) -> Obj:
    """A ServiceAccount token's claims, as kube-apiserver writes them (before a bound pod's)."""
    return {
        "aud": audiences,
        "exp": int(expires.timestamp()),
        "iat": int(now.timestamp()),
        "iss": ISSUER,
        "jti": secrets.token_hex(16),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        "nbf": int(now.timestamp()),
        "sub": f"system:serviceaccount:{namespace}:{name}",
    }
