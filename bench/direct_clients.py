"""The direct clients the benchmarks hold the runner's model clients against, and their data.

Why one module: runner_throughput.py (against the real servers), runner_end_to_end.py (the
direct program) and runner_client_cpu.py (canned answers, no server) all compare the runner with
the leanest clients we can write for the same job, so they must compare with the same ones.

A direct client goes from the same `InputRecord`s to one decoded value per record, encoding every
record and decoding every answer on every call, but it is specialised to the benchmarks' data (it
knows the field order and that every value is a float):

- `Hand*`, written here: `http.client` per thread on a kept-alive connection, orjson for JSON
  bodies and answers (since 2026-11-30, as the runner's clients; the standard library's json
  before), struct/numpy for binary tensors, and for gRPC a raw channel with the request's constant
  part serialised once per batch size and the tensor appended as `raw_input_contents`;
- `Library*`: tritonclient, the official client, for the Open Inference Protocol.

Nothing here imports the runner beyond its public API (`runners.api`, the protocol registry):
the runner's clients are found as the runner finds them, and the gRPC method and channel options
below are the direct clients' own settings.
"""

from __future__ import annotations

import http.client
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from itertools import chain
from math import isclose
from typing import Any, Protocol
from urllib.parse import urlsplit

import grpc
import numpy as np
import orjson
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.grpc import service_pb2

from contracts.model import ModelEndpoint
from runners.api import InputRecord, ModelClient, Prediction, RunContext
from runners.registry import model_protocol

IRIS = ([5.1, 3.5, 1.4, 0.2], [5.9, 3.0, 4.2, 1.5], [6.7, 3.0, 5.2, 2.3])
FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
PROMPTS = ("Hello there", "Tell me a story", "1 2 3 4", "What is longrun?")
CTX = RunContext(run_uid="bench", job_name="bench")
LLM_PROTOCOLS = ("openai-chat", "openai-completions", "openai-embeddings")
# server of e2e.peers -> (label, runner protocol) for every protocol it speaks.
SERVER_PROTOCOLS: dict[str, list[tuple[str, str]]] = {
    "kserve": [("v1 REST", "kserve-v1"), ("v2 REST", "kserve-v2"), ("v2 gRPC", "triton-grpc")],
    "mlserver": [("v2 REST", "kserve-v2"), ("v2 gRPC", "triton-grpc")],
    "triton": [("v2 REST", "kserve-v2"), ("v2 gRPC", "triton-grpc")],
    "llama-chat": [("chat", "openai-chat"), ("completions", "openai-completions")],
    "llama-embeddings": [("embeddings", "openai-embeddings")],
}

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"  # the Open Inference Protocol's
CHANNEL_OPTIONS = (  # no message size limit, as tritonclient sets it
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
)
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
NUMPY_TYPES = {"INT64": "<i8", "INT32": "<i4", "FP32": "<f4", "FP64": "<f8"}
RAW_INPUT_TAG = bytes([7 << 3 | 2])  # ModelInferRequest.raw_input_contents: field 7, bytes


# ---------------------------------------------------------------- records and the runner's side


def iris_records(count: int) -> list[InputRecord]:
    rows = [dict(zip(FEATURES, IRIS[i % 3], strict=True)) for i in range(count)]
    return [InputRecord(i, str(i), row) for i, row in enumerate(rows)]


def prompt_records(count: int) -> list[InputRecord]:
    return [InputRecord(i, str(i), {"prompt": PROMPTS[i % len(PROMPTS)]}) for i in range(count)]


def records_for(protocol: str, count: int) -> list[InputRecord]:
    """Prompts for the OpenAI protocols, iris rows for the tensor ones."""
    return prompt_records(count) if protocol in LLM_PROTOCOLS else iris_records(count)


