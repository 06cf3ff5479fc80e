"""The OpenAI clients' request bodies, token usage and openai-batch requests.

Faked: the HTTP transport (`FakeTransport`), answering like vLLM/llama.cpp would, and the
waits of per-request retries (a policy whose stop event records waits). Real: the clients,
runners/models/openai_bodies.py, openai_batch.py, openai_requests.py and runners/tokens.py.
The same paths against a real llama.cpp server: tests/runners/test_llm_batch_real.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from model_fakes import FakeTransport, Sent, endpoint, records, reply

from contracts.config import RunnerTuning
from runners.api import ConfigError, InputRecord, Prediction, RecordFailure, RunContext
from runners.models.http import HttpResponse
from runners.models.openai import ChatClient, CompletionsClient, EmbeddingsClient
from runners.retry import Backoff, RequestPolicy

USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def chat(sent: Sent) -> HttpResponse:
    messages = sent.json().get("messages", [])
    choice = {"index": 0, "message": {"role": "assistant", "content": f"re: {len(messages)}"}}
    return reply({"choices": [choice], "usage": USAGE}, headers={"x-request-id": "req-abc"})


def test_a_static_body_goes_into_every_request_with_the_shortcuts(ctx: RunContext) -> None:
    fake = FakeTransport(chat)
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    model = endpoint(
        "openai-chat",
        name="tiny",
        body={"response_format": schema, "seed": 1, "stop": ["\n"]},
        max_tokens=8,
        system_prompt="Be brief.",
    )
    ChatClient(model, ctx, transport=fake).predict(records({"prompt": "hi"}))
    assert fake.sent[0].json() == {
        "model": "tiny",
        "response_format": schema,
        "seed": 1,
        "stop": ["\n"],
        "max_tokens": 8,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
    }


def test_a_messages_field_sends_each_records_conversation(ctx: RunContext) -> None:
    fake = FakeTransport(chat)
    turns = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
    ]
    model = endpoint("openai-chat", messages_field="dialog", system_prompt="Math.")
    client = ChatClient(model, ctx, transport=fake)
    outcomes = client.predict(records({"dialog": turns}, {"dialog": json.dumps(turns[:1])}))
    assert outcomes == [Prediction("re: 4"), Prediction("re: 2")]
    assert fake.sent[0].json()["messages"] == [{"role": "system", "content": "Math."}, *turns]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({}, "record field 'dialog' is missing"),
        ({"dialog": "hello"}, "record field 'dialog' is text that is not JSON array of messages"),
        ({"dialog": {"role": "user"}}, "record field 'dialog' is a dict, not array of messages"),
    ],
)
def test_a_record_without_messages_fails_naming_the_field(
    ctx: RunContext, row: dict[str, Any], reason: str
) -> None:
    fake = FakeTransport(chat)
    client = ChatClient(endpoint("openai-chat", messages_field="dialog"), ctx, transport=fake)
    assert client.predict(records(row)) == [RecordFailure(reason)]
    assert fake.sent == []


def test_a_body_field_merges_each_records_body_over_the_static_one(ctx: RunContext) -> None:
    fake = FakeTransport(chat)
    model = endpoint("openai-chat", name="tiny", body_field="request", body={"seed": 1})
    own = {"messages": [{"role": "user", "content": "x"}], "seed": 2, "tools": []}
    ChatClient(model, ctx, transport=fake).predict(records({"request": json.dumps(own)}))
    assert fake.sent[0].json() == {"model": "tiny", **own}


def test_a_body_naming_another_model_fails_and_is_not_sent(ctx: RunContext) -> None:
    fake = FakeTransport(chat)
    model = endpoint("openai-chat", name="tiny", body_field="request")
    same = {"model": "tiny", "messages": []}
    other = {"model": "gpt-4o", "messages": []}
    client = ChatClient(model, ctx, transport=fake)
    outcomes = client.predict(records({"request": other}, {"request": same}))
    assert isinstance(outcomes[0], RecordFailure)
    assert "body.model \"gpt-4o\" is not the model this run calls ('tiny')" in outcomes[0].reason
    assert outcomes[1] == Prediction("re: 0")
    assert [s.json()["model"] for s in fake.sent] == ["tiny"]


def test_each_answers_usage_goes_with_its_record(ctx: RunContext) -> None:
    fake = FakeTransport(chat)
    client = ChatClient(endpoint("openai-chat"), ctx, transport=fake)
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": 1}, {"prompt": "c"}))
    assert outcomes.usage == [USAGE, None, USAGE]


def test_a_list_request_shares_its_usage_among_its_records(ctx: RunContext) -> None:
    def embed(sent: Sent) -> HttpResponse:
        items = sent.json()["input"]
        data = [{"index": i, "embedding": [1.0]} for i in range(len(items))]
        return reply({"data": data, "usage": {"prompt_tokens": 10, "total_tokens": 10}})

    client = EmbeddingsClient(endpoint("openai-embeddings"), ctx, transport=FakeTransport(embed))
    outcomes = client.predict(records({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}))
    assert outcomes.usage is not None
    assert [u["total_tokens"] for u in outcomes.usage] == [4, 3, 3]


def test_a_body_field_makes_completions_send_one_request_per_record(ctx: RunContext) -> None:
    def complete(sent: Sent) -> HttpResponse:
        return reply({"choices": [{"index": 0, "text": "ok"}], "usage": USAGE})

    fake = FakeTransport(complete)
    model = endpoint("openai-completions", body_field="request")
    client = CompletionsClient(model, ctx, transport=fake)
    client.predict(records({"request": {"prompt": "a"}}, {"request": {"prompt": "b"}}))
    assert [s.json()["prompt"] for s in fake.sent] == ["a", "b"]


# -- openai-batch records -----------------------------------------------------------------


def line(custom_id: str, url: str = "/v1/chat/completions", **body: Any) -> InputRecord:
    data = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
    return InputRecord(0, custom_id, data)


@pytest.fixture
def batch_ctx(ctx: RunContext) -> RunContext:
    return replace(ctx, input_format="openai-batch")


def answering(sent: Sent) -> HttpResponse:
    body = sent.json()
    if body.get("max_tokens") == -1:
        error = {"error": {"message": "max_tokens must be positive", "type": "invalid"}}
        return reply(error, status=400, headers={"x-request-id": "req-400"})
    if sent.url.endswith("/responses"):
        return reply(b"<html>Not Found</html>", status=404)
    return chat(sent)


def test_batch_bodies_go_as_they_are_to_their_urls_and_answers_are_kept_whole(
    batch_ctx: RunContext,
) -> None:
    fake = FakeTransport(answering)
    # Whichever OpenAI client the protocol names: each line's url picks the endpoint.
    client = CompletionsClient(endpoint("openai-chat", name="tiny"), batch_ctx, transport=fake)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logprobs": True}
    outcomes = client.predict(
        [line("a", **body), line("b", "/v1/embeddings", input="y"), line("c", messages=[])]
    )
    assert [s.url for s in fake.sent] == [
        "http://model:8080/v1/chat/completions",
        "http://model:8080/v1/embeddings",
        "http://model:8080/v1/chat/completions",
    ]
    assert fake.sent[0].json() == body
    assert fake.sent[1].json() == {"input": "y", "model": "tiny"}  # model filled in
    first = outcomes.values[0]
    assert first["status_code"] == 200 and first["request_id"] == "req-abc"
    assert first["body"]["choices"][0]["message"]["content"] == "re: 1"
    assert outcomes.values[1]["body"]["choices"][0]["message"]["content"] == "re: 0"
    assert outcomes.usage == [USAGE] * 3


def test_batch_lines_the_server_or_the_model_refuse_fail_with_code_and_answer(
    batch_ctx: RunContext,
) -> None:
    fake = FakeTransport(answering)
    client = ChatClient(endpoint("openai-chat", name="tiny"), batch_ctx, transport=fake)
    outcomes = client.predict(
        [
            line("a", max_tokens=-1, messages=[]),
            line("b", "/v1/responses", input="x"),
            line("c", model="gpt-4o", messages=[]),
        ]
    )
    refused, missing, other = (outcomes.failures[i] for i in range(3))
    assert refused.code == "invalid_request"
    assert refused.response == {
        "status_code": 400,
        "request_id": "req-400",
        "body": {"error": {"message": "max_tokens must be positive", "type": "invalid"}},
    }
    assert refused.reason == "custom_id 'a': HTTP 400: max_tokens must be positive"
    assert missing.code == "not_found" and missing.response["status_code"] == 404
    assert missing.response["body"] == "<html>Not Found</html>"
    assert missing.response["request_id"].startswith("req_")
    assert other.code == "model_mismatch" and other.response is None
    assert len(fake.sent) == 2  # the mismatched line never left


def test_a_refused_key_stops_a_batch_run(batch_ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"error": "invalid api key"}, status=401))
    client = ChatClient(endpoint("openai-chat", name="tiny"), batch_ctx, transport=fake)
    with pytest.raises(ConfigError, match="HTTP 401"):
        client.predict([line("a", messages=[])])


def test_a_server_error_left_after_the_retries_fails_its_line_with_status_500(
    batch_ctx: RunContext,
) -> None:
    fake = FakeTransport(lambda _: reply({"error": {"message": "boom"}}, status=500))
    policy = RequestPolicy(Backoff(initial=0, maximum=0, max_attempts=2))
    client = ChatClient(
        endpoint("openai-chat", name="tiny"), batch_ctx, transport=fake, policy=policy
    )
    outcomes = client.predict([line("a", messages=[])])
    assert outcomes.failures[0].code == "server_error"
    assert outcomes.failures[0].response["status_code"] == 500
    assert len(fake.sent) == 2


def test_a_token_cap_releases_a_request_without_a_bound_when_it_fails(ctx: RunContext) -> None:
    busy = [reply({"error": "busy"}, status=503)]
    fake = FakeTransport(lambda sent: busy.pop() if busy else chat(sent))
    tuned = replace(ctx, tuning=RunnerTuning(tokensPerMinute=1000, initialBackoffSeconds=0))
    client = ChatClient(endpoint("openai-chat"), tuned, transport=fake)
    # No max_tokens: each attempt runs alone; the 503'd one must let the retry start.
    assert client.predict(records({"prompt": "x"})) == [Prediction("re: 1")]
    assert len(fake.sent) == 2
    limiter = client.requests.limiter
    assert limiter is not None and limiter.used == USAGE["total_tokens"]  # charged its usage
