"""Local HTTP servers for tests (stdlib http.server on 127.0.0.1, random port).

- `Receiver`: a JSON API that serves input records (optionally paginated) and
  accepts output chunks, de-duplicating by (jobId, jobName, chunk, role) the way
  the docs require HTTP receivers to, and answers `GET .../committed?jobId=&jobName=&role=`
  with the chunks it holds (`{"chunks": [{"chunk": n, "records": n}, ...]}`, an http
  output's `committedUrl`). It also stands in for Krateo's finops-database-handler
  (`POST /compute/<name>`): like the real one (it builds a command line with
  `key + '=' + value`) it answers 500 unless every value of the body is a string;
  `.../<name>input` answers `{"result": [...]}`, `.../committed` answers the chunks the
  other notebooks hold for the body's job_uid, job_name and role (as `result`, JSON text),
  and other notebooks keep the body de-duplicated by (job_uid, job_name, chunk, path).
- `make_certificate`: a self-signed certificate for 127.0.0.1/localhost made by the
  real `openssl` CLI; `serve(..., tls=(cert, key))` then speaks HTTPS with it.
- `KServeStub`: a KServe v2 REST model (`POST /v2/models/NAME/infer`) that can
  answer a share of requests with 503 or 429 + Retry-After, hang, or reject poison.
- `OpenAIStub`: an OpenAI-compatible chat server (`POST /v1/chat/completions`) that
  answers a share of requests with 503 or 429 + Retry-After and counts the answers
  it gave per prompt.
"""

from __future__ import annotations

import json
import random
import ssl
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