def runner_client(endpoint: ModelEndpoint, **hooks: Any) -> ModelClient:
    """The runner's client for the endpoint's protocol, found through the runner's registry.

    `hooks` are the built-in clients' test hooks: `transport=` (REST) or `channel=` (gRPC).
    """
    client: ModelClient = model_protocol(endpoint.protocol)(endpoint, CTX, **hooks)
    return client


def runner_values(outcomes: Sequence[Any]) -> list[Any]:
    """The value of every outcome; raises when a record failed."""
    bad = [o for o in outcomes if not isinstance(o, Prediction)]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(outcomes)} records failed, e.g. {bad[0]}")
    return [o.value for o in outcomes]


@dataclass(frozen=True, slots=True)
class Response:
    """What the runner's REST clients read from their transport: status, headers, body."""

    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class RecordingTransport:
    """A transport for the runner's REST clients (one thread) that keeps every POST it sends."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.conns: dict[str, http.client.HTTPConnection] = {}
        self.posts: list[tuple[str, bytes, dict[str, str]]] = []  # (url, body, headers)

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> Response:
        if method == "POST" and body is not None:
            self.posts.append((url, body, dict(headers)))
        parts = urlsplit(url)
        conn = self.conns.get(parts.netloc)
        if conn is None:
            conn = http.client.HTTPConnection(parts.netloc, timeout=self.timeout)
            self.conns[parts.netloc] = conn
        conn.request(method, parts.path, body, dict(headers))
        response = conn.getresponse()
        fields = {name.lower(): value for name, value in response.getheaders()}
        return Response(response.status, fields, response.read())

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def runner_posts(
    endpoint: ModelEndpoint, batch: list[InputRecord]
) -> list[tuple[str, bytes, dict[str, str]]]:
    """The POSTs the runner's REST client sends for `batch`, after its one-off probing (binary
    extension, prompt lists): the exact bytes to replay."""
    transport = RecordingTransport(endpoint.timeout_seconds)
    client = runner_client(endpoint, transport=transport)
    try:
        client.predict(batch)
        transport.posts.clear()
        runner_values(client.predict(batch))
    finally:
        client.close()
    return transport.posts


def runner_sends_binary(endpoint: ModelEndpoint) -> bool:
    """Whether the runner's v2 REST client sends this server binary tensors (it asks `GET /v2`)."""
    _, _, headers = runner_posts(endpoint, iris_records(1))[0]
    return headers.get("Content-Type") == "application/octet-stream"


# ---------------------------------------------------------------- the direct clients


class DirectClient(Protocol):
    """From records to one decoded value per record (what the runner's `predict` does)."""

    def __call__(self, batch: list[InputRecord]) -> list[Any]: ...

    def close(self) -> None: ...


def iris_values(batch: list[InputRecord]) -> list[float]:
    """The batch's features, flat and row-major (every record holds the four, in order)."""
    if isinstance(batch, ColumnBatch):
        return batch.matrix.ravel().tolist()
    return list(chain.from_iterable([record.data.values() for record in batch]))


def fp32_bytes(values: list[float]) -> bytes:
    """Little-endian FP32: struct packs a list of floats in half numpy's time."""
    return struct.pack(f"<{len(values)}f", *values)


class ColumnBatch(list[InputRecord]):
    """A batch read from Parquet by the direct program: no records, its [B, 4] matrix built
    from the Arrow columns; `len()` is its row count."""

    def __init__(self, matrix: np.ndarray[Any, Any]) -> None:
        super().__init__()
        self.matrix = matrix

    def __len__(self) -> int:
        return len(self.matrix)


def tensor_bytes(batch: list[InputRecord]) -> bytes:
    """The batch's FP32 tensor: from its columns (ColumnBatch), else from its records."""
    if isinstance(batch, ColumnBatch):
        return batch.matrix.astype("<f4").tobytes()
    return fp32_bytes(iris_values(batch))


def per_row(values: list[Any], shape: Sequence[int]) -> list[Any]:
    """One value per record from a flat row-major output of shape [B] or [B, k]."""
    if len(shape) == 1:
        return values
    width = shape[1]
    return [values[i : i + width] for i in range(0, len(values), width)]


