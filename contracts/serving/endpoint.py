"""How a ModelDeployment is reached: its Service, Ingress and TLS, and who may call it (API
keys, and tokens of an OIDC issuer)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, StringConstraints, model_validator

from contracts.base import (
    DNS_SUBDOMAIN,
    SECRET_KEY,
    ObjectName,
    Schema,
    cel,
    checked_url,
    url_pattern,
)
from contracts.serving.text import UrlPath


class IngressSpec(Schema):
    """An Ingress in front of the Service."""

    host: Annotated[str, StringConstraints(max_length=253, pattern=DNS_SUBDOMAIN)] = Field(
        description="Host name, e.g. llm.example.com."
    )
    path: UrlPath = Field(default="/", description="Path prefix.")
    class_name: ObjectName | None = Field(default=None, description="IngressClass name.")


class IssuerRef(Schema):
    """A cert-manager issuer."""

    name: ObjectName = Field(description="Issuer or ClusterIssuer name.")
    kind: Literal["Issuer", "ClusterIssuer"] = Field(default="Issuer", description="Issuer kind.")


class TlsSpec(Schema):
    """TLS for the Ingress through a cert-manager Certificate."""

    issuer_ref: IssuerRef = Field(description="The cert-manager issuer that signs the certificate.")
    secret_name: ObjectName | None = Field(
        default=None, description="Secret receiving the certificate; default: <name>-tls."
    )


class EndpointSpec(Schema):
    """How the deployment is reached."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "!has(self.tls) || has(self.ingress)",
            "tls needs ingress (the certificate is for its host)",
        )
    )

    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="Service type."
    )
    port: int = Field(default=8080, ge=1, le=65535, description="Service port (HTTP).")
    grpc_port: int = Field(
        default=8081, ge=1, le=65535, description="Service port for gRPC (triton grpc only)."
    )
    ingress: IngressSpec | None = Field(default=None, description="Optional Ingress.")
    tls: TlsSpec | None = Field(default=None, description="TLS for the Ingress (cert-manager).")

    @model_validator(mode="after")
    def _tls_needs_ingress(self) -> EndpointSpec:
        if self.tls is not None and self.ingress is None:
            raise ValueError("tls needs ingress (the certificate is for its host)")
        return self


HttpsUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048),
    AfterValidator(lambda v: checked_url(v, schemes=("https",), optional=False)),
    Field(json_schema_extra={"pattern": url_pattern("https", optional=False)}),
]
# How in-cluster clients name the API server: a JWKS there is read as an in-cluster client (the
# controller mounts the verifier's credentials; runners/tokencheck connects to
# KUBERNETES_SERVICE_HOST with them).
CLUSTER_API_HOSTS = frozenset(
    {"kubernetes", "kubernetes.default", "kubernetes.default.svc",
     "kubernetes.default.svc.cluster.local"}
)  # fmt: skip
ClaimText = Annotated[str, StringConstraints(min_length=1, max_length=253)]
CLAIM_NAME = re.compile(r"^[!-~]{1,63}$")  # printable ASCII without spaces
CLAIMS_RULE = (
    "each claim name is 1-63 printable characters without spaces, with at least one allowed value"
)
OIDC_NEEDS_ENABLED = "auth.oidc needs auth.enabled: true (it is a way to authenticate)"
NO_WAY_IN = (
    "auth.apiKeys: false needs auth.oidc (else nothing could authenticate); to serve without "
    "authentication set auth.enabled: false"
)


class ConfigMapKeyRef(Schema):
    """A key of a ConfigMap in the deployment's namespace."""

    name: ObjectName = Field(description="ConfigMap name.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=SECRET_KEY)] = (
        Field(default="ca.crt", description="Key holding the PEM certificates.")
    )


class OidcSpec(Schema):
    """Signed JWTs of one OpenID Connect issuer, checked by a verifier beside the auth sidecar:
    the signature against the issuer's JWKS, expiry, issuer, audience and the claims below."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "!has(self.claims) || self.claims.all(k, k.matches('^[!-~]{1,63}$') && "
            "self.claims[k].size() > 0)",
            CLAIMS_RULE,
        )
    )

    issuer: HttpsUrl = Field(
        description=(
            "The issuer, exactly as tokens carry it in `iss` (Entra ID, Keycloak, Dex, or a "
            "Kubernetes ServiceAccount issuer such as https://kubernetes.default.svc.cluster.local)."
        )
    )
    audiences: list[ClaimText] = Field(
        min_length=1,
        max_length=16,
        description="A token's `aud` must hold one of these.",
    )
    claims: dict[str, list[ClaimText]] = Field(
        default_factory=dict,
        max_length=16,
        description=(
            "Required claims: the token's claim (a string, or a list of strings) must match one "
            "of the listed values, e.g. `sub: [system:serviceaccount:team-a:batch]`."
        ),
    )
    jwks_uri: HttpsUrl | None = Field(
        default=None,
        description=(
            "Where the issuer's signing keys are; default: `jwks_uri` of "
            "`<issuer>/.well-known/openid-configuration`. For the cluster's own ServiceAccount "
            "issuer use https://kubernetes.default.svc/openid/v1/jwks: the verifier reaches it "
            "as an in-cluster client."
        ),
    )
    ca_config_map_ref: ConfigMapKeyRef | None = Field(
        default=None,
        description=(
            "CA certificates (PEM) that sign the issuer's TLS certificate, for an issuer with a "
            "private CA; default: the image's public CAs."
        ),
    )

    @model_validator(mode="after")
    def _values_listed(self) -> OidcSpec:
        for name, values in self.claims.items():
            if not CLAIM_NAME.fullmatch(name) or not values:
                raise ValueError(f"claims.{name}: {CLAIMS_RULE}")
        return self


class AuthSpec(Schema):
    """Who may call: generated API keys (a Secret, checked by the runtime or an nginx sidecar)
    and, with `oidc`, signed tokens of an issuer."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "!has(self.oidc) || !has(self.enabled) || self.enabled",
            OIDC_NEEDS_ENABLED,
            "!has(self.apiKeys) || self.apiKeys || has(self.oidc) || "
            "(has(self.enabled) && !self.enabled)",
            NO_WAY_IN,
        )
    )

    enabled: bool = Field(
        default=True,
        description=(
            "Require authentication: `Authorization: Bearer <key>` (or a token, with oidc). "
            "false: anyone who reaches the Service may call."
        ),
    )
    api_keys: bool = Field(
        default=True,
        description="Generate API keys and accept them; false with oidc: tokens only.",
    )
    key_count: int = Field(default=1, ge=1, le=16, description="How many keys to generate.")
    oidc: OidcSpec | None = Field(
        default=None, description="Also accept signed tokens of this OIDC issuer."
    )

    @model_validator(mode="after")
    def _a_way_in(self) -> AuthSpec:
        if self.oidc is not None and not self.enabled:
            raise ValueError(OIDC_NEEDS_ENABLED)
        if self.enabled and not self.api_keys and self.oidc is None:
            raise ValueError(NO_WAY_IN)
        return self

    @property
    def keys(self) -> bool:
        """True when API keys are made and accepted."""
        return self.enabled and self.api_keys

    @property
    def tokens(self) -> bool:
        """True when signed tokens are accepted."""
        return self.enabled and self.oidc is not None
