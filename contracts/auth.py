"""How a run proves who it is to a model server: a key from a Secret, or its own token.

Two kinds of credential, one header. A key (`secretRef`) is a shared secret someone copied
into the run's namespace. A ServiceAccount token (`serviceAccountToken`) is issued by the
cluster to the runner pod itself (a projected volume, TokenRequest): it names the pod's
ServiceAccount (`system:serviceaccount:<namespace>:<name>`), is bound to the pod, expires,
and is rotated by the kubelet, so nothing is copied between namespaces. The model server
must accept the audience (a ModelDeployment's `auth.oidc.audiences`).

The controller mounts the token at `MODEL_TOKEN_DIR/MODEL_TOKEN_FILE` in the runner
container; the runner reads it there. Both sides take the path from here.

HTTP stores (`storage.*.http.auth`) take a key only (`KeyAuth`): a token has one audience,
the model server's.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from contracts.base import Schema, SecretKeyRef, cel

# Where the runner container finds its ServiceAccount token (a projected volume, read-only).
MODEL_TOKEN_DIR = "/var/run/secrets/longrun/model-token"
MODEL_TOKEN_FILE = "token"
MODEL_TOKEN_PATH = f"{MODEL_TOKEN_DIR}/{MODEL_TOKEN_FILE}"
# The runner container's env names the file (local executors move mounts, and env with them).
MODEL_TOKEN_PATH_ENV = "LONGRUN_MODEL_TOKEN_PATH"
# kube-apiserver refuses a TokenRequest shorter than 10 minutes; 24 h is a sane ceiling.
MIN_TOKEN_SECONDS = 600
MAX_TOKEN_SECONDS = 86400

AuthHeader = Literal["Authorization", "X-API-Key"]
_HEADER_DOC = "Header carrying the key: `Authorization: Bearer <key>` or `X-API-Key: <key>`."
ONE_CREDENTIAL = "set exactly one of secretRef and serviceAccountToken"


class KeyAuth(Schema):
    """An API key read from a Secret and sent as a request header."""

    secret_ref: SecretKeyRef = Field(description="Secret key holding the API key or token.")
    header: AuthHeader = Field(default="Authorization", description=_HEADER_DOC)


class ServiceAccountToken(Schema):
    """A token of the runner pod's ServiceAccount, issued for one audience and rotated by the
    kubelet (a projected `serviceAccountToken` volume)."""

    audience: Annotated[str, StringConstraints(min_length=1, max_length=253)] = Field(
        description=(
            "Audience of the token (its `aud` claim): one the model server accepts, e.g. an "
            "entry of the ModelDeployment's auth.oidc.audiences."
        )
    )
    expiration_seconds: int = Field(
        default=3600,
        ge=MIN_TOKEN_SECONDS,
        le=MAX_TOKEN_SECONDS,
        description=(
            "Lifetime of the token, in seconds (600 to 86400); the kubelet replaces it at 80 % "
            "of it and the runner picks the new one up."
        ),
    )


class ApiKeyAuth(Schema):
    """How the runner authenticates to the model: a key from a Secret or the pod's own
    ServiceAccount token, sent as a request header."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.secretRef) != has(self.serviceAccountToken)",
            ONE_CREDENTIAL,
        )
    )

    secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the API key or token. Set this or serviceAccountToken.",
    )
    service_account_token: ServiceAccountToken | None = Field(
        default=None,
        description=(
            "Send a token of the runner pod's ServiceAccount instead of a key: no Secret to "
            "copy. Set this or secretRef."
        ),
    )
    header: AuthHeader = Field(
        default="Authorization",
        description=(
            "Header carrying the key or token: `Authorization: Bearer <value>` or "
            "`X-API-Key: <value>`."
        ),
    )

    @model_validator(mode="after")
    def _one_credential(self) -> ApiKeyAuth:
        if (self.secret_ref is None) == (self.service_account_token is None):
            raise ValueError(ONE_CREDENTIAL)
        return self
