"""OpenAI-compatible chat, completions and embeddings clients: URLs, bodies, answers, failures.

Faked: the HTTP transport (`FakeTransport`), answering like vLLM/llama.cpp/Ollama would,
including servers that refuse prompt lists, and the waits of per-request retries (a stop event
that records them instead of sleeping, a rate limiter on a clock that never moves). Real: the
clients, endpoint validation, runners.retry.
The same clients against a real llama.cpp server are in test_model_real_servers.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from model_fakes import FakeTransport, Sent, endpoint, records, reply

from contracts.config import RunnerTuning
from runners.api import (
    ConfigError,
    Prediction,
    RecordFailure,
    RunContext,
    TransientError,
)
from runners.modelcalls import ModelCalls
from runners.models.http import HttpResponse
from runners.models.openai import ChatClient, CompletionsClient, EmbeddingsClient, api_url
from runners.pace import COOLDOWN, AutoConcurrency
from runners.retry import Backoff, RateLimiter, RequestPolicy


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://vllm:8000", "http://vllm:8000/v1/chat/completions"),
        ("http://vllm:8000/", "http://vllm:8000/v1/chat/completions"),
        ("http://vllm:8000/v1", "http://vllm:8000/v1/chat/completions"),
        ("vllm:8000/v1/", "http://vllm:8000/v1/chat/completions"),
        ("http://h/v1/chat/completions", "http://h/v1/chat/completions"),
        ("http://h/v1/embeddings", "http://h/v1/chat/completions"),
        (
            "https://x.openai.azure.com/openai/deployments/gpt?api-version=2024-06-01",
            "https://x.openai.azure.com/openai/deployments/gpt/chat/completions"
            "?api-version=2024-06-01",
        ),
    ],
)
def test_api_url_accepts_base_v1_and_full_urls(url: str, expected: str) -> None:
    assert api_url(url, "/chat/completions") == expected


def chat_answer(sent: Sent) -> HttpResponse:
    prompt = sent.json()["messages"][-1]["content"]
    return reply(
        {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"re: {prompt}"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
    )


def test_chat_sends_system_and_user_messages_per_record(ctx: RunContext) -> None:
    fake = FakeTransport(chat_answer)
    model = endpoint(
        "openai-chat", "http://llm:8000", name="tiny", system_prompt="Be brief.", max_tokens=8
    )
    outcomes = ChatClient(model, ctx, transport=fake).predict(
        records({"prompt": "hi"}, {"prompt": "yo"})
    )
    assert outcomes == [Prediction("re: hi"), Prediction("re: yo")]
    assert [s.url for s in fake.sent] == ["http://llm:8000/v1/chat/completions"] * 2
    assert fake.sent[0].json() == {
        "model": "tiny",
        "max_tokens": 8,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
    }


def test_chat_leaves_out_unset_options(ctx: RunContext) -> None:
    fake = FakeTransport(chat_answer)
    model = endpoint("openai-chat", prompt_field="question", temperature=0)
    ChatClient(model, ctx, transport=fake).predict(records({"question": "why"}))
    assert fake.sent[0].json() == {
        "model": "iris",
        "temperature": 0,
        "messages": [{"role": "user", "content": "why"}],
    }


def test_chat_fails_records_without_a_text_prompt(ctx: RunContext) -> None:
    fake = FakeTransport(chat_answer)
    outcomes = ChatClient(endpoint("openai-chat"), ctx, transport=fake).predict(
        records({"text": "x"}, {"prompt": 3}, {"prompt": "ok"})
    )
    assert outcomes == [
        RecordFailure("record field 'prompt' is missing"),
        RecordFailure("record field 'prompt' is a int, not a string"),
        Prediction("re: ok"),
    ]
    assert len(fake.sent) == 1


def test_chat_tolerates_missing_optional_fields(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"choices": [{"message": {"content": None}}]}))
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake)
    assert client.predict(records({"prompt": "x"})) == [Prediction("")]


def test_chat_fails_the_record_on_a_malformed_answer(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"choices": []}))
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake)
    [outcome] = client.predict(records({"prompt": "x"}))
    assert isinstance(outcome, RecordFailure)
    assert "choices[0].message" in outcome.reason


def test_chat_fails_only_the_record_the_server_refuses(ctx: RunContext) -> None:
    def handle(sent: Sent) -> HttpResponse:
        if sent.json()["messages"][-1]["content"] == "long":
            return reply({"error": {"message": "context length exceeded"}}, status=400)
        return chat_answer(sent)

    client = ChatClient(endpoint("openai-chat"), ctx, transport=FakeTransport(handle))
    outcomes = client.predict(records({"prompt": "long"}, {"prompt": "ok"}))
    assert outcomes[1] == Prediction("re: ok")
    assert isinstance(outcomes[0], RecordFailure)
    assert "HTTP 400: context length exceeded" in outcomes[0].reason


def test_chat_stops_the_run_when_the_key_is_refused(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"error": "invalid api key"}, status=401))
    with pytest.raises(ConfigError, match="HTTP 401"):
        ChatClient(endpoint("openai-chat"), ctx, transport=fake).predict(records({"prompt": "x"}))


class RecordingStop(threading.Event):
    """A stop event that is never set and records the waits instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return False


