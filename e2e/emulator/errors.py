"""Kubernetes-shaped API errors.

Clients branch on `Status.reason` and `code` (AlreadyExists vs Conflict are both
409), so every failure leaves the emulator as a `Status` body shaped exactly like
kube-apiserver's, built in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class FieldError:
    """One `details.causes[]` entry (apimachinery field.Error)."""

    reason: str
    field: str
    message: str

    def as_cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def render(self) -> str:
        return f"{self.field}: {self.message}"


def fmt_value(value: Any) -> str:
    """Render a value the way Go's field errors quote it."""
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, f"Invalid value: {fmt_value(value)}: {detail}")


def required(path: str, detail: str = "") -> FieldError:
    msg = "Required value" + (f": {detail}" if detail else "")
    return FieldError("FieldValueRequired", path, msg)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, f"Forbidden: {detail}")


def not_supported(path: str, value: Any, allowed: list[Any]) -> FieldError:
    opts = ", ".join(fmt_value(a) for a in allowed)
    return FieldError(
        "FieldValueNotSupported",
        path,
        f"Unsupported value: {fmt_value(value)}: supported values: {opts}",
    )


def type_invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueTypeInvalid", path, f"Invalid value: {fmt_value(value)}: {detail}")


@dataclass
class ApiError(Exception):
    """An HTTP error carried as a Kubernetes Status."""

    code: int
    message: str
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reason = self.reason or REASONS.get(self.code, "Unknown")
        super().__init__(self.message)

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = {k: v for k, v in self.details.items() if v not in ("", None, [])}
        if details:
            body["details"] = details
        return body


def qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        f'{qualified(plural, group)} "{name}" not found',
        details={"name": name, "group": group, "kind": plural},
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{qualified(plural, group)} "{name}" already exists',
        reason="AlreadyExists",
        details={"name": name, "group": group, "kind": plural},
    )


def conflict(plural: str, group: str, name: str, detail: str | None = None) -> ApiError:
    why = detail or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        details={"name": name, "group": group, "kind": plural},
    )


def invalid_object(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    qual = f"{kind}.{group}" if group else kind
    if len(errors) == 1:
        summary = errors[0].render()
    else:
        summary = "[" + ", ".join(e.render() for e in errors) + "]"
    return ApiError(
        422,
        f'{qual} "{name}" is invalid: {summary}',
        details={
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [e.as_cause() for e in errors],
        },
    )


def gone(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)
