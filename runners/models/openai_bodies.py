"""Request bodies for the OpenAI clients, built from records as the model block says.

The rules (contracts/llm.py checks the settings; docs/llm-batch.md has the table):
- every body starts from `{"model": model.name, **model.body}`, with the shortcuts
  `maxTokens` (max_tokens) and `temperature` filled in;
- the record gives the rest, one of three ways: its prompt (`promptField`, default `prompt`:
  the user message after `systemPrompt` for chat, `prompt` for completions, `input` for
  embeddings), its `messages` array (`messagesField`, chat; `systemPrompt` goes first), or its
  whole body (`bodyField`, merged over the static body);
- a record's `model`, when it names one, must be model.name: a mismatch fails that record,
  it is never sent to another model nor silently replaced.
A value that cannot make a body fails its record with a reason naming the field (RowError).

Cost per record: one dict lookup and one small dict merge; nothing for the tensor protocols.
"""

from __future__ import annotations

import json
from typing import Any

from contracts.model import ModelEndpoint
from runners.models.rowvalues import RowError

DEFAULT_PROMPT_FIELD = "prompt"
# What the record's prompt becomes, per endpoint.
PROMPT_KEYS = {"chat": "messages", "completions": "prompt", "embeddings": "input"}


def _field(data: Any, field: str) -> Any:
    value = data.get(field) if isinstance(data, dict) else None
    if value is None:
        raise RowError(f"record field {field!r} is missing")
    return value


def _json_text(value: Any, field: str, kind: type, what: str) -> Any:
    """`value`, or the JSON it holds as text, when it is a `kind`; else RowError."""
    if isinstance(value, str) and kind is not str:
        try:
            value = json.loads(value)
        except ValueError:
            raise RowError(f"record field {field!r} is text that is not JSON {what}") from None
    if not isinstance(value, kind):
        raise RowError(f"record field {field!r} is a {type(value).__name__}, not {what}")
    return value


def model_mismatch(model: Any, name: str) -> str:
    """Why a request naming `model` is not sent to the run's model `name`."""
    return (
        f"body.model {json.dumps(model)[:100]} is not the model this run calls ({name!r}); "
        "set model.name to it, or leave model out of the body"
    )


class Bodies:
    """Makes the request bodies of one endpoint (`kind`: chat, completions or embeddings)."""

    def __init__(self, endpoint: ModelEndpoint, kind: str) -> None:
        self.kind = kind
        self.model = endpoint.name
        static: dict[str, Any] = {"model": endpoint.name, **(endpoint.body or {})}
        if endpoint.max_tokens is not None:
            static["max_tokens"] = endpoint.max_tokens
        if endpoint.temperature is not None:
            static["temperature"] = endpoint.temperature
        self.static = static
        system = endpoint.system_prompt
        self._system = [{"role": "system", "content": system}] if system else []
        self._body_field = endpoint.body_field
        self._messages_field = endpoint.messages_field
        self._prompt_field = endpoint.prompt_field or DEFAULT_PROMPT_FIELD
        # A batch of prompts can go as one list request (completions, embeddings).
        self.listable = self._body_field is None and self._messages_field is None

    def item(self, data: Any) -> Any:
        """What a record adds to the static body: its prompt (str), messages (list) or own
        body (dict); raises RowError naming the field."""
        if self._body_field is not None:
            own = _json_text(_field(data, self._body_field), self._body_field, dict, "object")
            model = own.get("model")
            if model is not None and model != self.model:
                raise RowError(
                    f"record field {self._body_field!r}: {model_mismatch(model, self.model)}"
                )
            return own
        if self._messages_field is not None:
            field = self._messages_field
            return _json_text(_field(data, field), field, list, "array of messages")
        value = _field(data, self._prompt_field)
        if not isinstance(value, str):
            kind = f"a {type(value).__name__}, not a string"
            raise RowError(f"record field {self._prompt_field!r} is {kind}")
        return value

    def body(self, item: Any) -> dict[str, Any]:
        """The whole request body for one item (see `item`)."""
        if isinstance(item, dict):
            return {**self.static, **item}
        if self.kind == "chat":
            if isinstance(item, str):
                item = [{"role": "user", "content": item}]
            return {**self.static, "messages": [*self._system, *item]}
        return {**self.static, PROMPT_KEYS[self.kind]: item}