def policy(*, attempts: int = 5, rate: float | None = None) -> RequestPolicy:
    """Retries without sleeping; a rate limiter on a clock that never moves."""
    limiter = RateLimiter(rate, clock=lambda: 0.0) if rate else None
    return RequestPolicy(Backoff(0.5, 30.0, attempts), limiter, RecordingStop())


def waits(used: RequestPolicy) -> list[float | None]:
    assert isinstance(used.stop, RecordingStop)
    return used.stop.waits


def failing_once(prompt: str, status: int, **headers: str) -> Callable[[Sent], HttpResponse]:
    """Chat answers, except a first `status` for `prompt`."""
    failed: list[str] = []

    def handle(sent: Sent) -> HttpResponse:
        if sent.json()["messages"][-1]["content"] == prompt and not failed:
            failed.append(prompt)
            return reply({"error": "busy"}, status=status, headers=headers)
        return chat_answer(sent)

    return handle


def test_chat_retries_only_the_request_that_failed(ctx: RunContext) -> None:
    fake, used = FakeTransport(failing_once("b", 503)), policy()
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake, policy=used)
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}))
    assert outcomes == [Prediction("re: a"), Prediction("re: b"), Prediction("re: c")]
    assert [s.json()["messages"][-1]["content"] for s in fake.sent] == ["a", "b", "b", "c"]
    assert len(waits(used)) == 1


def test_chat_waits_at_least_retry_after_before_resending(ctx: RunContext) -> None:
    fake, used = FakeTransport(failing_once("a", 429, **{"Retry-After": "7"})), policy()
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake, policy=used)
    assert client.predict(records({"prompt": "a"})) == [Prediction("re: a")]
    assert len(fake.sent) == 2
    assert len(waits(used)) == 1 and (waits(used)[0] or 0) >= 7


def test_chat_rate_limit_paces_every_request_not_every_batch(ctx: RunContext) -> None:
    fake, used = FakeTransport(chat_answer), policy(rate=2)
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake, policy=used)
    client.predict(records({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}))
    assert waits(used) == [0.5, 1.0]  # 2 requests/s: the 2nd and 3rd request wait their turn


def test_chat_raises_transient_error_when_a_request_runs_out_of_attempts(
    ctx: RunContext,
) -> None:
    fake = FakeTransport(lambda _: reply({}, status=429, headers={"Retry-After": "3"}))
    used = policy(attempts=2)
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake, policy=used)
    with pytest.raises(TransientError) as caught:
        client.predict(records({"prompt": "x"}, {"prompt": "y"}))
    assert caught.value.retry_after == 3
    assert len(fake.sent) == 2 and waits(used) == [3.0]


def test_chat_without_a_policy_retries_with_the_default_tuning(ctx: RunContext) -> None:
    client = ChatClient(endpoint("openai-chat"), ctx)
    assert client.policy.backoff.max_attempts == RunnerTuning().max_attempts
    assert client.policy.limiter is None


