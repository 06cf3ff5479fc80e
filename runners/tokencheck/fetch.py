"""Fetching the issuer's signing keys: discovery, the JWKS, the in-cluster API server.

Where the keys are: `jwksUri` when configured; otherwise the issuer's discovery document
`{issuer}/.well-known/openid-configuration`, whose `issuer` must equal the configured one
exactly (OpenID Connect Discovery 1.0, section 4.3: a document that names another issuer
could hand us that issuer's keys) and whose `jwks_uri` is then used.

How they are fetched: one GET with http.client, no redirects followed (a redirect could
move a credential-carrying request elsewhere or from https to http), a timeout of a few
seconds per socket operation, and bodies over 1 MiB refused. https only; http only for
loopback hosts, which tests use (config.check_url).

The cluster's own ServiceAccount issuer: its JWKS lives on the API server
(`https://kubernetes.default.svc/openid/v1/jwks`) and is served only to authenticated
clients (the default RBAC binds `system:service-account-issuer-discovery` to all
ServiceAccounts). A URL whose host is one of the API server's in-cluster names is therefore
fetched from `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` (same path), as
client-go's in-cluster config does: TLS checked against the pod's `ca.crt` and the pod's
ServiceAccount token sent, read anew for every fetch because the kubelet rotates it. Other
hosts get the system CA bundle (or `--ca-file`, an issuer's private CA) and no credentials.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from contracts.serving import CLUSTER_API_HOSTS
from runners.tokencheck.config import OidcConfig, check_url

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_BYTES = 1 << 20
TIMEOUT_SECONDS = 5.0
DISCOVERY_PATH = "/.well-known/openid-configuration"
# kube-apiserver answers 406 to a JWKS request that accepts only application/json.
ACCEPT = "application/json, application/jwk-set+json"


class FetchError(Exception):
    """The keys could not be fetched; the message is short and holds no credential."""


@dataclass(frozen=True)
class Fetcher:
    """GETs JSON documents by the rules of the module docstring."""

    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    ca_file: Path | None = None  # the issuer's private CA (PEM); None: the system's CAs

    def get_json(self, url: str) -> dict[str, Any]:
        """The JSON object at `url`; FetchError when it cannot be had."""
        try:
            check_url(url)
        except ValueError as exc:
            raise FetchError(str(exc)) from None
        parts = urlsplit(url)
        if parts.hostname in CLUSTER_API_HOSTS:
            body = self._get_in_cluster(url, parts)
        else:
            context = self._context() if parts.scheme == "https" else None
            body = _get(url, parts, context=context, headers={})
        try:
            document = json.loads(body)
        except ValueError:
            raise FetchError(f"{url} did not answer JSON") from None
        if not isinstance(document, dict):
            raise FetchError(f"{url} did not answer a JSON object")
        return document

    def _context(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise FetchError(f"cannot use the CA file {self.ca_file}: {exc}") from None

    def _get_in_cluster(self, url: str, parts: SplitResult) -> bytes:
        host = self.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = self.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise FetchError(f"{url} is the API server, but KUBERNETES_SERVICE_HOST is not set")
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        target = parts._replace(scheme="https", netloc=netloc)
        try:
            token = (self.service_account_dir / "token").read_text().strip()
            context = ssl.create_default_context(cafile=self.service_account_dir / "ca.crt")
        except (OSError, ssl.SSLError) as exc:
            raise FetchError(f"no ServiceAccount credentials in {self.service_account_dir}: "
                             f"{exc}") from None  # fmt: skip
        headers = {"Authorization": f"Bearer {token}"}
        return _get(target.geturl(), target, context=context, headers=headers)


def _get(
    url: str, parts: SplitResult, *, context: ssl.SSLContext | None, headers: dict[str, str]
) -> bytes:
    host, port = parts.hostname or "", parts.port
    conn: HTTPConnection = (
        HTTPSConnection(host, port, timeout=TIMEOUT_SECONDS, context=context)
        if parts.scheme == "https"
        else HTTPConnection(host, port, timeout=TIMEOUT_SECONDS)
    )
    path = parts.path or "/"
    path += f"?{parts.query}" if parts.query else ""
    try:
        conn.request("GET", path, headers={"Accept": ACCEPT, **headers})
        answer = conn.getresponse()
        body = answer.read(MAX_BYTES + 1)
    except (OSError, HTTPException) as exc:
        raise FetchError(f"cannot get {url}: {exc}") from None
    finally:
        conn.close()
    if answer.status != 200:
        raise FetchError(f"{url} answered HTTP {answer.status}")
    if len(body) > MAX_BYTES:
        raise FetchError(f"{url} answered more than 1 MiB")
    return body


def jwks_url(config: OidcConfig, fetcher: Fetcher) -> str:
    """Where the issuer's keys are: `jwksUri`, or the discovery document's `jwks_uri`."""
    if config.jwks_uri is not None:
        return config.jwks_uri
    url = config.issuer.rstrip("/") + DISCOVERY_PATH
    document = fetcher.get_json(url)
    named = document.get("issuer")
    if named != config.issuer:
        raise FetchError(
            f"the discovery document at {url} names issuer {_short(named)}, not {config.issuer!r}"
        )
    jwks = document.get("jwks_uri")
    if not isinstance(jwks, str) or not jwks:
        raise FetchError(f"the discovery document at {url} has no jwks_uri")
    return jwks


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
