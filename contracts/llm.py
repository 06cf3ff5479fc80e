"""The rules of LLM request bodies: what a config may set, and with which protocol and input.

Why one module: the same rules are checked in four places, and must say the same thing:
`longrun validate` and the controller's InvalidConfig condition (the config's own validators),
the controller again once a `deploymentRef` has given the protocol (controller/core/serving/
uses.py), and the runner when it loads a contract. Each function returns the first problem as
one line naming the field, or None.

How a request body is made (docs/llm-batch.md): `body` (static) < the record's body
(`bodyField`) < the record's prompt or messages (`promptField` / `messagesField`), plus the
shortcuts `maxTokens`, `temperature` and `systemPrompt`; `model` is always `model.name`.
With `format: openai-batch` a record *is* a request and its body is sent as it is, so none of
those settings apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from contracts.storage_fields import OPENAI_BATCH

if TYPE_CHECKING:
    from contracts.config import RunnerTuning
    from contracts.model import _EndpointFields
    from contracts.storage import StorageSpec

OPENAI_PROTOCOLS = ("openai-chat", "openai-completions", "openai-embeddings")
TENSOR_PROTOCOLS = ("kserve-v1", "kserve-v2", "triton-grpc")
# The URLs a batch line may name, and the endpoint each is under the model's API base.
BATCH_URLS: Mapping[str, str] = {
    "/v1/chat/completions": "/chat/completions",
    "/v1/completions": "/completions",
    "/v1/embeddings": "/embeddings",
    "/v1/responses": "/responses",
}
# Keys of the static `body` the runner sets itself, and where to set them instead.
RESERVED_BODY_KEYS: Mapping[str, str] = {
    "model": "model.name names the model",
    "stream": "the runner reads whole answers, not streams",
    "messages": "each record gives them: use messagesField, or bodyField for whole bodies",
    "prompt": "each record gives it: use promptField, or bodyField for whole bodies",
    "input": "each record gives it: use promptField, or bodyField for whole bodies",
}
# The shortcuts that are sugar over a body key.
SHORTCUTS: Mapping[str, str] = {"max_tokens": "maxTokens", "temperature": "temperature"}
# The settings that build a body from a record: none applies to an openai-batch record.
BODY_SETTINGS = (
    ("body", "body"),
    ("body_field", "bodyField"),
    ("messages_field", "messagesField"),
    ("prompt_field", "promptField"),
    ("system_prompt", "systemPrompt"),
    ("max_tokens", "maxTokens"),
    ("temperature", "temperature"),
)


def model_problem(model: _EndpointFields) -> str | None:
    """What is wrong with the model block's body settings whatever the protocol, or None."""
    fields = [
        name
        for name, value in (
            ("promptField", model.prompt_field),
            ("messagesField", model.messages_field),
            ("bodyField", model.body_field),
        )
        if value is not None
    ]
    if len(fields) > 1:
        return f"set one of promptField, messagesField and bodyField, not {' and '.join(fields)}"
    if model.body_field is not None and model.system_prompt is not None:
        return "systemPrompt: not with bodyField (each record's body holds its own messages)"
    for key, why in RESERVED_BODY_KEYS.items():
        if model.body is not None and key in model.body:
            return f"body.{key}: leave it out ({why})"
    for key, shortcut in SHORTCUTS.items():
        if model.body is not None and key in model.body and getattr(model, key) is not None:
            return f"{shortcut}: set {key} in one place, {shortcut} or body.{key}"
    return None


def protocol_problem(model: _EndpointFields, protocol: str) -> str | None:
    """What is wrong with the body settings for `protocol`, or None."""
    if protocol in TENSOR_PROTOCOLS:
        for attr, name in (("body", "body"), ("body_field", "bodyField")):
            if getattr(model, attr) is not None:
                return f"{name}: applies to OpenAI protocols, not {protocol}"
    if model.messages_field is not None and protocol != "openai-chat":
        return f"messagesField: applies to openai-chat, not {protocol} (use promptField)"
    return None


def input_format(storage: StorageSpec | None) -> str | None:
    """The `format` a storage block names (a plug-in kind's too), or None."""
    if storage is None:
        return None
    body = storage.body()
    value = body.get("format") if isinstance(body, dict) else getattr(body, "format", None)
    return value if isinstance(value, str) else None


def run_problem(
    model: _EndpointFields,
    protocol: str | None,
    *,
    storage_input: StorageSpec,
    outputs: Mapping[str, StorageSpec | None],
    runner: RunnerTuning,
    storage: str = "storage.",
) -> str | None:
    """What is wrong with the model, storage and tuning together (`protocol`: None while a
    deploymentRef has not given it), or None. `outputs` maps `output`/`errors` to their block;
    `storage` is where those blocks are (a contract has them at its top: "")."""
    batch = input_format(storage_input) == OPENAI_BATCH
    kind = storage_input.kind
    if batch and protocol in TENSOR_PROTOCOLS:
        return (
            f"{storage}input.{kind}.format: openai-batch needs an OpenAI protocol "
            f"({', '.join(OPENAI_PROTOCOLS)}), not {protocol}"
        )
    if batch:
        for attr, name in BODY_SETTINGS:
            if getattr(model, attr) is not None:
                return (
                    f"model.{name}: not with format openai-batch (each request line carries "
                    "its own body, sent as it is)"
                )
    for where, spec in outputs.items():
        if input_format(spec) == OPENAI_BATCH and not batch and spec is not None:
            return (
                f"{storage}{where}.{spec.kind}.format: openai-batch output answers "
                "openai-batch input lines; set the input's format to openai-batch, or write "
                "jsonl or csv"
            )
    if runner.tokens_per_minute is not None and protocol in TENSOR_PROTOCOLS:
        return f"runner.tokensPerMinute: applies to OpenAI protocols, not {protocol}"
    return None
