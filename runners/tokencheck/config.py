"""The verifier's configuration: `oidc.json`, which the controller writes into the sidecar's
ConfigMap from a ModelDeployment's `auth.oidc`.

Exactly four keys, camelCase as in the spec: `issuer`, `audiences`, `claims` (a claim name
-> the values allowed for it; `{}` when absent) and `jwksUri` (null: found through the
issuer's discovery document). Anything else is an error, so a typo in a key name cannot
silently drop a restriction.

URLs: https only. Plain http is accepted for loopback hosts (127.0.0.1, localhost, ::1) so
that tests can run an issuer in-process; nothing outside the pod can be reached that way.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class ConfigError(ValueError):
    """The config file cannot be used; the message is one line."""


def check_url(url: str) -> str:
    """`url` if it is an absolute https URL (http for loopback hosts); ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{url!r} is not an absolute https URL")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"{url!r} must use https (http only for 127.0.0.1, localhost, ::1)")
    if parts.fragment or parts.username or parts.password:
        raise ValueError(f"{url!r} may hold no fragment and no user info")
    return url


class OidcConfig(BaseModel):
    """One issuer whose tokens the sidecar accepts."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    issuer: StrictStr
    audiences: tuple[StrictStr, ...] = Field(min_length=1)
    claims: dict[StrictStr, tuple[StrictStr, ...]] = Field(default_factory=dict)
    jwks_uri: StrictStr | None = Field(default=None, alias="jwksUri")

    @field_validator("issuer")
    @classmethod
    def _issuer_is_url(cls, value: str) -> str:
        check_url(value)
        if urlsplit(value).query:
            raise ValueError("an issuer URL has no query")
        return value

    @field_validator("jwks_uri")
    @classmethod
    def _jwks_is_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @field_validator("audiences")
    @classmethod
    def _audiences_not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not audience for audience in value):
            raise ValueError("an audience may not be empty")
        return value

    @field_validator("claims")
    @classmethod
    def _claims_allow_something(
        cls, value: dict[str, tuple[str, ...]]
    ) -> dict[str, tuple[str, ...]]:
        for name, allowed in value.items():
            if not name or not allowed:
                raise ValueError(f"claim {name!r} needs a name and at least one allowed value")
        return value


def load(path: Path) -> OidcConfig:
    """The config in `path`; ConfigError with a one-line reason when it is not usable."""
    try:
        return OidcConfig.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:  # also what JSON that does not parse gives
        raise ConfigError(f"{path}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "(top)"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}".replace("\n", " ")
