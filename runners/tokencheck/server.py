"""The HTTP face nginx's `auth_request` talks to: /check and /healthz on a loopback port.

Contract (the sidecar's nginx.conf relies on it):

- `/check`, any method (nginx's auth subrequest keeps the client's method): headers in are
  `Authorization` (the client's, passed through) and `X-Longrun-Key-Ok` (`1` when nginx has
  already matched a static API key: then 204 at once, the token is not looked at; nginx must
  always set this header itself so a client cannot). 204 when the bearer token is valid;
  401 otherwise, with `WWW-Authenticate: Bearer error="invalid_token",
  error_description="<reason>"` and `X-Longrun-Auth-Error: <reason>` (verify.py's reasons,
  or "missing bearer token"). The scheme `Bearer` is matched in any letter case (RFC 7235).
- `/healthz`: 200, `{"keys": <number of signing keys held>, "lastError": <str or null>}`.
- anything else: 404.

Nothing the client sent is logged; a refused reason is logged at most once per
LOG_EVERY_SECONDS, so a flood of bad tokens cannot flood the log either.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runners.tokencheck.verify import Verifier

LOG = logging.getLogger("longrun.tokencheck")
KEY_OK_HEADER = "X-Longrun-Key-Ok"
ERROR_HEADER = "X-Longrun-Auth-Error"
LOG_EVERY_SECONDS = 5.0
MAX_TOKEN_CHARS = 16_384
MAX_DISCARDED_BODY = 65_536


class CheckServer(ThreadingHTTPServer):
    """A threading server holding the verifier its handlers ask."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], verifier: Verifier) -> None:
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(address, CheckHandler)
        self.verifier = verifier
        self._logged: dict[str, float] = {}
        self._log_lock = threading.Lock()

    def log_refusal(self, reason: str) -> None:
        """Log `reason` unless it was logged in the last LOG_EVERY_SECONDS."""
        now = time.monotonic()
        with self._log_lock:
            if now - self._logged.get(reason, float("-inf")) < LOG_EVERY_SECONDS:
                return
            self._logged[reason] = now
        LOG.warning("refused a token: %s", reason)


class CheckHandler(BaseHTTPRequestHandler):
    server: CheckServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log: the refusals are logged, rate-limited, by CheckServer

    def do_GET(self) -> None:
        self._answer()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _answer(self) -> None:
        self._discard_body()
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            keys = self.server.verifier.keys
            body = json.dumps({"keys": keys.count, "lastError": keys.last_error})
            self._send(200, body.encode(), {"Content-Type": "application/json"})
        elif path == "/check":
            self._check()
        else:
            self._send(404, b"not found\n", {"Content-Type": "text/plain"})

    def _check(self) -> None:
        if self.headers.get(KEY_OK_HEADER, "").strip() == "1":
            self._send(204, b"", {})
            return
        reason = self._refusal()
        if reason is None:
            self._send(204, b"", {})
            return
        self.server.log_refusal(reason)
        safe = _header_text(reason)
        headers = {
            "WWW-Authenticate": f'Bearer error="invalid_token", error_description="{safe}"',
            ERROR_HEADER: safe,
            "Content-Type": "text/plain",
        }
        self._send(401, f"{safe}\n".encode(), headers)

    def _refusal(self) -> str | None:
        scheme, _, token = (self.headers.get("Authorization") or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "missing bearer token"
        if len(token) > MAX_TOKEN_CHARS:
            return "malformed token"
        return self.server.verifier.check(token)

    def _discard_body(self) -> None:
        text = self.headers.get("Content-Length") or "0"
        length = int(text) if text.isdigit() else MAX_DISCARDED_BODY + 1
        if length > MAX_DISCARDED_BODY or self.headers.get("Transfer-Encoding"):
            self.close_connection = True  # not worth reading; the connection ends after this
        elif length > 0:
            self.rfile.read(length)

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and status != 204:
            self.wfile.write(body)


def _header_text(reason: str) -> str:
    """`reason` as one line of printable ASCII without quotes or backslashes."""
    text = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "?" for c in reason)
    return text[:300]
