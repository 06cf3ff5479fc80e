"""A small OpenAI-compatible server for the runner's LLM tests (imported as a helper module).

A real HTTP/1.1 server on 127.0.0.1 (stdlib ThreadingHTTPServer) that answers
`/v1/chat/completions`, `/v1/completions` and `/v1/embeddings` the way vLLM and llama.cpp
do, with deterministic text and a `usage` whose counts follow the request (so sums can be
checked), and refuses what a real server refuses: a negative `max_tokens` (400, OpenAI's
error body), an unknown model (404), an endpoint it does not serve (`/v1/responses`: 404).
Every request is recorded. The real servers (llama.cpp) are used where behaviour matters:
tests/runners/test_llm_batch_real.py and tests/local/test_examples_run.py.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

MODEL = "tiny"


def _error(status: int, message: str, kind: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _tokens(value: Any) -> int:
    """A stand-in tokenizer: one token per word of the JSON text."""
    return max(len(json.dumps(value).split()), 1)


def answer(path: str, body: dict[str, Any], refuse: set[str]) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) for one request; a prompt or last message in `refuse` gets a 400."""
    said = body.get("prompt", body.get("input", (body.get("messages") or [{}])[-1].get("content")))
    if isinstance(said, str) and said in refuse:
        return _error(400, f"refused {said!r} for the test", "invalid_request_error")
    if path not in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        return _error(404, f"no endpoint {path}", "not_found_error")
    if body.get("model") != MODEL:
        return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
    limit = body.get("max_tokens", 3)
    if not isinstance(limit, int) or limit < 0:
        return _error(400, "max_tokens must be at least 0", "invalid_request_error")
    if path == "/v1/embeddings":
        items = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"index": i, "embedding": [float(len(str(t))), 1.0]} for i, t in enumerate(items)]
        prompt = sum(_tokens(t) for t in items)
        usage = {"prompt_tokens": prompt, "total_tokens": prompt}  # embeddings complete nothing
        return 200, {"object": "list", "data": data, "usage": usage}
    if path == "/v1/completions":
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = [{"index": i, "text": f"re: {p}"} for i, p in enumerate(prompts)]
        prompt = sum(_tokens(p) for p in prompts)
        usage = _usage(prompt, limit * len(prompts))
        return 200, {"object": "text_completion", "choices": choices, "usage": usage}
    messages = body["messages"]
    text = f"re: {messages[-1].get('content')}"
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return 200, {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [choice],
        "usage": _usage(_tokens(messages), limit),
    }


@dataclass
class OpenAIStub:
    """The server's address and what it was sent."""

    url: str = ""
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    request_ids: bool = True  # answer with an x-request-id header, as OpenAI does
    refuse: set[str] = field(default_factory=set)  # prompts answered with a 400


@contextmanager
def serve() -> Iterator[OpenAIStub]:
    """Run the server on a free port for the duration of the block."""
    stub = OpenAIStub()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(size) or b"{}")
            with lock:
                stub.requests.append((self.path, body))
                number = len(stub.requests)
            status, doc = answer(self.path, body, stub.refuse)
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if stub.request_ids:
                self.send_header("x-request-id", f"req-{number}")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
