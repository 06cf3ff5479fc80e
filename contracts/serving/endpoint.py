"""How a ModelDeployment is reached: its Service, Ingress and TLS, and its API keys."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from contracts.base import DNS_SUBDOMAIN, ObjectName, Schema, cel
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


class AuthSpec(Schema):
    """API keys: generated into a Secret, enforced by the runtime or an nginx sidecar."""

    enabled: bool = Field(default=True, description="Require `Authorization: Bearer <key>`.")
    key_count: int = Field(default=1, ge=1, le=16, description="How many keys to generate.")
