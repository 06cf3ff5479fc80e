"""Every protocol client against the real model servers of `e2e.peers`.

Real: KServe 0.21 (v1 REST, v2 REST, v2 gRPC), MLServer 1.7 (v2 REST, v2 gRPC), Triton 2.51 via
PyTriton (v2 REST with and without the binary extension, gRPC) and llama.cpp's OpenAI server
(chat, completions, embeddings), each in its own virtualenv and process, started once per session
by the fixtures in `e2e.peers.fixtures`. Faked: only the models (sklearn iris classifiers, a
nearest-centroid iris classifier for Triton, a tiny random llama whose text is nonsense).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from model_fakes import endpoint, iris, records

from e2e.peers.server import PeerServer
from runners.api import (
    ConfigError,
    ModelClient,
    Outcome,
    Prediction,
    RecordFailure,
    RunContext,
)
from runners.models.kserve import KServeV1Client, KServeV2Client, takes_binary
from runners.models.openai import ChatClient, CompletionsClient, EmbeddingsClient
from runners.models.triton_grpc import TritonGrpcClient

SETOSA = [5.1, 3.5, 1.4, 0.2]  # iris row 0: class 0
VERSICOLOR = [5.9, 3.0, 4.2, 1.5]  # iris row 61: class 1
VIRGINICA = [6.7, 3.0, 5.2, 2.3]  # iris row 145: class 2
CLASSES = [0, 1, 2]
EMBEDDING_SIZE = 64  # n_embd of the tiny llama in e2e/peers/servers/llama_server.py


def classes(outcomes: list[Outcome]) -> list[Any]:
    """The class per record, whether the server answers 0, [0] or {"predict": [0], ...}."""
    found = []
    for outcome in outcomes:
        assert isinstance(outcome, Prediction), outcome
        value = outcome.value
        value = value["predict"] if isinstance(value, dict) else value
        found.append(value[0] if isinstance(value, list) else value)
    return found


@pytest.fixture
def predict(ctx: RunContext) -> Iterator[Any]:
    """Build a client, run one batch, close it."""

    def run(
        client_class: Any, protocol: str, url: str, *, batch: Any = None, **fields: Any
    ) -> list[Outcome]:
        client: ModelClient = client_class(endpoint(protocol, url, **fields), ctx)
        with closing(client):
            return client.predict(batch or iris(SETOSA, VERSICOLOR, VIRGINICA))

    yield run


def test_kserve_v1_rest_classifies_iris(kserve_server: PeerServer, predict: Any) -> None:
    outcomes = predict(KServeV1Client, "kserve-v1", kserve_server.http_url, name="iris")
    assert classes(outcomes) == CLASSES


@pytest.mark.parametrize("binary", [False, True, None])
def test_kserve_v2_rest_classifies_iris(
    kserve_server: PeerServer, predict: Any, binary: bool | None
) -> None:
    url = kserve_server.http_url
    outcomes = predict(KServeV2Client, "kserve-v2", url, name="iris", binary_data=binary)
    assert outcomes == [Prediction(0), Prediction(1), Prediction(2)]


def server_metadata(server: PeerServer) -> Any:
    with urllib.request.urlopen(f"{server.http_url}/v2", timeout=10) as response:
        return json.loads(response.read())


def test_binary_tensors_are_chosen_for_kserve_and_triton_not_mlserver(
    kserve_server: PeerServer, mlserver_server: PeerServer, triton_server: PeerServer
) -> None:
    # binaryData unset: KServe implements the extension without listing it, Triton lists it,
    # MLServer has neither (its answer to binary input is a 500).
    assert takes_binary(server_metadata(kserve_server))
    assert takes_binary(server_metadata(triton_server))
    assert not takes_binary(server_metadata(mlserver_server))


def test_kserve_v2_accepts_a_krateo_url_without_scheme(
    kserve_server: PeerServer, predict: Any
) -> None:
    url = kserve_server.http_url.removeprefix("http://") + "/v2/models/iris/infer"
    outcomes = predict(KServeV2Client, "kserve-v2", url, name="ignored-name")
    assert classes(outcomes) == CLASSES


def test_kserve_v2_fails_only_non_numeric_records(kserve_server: PeerServer, predict: Any) -> None:
    batch = records({"f": SETOSA}, {"f": ["a", "b", "c", "d"]}, {"f": VIRGINICA})
    outcomes = predict(KServeV2Client, "kserve-v2", kserve_server.http_url, batch=batch)
    assert outcomes[0] == Prediction(0)
    assert outcomes[1] == RecordFailure("value 'a' is not a number")
    assert outcomes[2] == Prediction(2)


def test_kserve_unknown_model_stops_the_run(kserve_server: PeerServer, predict: Any) -> None:
    with pytest.raises(ConfigError, match=r"HTTP 404.*model\.name"):
        predict(KServeV2Client, "kserve-v2", kserve_server.http_url, name="no-such-model")


def test_kserve_v2_grpc_classifies_iris(kserve_server: PeerServer, predict: Any) -> None:
    assert kserve_server.grpc_url is not None
    outcomes = predict(TritonGrpcClient, "triton-grpc", kserve_server.grpc_url, name="iris")
    assert classes(outcomes) == CLASSES


def test_mlserver_v2_rest_classifies_iris(mlserver_server: PeerServer, predict: Any) -> None:
    # binaryData unset: MLServer does not list the binary extension, so JSON is used.
    outcomes = predict(KServeV2Client, "kserve-v2", mlserver_server.http_url, name="iris")
    assert outcomes == [Prediction([0]), Prediction([1]), Prediction([2])]


def test_mlserver_v2_grpc_classifies_iris(mlserver_server: PeerServer, predict: Any) -> None:
    assert mlserver_server.grpc_url is not None
    outcomes = predict(TritonGrpcClient, "triton-grpc", mlserver_server.grpc_url, name="iris")
    assert classes(outcomes) == CLASSES


@pytest.mark.parametrize("binary", [False, True, None])
def test_triton_v2_rest_classifies_iris(
    triton_server: PeerServer, predict: Any, binary: bool | None
) -> None:
    url = triton_server.http_url
    outcomes = predict(KServeV2Client, "kserve-v2", url, name="iris", binary_data=binary)
    assert classes(outcomes) == CLASSES
    assert len(outcomes[0].value["predict_proba"]) == 3


def test_triton_v2_rest_returns_only_the_requested_output(
    triton_server: PeerServer, predict: Any
) -> None:
    url = triton_server.http_url
    outcomes = predict(KServeV2Client, "kserve-v2", url, name="iris", output_names=["predict"])
    assert outcomes == [Prediction([0]), Prediction([1]), Prediction([2])]


def test_triton_grpc_classifies_iris(triton_server: PeerServer, predict: Any) -> None:
    assert triton_server.grpc_url is not None
    url = f"grpc://{triton_server.grpc_url}"
    outcomes = predict(TritonGrpcClient, "triton-grpc", url, name="iris")
    assert classes(outcomes) == CLASSES


PROMPTS = records({"prompt": "Hello"}, {"prompt": "Say something."}, {"prompt": "1 2 3"})


def test_llama_chat_answers_text_per_record(llama_chat_server: PeerServer, predict: Any) -> None:
    outcomes = predict(
        ChatClient,
        "openai-chat",
        llama_chat_server.http_url,
        name=llama_chat_server.model,
        system_prompt="You are terse.",
        max_tokens=8,
        batch=PROMPTS,
    )
    assert len(outcomes) == 3
    assert all(isinstance(o, Prediction) and isinstance(o.value, str) for o in outcomes)
    assert any(o.value for o in outcomes)


def test_llama_completions_answers_text_per_record(
    llama_chat_server: PeerServer, predict: Any
) -> None:
    outcomes = predict(
        CompletionsClient,
        "openai-completions",
        f"{llama_chat_server.http_url}/v1",
        name=llama_chat_server.model,
        max_tokens=8,
        batch=PROMPTS,
    )
    assert len(outcomes) == 3
    assert all(isinstance(o, Prediction) and isinstance(o.value, str) for o in outcomes)


def test_llama_embeddings_answers_a_vector_per_record(
    llama_embeddings_server: PeerServer, predict: Any
) -> None:
    outcomes = predict(
        EmbeddingsClient,
        "openai-embeddings",
        llama_embeddings_server.http_url,
        name=llama_embeddings_server.model,
        batch=PROMPTS,
    )
    assert len(outcomes) == 3
    for outcome in outcomes:
        assert isinstance(outcome, Prediction)
        assert len(outcome.value) == EMBEDDING_SIZE
        assert all(isinstance(x, float) for x in outcome.value)
    assert outcomes[0].value != outcomes[1].value


def shuffled_iris() -> list[Any]:
    """SETOSA, VERSICOLOR, VIRGINICA, SETOSA with their keys in three producers' orders."""
    names = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    orders = [names, names[::-1], names[2:] + names[:2], names[::-1]]
    rows = (SETOSA, VERSICOLOR, VIRGINICA, SETOSA)
    return records(
        *(
            {name: dict(zip(names, row, strict=True))[name] for name in order}
            for row, order in zip(rows, orders, strict=True)
        )
    )


@pytest.mark.parametrize(
    ("client_class", "protocol", "server", "grpc"),
    [
        (KServeV1Client, "kserve-v1", "kserve_server", False),
        (KServeV2Client, "kserve-v2", "kserve_server", False),
        (TritonGrpcClient, "triton-grpc", "kserve_server", True),
        (KServeV2Client, "kserve-v2", "mlserver_server", False),
        (KServeV2Client, "kserve-v2", "triton_server", False),
        (TritonGrpcClient, "triton-grpc", "triton_server", True),
    ],
)
def test_records_whose_keys_come_in_other_orders_are_classified_by_name(
    request: pytest.FixtureRequest,
    predict: Any,
    client_class: Any,
    protocol: str,
    server: str,
    grpc: bool,
) -> None:
    # Issue 15 item 1: with inputFields unset the features were sent in each record's own key
    # order, so records from producers that wrote the keys in another order were misclassified.
    peer: PeerServer = request.getfixturevalue(server)
    url = peer.grpc_url if grpc else peer.http_url
    assert url is not None
    outcomes = predict(client_class, protocol, url, name="iris", batch=shuffled_iris())
    assert classes(outcomes) == [*CLASSES, 0]