def per_record(columns: list[tuple[str, list[Any]]]) -> list[Any]:
    """The one output's values, or a {name: value} dict per record for several outputs."""
    (name, values), *others = columns
    if not others:
        return values
    records = [{name: value} for value in values]
    for name, values in others:  # a column at a time: a third of dict(zip(...)) per record
        for record, value in zip(records, values, strict=True):
            record[name] = value
    return records


def varint(number: int) -> bytes:
    """A protobuf base-128 varint."""
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


class HandRest:
    """A hand-written REST client: one kept-alive `http.client` connection (one per thread)."""

    def __init__(self, endpoint: ModelEndpoint, path: str) -> None:
        url = urlsplit(endpoint.url)
        self.conn = http.client.HTTPConnection(
            url.hostname or "", url.port, timeout=endpoint.timeout_seconds
        )
        self.path = path
        self.model = endpoint.name

    def post(
        self, body: bytes, headers: Mapping[str, str] = JSON_HEADERS, path: str | None = None
    ) -> tuple[http.client.HTTPResponse, bytes]:
        self.conn.request("POST", path or self.path, body, headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
        return response, data

    def close(self) -> None:
        self.conn.close()


class HandV1(HandRest):
    """KServe v1: the rows as `instances`, the `predictions` list back."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, f"/v1/models/{endpoint.name}:predict")

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        if isinstance(batch, ColumnBatch):
            rows = batch.matrix.tolist()
        else:
            rows = [list(record.data.values()) for record in batch]
        _, data = self.post(orjson.dumps({"instances": rows}))
        return orjson.loads(data)["predictions"]  # type: ignore[no-any-return]


class HandV2Json(HandRest):
    """Open Inference Protocol, JSON (KServe, MLServer): one FP32 [B, 4] input, one output."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, f"/v2/models/{endpoint.name}/infer")

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        tensor: dict[str, Any] = {"name": "input-0", "shape": [len(batch), 4], "datatype": "FP32"}
        tensor["data"] = iris_values(batch)
        _, data = self.post(orjson.dumps({"id": "1", "inputs": [tensor]}))
        output = orjson.loads(data)["outputs"][0]
        return per_row(output["data"], output["shape"])


class HandV2Binary(HandRest):
    """Open Inference Protocol with the binary tensor extension (Triton): raw in, raw out.

    The JSON head depends on the batch size only, so it is serialised once per size.
    """

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, f"/v2/models/{endpoint.name}/infer")
        self.heads: dict[int, tuple[bytes, dict[str, str]]] = {}

    def _head(self, rows: int) -> tuple[bytes, dict[str, str]]:
        found = self.heads.get(rows)
        if found is None:
            tensor: dict[str, Any] = {"name": "input-0", "shape": [rows, 4], "datatype": "FP32"}
            tensor["parameters"] = {"binary_data_size": rows * 4 * 4}
            parameters = {"binary_data_output": True}
            head = orjson.dumps({"inputs": [tensor], "parameters": parameters})
            headers = {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(len(head)),
            }
            found = self.heads[rows] = head, headers
        return found

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        head, headers = self._head(len(batch))
        response, data = self.post(head + tensor_bytes(batch), headers)
        offset = int(response.getheader("Inference-Header-Content-Length") or 0)
        columns = []
        for output in orjson.loads(data[:offset])["outputs"]:
            end = offset + output["parameters"]["binary_data_size"]
            array = np.frombuffer(data[offset:end], NUMPY_TYPES[output["datatype"]])
            columns.append((output["name"], array.reshape(output["shape"]).tolist()))
            offset = end
        return per_record(columns)


@cache
def infer_head(model: str, rows: int) -> bytes:
    """A ModelInferRequest but for its tensor's bytes: the same for every batch of `rows`."""
    request = service_pb2.ModelInferRequest(model_name=model, id="1")
    request.inputs.add(name="input-0", datatype="FP32").shape.extend((rows, 4))
    return request.SerializeToString()  # type: ignore[no-any-return]


