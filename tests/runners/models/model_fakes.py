"""Fakes and small real servers for the model client tests (imported as `model_fakes`).

`FakeTransport` is a handler function handed to a client in place of its connection pool (the
httpx MockTransport idea); `LocalServer` is a real stdlib HTTP/1.1 server for tests where the
sockets matter.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.model import ModelEndpoint
from runners.api import InputRecord
from runners.models.http import HttpResponse


@dataclass
class Sent:
    """One request as the client handed it to the transport."""

    method: str
    url: str
    body: bytes | None
    headers: Mapping[str, str]

    def json(self) -> Any:
        assert self.body is not None
        return json.loads(self.body)


Handler = Callable[[Sent], HttpResponse]


@dataclass
class FakeTransport:
    """A Transport that answers with `handler` and records what was sent."""

    handler: Handler
    sent: list[Sent] = field(default_factory=list)
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        request = Sent(method, url, body, dict(headers))
        with self.lock:
            self.sent.append(request)
        return self.handler(request)

    def close(self) -> None:
        self.closed = True


def reply(
    doc: Any = None, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    """A JSON response (or raw bytes when `doc` is bytes)."""
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return HttpResponse(status, {k.lower(): v for k, v in (headers or {}).items()}, body)


def endpoint(protocol: str, url: str = "http://model:8080", **fields: Any) -> ModelEndpoint:
    """A validated ModelEndpoint, fields by their Python names."""
    return ModelEndpoint(protocol=protocol, url=url, name=fields.pop("name", "iris"), **fields)


def records(*rows: Any) -> list[InputRecord]:
    """InputRecords at positions 0.. whose data are `rows` (dicts)."""
    return [InputRecord(position=i, id=str(i), data=row) for i, row in enumerate(rows)]


def iris(*rows: list[float]) -> list[InputRecord]:
    """Iris-shaped records with the four named feature fields."""
    names = ("sepal_length", "sepal_width", "petal_length", "petal_width")
    return records(*(dict(zip(names, row, strict=True)) for row in rows))


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate for 127.0.0.1/localhost and its key, as PEM files."""

    cert: Path
    key: Path


Answer = tuple[int, Mapping[str, str], bytes]


@dataclass
class LocalServer:
    """A real HTTP/1.1 keep-alive server on 127.0.0.1 answering with `answer` (a function)."""

    answer: Callable[[str, str, Mapping[str, str], bytes], Answer]
    connections: int = 0
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def handler_class(server: LocalServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            server.connections += 1

        def _serve(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size)
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.requests.append((self.command, self.path, headers, body))
            status, extra, data = server.answer(self.command, self.path, headers, body)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def json_answer(doc: Any, *, status: int = 200) -> Callable[..., Answer]:
    """An `answer` function that always replies with `doc` as JSON."""
    data = json.dumps(doc).encode()
    return lambda *_: (status, {"Content-Type": "application/json"}, data)
