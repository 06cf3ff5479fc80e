"""JSON over HTTP to one host, on http.client, through the guard (guard.py).

What a host answers never reaches a status or a log as it is: an answer is parsed for the
fields a protocol reads, and an error names the request and the HTTP status, plus at most
the short `error` text of a JSON error answer (Ollama's words for a failed pull). So an
InferenceHost pointed at some other service in the controller's network learns nothing of
that service's pages. Redirects are not followed (a 3xx is an error naming it), answers
are read up to 1 MiB, and a bearer token, when the host has one, goes only to the host's
own endpoint.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from controller.hosts.guard import HostGuard

MAX_ANSWER = 1 << 20
ERROR_TEXT_MAX = 200


class HostError(Exception):
    """A request to a host failed: one line, never the body of an answer."""


class HostClient:
    """Requests to one host's endpoint (`scheme://host:port`)."""

    def __init__(
        self, endpoint: str, *, guard: HostGuard, timeout: float, token: str | None = None
    ) -> None:
        parts = urlsplit(endpoint)
        self.scheme = parts.scheme or "http"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.guard = guard
        self.timeout = timeout
        self._token = token
        self.address: str | None = None  # the address the last connection went to

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Send a request, return the parsed JSON answer (None for an empty one); HostError
        for anything but a 2xx answer of JSON."""
        conn = self._connection(timeout or self.timeout)
        headers = {"Accept": "application/json", "User-Agent": "longrun-controller"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            conn.request(method, path, body=data, headers=headers)
            answer = conn.getresponse()
            with answer:  # closed even when read only in part (an answer too large)
                raw = answer.read(MAX_ANSWER + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise HostError(f"{method} {path}: {_reason(exc)}") from None
        finally:
            conn.close()
        return _parsed(method, path, answer.status, raw)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=timeout)

        def connect(
            address: tuple[str, int], timeout: float | None = None, *_: Any
        ) -> socket.socket:
            sock, self.address = self.guard.connect(address[0], address[1], timeout or self.timeout)
            return sock

        conn._create_connection = connect  # type: ignore[attr-defined]
        return conn


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return "the name does not resolve"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:ERROR_TEXT_MAX]


def _parsed(method: str, path: str, status: int, raw: bytes) -> Any:
    if len(raw) > MAX_ANSWER:
        raise HostError(f"{method} {path}: the answer is larger than 1 MiB")
    if 300 <= status < 400:
        raise HostError(
            f"{method} {path} answered with a redirect (HTTP {status}), which is not followed: "
            "set the endpoint to where it points"
        )
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError:
        body = ValueError
    if not 200 <= status < 300:
        said = body.get("error") if isinstance(body, dict) else None
        text = f": {' '.join(said.split())[:ERROR_TEXT_MAX]}" if isinstance(said, str) else ""
        raise HostError(f"{method} {path} answered HTTP {status}{text}")
    if body is ValueError:
        raise HostError(f"{method} {path} answered HTTP {status} with something that is not JSON")
    return body