def infer_request(model: str, batch: list[InputRecord]) -> bytes:
    """The serialised ModelInferRequest: its constant head, the tensor appended as raw bytes."""
    raw = tensor_bytes(batch)
    return infer_head(model, len(batch)) + RAW_INPUT_TAG + varint(len(raw)) + raw


class HandGrpc:
    """ModelInfer on a shared channel, the request from `infer_request`; raw output contents
    decoded with numpy."""

    def __init__(self, endpoint: ModelEndpoint, channel: grpc.Channel) -> None:
        self.call = channel.unary_unary(  # bytes in (no serialiser), a message out
            INFER_METHOD, response_deserializer=service_pb2.ModelInferResponse.FromString
        )
        self.model = endpoint.name

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        response = self.call(infer_request(self.model, batch), timeout=60)
        columns = [
            (out.name, np.frombuffer(data, NUMPY_TYPES[out.datatype]).reshape(out.shape).tolist())
            for out, data in zip(response.outputs, response.raw_output_contents, strict=True)
        ]
        return per_record(columns)

    def close(self) -> None:
        pass  # the channel is the caller's


class HandChat(HandRest):
    """OpenAI chat: one request per record, the first choice's message text back."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/chat/completions")
        self.options = openai_options(endpoint)

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        texts = []
        for record in batch:
            message = {"role": "user", "content": record.data["prompt"]}
            _, data = self.post(orjson.dumps({**self.options, "messages": [message]}))
            texts.append(orjson.loads(data)["choices"][0]["message"]["content"])
        return texts


class HandCompletions(HandRest):
    """OpenAI completions, one prompt per request (llama.cpp takes no prompt lists)."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/completions")
        self.options = openai_options(endpoint)

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        texts = []
        for record in batch:
            body = orjson.dumps({**self.options, "prompt": record.data["prompt"]})
            _, data = self.post(body)
            texts.append(orjson.loads(data)["choices"][0]["text"])
        return texts


class HandEmbeddings(HandRest):
    """OpenAI embeddings: the batch's prompts as one `input` list, vectors back by index."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/embeddings")
        self.options = openai_options(endpoint)

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        prompts = [record.data["prompt"] for record in batch]
        _, data = self.post(orjson.dumps({**self.options, "input": prompts}))
        items = sorted(orjson.loads(data)["data"], key=lambda item: item["index"])
        return [item["embedding"] for item in items]


class HandBatchLines(HandRest):
    """OpenAI batch lines (`custom_id`, `url`, `body`), each body POSTed as it is to its url
    with the model filled in, one request per line: the line's `response` back (status, the
    server's `x-request-id`, the answer's JSON), as the runner's openai-batch records give it.
    A connection the server closed while idle (uvicorn keeps one 5 s) is opened again and the
    request sent once more, as the runner's connection pool does."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/chat/completions")

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        answers = []
        for record in batch:
            line = record.data
            body = orjson.dumps({**line["body"], "model": self.model})
            try:
                response, data = self.post(body, path=line["url"])
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                self.conn.close()
                response, data = self.post(body, path=line["url"])
            request_id = response.getheader("x-request-id") or ""
            answers.append(
                {
                    "status_code": response.status,
                    "request_id": request_id,
                    "body": orjson.loads(data),
                }
            )
        return answers


def openai_options(endpoint: ModelEndpoint) -> dict[str, Any]:
    """The body fields the runner's OpenAI clients send besides the prompt, in their order."""
    options: dict[str, Any] = {"model": endpoint.name}
    if endpoint.max_tokens is not None:
        options["max_tokens"] = endpoint.max_tokens
    if endpoint.temperature is not None:
        options["temperature"] = endpoint.temperature
    return options