Reply = tuple[int, dict[str, str], Any]
Handler = Callable[[str, str, dict[str, list[str]], Any, dict[str, str]], Reply]


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """(cert, key) PEM files: a certificate for 127.0.0.1/localhost that is its own CA."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@contextmanager
def serve(handler: Handler, *, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """Run `handler(method, path, query, json_body, headers)` behind a local server.

    With `tls` (cert, key) the server speaks HTTPS and the URL starts with https://.
    """

    class Request(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are two writes: without TCP_NODELAY, Nagle's algorithm and the
        # client's delayed ACK hold each keep-alive response back by ~40 ms.
        disable_nagle_algorithm = True

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            url = urlparse(self.path)
            status, headers, payload = handler(
                self.command, url.path, parse_qs(url.query), body, dict(self.headers)
            )
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Request)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Receiver:
    """Serves records and stores received chunks, de-duplicated by their key."""

    def __init__(self, records: list[dict[str, Any]] | None = None, page_size: int = 0) -> None:
        self.records = records or []
        self.page_size = page_size
        self.chunks: dict[tuple[str, str, Any, str], Any] = {}
        self.requests: list[tuple[str, str, Any, dict[str, str]]] = []
        self.lock = threading.Lock()

    def __call__(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        headers: dict[str, str],
    ) -> Reply:
        with self.lock:
            self.requests.append((method, path, body, headers))
        if path.startswith("/compute/"):
            return self._compute(path, body)
        if method == "GET" and path.endswith("/committed"):
            return 200, {}, self._committed(query)
        if method == "GET":
            return 200, {}, self._page(query)
        if not isinstance(body, dict):  # a POST cut off by a kill before its body: never held
            return 400, {}, {"error": "no JSON body"}
        key = (body["jobId"], body["jobName"], body.get("chunk", "complete"), body.get("role", ""))
        with self.lock:
            self.chunks[key] = body
        return 200, {}, {"ok": True}

    def _compute(self, path: str, body: Any) -> Reply:
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            # The real handler's `key + '=' + parameters[key]` raises TypeError: a 500.
            return 500, {}, {"detail": "Internal Server Error"}
        if path.endswith("input"):
            return 200, {}, {"result": self.records}
        if path.endswith("committed"):
            return 200, {}, {"result": json.dumps(self._krateo_committed(body))}
        key = (body.get("job_uid"), body.get("job_name"), body.get("chunk"), path)
        with self.lock:
            self.chunks[key] = body
        return 200, {}, {"result": "ok"}

    def _committed(self, query: dict[str, list[str]]) -> Any:
        wanted = tuple(query.get(k, [""])[0] for k in ("jobId", "jobName", "role"))
        with self.lock:
            held = [
                {"chunk": chunk, "records": len(body["records"])}
                for (uid, job, chunk, role), body in self.chunks.items()
                if (uid, job, role) == wanted and isinstance(chunk, int)
            ]
        return {"chunks": sorted(held, key=lambda item: item["chunk"])}

    def _krateo_committed(self, body: dict[str, str]) -> list[dict[str, int]]:
        field = "errors" if body.get("role") == "errors" else "ids"
        with self.lock:
            return [
                {"chunk": int(chunk), "records": len(json.loads(held[field]))}
                for (uid, job, chunk, _), held in self.chunks.items()
                if (uid, job) == (body.get("job_uid"), body.get("job_name")) and field in held
            ]

    def _page(self, query: dict[str, list[str]]) -> Any:
        if not self.page_size:
            return {"data": {"items": self.records}}
        offset = int(query.get("offset", ["0"])[0])
        return {"data": {"items": self.records[offset : offset + self.page_size]}}


class KServeStub:
    """A KServe v2 model: doubles `data`; failure shares, hang and poison configurable.

    `down_for` answers that many requests 503 from request number `down_from` on (1: the first),
    as a server does while it restarts. A batch holding the value `poison` is answered
    `poison_status` (400: the server refuses it; 500: the model crashes on it).
    """

    def __init__(
        self,
        *,
        unavailable: float = 0.0,
        throttled: float = 0.0,
        hang: float = 0.0,
        seed: int = 7,
        poison: float | None = None,
        poison_status: int = 400,
        down_for: int = 0,
        down_from: int = 1,
    ) -> None:
        self.down_for = down_for
        self.down_from = down_from
        self.poison_status = poison_status
        self.unavailable = unavailable
        self.throttled = throttled
        self.hang = hang
        self.poison = poison
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.calls = 0
        self.statuses: dict[int, int] = {}
        self.release = threading.Event()

    def __call__(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        headers: dict[str, str],
    ) -> Reply:
        with self.lock:
            self.calls += 1
            roll = self.rng.random()
            down = self.down_from <= self.calls < self.down_from + self.down_for
        if down:
            return self._count(503, {}, {"error": "restarting"})
        if self.hang:
            self.release.wait(self.hang)
        if roll < self.unavailable:
            return self._count(503, {}, {"error": "unavailable"})
        if roll < self.unavailable + self.throttled:
            return self._count(429, {"Retry-After": "0"}, {"error": "slow down"})
        tensor = body["inputs"][0]
        data = tensor["data"]
        if self.poison is not None and self.poison in data:
            return self._count(self.poison_status, {}, {"error": "poison value"})
        rows = tensor["shape"][0]
        out = {"name": "output-0", "shape": [rows], "datatype": "FP32"}
        width = len(data) // max(rows, 1)
        out["data"] = [sum(data[i * width : (i + 1) * width]) * 2 for i in range(rows)]
        return self._count(200, {}, {"model_name": "m", "id": "", "outputs": [out]})

    def _count(self, status: int, headers: dict[str, str], body: Any) -> Reply:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
        return status, headers, body


class OpenAIStub:
    """An OpenAI-compatible chat model answering `re: <prompt>`; 503 and 429 shares configurable.

    A prompt is refused at most `max_faults_in_a_row` times in a row, so a client with more
    attempts than that always gets through: fault tests are about retries, not luck.
    """

    def __init__(
        self,
        *,
        unavailable: float = 0.0,
        throttled: float = 0.0,
        retry_after: str = "0",
        max_faults_in_a_row: int = 2,
        seed: int = 7,
    ) -> None:
        self.unavailable = unavailable
        self.throttled = throttled
        self.retry_after = retry_after
        self.max_faults = max_faults_in_a_row
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.answered: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self._streaks: Counter[str] = Counter()

    def __call__(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        headers: dict[str, str],
    ) -> Reply:
        prompt = body["messages"][-1]["content"]
        status = self._status(prompt)
        if status == 503:
            return 503, {}, {"error": {"message": "overloaded"}}
        if status == 429:
            return 429, {"Retry-After": self.retry_after}, {"error": {"message": "slow down"}}
        message = {"role": "assistant", "content": f"re: {prompt}"}
        return 200, {}, {"choices": [{"index": 0, "message": message}]}

    def _status(self, prompt: str) -> int:
        with self.lock:
            roll = self.rng.random()
            faulty = self._streaks[prompt] < self.max_faults
            status = 200
            if faulty and roll < self.unavailable:
                status = 503
            elif faulty and roll < self.unavailable + self.throttled:
                status = 429
            self._streaks[prompt] = self._streaks[prompt] + 1 if status != 200 else 0
            self.statuses[status] += 1
            if status == 200:
                self.answered[prompt] += 1
        return status
