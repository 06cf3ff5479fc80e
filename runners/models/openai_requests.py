"""One OpenAI request: POST a JSON body within the tokens-per-minute cap, read the answer.

Shared by the OpenAI clients (runners/models/openai.py) and the openai-batch requests
(runners/models/openai_batch.py). Without `tokensPerMinute` a request is the plain POST; with
it, each request (each attempt of a retried one) reserves its bound first and is charged its
answer's usage after (runners/tokens.py).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from runners.models.http import (
    HttpClient,
    HttpRejected,
    HttpResponse,
    HttpUnavailable,
    json_body,
    parse_json,
)
from runners.retry import Waiter
from runners.tokens import TokenLimiter, request_bound, token_counts, usage_of


class Requests:
    """POSTs JSON bodies for one client (thread-safe)."""

    def __init__(
        self,
        http: HttpClient,
        *,
        tokens_per_minute: int | None = None,
        stop: Waiter | None = None,
    ) -> None:
        self.http = http
        self.limiter = TokenLimiter(tokens_per_minute) if tokens_per_minute else None
        self._stop: Waiter = stop or threading.Event()

    def post(
        self,
        url: str,
        body: dict[str, Any],
        *,
        what: str,
        completes: bool = True,
        per_record: frozenset[int] = frozenset(),
    ) -> tuple[HttpResponse, Any]:
        """The response and its decoded JSON; raises as HttpClient.send and parse_json do."""
        data = json_body(body)
        if self.limiter is None:
            response = self.http.send("POST", url, body=data, what=what, per_record=per_record)
            return response, parse_json(response, what=what)
        bound = request_bound(body, len(data), completes=completes)
        entry = self.limiter.acquire(bound, self._stop)
        # A request without an answer (a timeout) keeps its reservation: it may have been
        # served. One the server refused (4xx, 429, 5xx) made no tokens.
        tokens: int | None = None
        try:
            response = self.http.send("POST", url, body=data, what=what, per_record=per_record)
            answer = parse_json(response, what=what)
            usage = usage_of(answer)
            tokens = None if usage is None else token_counts(usage)[2]
        except (HttpRejected, HttpUnavailable):
            tokens = 0
            raise
        finally:
            self.limiter.settle(entry, tokens)
        return response, answer

    def close(self) -> None:
        """Close the connections."""
        self.http.close()


def request_id(response: HttpResponse | None) -> str:
    """The server's id for the request (`x-request-id`), else a new one (`req_<32 hex>`)."""
    given = None if response is None else response.headers.get("x-request-id")
    return given if given else f"req_{uuid.uuid4().hex}"


def response_object(response: HttpResponse, body: Any) -> dict[str, Any]:
    """An answer as an OpenAI batch output line's `response`: status, request id, body."""
    return {"status_code": response.status, "request_id": request_id(response), "body": body}
