"""TLS for every connection the runner makes: one reading of a `tls` block.

Storage backends and model clients state their trust the same way, `tls:
{caSecretRef, insecureSkipVerify}` (contracts.model.TlsOptions), but hand it to
different stacks: requests and botocore take `verify` (True, False or a CA
file), http.client an `ssl.SSLContext`, gRPC the CA file's bytes. Reading the
block here, once for all of them, means a CA bundle is checked the same way
everywhere (mounted, and PEM that OpenSSL loads) when the backend or client
opens, and a bad one is a ConfigError naming the field, not a failure at the
first request.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from contracts.model import TlsOptions
from runners.api import ConfigError, RunContext
from runners.secrets import secret_path


def check_pem(
    *, field: str, what: str, cafile: str | None = None, cadata: str | None = None
) -> None:
    """ConfigError unless the CA file or CA data (`what` names it) is a PEM CA bundle."""
    try:
        ssl.create_default_context(cafile=cafile, cadata=cadata)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"{field}: {what} is not a PEM CA bundle ({exc})") from None


def ca_bundle(path: Path, *, field: str) -> str:
    """`path` checked to be a readable PEM CA bundle; else ConfigError."""
    if not path.is_file():
        raise ConfigError(f"{field}: the CA bundle is not mounted at {path}")
    check_pem(field=field, what=str(path), cafile=str(path))
    return str(path)


def ca_file(tls: TlsOptions | None, ctx: RunContext, *, field: str) -> str | None:
    """The checked path of the CA bundle `tls.caSecretRef` names, or None without one."""
    if tls is None or tls.ca_secret_ref is None:
        return None
    ref = tls.ca_secret_ref
    return ca_bundle(secret_path(ctx, name=ref.name, key=ref.key), field=field)


def is_insecure(tls: TlsOptions | None) -> bool:
    """True when certificate verification is switched off."""
    return tls is not None and tls.insecure_skip_verify


def verify(tls: TlsOptions | None, ctx: RunContext, *, field: str) -> bool | str:
    """requests' and botocore's `verify`: False (no verification), the CA file, else True."""
    if is_insecure(tls):
        return False
    return ca_file(tls, ctx, field=field) or True


def ssl_context(tls: TlsOptions | None, ctx: RunContext, *, field: str) -> ssl.SSLContext:
    """An SSL context (http.client): the CA bundle, else the system's; or no verification."""
    context = ssl.create_default_context(cafile=ca_file(tls, ctx, field=field))
    if is_insecure(tls):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
