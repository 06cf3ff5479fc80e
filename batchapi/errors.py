"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with a status.

The official clients turn the status into their exception classes (400 BadRequestError, 401
AuthenticationError, 403 PermissionDeniedError, 404 NotFoundError, 413 APIStatusError, ...)
and show the message, so each message names the field and what to do.
"""

from __future__ import annotations

from typing import Any

TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    411: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
}


class ApiFailure(Exception):
    """An answer other than success: the HTTP status and OpenAI's error object."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body the clients read."""
        kind = TYPES.get(self.status, "server_error" if self.status >= 500 else "api_error")
        error = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return {"error": error}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiFailure:
    """400: the request itself is wrong; the message names the field."""
    return ApiFailure(400, message, param=param, code=code)


def no_file(file_id: str) -> ApiFailure:
    """404 for a file that is missing, foreign, or not visible to the caller (all the same)."""
    return ApiFailure(404, f"No such File object: {file_id}", param="id", code="not_found")


def no_batch(batch_id: str) -> ApiFailure:
    """404 for a batch that is missing, foreign, or not visible to the caller (all the same)."""
    return ApiFailure(404, f"No batch found with id '{batch_id}'.", param="id", code="not_found")
