"""What every protocol client needs from the endpoint block: credentials and tensor defaults.

Kept in one place so that the HTTP clients and the gRPC client read Secrets the same way (TLS
settings are runners/tls.py's, shared with the storage backends; records become tensor rows in
rows.py). Secret values are read once, at construction, and never appear in messages or logs.
"""

from __future__ import annotations

from contracts.model import ModelEndpoint
from runners.api import RunContext
from runners.secrets import read_secret

DEFAULT_INPUT_NAME = "input-0"
DEFAULT_DATATYPE = "FP32"


def auth_header(endpoint: ModelEndpoint, ctx: RunContext) -> tuple[str, str] | None:
    """The (header, value) pair carrying the API key, or None without `auth`."""
    if endpoint.auth is None:
        return None
    ref = endpoint.auth.secret_ref
    key = read_secret(ctx, name=ref.name, key=ref.key, field="model.auth.secretRef")
    if endpoint.auth.header == "Authorization":
        return "Authorization", f"Bearer {key}"
    return "X-API-Key", key
