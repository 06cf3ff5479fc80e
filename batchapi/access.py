"""Who is calling, in which namespace, and may they: the Kubernetes API server decides.

The API key a client sends (`Authorization: Bearer <token>`) is a Kubernetes token, a user's
or a ServiceAccount's: a TokenReview says who it is. Each action is then a SubjectAccessReview
on InferenceRuns (group longrun.dev) in the namespace, with the verb of the table below; the
server holds no list of users and no Secret.

| action | verb |
| --- | --- |
| upload a file, create a batch | create |
| list files or batches, list models | list |
| retrieve a file or its content, retrieve a batch | get |
| delete a file | delete |
| cancel a batch | patch |

The namespace is the path's (`/namespaces/<ns>/v1/...`, so a client changes only its
`base_url`), else the `OpenAI-Organization` header (the clients' `organization`), else the
namespace of a ServiceAccount token, else the server's default namespace.

A request for one object (a file or batch id) that is refused for any reason (no token, a
token the API server does not accept, one without the permission, another namespace's id)
answers exactly as a missing object: 404. Requests for a collection answer 401 without an
accepted token and 403 without the permission.
"""

from __future__ import annotations

import re
from typing import Any

from batchapi.errors import ApiFailure, bad_request
from batchapi.ports import Reviews
from batchapi.settings import ApiSettings
from controller.core.ports import ApiError

Obj = dict[str, Any]
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
SERVICE_ACCOUNT = re.compile(r"^system:serviceaccount:([^:]+):[^:]+$")


class Gate:
    """Identity and permission checks through a cluster's reviews."""

    def __init__(self, reviews: Reviews, settings: ApiSettings) -> None:
        self.reviews = reviews
        self.settings = settings

    def identify(self, authorization: str | None) -> Obj | None:
        """The user a bearer token is, None without one the API server accepts."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        try:
            return self.reviews.review_token(token.strip())
        except ApiError as exc:
            raise _unavailable(exc) from exc

    def namespace(self, *, path: str | None, header: str | None, user: Obj | None) -> str:
        """The namespace a request is for (module docstring), checked as a name."""
        account = SERVICE_ACCOUNT.match(str((user or {}).get("username") or ""))
        chosen = (
            path or header or (account.group(1) if account else self.settings.default_namespace)
        )
        if not chosen:
            raise bad_request(
                "Name a namespace: use the base URL .../namespaces/<namespace>/v1, or send "
                "the OpenAI-Organization header (the client's organization).",
                param="namespace",
            )
        if not NAMESPACE.match(chosen):
            raise bad_request(f"'{chosen}' is not a namespace name.", param="namespace")
        return chosen

    def allows(self, user: Obj | None, *, namespace: str, verb: str, name: str = "") -> bool:
        """True when the user may `verb` InferenceRuns in the namespace served here."""
        if user is None or not self.settings.serves(namespace):
            return False
        try:
            return self.reviews.review_access(user, namespace=namespace, verb=verb, name=name)
        except ApiError as exc:
            raise _unavailable(exc) from exc

    def check_collection(self, user: Obj | None, *, namespace: str, verb: str) -> None:
        """401 without an accepted token, 403 without the permission."""
        if user is None:
            raise ApiFailure(
                401,
                "The API key was not accepted: send a Kubernetes token (a user's, or "
                "`kubectl create token <serviceaccount>`) as the API key.",
                code="invalid_api_key",
            )
        if not self.settings.serves(namespace):
            raise ApiFailure(
                403,
                f"This server does not serve namespace {namespace} (its files live where only "
                "some namespaces' runner pods can read them).",
                code="permission_denied",
            )
        if not self.allows(user, namespace=namespace, verb=verb):
            raise ApiFailure(
                403,
                f"{user.get('username')} may not {verb} inferenceruns.longrun.dev in namespace "
                f"{namespace}.",
                code="permission_denied",
            )


def _unavailable(exc: ApiError) -> ApiFailure:
    return ApiFailure(503, f"The Kubernetes API server did not answer a review: {exc.message}")
