"""The runner's model clients' own CPU per batch, with no server: what a record costs the client.

On a 2-core node the client and the model server share the CPU, so each microsecond the client
spends per record is taken from the server (see runner_throughput.py). This measures only the
client: every protocol client of `runners.models` is handed a precomputed, realistic answer (as
KServe, MLServer, Triton and llama.cpp send them) and timed over many `predict` calls, in two
ways:

- `client`: through a fake `Transport` returning the answer (the protocol module alone: rows,
  tensors, JSON, Predictions);
- `stack`: through the client's own transport (the real `ConnectionPool` and `http.client`)
  over a canned socket that reads the answer's HTTP bytes (adds the HTTP layer). For gRPC, a
  fake channel runs the client's own request serialiser and response deserialiser, so both
  columns are the same there.

With `--hand`, the hand-written direct clients of direct_clients.py (the leanest code for the
same job, as runner_throughput.py measures against real servers) are timed over the same canned
answers and sockets: what the runner's generality costs in CPU alone, with no server's noise.

It prints microseconds per batch and per record, best of `--repeats` runs of `--seconds` each
(CPU time of this process: robust to other jobs, but the best of several runs still is the
figure to compare). Run it on the old and the new code to compare a change:

    python bench/runner_client_cpu.py
    python bench/runner_client_cpu.py --hand --batch-sizes 256
    python bench/runner_client_cpu.py --batch-sizes 256 --protocols triton-rest,triton-grpc
    python bench/runner_client_cpu.py --profile triton-rest:256   # cProfile of one cell
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import io
import json
import pstats
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import numpy as np  # noqa: E402
from direct_clients import (  # noqa: E402
    Response,
    check_direct,
    hand_client,
    records_for,
    runner_client,
    runner_values,
)
from tritonclient.grpc import service_pb2  # noqa: E402

from contracts.model import ModelEndpoint  # noqa: E402
from runners.api import InputRecord  # noqa: E402
from runners.cli import settle_garbage_collector  # noqa: E402

URL = "http://model:8080"
EMBEDDING_SIZE = 64


# ---------------------------------------------------------------- realistic answers


@dataclass(frozen=True)
class Answer:
    """What a server sends back: headers (lower-case names) and body."""

    headers: Mapping[str, str]
    body: bytes

    def http_bytes(self) -> bytes:
        """The whole HTTP/1.1 response as it comes off the socket."""
        lines = ["HTTP/1.1 200 OK", f"content-length: {len(self.body)}"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        lines += ["date: Mon, 23 Nov 2026 10:00:00 GMT", "server: uvicorn"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


def json_answer(doc: Any) -> Answer:
    return Answer({"content-type": "application/json"}, json.dumps(doc).encode())


def classes(count: int) -> list[int]:
    return [i % 3 for i in range(count)]


def kserve_v1(count: int) -> Answer:
    return json_answer({"predictions": classes(count)})


def kserve_v2(count: int) -> Answer:
    """KServe's sklearn server: one INT64 [B] output, no parameters."""
    output = {"name": "predict", "shape": [count], "datatype": "INT64", "parameters": None}
    doc = {"model_name": "iris", "model_version": None, "id": "1", "parameters": None}
    return json_answer({**doc, "outputs": [{**output, "data": classes(count)}]})


def mlserver_v2(count: int) -> Answer:
    """MLServer's sklearn runtime: `predict` INT64 [B, 1], flat data."""
    output: dict[str, Any] = {"name": "predict", "shape": [count, 1], "datatype": "INT64"}
    output["parameters"] = {"content_type": "np"}
    doc = {"model_name": "iris", "id": "1", "parameters": {}}
    answer = json_answer({**doc, "outputs": [{**output, "data": classes(count)}]})
    events = ("specversion", "source", "type", "modelid", "inferenceservicename", "endpoint")
    cloud_events = {f"ce-{name}": "io.seldon.serving" for name in events}  # MLServer sends them
    return Answer({**answer.headers, **cloud_events, "ce-id": "1"}, answer.body)


def triton_outputs(count: int) -> list[tuple[str, str, list[int], bytes]]:
    """Triton's iris model: `predict` INT64 [B, 1] and `predict_proba` FP32 [B, 3], raw."""
    labels = np.asarray(classes(count), dtype="<i8").reshape(count, 1)
    proba = np.tile(np.asarray([0.8, 0.15, 0.05], dtype="<f4"), (count, 1))
    return [
        ("predict", "INT64", [count, 1], labels.tobytes()),
        ("predict_proba", "FP32", [count, 3], proba.tobytes()),
    ]


