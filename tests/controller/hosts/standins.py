"""Stand-ins for the Ollama and inferenced daemons, written from their public API documents.

Nothing real of either runs here (Ollama is a Go binary from its own site, inferenced a
macOS daemon), so these servers answer as the documents say the daemons answer, and no
more; docs/serving.md says which protocols were tried against a real daemon (none of these
two). Run one as a process: `python -m tests.controller.hosts.standins ollama --host H
--port P --library qwen2.5:3b,llama3 [--token T]`.

- `ollama` (github.com/ollama/ollama docs/api.md): `GET /api/version`; `GET /api/tags`
  (pulled models), `GET /api/ps` (loaded models), each `{"models": [{"name", "model"}]}`;
  `POST /api/pull {"model", "stream": false}` answers `{"status": "success"}` for a model
  of the library (else 500 with an `error`); `POST /api/generate {"model", "keep_alive"}`
  without a prompt loads the model (404 `model "x" not found` unless pulled), or with
  `keep_alive: 0` unloads it; `POST /api/copy {"source", "destination"}`. A name without a
  tag is `:latest`. `hf.co/<org>/<repo>` pulls are in the library when listed so.
- `inferenced` (github.com/dormlab/inferenced README, plus longrun's assumptions, marked so
  in controller/hosts/protocols/inferenced.py): `GET /v1/models` lists the loaded models;
  `POST /admin/models {"model"}` loads one of the library (404 otherwise);
  `DELETE /admin/models/<name>` unloads it.

`odd` is no daemon: a server that misbehaves as a test needs (a redirect at `/redirect`, a
2 MiB answer at `/big`, an HTML page at `/html`, a 500 whose body holds a long page and an
`error` text at `/error`).

With `--token`, every request but the health check (`/api/version`, `/v1/models`) needs
`Authorization: Bearer <token>` (401 otherwise); each request's method, path and whether
it carried the token are appended to `--log` as JSON lines, for tests to read.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

HEALTH_PATHS = ("/api/version", "/v1/models")


def ollama_name(name: str) -> str:
    """`llama3` is `llama3:latest`."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class State:
    """What a daemon has: its library, what is pulled and what is loaded."""

    def __init__(self, kind: str, library: list[str], token: str | None, log: Path | None):
        self.kind, self.token, self.log = kind, token, log
        norm = ollama_name if kind == "ollama" else (lambda n: n)
        self.library = {norm(n) for n in library}
        self.pulled: set[str] = set()
        self.loaded: set[str] = set()
        self.norm = norm
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    """One request to the stand-in."""

    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _allowed(self, state: State) -> bool:
        carried = self.headers.get("Authorization") == f"Bearer {state.token}"
        if state.log is not None:
            with state.lock, state.log.open("a") as out:
                out.write(
                    json.dumps({"method": self.command, "path": self.path, "token": carried}) + "\n"
                )
        if state.token is None or carried or self.path in HEALTH_PATHS:
            return True
        self._send(401, {"error": "unauthorized"})
        return False

    def do_GET(self) -> None:
        state: State = self.server.state
        if state.kind == "odd":
            self._odd()
        elif self._allowed(state):
            self._send(
                *(ollama_get if state.kind == "ollama" else inferenced_get)(state, self.path)
            )

    def _odd(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/big":
            self._send(200, {"data": "x" * (2 << 20)})
        elif self.path == "/html":
            data = b"<html>internal admin page: SECRET-PAGE</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send(500, {"error": "model x: out of memory", "page": "SECRET-PAGE " * 100})

    def do_POST(self) -> None:
        state: State = self.server.state
        if self._allowed(state):
            handle = ollama_post if state.kind == "ollama" else inferenced_post
            self._send(*handle(state, self.path, self._body()))

    def do_DELETE(self) -> None:
        state: State = self.server.state
        if self._allowed(state):
            self._send(*inferenced_delete(state, self.path))


def _listed(names: set[str]) -> dict[str, Any]:
    return {"models": [{"name": n, "model": n, "size": 1} for n in sorted(names)]}


def ollama_get(state: State, path: str) -> tuple[int, Any]:
    with state.lock:
        if path == "/api/version":
            return 200, {"version": "0.0.0-standin"}
        if path == "/api/tags":
            return 200, _listed(state.pulled)
        if path == "/api/ps":
            return 200, _listed(state.loaded)
    return 404, {"error": "not found"}


def ollama_post(state: State, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    name = state.norm(str(body.get("model") or body.get("name") or ""))
    with state.lock:
        if path == "/api/pull":
            if name not in state.library:
                return 500, {"error": "pull model manifest: file does not exist"}
            state.pulled.add(name)
            return 200, {"status": "success"}
        if path == "/api/copy":
            source = state.norm(str(body.get("source")))
            if source not in state.pulled:
                return 404, {"error": f'model "{source}" not found'}
            state.pulled.add(state.norm(str(body.get("destination"))))
            return 200, None
        if path == "/api/generate":
            return _generate(state, name, body)
    return 404, {"error": "not found"}


def _generate(state: State, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    if name not in state.pulled:
        return 404, {"error": f'model "{name}" not found, try pulling it first'}
    if body.get("keep_alive") == 0:
        state.loaded.discard(name)
        return 200, {"model": name, "response": "", "done": True, "done_reason": "unload"}
    state.loaded.add(name)
    return 200, {"model": name, "response": "", "done": True, "done_reason": "load"}


def inferenced_get(state: State, path: str) -> tuple[int, Any]:
    if path == "/v1/models":
        with state.lock:
            data = [{"id": n, "object": "model"} for n in sorted(state.loaded)]
        return 200, {"object": "list", "data": data}
    return 404, {"error": "not found"}


def inferenced_post(state: State, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    name = str(body.get("model") or "")
    if path != "/admin/models":
        return 404, {"error": "not found"}
    with state.lock:
        if name not in state.library:
            return 404, {"error": f"unknown model {name}"}
        state.loaded.add(name)
    return 200, {"model": name, "status": "loaded"}


def inferenced_delete(state: State, path: str) -> tuple[int, Any]:
    name = unquote(path.removeprefix("/admin/models/"))
    with state.lock:
        if not path.startswith("/admin/models/") or name not in state.loaded:
            return 404, {"error": f"model {name} is not loaded"}
        state.loaded.discard(name)
    return 200, {"model": name, "status": "unloaded"}


def serve(kind: str, host: str, port: int, *, library: list[str], token: str | None = None,
          log: Path | None = None) -> ThreadingHTTPServer:  # fmt: skip
    """A running stand-in (in a thread); `shutdown()` it when done."""
    server = ThreadingHTTPServer((host, port), Handler)
    server.state = State(kind, library, token, log)  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=("ollama", "inferenced", "odd"))
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--library", default="")
    parser.add_argument("--token", default=None)
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    library = [n for n in args.library.split(",") if n]
    server = serve(args.kind, args.host, args.port, library=library, token=args.token, log=args.log)
    threading.Event().wait() if server else None


if __name__ == "__main__":
    main()
