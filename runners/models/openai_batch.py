"""openai-batch records: each line's body sent as it is to the line's URL, one request each.

A record here is a request line that runners/batchlines.py has checked already (custom_id,
POST, a known url, an object body). What is left is the model and the server:
- `body.model`: absent, it is filled in with the run's model (`model.name`, or the
  deployment's); equal, the body goes as it is; different, the record fails with code
  `model_mismatch` and is not sent (a batch file written for another model is never run on
  this one without a word);
- the url picks the endpoint under the model's API base (`/v1/chat/completions` ->
  `<base>/chat/completions`, the same for completions, embeddings and responses), whatever
  the config's OpenAI protocol: the protocol only says the server speaks OpenAI's API. A server
  that does not speak an endpoint (llama.cpp and `/v1/responses`) refuses its lines;
- the answer: 2xx, the prediction is the line's `response` (`status_code`, `request_id`,
  `body`) and its usage is counted; a refusal (4xx, a 404 included: the URL is the line's) or
  a 500 left after the retries fails the record with the server's status and body kept and an
  error code (STATUS_CODES); 401 and 403 stop the run (the key is wrong for every line);
  unavailability (429, 502-504, timeouts) is retried, then stops the run as for any protocol.
Each request is retried and paced on its own (RequestPolicy), as the chat client's are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contracts.llm import BATCH_URLS
from runners.api import InputRecord, RecordFailure
from runners.models.http import HttpRejected, HttpResponse, HttpServerError, short_reason
from runners.models.openai_bodies import model_mismatch
from runners.models.openai_requests import Requests, response_object
from runners.outcomes import Outcomes
from runners.retry import RequestPolicy
from runners.tokens import usage_of

# Error codes of the statuses a server refuses a line with (others: http_error).
STATUS_CODES = {
    400: "invalid_request",
    404: "not_found",
    405: "not_found",
    413: "request_too_large",
    422: "invalid_request",
    500: "server_error",
}
_PER_RECORD = frozenset({404})
_ERROR_TEXT = 4096  # characters of a non-JSON error page kept in the line's response body


class BatchRequests:
    """Sends openai-batch records for one client (thread-safe)."""

    def __init__(
        self, urls: Mapping[str, str], model: str, requests: Requests, policy: RequestPolicy
    ) -> None:
        self._urls = urls  # line url -> full URL under the model's API base
        self._model = model
        self._requests = requests
        self._policy = policy

    def predict(self, records: Sequence[InputRecord]) -> Outcomes:
        """One outcome per record, with each answer's usage."""
        values: list[Any] = []
        usage: list[Any] = []
        failures: dict[int, RecordFailure] = {}
        for index, record in enumerate(records):
            answer = self._one(record.data)
            if isinstance(answer, RecordFailure):
                failures[index] = answer
                values.append(None)
                usage.append(None)
            else:
                values.append(answer)
                usage.append(usage_of(answer["body"]))
        return Outcomes(values, failures, usage)

    def _one(self, line: dict[str, Any]) -> dict[str, Any] | RecordFailure:
        custom_id, url, body = line["custom_id"], line["url"], line["body"]
        model = body.get("model")
        if model is None:
            body = {**body, "model": self._model}
        elif model != self._model:
            why = model_mismatch(model, self._model)
            return RecordFailure(f"custom_id {custom_id!r}: {why}", "model_mismatch")
        target = self._urls[url]
        completes = BATCH_URLS[url] != "/embeddings"
        try:
            response, answer = self._policy.call(
                lambda: self._requests.post(
                    target, body, what=f"POST {url}", completes=completes, per_record=_PER_RECORD
                )
            )
        except (HttpRejected, HttpServerError) as exc:
            return refusal(custom_id, exc.status, exc.response)
        return response_object(response, answer)


def refusal(custom_id: str, status: int, response: HttpResponse | None) -> RecordFailure:
    """The failure of a line the server refused, with its status and what it said."""
    detail = "" if response is None else short_reason(response.body)
    reason = f"custom_id {custom_id!r}: HTTP {status}" + (f": {detail}" if detail else "")
    code = STATUS_CODES.get(status, "http_error")
    if response is None:
        return RecordFailure(reason, code)
    return RecordFailure(reason, code, response_object(response, _body(response)))


def _body(response: HttpResponse) -> Any:
    text = response.body.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text[:_ERROR_TEXT]