def triton_binary(count: int) -> Answer:
    outputs = [
        {
            "name": name,
            "datatype": kind,
            "shape": shape,
            "parameters": {"binary_data_size": len(raw)},
        }
        for name, kind, shape, raw in triton_outputs(count)
    ]
    head = json.dumps({"id": "1", "model_name": "iris", "model_version": "1", "outputs": outputs})
    raw = b"".join(raw for *_, raw in triton_outputs(count))
    headers = {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(head)),
    }
    return Answer(headers, head.encode() + raw)


def chat(count: int) -> Answer:
    message = {"role": "assistant", "content": "Once upon a time"}
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    usage = {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}
    return json_answer(
        {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "tiny",
         "choices": [choice], "usage": usage}
    )  # fmt: skip


def completions(count: int) -> Answer:
    choices = [
        {"text": " once upon a time", "index": i, "logprobs": None, "finish_reason": "length"}
        for i in range(count)
    ]
    return json_answer({"id": "cmpl-1", "object": "text_completion", "choices": choices})


def embeddings(count: int) -> Answer:
    vector = [round(0.001 * i - 0.03, 6) for i in range(EMBEDDING_SIZE)]
    data = [{"object": "embedding", "embedding": vector, "index": i} for i in range(count)]
    return json_answer({"object": "list", "data": data, "model": "tiny"})


def grpc_answer(outputs: list[tuple[str, str, list[int], bytes]]) -> Any:
    response = service_pb2.ModelInferResponse(model_name="iris", model_version="1", id="1")
    for name, datatype, shape, raw in outputs:
        tensor = response.outputs.add(name=name, datatype=datatype)
        tensor.shape.extend(shape)
        response.raw_output_contents.append(raw)
    return response


def kserve_grpc(count: int) -> bytes:
    """KServe: `predict` INT64 [B], raw, its size as a parameter."""
    labels = np.asarray(classes(count), dtype="<i8").tobytes()
    response = grpc_answer([("predict", "INT64", [count], labels)])
    response.outputs[0].parameters["binary_data_size"].int64_param = len(labels)
    return response.SerializeToString()  # type: ignore[no-any-return]


def mlserver_grpc(count: int) -> bytes:
    """MLServer: `predict` INT64 [B, 1], raw, with a content type."""
    labels = np.asarray(classes(count), dtype="<i8").tobytes()
    response = grpc_answer([("predict", "INT64", [count, 1], labels)])
    response.outputs[0].parameters["content_type"].string_param = "np"
    return response.SerializeToString()  # type: ignore[no-any-return]


def triton_grpc(count: int) -> bytes:
    return grpc_answer(triton_outputs(count)).SerializeToString()  # type: ignore[no-any-return]


# ---------------------------------------------------------------- fakes


class CannedTransport:
    """A transport (the REST clients' `transport=` hook) answering every request alike."""

    def __init__(self, answer: Answer) -> None:
        self.response = Response(200, dict(answer.headers), answer.body)

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> Response:
        return self.response

    def close(self) -> None:
        pass


class CannedSocket:
    """Enough of a socket for http.client: sends go nowhere, each response is `raw` again."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def sendall(self, data: Any) -> None:
        pass

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self.raw)

    def close(self) -> None:
        pass


@contextmanager
def canned_sockets(answer: Answer) -> Iterator[None]:
    """Every `http.client` connection that connects inside reads `answer` for each request: the
    clients' own HTTP stacks run as they are, with no server."""

    def connect(conn: http.client.HTTPConnection) -> None:
        conn.sock = CannedSocket(answer.http_bytes())

    with mock.patch.object(http.client.HTTPConnection, "connect", connect):
        yield


