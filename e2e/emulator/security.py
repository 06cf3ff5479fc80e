"""The emulator's front door: who is asking (authn), may they (RBAC), and admission.

The HTTP server asks this object three things per request, in kube-apiserver's order:
the identity behind the Authorization header, whether RBAC allows the request (as the
apiserver's RequestInfo describes it: verb, API group, resource/subresource, namespace,
name — also the name a list or watch selects with `fieldSelector=metadata.name=<n>`), and
it serves the requests that are not stored objects (TokenRequest, token and access reviews). Api
writes call `admit` after their own validation, as validating admission plugins run after
the object's validation: PodSecurity, and the immutable roleRef of bindings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import podsecurity, rbacpolicy
from .authn import AUTHENTICATED, Authenticator, Identity, service_account_identity
from .errors import FieldError, bad_request, invalid_object
from .options import Request
from .rbac import GROUP, Attributes, Authorizer, access_review, forbidden, rules_review
from .registry import ResourceType

if TYPE_CHECKING:
    from .api import Api
    from .server import Route

Obj = dict[str, Any]
REVIEWS = {"selfsubjectaccessreviews": "SelfSubjectAccessReview",
           "subjectaccessreviews": "SubjectAccessReview"}  # fmt: skip
SELF_REVIEWS = ("selfsubjectreviews", "selfsubjectrulesreviews")
TOKEN_REVIEWS = "tokenreviews"  # who a bearer token is (a webhook or the Batch API asks)


class Security:
    """Authentication, authorization and the validating admission plugins of one emulator."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.authn = Authenticator(store=api.store, clock=api.clock)
        self.authorizer = Authorizer(api.store)

    # -- per request -----------------------------------------------------------------------
    def identify(self, headers: Any) -> Identity:
        """The requester (Authorization), or whom it impersonates (Impersonate-User/-Group,
        as `kubectl --as/--as-group` sends) once RBAC allows it the `impersonate` verb."""
        requester = self.authn.authenticate(headers.get("Authorization"))
        user = headers.get("Impersonate-User")
        if not user and not headers.get("Impersonate-Group"):
            return requester  # the usual case: no header scan
        groups = [g for g in headers.get_all("Impersonate-Group") or [] if g]
        if not user:
            if groups:
                raise bad_request(f"requested {groups} without impersonating a user")
            return requester
        targets = [("users", "", user)] + [("groups", "", g) for g in groups]
        parts = user.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            targets[0] = ("serviceaccounts", parts[2], parts[3])
            account = service_account_identity(parts[2], parts[3])
            groups = groups or [g for g in account.groups if g != AUTHENTICATED]
        for resource, namespace, name in targets:
            attrs = Attributes(requester, "impersonate", namespace=namespace, resource=resource,
                               name=name)  # fmt: skip
            allowed, reason = self.authorizer.authorize(attrs)
            if not allowed:
                raise forbidden(attrs, reason)
        return Identity(user, (*groups, AUTHENTICATED))

    def check_path(self, user: Identity, method: str, path: str) -> None:
        """Authorize a non-resource request (discovery, /healthz, /openapi...)."""
        if user.is_admin:
            return
        attrs = Attributes(user, method.lower(), path=path or "/")
        allowed, reason = self.authorizer.authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)

    def check(self, user: Identity, verb: str, route: Route, query: dict[str, str]) -> None:
        """Authorize a resource request; 403 with the real server's message if refused."""
        if user.is_admin:
            return
        name = route.name or _selected_name(verb, query)
        rt = route.rt
        namespace = route.namespace
        if rt.plural == "namespaces" and not rt.group and route.name:
            namespace = route.name  # a namespace's own requests are "in" it (RequestInfo)
        attrs = Attributes(
            user,
            verb,
            namespace=namespace,
            group=rt.group,
            resource=rt.plural,
            subresource=route.subresource,
            name=name,
        )
        allowed, reason = self.authorizer.authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)

    def serves(self, route: Route, verb: str) -> bool:
        """Requests answered here rather than by the store (create-only virtual resources)."""
        if verb != "create":
            return False
        token = (route.rt.group, route.rt.plural, route.subresource) == (
            "",
            "serviceaccounts",
            "token",
        )
        return token or route.rt.plural in (*REVIEWS, *SELF_REVIEWS, TOKEN_REVIEWS)

    def serve(self, user: Identity, route: Route, body: Any) -> Obj:
        if route.rt.plural == "serviceaccounts":
            return self.authn.token_request(route.namespace, route.name, body)
        if route.rt.plural == TOKEN_REVIEWS:
            return self.authn.token_review(body)
        if route.rt.plural == "selfsubjectrulesreviews":  # kubectl auth can-i --list
            return rules_review(self.authorizer, user, body)
        if route.rt.plural == "selfsubjectreviews":  # kubectl auth whoami
            info = {"username": user.user, "groups": list(user.groups)}
            info.update({"uid": user.uid} if user.uid else {})
            meta = {"creationTimestamp": None}
            return {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                    "metadata": meta, "status": {"userInfo": info}}  # fmt: skip
        return access_review(self.authorizer, user, REVIEWS[route.rt.plural], body)

    # -- validating admission ----------------------------------------------------------------
    def admit(self, rt: ResourceType, obj: Obj, old: Obj | None, req: Request) -> None:
        """RBAC objects' rules and roleRef; PodSecurity on creation."""
        if rt.group == GROUP:
            errors: list[FieldError] = rbacpolicy.validate(rt.kind, obj, old)
            if errors:
                raise invalid_object(rt.kind, rt.group, obj["metadata"]["name"], errors)
            return
        if old is not None or rt.is_custom:
            return
        namespace = obj["metadata"].get("namespace")
        if not namespace:
            return
        ns = self.api.store.get("namespaces", "", namespace)
        podsecurity.admit(rt.group, rt.plural, obj, ns, req.warnings)


def _selected_name(verb: str, query: dict[str, str]) -> str:
    """list/watch with `fieldSelector=metadata.name=<n>` is authorized as a request for <n>."""
    if verb not in ("list", "watch"):
        return ""
    selector = (query.get("fieldSelector") or "").strip()
    for op in ("==", "="):
        key, sep, value = selector.partition(op)
        if sep and key.strip() == "metadata.name" and "," not in value and "!" not in key:
            return value.strip()
    return ""
