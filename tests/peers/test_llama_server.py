"""llama.cpp's own `llama-server` answers chat completions and has the slots it was given.

Real: `llama-server` compiled from the llama.cpp source that llama-cpp-python's sdist vendors
(the `llamacpp` peer env), started with `--parallel 4` and an API key; its HTTP stack and
`requests`. Faked: only the model, the tiny random GGUF llama of `llama_server.py`, whose text
is nonsense. The fixture builds the env when it is missing (a compile of ~10-25 min; `python
-m e2e.peers prepare` builds it with the others); a server that cannot be built or started
skips locally and fails in CI, like every peer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from e2e.peers import PeerServer

pytestmark = pytest.mark.requires_service
TIMEOUT = 60


def _get(server: PeerServer, path: str) -> Any:
    headers = {"Authorization": f"Bearer {server.api_key}"}
    response = requests.get(f"{server.http_url}{path}", headers=headers, timeout=TIMEOUT)
    response.raise_for_status()
    return response.json()


def _chat(server: PeerServer, content: str, *, key: str | None) -> requests.Response:
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
    }
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.post(
        f"{server.http_url}/v1/chat/completions", json=body, headers=headers, timeout=TIMEOUT
    )


def test_llama_server_answers_chat_completions(llama_server_4_slots: PeerServer) -> None:
    response = _chat(llama_server_4_slots, "Hello", key=llama_server_4_slots.api_key)
    response.raise_for_status()
    result = response.json()
    assert result["object"] == "chat.completion"
    (choice,) = result["choices"]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert result["usage"]["completion_tokens"] > 0


def test_llama_server_refuses_a_request_without_its_key(
    llama_server_4_slots: PeerServer,
) -> None:
    assert _chat(llama_server_4_slots, "Hello", key=None).status_code == 401


def test_llama_server_has_the_four_slots_it_was_given(llama_server_4_slots: PeerServer) -> None:
    assert _get(llama_server_4_slots, "/props")["total_slots"] == 4
    assert [slot["id"] for slot in _get(llama_server_4_slots, "/slots")] == [0, 1, 2, 3]


def test_llama_server_answers_four_requests_sent_at_once(
    llama_server_4_slots: PeerServer,
) -> None:
    key = llama_server_4_slots.api_key
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(
            pool.map(lambda i: _chat(llama_server_4_slots, f"Say {i}.", key=key), range(4))
        )
    assert [a.status_code for a in answers] == [200] * 4
    assert all(a.json()["usage"]["completion_tokens"] > 0 for a in answers)