class CannedChannel:
    """A gRPC channel whose calls serialise the request and deserialise a canned answer."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **_: Any,
    ) -> Callable[..., Any]:
        def call(request: Any, **_: Any) -> Any:
            if request_serializer is not None:
                request_serializer(request)
            if response_deserializer is None:
                return self.answer
            return response_deserializer(self.answer)

        return call

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    name: str
    endpoint: ModelEndpoint
    answer: Callable[[int], Any]  # Answer for REST, bytes for gRPC
    hand: bool = True  # the hand client sends the requests the answer is for

    @property
    def grpc(self) -> bool:
        return self.endpoint.protocol == "triton-grpc"


def model(protocol: str, **fields: Any) -> ModelEndpoint:
    url = "127.0.0.1:8001" if protocol == "triton-grpc" else URL
    return ModelEndpoint(protocol=protocol, url=url, name="iris", **fields)


JSON_V2 = model("kserve-v2", binary_data=False)
BINARY_V2 = model("kserve-v2", binary_data=True)
GRPC = model("triton-grpc")
CASES = [
    Case("kserve-v1", model("kserve-v1"), kserve_v1),
    Case("kserve-v2", JSON_V2, kserve_v2),
    Case("mlserver-v2", JSON_V2, mlserver_v2),
    Case("triton-rest", BINARY_V2, triton_binary),
    Case("kserve-grpc", GRPC, kserve_grpc),
    Case("mlserver-grpc", GRPC, mlserver_grpc),
    Case("triton-grpc", GRPC, triton_grpc),
    Case("chat", model("openai-chat", max_tokens=8), chat),
    # The runner sends the batch's prompts as one list; the hand client one prompt per request.
    Case("completions", model("openai-completions"), completions, hand=False),
    Case("embeddings", model("openai-embeddings"), embeddings),
]


Call = Callable[[list[InputRecord]], Any]


def make_client(case: Case, size: int, *, kind: str) -> tuple[Call, Callable[[], None]]:
    """(call, close) of the client timed as `kind`, checked on one batch: the runner's `predict`
    through a canned transport ("client") or its own ("stack", inside `canned`), or the hand
    client ("hand", inside `canned`), which must answer exactly as the runner's."""
    answer, batch = case.answer(size), records_for(case.endpoint.protocol, size)
    channel = CannedChannel(answer) if case.grpc else None
    if channel is not None:
        runner = runner_client(case.endpoint, channel=channel)
    elif kind == "client":
        runner = runner_client(case.endpoint, transport=CannedTransport(answer))
    else:
        runner = runner_client(case.endpoint)  # its own transport, inside `canned`
    want = runner_values(runner.predict(batch))  # warms up (and lets clients learn the server)
    if kind != "hand":
        return runner.predict, runner.close
    runner.close()
    hand = hand_client(case.endpoint, binary=bool(case.endpoint.binary_data), channel=channel)()
    check_direct(case.name, hand, batch, want)
    return hand, hand.close


def canned(case: Case, size: int, *, kind: str) -> Any:
    """`canned_sockets` for REST clients timed through an HTTP stack, else nothing."""
    return nullcontext() if case.grpc or kind == "client" else canned_sockets(case.answer(size))


# ---------------------------------------------------------------- timing


def per_batch(call: Call, batch: list[InputRecord], *, seconds: float) -> float:
    """CPU seconds per call, over as many calls as fit in `seconds`."""
    call(batch)  # warm up
    calls, cpu0 = 0, time.process_time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            call(batch)
        calls += 10
    return (time.process_time() - cpu0) / calls


def best_per_batch(case: Case, size: int, args: argparse.Namespace, *, kind: str) -> float:
    batch = records_for(case.endpoint.protocol, size)
    with canned(case, size, kind=kind):
        call, close = make_client(case, size, kind=kind)
        try:
            return min(per_batch(call, batch, seconds=args.seconds) for _ in range(args.repeats))
        finally:
            close()


def profile(case: Case, size: int, args: argparse.Namespace) -> None:
    batch = records_for(case.endpoint.protocol, size)
    with canned(case, size, kind="stack"):
        call, close = make_client(case, size, kind="stack")
        call(batch)
        profiler = cProfile.Profile()
        profiler.enable()
        per_batch(call, batch, seconds=args.seconds * args.repeats)
        profiler.disable()
        close()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--protocols", default=",".join(case.name for case in CASES))
    parser.add_argument("--batch-sizes", type=ints, default=[1, 32, 256])
    parser.add_argument("--seconds", type=float, default=0.5, help="per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per cell; the best counts")
    parser.add_argument("--profile", metavar="PROTOCOL:B", help="cProfile one cell instead")
    parser.add_argument(
        "--hand", action="store_true", help="also time the hand clients of direct_clients.py"
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="tune the collector before timing as the runner does after start-up "
        "(runners.cli.settle_garbage_collector: freeze, bigger young generation)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = {case.name: case for case in CASES}
    if args.gc_freeze:
        settle_garbage_collector()
    if args.profile:
        name, _, size = args.profile.partition(":")
        profile(cases[name], int(size or 256), args)
        return 0
    head = f"{'protocol':13} {'B':>4} {'client us/batch':>15} {'us/rec':>7} "
    head += f"{'stack us/batch':>15} {'us/rec':>7}"
    head += f" {'hand us/batch':>15} {'us/rec':>7}" if args.hand else ""
    print(head)
    print("-" * len(head))
    for name in args.protocols.split(","):
        case = cases[name]
        for size in args.batch_sizes:
            client = best_per_batch(case, size, args, kind="client") * 1e6
            stack = client if case.grpc else best_per_batch(case, size, args, kind="stack") * 1e6
            line = f"{name:13} {size:>4} {client:>15.1f} {client / size:>7.2f} "
            line += f"{stack:>15.1f} {stack / size:>7.2f}"
            if args.hand and case.hand:
                hand = best_per_batch(case, size, args, kind="hand") * 1e6
                line += f" {hand:>15.1f} {hand / size:>7.2f}"
            elif args.hand:
                line += f" {'-':>15} {'-':>7}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
