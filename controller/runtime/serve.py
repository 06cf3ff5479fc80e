"""The controller's HTTP endpoints: `/metrics` on one port, `/healthz` and `/readyz` on another.

Kept apart from the manager so probes and scrapes never wait on a reconcile;
the handlers only read thread-safe state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Route = Callable[[], tuple[int, str, str]]  # status, content type, body


def _handler_for(routes: dict[str, Route]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            status, ctype, body = route() if route else (404, "text/plain", "not found\n")
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return  # probes every few seconds would drown the logs

    return Handler


class Endpoint:
    """A small HTTP server on a daemon thread."""

    def __init__(self, port: int, routes: dict[str, Route], *, host: str = "0.0.0.0") -> None:
        self.server = ThreadingHTTPServer((host, port), _handler_for(routes))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server.server_address[1])

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()


def probe(check: Callable[[], bool]) -> Route:
    """A route answering 200 `ok` when `check()` holds, else 503."""

    def route() -> tuple[int, str, str]:
        return (200, "text/plain", "ok\n") if check() else (503, "text/plain", "not ready\n")

    return route
