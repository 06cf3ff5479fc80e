"""OpenAI-compatible clients (vLLM, llama.cpp, Ollama, Foundry Local, OpenAI itself).

- chat: one `/chat/completions` request per record (the API has no batch form), sent one after
  the other within a batch. Requests in flight therefore equal the runner's `concurrency`, the
  one knob that bounds load on the server: raise it (and keep batches small) for servers that
  batch continuously such as vLLM; llama.cpp serialises requests, so more gains nothing there.
  Each of these requests is retried and rate-limited on its own (`RequestPolicy`): were a 503
  raised to the pipeline, it would retry the whole batch, re-sending the records already
  answered, and at 15% faults a batch of 32 would rarely get through within its attempts. A
  request that runs out of attempts raises TransientError and the pipeline retries the batch.
  The 429s and 503s retried so go with the batch's outcomes (Outcomes.overloaded), for
  `concurrency: auto`, which would otherwise see the batch go through as if nothing happened.
  The policy follows the run's `runner` tuning (attempts, backoff, requestsPerSecond) and
  stops waiting on SIGTERM, both from the RunContext; a constructor `policy` overrides it.
  Retries made here are not counted in the summary's `recordsRetried` (the pipeline's are).
- completions: the whole batch as a prompt list in one request where the server accepts it. A
  server that refuses a list (llama.cpp's server takes at most one prompt) or answers fewer
  choices is remembered, and that client then sends one request per record, each retried and
  rate-limited on its own as for chat. A list request is one request per batch: the pipeline
  retries and paces it.
- embeddings: the whole batch as one `input` list, with the same fallback.

Bodies: runners/models/openai_bodies.py makes them from records (a static `body`, a record's
prompt, messages or whole body, the shortcuts). With `format: openai-batch` every record is a
request line instead and runners/models/openai_batch.py sends it as it is, whichever of the
three clients the protocol names.

Prediction values are the text (chat, completions) or the vector (embeddings), so outputs hold
what users asked for; each answer's `usage` goes beside them (Outcomes.usage), shared out when
one answer covers several records (runners/tokens.py). With `runner.tokensPerMinute`, each
request waits for room under the cap (runners/models/openai_requests.py).

URLs: a bare `scheme://host[:port]` gets `/v1`; any other path is the API base as given
(`.../v1`, Azure-style `.../openai/deployments/NAME`); a full endpoint URL
(`.../v1/chat/completions`) is reduced to its base. A query string (`?api-version=...`) is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from contracts.config import RunnerTuning
from contracts.llm import BATCH_URLS
from contracts.model import ModelEndpoint
from contracts.storage_fields import OPENAI_BATCH
from runners.api import (
    BatchRejected,
    InputRecord,
    Outcome,
    Prediction,
    RecordFailure,
    RunContext,
    TransientError,
)
from runners.models.http import HttpClient, HttpRejected, HttpUnavailable, Transport, with_scheme
from runners.models.openai_batch import BatchRequests
from runners.models.openai_bodies import DEFAULT_PROMPT_FIELD as DEFAULT_PROMPT_FIELD
from runners.models.openai_bodies import Bodies
from runners.models.openai_requests import Requests
from runners.models.rows import Batch, Parts
from runners.outcomes import Outcomes
from runners.retry import RequestPolicy
from runners.tokens import split_usage, usage_of

_ENDPOINTS = ("/chat/completions", "/completions", "/embeddings", "/responses")
# Statuses that blame the record's content rather than the endpoint or its configuration.
_RECORD_STATUSES = frozenset({400, 413, 422})
# Statuses that blame the key, the URL or the model name: never the list form of a request.
_ENDPOINT_STATUSES = frozenset({401, 403, 404})
# One answer: the outcome and the answer's usage (None when it had none).
Answer = tuple[Outcome, Any]


def api_url(url: str, endpoint: str) -> str:
    """The URL of `endpoint` (e.g. "/embeddings") under the API base that `url` names."""
    parts = urlsplit(with_scheme(url))
    path = parts.path.rstrip("/")
    for suffix in _ENDPOINTS:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not path:
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path + endpoint, parts.query, ""))


def _status(exc: Exception) -> int | None:
    return exc.status if isinstance(exc, HttpRejected | HttpUnavailable) else None


class _OpenAIClient:
    """What the three clients share: URL, auth, bodies and one request per record."""

    endpoint_path = ""
    what = ""
    kind = ""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        ctx: RunContext,
        *,
        transport: Transport | None = None,
        policy: RequestPolicy | None = None,
    ) -> None:
        self.url = api_url(endpoint.url, self.endpoint_path)
        tuning = ctx.tuning or RunnerTuning()
        self.policy = policy or RequestPolicy.from_tuning(tuning, stop=ctx.stop)
        self.bodies = Bodies(endpoint, self.kind)
        http = HttpClient(endpoint, ctx, transport=transport)
        self.requests = Requests(http, tokens_per_minute=tuning.tokens_per_minute, stop=ctx.stop)
        self._batch: BatchRequests | None = None
        if ctx.input_format == OPENAI_BATCH:
            urls = {url: api_url(endpoint.url, path) for url, path in BATCH_URLS.items()}
            self._batch = BatchRequests(urls, endpoint.name, self.requests, self.policy)

    def predict(self, records: Sequence[InputRecord]) -> Outcomes:
        self.policy.take_overloads()  # left by this thread's last batch, if it raised
        if self._batch is not None:
            outcomes = self._batch.predict(records)
        else:
            batch = Batch(records, lambda record: self.bodies.item(record.data))
            outcomes = _merged(batch, self._answers(batch.items))
        overloaded = self.policy.take_overloads()
        if not overloaded:
            return outcomes
        return Outcomes(outcomes.values, outcomes.failures, outcomes.usage, overloaded=overloaded)

    def _answers(self, items: list[Any]) -> list[Answer]:
        return [self._one(item) for item in items]

    def _post(self, body: dict[str, Any]) -> Any:
        completes = self.kind != "embeddings"
        return self.requests.post(self.url, body, what=self.what, completes=completes)[1]

    def _one(self, item: Any) -> Answer:
        """One request for one record, retried on its own; a 400-like refusal fails it."""
        body = self.bodies.body(item)
        try:
            answer = self.policy.call(lambda: self._post(body))
        except BatchRejected as exc:
            if _status(exc) in _RECORD_STATUSES:
                return RecordFailure(str(exc)), None
            raise
        return self._read_one(answer), usage_of(answer)

    def _read_one(self, answer: Any) -> Outcome:
        raise NotImplementedError

    def close(self) -> None:
        self.requests.close()


def _merged(batch: Parts, answers: list[Answer]) -> Outcomes:
    """The batch's outcomes in record order, with each answer's usage beside its value."""
    outcomes = batch.outcomes([outcome for outcome, _ in answers])
    if all(usage is None for _, usage in answers):
        return outcomes
    usage: list[Any] = [None] * batch.size
    for index, (_, used) in zip(batch.indexes, answers, strict=True):
        usage[index] = used
    return Outcomes(outcomes.values, outcomes.failures, usage)


class ChatClient(_OpenAIClient):
    """`/chat/completions`: the system prompt, then the record's prompt as the user message
    (or the record's messages, or its whole body)."""

    endpoint_path = "/chat/completions"
    what = "openai-chat"
    kind = "chat"

    def _read_one(self, answer: Any) -> Outcome:
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return RecordFailure(f"{self.what}: the response has no choices[0].message")
        text = message.get("content") if isinstance(message, dict) else None
        # A message without text content (e.g. only tool calls) is an empty answer, not an error.
        return Prediction(text if isinstance(text, str) else "")


class _ListClient(_OpenAIClient):
    """An API that takes the whole batch as one list, falling back to one request per record."""

    list_field = ""
    items_key = ""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        ctx: RunContext,
        *,
        transport: Transport | None = None,
        policy: RequestPolicy | None = None,
    ) -> None:
        super().__init__(endpoint, ctx, transport=transport, policy=policy)
        # None until the first batch of several records shows whether lists are accepted.
        self._takes_lists: bool | None = None

    def _answers(self, items: list[Any]) -> list[Answer]:
        if len(items) <= 1 or self._takes_lists is False or not self.bodies.listable:
            return super()._answers(items)
        try:
            answer = self._post({**self.bodies.static, self.list_field: items})
        except (BatchRejected, TransientError) as exc:
            if self._takes_lists or not _may_refuse_lists(exc):
                raise
            answer = None
        found = self._items(answer)
        if self._takes_lists is None and len(found) < len(items):
            self._takes_lists = False
            return super()._answers(items)
        self._takes_lists = True
        # One usage for the whole list: shared out so that the sum stays exact.
        shares = split_usage(usage_of(answer), len(items))
        return [(self._value(found.get(i)), shares[i]) for i in range(len(items))]

    def _read_one(self, answer: Any) -> Outcome:
        return self._value(self._items(answer).get(0))

    def _items(self, answer: Any) -> dict[int, dict[str, Any]]:
        """The answer's items by their `index` (else their position); empty when malformed."""
        items = answer.get(self.items_key) if isinstance(answer, dict) else None
        if not isinstance(items, list):
            return {}
        found: dict[int, dict[str, Any]] = {}
        for position, item in enumerate(items):
            if isinstance(item, dict):
                index = item.get("index")
                found[index if isinstance(index, int) else position] = item
        return found

    def _value(self, item: dict[str, Any] | None) -> Outcome:
        raise NotImplementedError