def test_chat_follows_the_runs_tuning_and_stop_event(ctx: RunContext) -> None:
    stop = threading.Event()
    tuning = RunnerTuning(max_attempts=9, requests_per_second=3.0)
    client = ChatClient(endpoint("openai-chat"), replace(ctx, tuning=tuning, stop=stop))
    assert client.policy.backoff.max_attempts == 9
    assert client.policy.limiter is not None and client.policy.stop is stop


def test_chat_sends_the_api_key(ctx: RunContext, put_secret: Callable[..., Path]) -> None:
    put_secret("openai", "key", "sk-test")
    model = endpoint("openai-chat", auth={"secret_ref": {"name": "openai", "key": "key"}})
    fake = FakeTransport(chat_answer)
    ChatClient(model, ctx, transport=fake).predict(records({"prompt": "x"}))
    assert fake.sent[0].headers["Authorization"] == "Bearer sk-test"


def completions_answer(sent: Sent) -> HttpResponse:
    prompts = sent.json()["prompt"]
    prompts = prompts if isinstance(prompts, list) else [prompts]
    # Choices come back out of order; `index` says which prompt each answers.
    choices = [{"index": i, "text": f"<{p}>"} for i, p in reversed(list(enumerate(prompts)))]
    return reply({"choices": choices})


def test_completions_sends_the_batch_as_one_prompt_list(ctx: RunContext) -> None:
    fake = FakeTransport(completions_answer)
    client = CompletionsClient(endpoint("openai-completions", max_tokens=4), ctx, transport=fake)
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}))
    assert outcomes == [Prediction("<a>"), Prediction("<b>"), Prediction("<c>")]
    assert len(fake.sent) == 1
    assert fake.sent[0].url == "http://model:8080/v1/completions"
    assert fake.sent[0].json() == {"model": "iris", "max_tokens": 4, "prompt": ["a", "b", "c"]}


def one_prompt_only(status: int) -> Callable[[Sent], HttpResponse]:
    """A server like llama.cpp's, which fails when `prompt` lists more than one prompt."""

    def handle(sent: Sent) -> HttpResponse:
        prompt = sent.json()["prompt"]
        if isinstance(prompt, list) and len(prompt) > 1:
            return reply({"detail": "only one prompt"}, status=status)
        return completions_answer(sent)

    return handle


@pytest.mark.parametrize("status", [400, 422, 500])
def test_completions_falls_back_to_one_request_per_record(status: int, ctx: RunContext) -> None:
    fake = FakeTransport(one_prompt_only(status))
    client = CompletionsClient(endpoint("openai-completions"), ctx, transport=fake)
    assert client.predict(records({"prompt": "a"}, {"prompt": "b"})) == [
        Prediction("<a>"),
        Prediction("<b>"),
    ]
    client.predict(records({"prompt": "c"}, {"prompt": "d"}))
    prompts = [s.json()["prompt"] for s in fake.sent]
    assert prompts == [["a", "b"], "a", "b", "c", "d"]


def test_completions_fallback_retries_each_prompt_on_its_own(ctx: RunContext) -> None:
    failed: list[str] = []

    def handle(sent: Sent) -> HttpResponse:
        if sent.json()["prompt"] == "b" and not failed:
            failed.append("b")
            return reply({"error": "busy"}, status=503)
        return one_prompt_only(400)(sent)

    fake, used = FakeTransport(handle), policy()
    client = CompletionsClient(endpoint("openai-completions"), ctx, transport=fake, policy=used)
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": "b"}))
    assert outcomes == [Prediction("<a>"), Prediction("<b>")]
    assert [s.json()["prompt"] for s in fake.sent] == [["a", "b"], "a", "b", "b"]


def test_completions_falls_back_when_the_server_answers_one_choice(ctx: RunContext) -> None:
    fake = FakeTransport(lambda s: reply({"choices": [{"text": "first only"}]}))
    client = CompletionsClient(endpoint("openai-completions"), ctx, transport=fake)
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": "b"}))
    assert outcomes == [Prediction("first only")] * 2
    assert len(fake.sent) == 3


def test_completions_keeps_lists_once_they_worked(ctx: RunContext) -> None:
    answers = iter([completions_answer, lambda _: reply({"x": 1}, status=500)])
    fake = FakeTransport(lambda s: next(answers)(s))
    client = CompletionsClient(endpoint("openai-completions"), ctx, transport=fake)
    client.predict(records({"prompt": "a"}, {"prompt": "b"}))
    with pytest.raises(TransientError):
        client.predict(records({"prompt": "c"}, {"prompt": "d"}))


