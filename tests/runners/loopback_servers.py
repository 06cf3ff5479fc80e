"""Recording HTTP servers on any loopback address, for tests about where requests go.

`serve_at("127.0.0.2", reply)` runs a stdlib server on that address (a second loopback
address stands for "another host": a different origin, and an address a deny-list can name
without denying 127.0.0.1) and records every request it gets, headers included, so a test
can assert that another origin received nothing. Never bound to a non-loopback address.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from requests.structures import CaseInsensitiveDict

Answer = tuple[int, dict[str, str], Any]
Reply = Callable[[str, str, Mapping[str, str]], Answer]  # headers: any case


@dataclass
class Seen:
    """One request a server got."""

    method: str
    path: str
    headers: CaseInsensitiveDict[str]


@dataclass
class Recorder:
    """The requests a server got, in order."""

    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seen: Seen) -> None:
        with self.lock:
            self.requests.append(seen)


def ok(payload: Any) -> Reply:
    """A reply function answering every request 200 with `payload` as JSON."""
    return lambda method, path, headers: (200, {}, payload)


@contextmanager
def serve_at(host: str, reply: Reply) -> Iterator[tuple[str, Recorder]]:
    """(base URL, recorder) of a server on loopback `host` answering with `reply`."""
    assert host.startswith("127."), "tests talk to loopback only"
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            headers = CaseInsensitiveDict(dict(self.headers))
            recorder.add(Seen(self.command, self.path, headers))
            status, extra, payload = reply(self.command, self.path, headers)
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **extra}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_HEAD = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}", recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