def _may_refuse_lists(exc: Exception) -> bool:
    """Whether a first list request failing so may mean "one prompt per request" (4xx or 500).

    A real 500 on the first batch only costs speed: the client then sends one prompt per request.
    """
    status = _status(exc)
    if isinstance(exc, BatchRejected):
        return status not in _ENDPOINT_STATUSES
    return status == 500


class CompletionsClient(_ListClient):
    """`/completions` with `prompt` as a list; the text of each choice."""

    endpoint_path = "/completions"
    what = "openai-completions"
    kind = "completions"
    list_field = "prompt"
    items_key = "choices"

    def _value(self, item: dict[str, Any] | None) -> Outcome:
        text = None if item is None else item.get("text")
        if not isinstance(text, str):
            return RecordFailure(f"{self.what}: the response has no choice with text for it")
        return Prediction(text)


class EmbeddingsClient(_ListClient):
    """`/embeddings` with `input` as a list; the vector of each item."""

    endpoint_path = "/embeddings"
    what = "openai-embeddings"
    kind = "embeddings"
    list_field = "input"
    items_key = "data"

    def _value(self, item: dict[str, Any] | None) -> Outcome:
        vector = None if item is None else item.get("embedding")
        if not isinstance(vector, list):
            return RecordFailure(f"{self.what}: the response has no embedding for it")
        return Prediction(vector)