def test_completions_does_not_fall_back_when_the_key_is_refused(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"error": "no"}, status=403))
    client = CompletionsClient(endpoint("openai-completions"), ctx, transport=fake)
    with pytest.raises(ConfigError, match="HTTP 403"):
        client.predict(records({"prompt": "a"}, {"prompt": "b"}))
    assert len(fake.sent) == 1


def embeddings_answer(sent: Sent) -> HttpResponse:
    texts: Any = sent.json()["input"]
    texts = texts if isinstance(texts, list) else [texts]
    data = [
        {"object": "embedding", "index": i, "embedding": [len(t), 0.5]} for i, t in enumerate(texts)
    ]
    return reply({"data": data, "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}})


def test_embeddings_sends_the_batch_as_one_input_list(ctx: RunContext) -> None:
    fake = FakeTransport(embeddings_answer)
    model = endpoint("openai-embeddings", "http://emb:8080/v1", prompt_field="text")
    outcomes = EmbeddingsClient(model, ctx, transport=fake).predict(
        records({"text": "ab"}, {"text": "abc"})
    )
    assert outcomes == [Prediction([2, 0.5]), Prediction([3, 0.5])]
    assert fake.sent[0].url == "http://emb:8080/v1/embeddings"
    assert fake.sent[0].json() == {"model": "iris", "input": ["ab", "abc"]}


def test_embeddings_fails_records_the_answer_leaves_out(ctx: RunContext) -> None:
    def handle(sent: Sent) -> HttpResponse:
        return reply({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1}]})

    client = EmbeddingsClient(endpoint("openai-embeddings"), ctx, transport=FakeTransport(handle))
    client._takes_lists = True  # learned earlier: this server takes lists
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": "b"}))
    assert outcomes[0] == Prediction([1.0])
    assert outcomes[1] == RecordFailure("openai-embeddings: the response has no embedding for it")


def test_embeddings_sends_a_single_record_as_a_string(ctx: RunContext) -> None:
    fake = FakeTransport(embeddings_answer)
    EmbeddingsClient(endpoint("openai-embeddings"), ctx, transport=fake).predict(
        records({"prompt": "solo"})
    )
    assert fake.sent[0].json()["input"] == "solo"


def batch_line(custom_id: str, prompt: str) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": prompt}]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


@pytest.mark.parametrize("lines", [False, True], ids=["chat", "openai-batch"])
def test_a_429_the_client_retried_itself_still_lowers_concurrency_auto(
    ctx: RunContext, lines: bool
) -> None:
    # The OpenAI clients retry each request on their own (RequestPolicy): the pipeline sees
    # the batch succeed, and the gate of `concurrency: auto` must hear of the 429 all the same.
    fake, used = FakeTransport(failing_once("b", 429)), policy()
    rows = [batch_line("1", "a"), batch_line("2", "b")] if lines else [{"prompt": "a"}]
    rows += [] if lines else [{"prompt": "b"}]
    run = replace(ctx, input_format="openai-batch") if lines else ctx
    client = ChatClient(endpoint("openai-chat"), run, transport=fake, policy=used)
    gate = AutoConcurrency(1, 8)
    calls = ModelCalls(client, Backoff(0, 0), threading.Event(), pace=gate)

    [(outcomes, _)] = calls.predict(records(*rows))

    assert len(outcomes) == 2 and not getattr(outcomes, "failures", {})
    assert len(fake.sent) == 3  # b twice: the client retried it
    assert (gate.climber.ceiling, gate.climber.cooldown) == (1, COOLDOWN)


def test_a_batch_without_a_429_tells_concurrency_auto_nothing_of_overload(
    ctx: RunContext,
) -> None:
    client = ChatClient(endpoint("openai-chat"), ctx, transport=FakeTransport(chat_answer))
    gate = AutoConcurrency(1, 8)
    calls = ModelCalls(client, Backoff(0, 0), threading.Event(), pace=gate)
    calls.predict(records({"prompt": "a"}))
    assert (gate.climber.ceiling, gate.climber.cooldown) == (0, 0)
