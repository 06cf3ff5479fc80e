"""One real request per protocol to each real model server the harness starts.

Real: the servers (KServe, MLServer, Triton via PyTriton, llama.cpp, vLLM's CPU build) from their
own PyPI envs, their HTTP and gRPC stacks, and the clients (``requests``, ``tritonclient.http``,
``tritonclient.grpc``). Faked: only the models — an sklearn iris classifier trained at start-up, a
fixed nearest-centroid iris classifier for Triton, and tiny random llamas (GGUF for llama.cpp, a
Hugging Face directory with a byte-level BPE tokenizer for vLLM) whose text is nonsense.
Servers that cannot be prepared skip locally and fail in CI (see ``e2e.peers.fixtures``).
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from e2e.peers import PeerServer

pytestmark = pytest.mark.requires_service

SETOSA = [5.1, 3.5, 1.4, 0.2]  # first row of the iris data set: class 0
VIRGINICA = [6.7, 3.0, 5.2, 2.3]  # row 145: class 2
ROWS = np.asarray([SETOSA, VIRGINICA], dtype=np.float32)
EXPECTED_CLASSES = [0, 2]
TIMEOUT = 30


def _v2_rest_infer(server: PeerServer) -> list[int]:
    body = {
        "inputs": [
            {"name": "input-0", "shape": [2, 4], "datatype": "FP32", "data": ROWS.ravel().tolist()}
        ]
    }  # no "id": servers must answer requests without one
    response = requests.post(
        f"{server.http_url}/v2/models/{server.model}/infer", json=body, timeout=TIMEOUT
    )
    response.raise_for_status()
    (output,) = [o for o in response.json()["outputs"] if o["name"] == "predict"]
    return [int(v) for v in output["data"]]


def _tritonclient_http_infer(server: PeerServer, *, binary: bool) -> np.ndarray:
    client = triton_http.InferenceServerClient(server.http_url.removeprefix("http://"))
    with closing(client):
        tensor = triton_http.InferInput("input-0", list(ROWS.shape), "FP32")
        tensor.set_data_from_numpy(ROWS, binary_data=binary)
        wanted = [triton_http.InferRequestedOutput("predict", binary_data=binary)]
        return np.asarray(client.infer(server.model, [tensor], outputs=wanted).as_numpy("predict"))


def _tritonclient_grpc_infer(server: PeerServer) -> np.ndarray:
    assert server.grpc_url is not None
    client = triton_grpc.InferenceServerClient(server.grpc_url)
    with closing(client):
        tensor = triton_grpc.InferInput("input-0", list(ROWS.shape), "FP32")
        tensor.set_data_from_numpy(ROWS)
        wanted = [triton_grpc.InferRequestedOutput("predict")]
        return np.asarray(client.infer(server.model, [tensor], outputs=wanted).as_numpy("predict"))


def _classes(array: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(array).ravel()]


def _openai_post(server: PeerServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(f"{server.http_url}{path}", json=body, timeout=TIMEOUT)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def test_kserve_v1_rest_predicts_iris_classes(kserve_server: PeerServer) -> None:
    response = requests.post(
        f"{kserve_server.http_url}/v1/models/{kserve_server.model}:predict",
        json={"instances": ROWS.tolist()},
        timeout=TIMEOUT,
    )
    response.raise_for_status()
    assert response.json() == {"predictions": EXPECTED_CLASSES}


def test_kserve_v2_rest_answers_request_without_id(kserve_server: PeerServer) -> None:
    assert _v2_rest_infer(kserve_server) == EXPECTED_CLASSES


def test_kserve_v2_grpc_returns_raw_outputs_tritonclient_reads(
    kserve_server: PeerServer,
) -> None:
    assert _classes(_tritonclient_grpc_infer(kserve_server)) == EXPECTED_CLASSES


def test_mlserver_v2_rest_predicts_with_tritonclient_json(mlserver_server: PeerServer) -> None:
    result = _tritonclient_http_infer(mlserver_server, binary=False)
    assert _classes(result) == EXPECTED_CLASSES


def test_mlserver_v2_grpc_predicts_iris_classes(mlserver_server: PeerServer) -> None:
    assert _classes(_tritonclient_grpc_infer(mlserver_server)) == EXPECTED_CLASSES


def test_triton_v2_rest_predicts_with_binary_tensors(triton_server: PeerServer) -> None:
    result = _tritonclient_http_infer(triton_server, binary=True)
    assert result.shape == (2, 1)
    assert _classes(result) == EXPECTED_CLASSES


def test_triton_v2_rest_predicts_with_plain_json(triton_server: PeerServer) -> None:
    assert _v2_rest_infer(triton_server) == EXPECTED_CLASSES


def test_triton_grpc_returns_classes_and_probabilities(triton_server: PeerServer) -> None:
    assert triton_server.grpc_url is not None
    client = triton_grpc.InferenceServerClient(triton_server.grpc_url)
    with closing(client):
        tensor = triton_grpc.InferInput("input-0", list(ROWS.shape), "FP32")
        tensor.set_data_from_numpy(ROWS)
        result = client.infer(triton_server.model, [tensor])
    assert _classes(result.as_numpy("predict")) == EXPECTED_CLASSES
    proba = result.as_numpy("predict_proba")
    assert proba.shape == (2, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)


def test_llama_chat_completion_returns_assistant_message(llama_chat_server: PeerServer) -> None:
    result = _openai_post(
        llama_chat_server,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "seed": 1},
    )
    assert result["object"] == "chat.completion"
    (choice,) = result["choices"]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert result["usage"]["completion_tokens"] > 0


def test_llama_completion_returns_text_and_usage(llama_chat_server: PeerServer) -> None:
    result = _openai_post(
        llama_chat_server,
        "/v1/completions",
        {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0},
    )
    assert result["object"] == "text_completion"
    assert isinstance(result["choices"][0]["text"], str)
    assert result["usage"]["prompt_tokens"] > 0


def test_llama_embeddings_return_one_vector_per_input(
    llama_embeddings_server: PeerServer,
) -> None:
    result = _openai_post(
        llama_embeddings_server, "/v1/embeddings", {"input": ["first text", "second"]}
    )
    vectors = [item["embedding"] for item in result["data"]]
    assert len(vectors) == 2
    assert {len(v) for v in vectors} == {64}  # the tiny model's embedding width
    assert all(np.isfinite(v).all() for v in vectors)


def _vllm_post(server: PeerServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {server.api_key}"}
    response = requests.post(f"{server.http_url}{path}", json=body, headers=headers, timeout=60)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def test_vllm_chat_completion_returns_assistant_message_and_usage(vllm_server: PeerServer) -> None:
    result = _vllm_post(
        vllm_server,
        "/v1/chat/completions",
        {
            "model": vllm_server.model,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello"},
            ],
            "max_tokens": 8,
        },
    )
    assert result["object"] == "chat.completion"
    (choice,) = result["choices"]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    usage = result["usage"]
    assert usage["completion_tokens"] == 8  # random weights never say </s> in time: all 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + 8


def test_vllm_completion_returns_text_and_usage(vllm_server: PeerServer) -> None:
    result = _vllm_post(
        vllm_server,
        "/v1/completions",
        {"model": vllm_server.model, "prompt": "The quick brown fox", "max_tokens": 4},
    )
    assert result["object"] == "text_completion"
    assert isinstance(result["choices"][0]["text"], str)
    assert result["usage"]["prompt_tokens"] == len(b"The quick brown fox")  # one token a byte


def test_vllm_refuses_requests_without_its_api_key(vllm_server: PeerServer) -> None:
    body = {"model": vllm_server.model, "prompt": "x", "max_tokens": 1}
    response = requests.post(f"{vllm_server.http_url}/v1/completions", json=body, timeout=30)
    assert response.status_code == 401
    models = requests.get(f"{vllm_server.http_url}/v1/models", timeout=30)
    assert models.status_code == 401


def test_vllm_embeddings_return_one_vector_per_input(vllm_embeddings_server: PeerServer) -> None:
    result = _vllm_post(
        vllm_embeddings_server,
        "/v1/embeddings",
        {"model": vllm_embeddings_server.model, "input": ["first text", "second"]},
    )
    vectors = [item["embedding"] for item in result["data"]]
    assert len(vectors) == 2
    assert {len(v) for v in vectors} == {128}  # the tiny model's hidden size
    assert all(np.isfinite(v).all() for v in vectors)
    assert result["usage"]["prompt_tokens"] == len(b"first text") + len(b"second")