HAND_REST: dict[str, Callable[[ModelEndpoint], DirectClient]] = {
    "kserve-v1": HandV1,
    "kserve-v2": HandV2Json,
    "openai-chat": HandChat,
    "openai-completions": HandCompletions,
    "openai-embeddings": HandEmbeddings,
}


def hand_client(
    endpoint: ModelEndpoint, *, binary: bool = False, channel: Any = None
) -> Callable[[], DirectClient]:
    """A factory of the hand client for the endpoint's protocol (one client per thread):
    binary tensors for v2 REST when `binary`, gRPC on the shared `channel`."""
    if endpoint.protocol == "triton-grpc":
        return partial(HandGrpc, endpoint, channel)
    if endpoint.protocol == "kserve-v2" and binary:
        return partial(HandV2Binary, endpoint)
    return partial(HAND_REST[endpoint.protocol], endpoint)


def open_channel(url: str) -> grpc.Channel:
    return grpc.insecure_channel(url, options=CHANNEL_OPTIONS)


def iris_array(batch: list[InputRecord]) -> np.ndarray[Any, Any]:
    return np.array(iris_values(batch), dtype=np.float32).reshape(len(batch), 4)


class LibraryHttp:
    """tritonclient.http (one client per thread: it is not thread-safe), JSON or binary."""

    def __init__(self, endpoint: ModelEndpoint, *, binary: bool) -> None:
        address = urlsplit(endpoint.url).netloc
        timeout = endpoint.timeout_seconds
        self.client = triton_http.InferenceServerClient(
            address, connection_timeout=timeout, network_timeout=timeout
        )
        self.model, self.binary = endpoint.name, binary
        # KServe reads a body without a JSON content type as binary tensors.
        self.headers = None if binary else {"Content-Type": "application/json"}

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        tensor = triton_http.InferInput("input-0", [len(batch), 4], "FP32")
        tensor.set_data_from_numpy(iris_array(batch), binary_data=self.binary)
        result = self.client.infer(self.model, [tensor], request_id="1", headers=self.headers)
        names = [output["name"] for output in result.get_response()["outputs"]]
        return per_record([(name, result.as_numpy(name).tolist()) for name in names])

    def close(self) -> None:
        self.client.close()


class LibraryGrpc:
    """tritonclient.grpc, one client shared by the threads (it is thread-safe, as the channel)."""

    def __init__(self, endpoint: ModelEndpoint, client: Any) -> None:
        self.client, self.model = client, endpoint.name

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        tensor = triton_grpc.InferInput("input-0", [len(batch), 4], "FP32")
        tensor.set_data_from_numpy(iris_array(batch))
        result = self.client.infer(self.model, [tensor], request_id="1")
        names = [output.name for output in result.get_response().outputs]
        return per_record([(name, result.as_numpy(name).tolist()) for name in names])

    def close(self) -> None:
        pass  # the client is the caller's


# ---------------------------------------------------------------- the same job, or no comparison


class Mismatch(AssertionError):
    """A direct client's answers differ from the runner's: its rate would compare nothing."""


def same_answer(a: Any, b: Any) -> bool:
    """Equal values, floats within 1e-4 relative: two calls to a server may round differently
    (Triton's FP32 probabilities differed in the 7th digit between two identical requests)."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, int | float)
            and isinstance(b, int | float)
            and isclose(a, b, rel_tol=1e-4)
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_answer, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_answer(a[k], b[k]) for k in a)
    return bool(a == b)


def check_direct(
    name: str, client: DirectClient, batch: list[InputRecord], want: list[Any]
) -> None:
    """Fail the run unless `client` answers the runner's values for `batch` (same_answer)."""
    got = client(batch)
    if not same_answer(got, want):
        first = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if not same_answer(a, b)),
            min(len(got), len(want)),
        )
        raise Mismatch(
            f"direct client {name!r} disagrees with the runner on record {first} of {len(want)}: "
            f"{got[first : first + 1]!r} != {want[first : first + 1]!r}"
        )
