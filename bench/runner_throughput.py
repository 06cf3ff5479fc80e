"""How close the runner's model clients come to the best direct client, server by server.

For every real server of `e2e.peers` and every protocol it speaks, and over a grid of batch sizes
and concurrency, this runs side by side in one process, each client shared by (or one per) N
threads, interleaved A B C C B A so that a load change on the machine hits them all alike:

- runner: the protocol client from `runners.models`, shared by N threads as the pipeline shares
  it, from `InputRecord`s to one `Prediction` per record;
- direct: the leanest client we can write that does the same job against the same server: from
  the same `InputRecord`s to one decoded value per record, encoding every record and decoding
  every answer on every call, but specialised to this benchmark's data (it knows the field order
  and that every value is a float). `hand` is written here (`http.client` per thread with a
  kept-alive connection and a cached JSON encoder for REST, numpy/struct for binary tensors, a
  raw gRPC channel with the request's constant part serialised once per batch size and
  `raw_input_contents` for gRPC); `tritonclient` is the official client where it speaks the
  protocol (v2 REST and gRPC). Before timing, each is checked to return exactly the runner's
  values for the batch; a disagreement stops the run. The cell's direct rate is the best of them;
- replay: the exact bytes the runner client sends, serialised once and replayed in a tight loop
  (responses read, not decoded): bound by the transport and the server, not a client doing the
  job. It tells how much CPU any encoding and decoding costs, not how lean the runner is;
- ceiling: `wrk` (REST) or `h2load` (gRPC) replaying the same body, as in shared/PEERS.md.

Each cell runs `--repeats` rounds (default 3); a ratio is the median of the rounds' ratios, so
one round that a load spike or a server's pause hit does not decide it, and the direct client is
the candidate with the most records/s over all rounds (not the luckiest round's).

It prints records/s, runner/direct (the issue's ratio: the runner against a client doing the
same work), runner/replay, and CPU milliseconds per 1,000 records (µs per record) of this
process (per client) and of the server's process group. Servers run one at a time, so they do
not compete for the CPU with each other; the client still competes with its server, as in a pod
sharing a small node.
Nothing is asserted but the direct clients' answers: the numbers are for people.

    python bench/runner_throughput.py --quick
    python bench/runner_throughput.py --servers kserve,triton --batch-sizes 1,32,256 \\
        --concurrency 1,4,8 --duration 5
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from math import isclose
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import grpc
import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.grpc import service_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.model import ModelEndpoint
from e2e.peers.server import PeerServer, start
from runners.api import InputRecord, ModelClient, Prediction, RunContext
from runners.cli import settle_garbage_collector
from runners.models.http import ConnectionPool, HttpResponse
from runners.models.kserve import KServeV1Client, KServeV2Client, takes_binary
from runners.models.openai import ChatClient, CompletionsClient, EmbeddingsClient
from runners.models.triton_grpc import CHANNEL_OPTIONS, INFER_METHOD, TritonGrpcClient

IRIS = ([5.1, 3.5, 1.4, 0.2], [5.9, 3.0, 4.2, 1.5], [6.7, 3.0, 5.2, 2.3])
FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
PROMPTS = ("Hello there", "Tell me a story", "1 2 3 4", "What is longrun?")
CTX = RunContext(run_uid="bench", job_name="bench")
RUNNER, REPLAY, HAND, LIBRARY = "runner", "replay", "hand", "tritonclient"


# ---------------------------------------------------------------- records and requests


def iris_records(count: int) -> list[InputRecord]:
    rows = [dict(zip(FEATURES, IRIS[i % 3], strict=True)) for i in range(count)]
    return [InputRecord(i, str(i), row) for i, row in enumerate(rows)]


def prompt_records(count: int) -> list[InputRecord]:
    return [InputRecord(i, str(i), {"prompt": PROMPTS[i % len(PROMPTS)]}) for i in range(count)]


@dataclass
class Captured:
    """Requests one `predict` call sent, as bytes to replay."""

    requests: list[tuple[str, str, bytes, dict[str, str]]] = field(default_factory=list)


class CapturingTransport:
    """Sends through a real pool and keeps what was sent (to build the replay client's bodies)."""

    def __init__(self, timeout: float) -> None:
        self.pool = ConnectionPool(timeout=timeout)
        self.captured = Captured()

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        if method == "POST" and body is not None:
            self.captured.requests.append((method, url, body, dict(headers)))
        return self.pool.send(method, url, body=body, headers=headers)

    def close(self) -> None:
        self.pool.close()


def capture_rest(client_class: Any, endpoint: ModelEndpoint, batch: list[InputRecord]) -> Captured:
    """The POSTs the runner client makes for `batch` (after any one-off probing)."""
    transport = CapturingTransport(endpoint.timeout_seconds)
    client = client_class(endpoint, CTX, transport=transport)
    try:
        client.predict(batch)  # learns (binary extension, prompt lists)
        transport.captured.requests.clear()
        outcomes = client.predict(batch)
    finally:
        client.close()
    runner_values(outcomes)
    return transport.captured


def grpc_request_bytes(endpoint: ModelEndpoint, batch: list[InputRecord]) -> bytes:
    rows = np.asarray([list(r.data.values()) for r in batch], dtype="<f4")
    request = service_pb2.ModelInferRequest(model_name=endpoint.name, id="1")
    tensor = request.inputs.add(name="input-0", datatype="FP32")
    tensor.shape.extend(rows.shape)
    request.raw_input_contents.append(rows.tobytes())
    return request.SerializeToString()  # type: ignore[no-any-return]


def runner_values(outcomes: Sequence[Any]) -> list[Any]:
    """The value of every outcome; raises when a record failed."""
    bad = [o for o in outcomes if not isinstance(o, Prediction)]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(outcomes)} records failed, e.g. {bad[0]}")
    return [o.value for o in outcomes]


# ---------------------------------------------------------------- direct clients


class Mismatch(AssertionError):
    """A direct client's answers differ from the runner's: its rate would compare nothing."""


class DirectClient(Protocol):
    """From records to one decoded value per record (what the runner's `predict` does)."""

    def __call__(self, batch: list[InputRecord]) -> list[Any]: ...

    def close(self) -> None: ...


JSON = json.JSONEncoder(separators=(",", ":"))  # one encoder, not one per json.dumps call
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
NUMPY_TYPES = {"INT64": "<i8", "INT32": "<i4", "FP32": "<f4", "FP64": "<f8"}
RAW_INPUT_TAG = bytes([7 << 3 | 2])  # ModelInferRequest.raw_input_contents: field 7, bytes


def iris_values(batch: list[InputRecord]) -> list[float]:
    """The batch's features, flat and row-major (every record holds the four, in order)."""
    return list(chain.from_iterable([record.data.values() for record in batch]))


def fp32_bytes(values: list[float]) -> bytes:
    """Little-endian FP32: struct packs a list of floats in half numpy's time."""
    return struct.pack(f"<{len(values)}f", *values)


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
        self, body: bytes, headers: Mapping[str, str] = JSON_HEADERS
    ) -> tuple[http.client.HTTPResponse, bytes]:
        self.conn.request("POST", self.path, body, headers)
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
        rows = [list(record.data.values()) for record in batch]
        _, data = self.post(JSON.encode({"instances": rows}).encode())
        return json.loads(data)["predictions"]  # type: ignore[no-any-return]


class HandV2Json(HandRest):
    """Open Inference Protocol, JSON (KServe, MLServer): one FP32 [B, 4] input, one output."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, f"/v2/models/{endpoint.name}/infer")

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        tensor: dict[str, Any] = {"name": "input-0", "shape": [len(batch), 4], "datatype": "FP32"}
        tensor["data"] = iris_values(batch)
        _, data = self.post(JSON.encode({"id": "1", "inputs": [tensor]}).encode())
        output = json.loads(data)["outputs"][0]
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
            head = JSON.encode({"inputs": [tensor], "parameters": parameters}).encode()
            headers = {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(len(head)),
            }
            found = self.heads[rows] = head, headers
        return found

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        head, headers = self._head(len(batch))
        response, data = self.post(head + fp32_bytes(iris_values(batch)), headers)
        offset = int(response.getheader("Inference-Header-Content-Length") or 0)
        columns = []
        for output in json.loads(data[:offset])["outputs"]:
            end = offset + output["parameters"]["binary_data_size"]
            array = np.frombuffer(data[offset:end], NUMPY_TYPES[output["datatype"]])
            columns.append((output["name"], array.reshape(output["shape"]).tolist()))
            offset = end
        return per_record(columns)


class HandGrpc:
    """ModelInfer on a shared channel: the request's constant part serialised once per batch
    size, the tensor appended as raw bytes; raw output contents decoded with numpy."""

    def __init__(self, endpoint: ModelEndpoint, channel: grpc.Channel) -> None:
        self.call = channel.unary_unary(  # bytes in (no serialiser), a message out
            INFER_METHOD, response_deserializer=service_pb2.ModelInferResponse.FromString
        )
        self.model = endpoint.name
        self.heads: dict[int, bytes] = {}

    def _head(self, rows: int) -> bytes:
        head = self.heads.get(rows)
        if head is None:
            request = service_pb2.ModelInferRequest(model_name=self.model, id="1")
            request.inputs.add(name="input-0", datatype="FP32").shape.extend((rows, 4))
            head = self.heads[rows] = request.SerializeToString()
        return head

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        raw = fp32_bytes(iris_values(batch))
        body = self._head(len(batch)) + RAW_INPUT_TAG + varint(len(raw)) + raw
        response = self.call(body, timeout=60)
        columns = [
            (out.name, np.frombuffer(data, NUMPY_TYPES[out.datatype]).reshape(out.shape).tolist())
            for out, data in zip(response.outputs, response.raw_output_contents, strict=True)
        ]
        return per_record(columns)

    def close(self) -> None:
        pass  # the channel is the cell's


class HandChat(HandRest):
    """OpenAI chat: one request per record, the first choice's message text back."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/chat/completions")
        self.options = openai_options(endpoint)

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        texts = []
        for record in batch:
            message = {"role": "user", "content": record.data["prompt"]}
            _, data = self.post(JSON.encode({**self.options, "messages": [message]}).encode())
            texts.append(json.loads(data)["choices"][0]["message"]["content"])
        return texts


class HandCompletions(HandRest):
    """OpenAI completions, one prompt per request (llama.cpp takes no prompt lists)."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/completions")
        self.options = openai_options(endpoint)

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        texts = []
        for record in batch:
            body = JSON.encode({**self.options, "prompt": record.data["prompt"]}).encode()
            _, data = self.post(body)
            texts.append(json.loads(data)["choices"][0]["text"])
        return texts


class HandEmbeddings(HandRest):
    """OpenAI embeddings: the batch's prompts as one `input` list, vectors back by index."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        super().__init__(endpoint, "/v1/embeddings")
        self.options = openai_options(endpoint)

    def __call__(self, batch: list[InputRecord]) -> list[Any]:
        prompts = [record.data["prompt"] for record in batch]
        _, data = self.post(JSON.encode({**self.options, "input": prompts}).encode())
        items = sorted(json.loads(data)["data"], key=lambda item: item["index"])
        return [item["embedding"] for item in items]


def openai_options(endpoint: ModelEndpoint) -> dict[str, Any]:
    """The body fields the runner's OpenAI clients send besides the prompt, in their order."""
    options: dict[str, Any] = {"model": endpoint.name}
    if endpoint.max_tokens is not None:
        options["max_tokens"] = endpoint.max_tokens
    if endpoint.temperature is not None:
        options["temperature"] = endpoint.temperature
    return options


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
        pass  # the client is the cell's


class Shared:
    """What the threads of one cell share: the runner client and the gRPC channels."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.runner: ModelClient = case.client_class(case.endpoint, CTX)
        self.channel: grpc.Channel | None = None
        self.library_grpc: Any = None
        if case.kind == "grpc":
            self.channel = grpc.insecure_channel(case.endpoint.url, options=CHANNEL_OPTIONS)
            self.library_grpc = triton_grpc.InferenceServerClient(case.endpoint.url)

    def direct_clients(self) -> dict[str, Callable[[], DirectClient]]:
        """A factory per direct candidate for this case: one client per thread."""
        endpoint, direct = self.case.endpoint, self.case.direct
        if self.channel is not None:
            return {
                HAND: partial(HandGrpc, endpoint, self.channel),
                LIBRARY: partial(LibraryGrpc, endpoint, self.library_grpc),
            }
        if direct is HandV2Json and self.case.binary:
            direct = HandV2Binary  # the server takes binary tensors: the leanest hand client
        found: dict[str, Callable[[], DirectClient]] = {HAND: partial(direct, endpoint)}
        if direct is HandV2Json or direct is HandV2Binary:
            found[LIBRARY] = partial(LibraryHttp, endpoint, binary=self.case.binary)
        return found

    def close(self) -> None:
        self.runner.close()
        if self.library_grpc is not None:
            self.library_grpc.close()
        if self.channel is not None:
            self.channel.close()


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


# ---------------------------------------------------------------- measuring


@dataclass
class Measure:
    records: int
    seconds: float
    cpu: float
    server_cpu: float
    errors: int

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def cpu_per_k(self, cpu: float | None = None) -> float:
        """CPU milliseconds per 1,000 records (= µs per record): this process's, or `cpu`'s."""
        used = self.cpu if cpu is None else cpu
        return used / self.records * 1e6 if self.records else float("nan")

    def __add__(self, other: Measure) -> Measure:
        return Measure(
            self.records + other.records,
            self.seconds + other.seconds,
            self.cpu + other.cpu,
            self.server_cpu + other.server_cpu,
            self.errors + other.errors,
        )


def group_cpu(pgid: int) -> float:
    """CPU seconds (user+system) used so far by every process in group `pgid`."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


Worker = Callable[[], int]


def run_threads(
    make_worker: Callable[[], Worker],
    *,
    threads: int,
    duration: float,
    pgid: int,
) -> Measure:
    """Run `threads` workers for `duration` seconds; each call of a worker returns records done.

    Each thread makes, connects and warms up its own worker before the clock starts, and closes
    it after the clock stops: tritonclient.http's gevent client cannot change threads.
    """
    stop = threading.Event()
    ready, done = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    counts = [0] * threads
    errors = [0] * threads

    def loop(index: int) -> None:
        try:
            work = make_worker()
            work()
        except BaseException:
            ready.abort()  # the main thread raises instead of waiting for ever
            raise
        ready.wait()
        while not stop.is_set():
            try:
                counts[index] += work()
            except Exception:
                errors[index] += 1
        done.wait()
        close = getattr(work, "close", None)
        if close is not None:
            close()

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        raise RuntimeError("a worker failed before the clock started (see above)") from None
    finally:
        if ready.broken:
            stop.set()
            done.abort()
    server0, cpu0, wall0 = group_cpu(pgid), time.process_time(), time.perf_counter()
    time.sleep(duration)
    stop.set()
    done.wait()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    server = group_cpu(pgid) - server0
    for thread in pool:
        thread.join()
    return Measure(sum(counts), wall, cpu, server, sum(errors))


def runner_worker(client: ModelClient, batch: list[InputRecord]) -> Worker:
    def work() -> int:
        outcomes = client.predict(batch)
        if not isinstance(outcomes[-1], Prediction):
            raise RuntimeError(str(outcomes[-1]))
        return len(outcomes)

    return work


class DirectWorker:
    """One thread's direct client doing the whole job on `batch` per call."""

    def __init__(self, make: Callable[[], DirectClient], batch: list[InputRecord]) -> None:
        self.client, self.batch = make(), batch

    def __call__(self) -> int:
        return len(self.client(self.batch))

    def close(self) -> None:
        self.client.close()


class RestReplay:
    """One connection replaying the captured requests (one per batch, or one per record)."""

    def __init__(self, captured: Captured, *, records: int, timeout: float) -> None:
        first = urlsplit(captured.requests[0][1])
        self.conn = http.client.HTTPConnection(first.hostname or "", first.port, timeout=timeout)
        self.plan = [(m, urlsplit(u).path, b, h) for m, u, b, h in captured.requests]
        self.records = records

    def __call__(self) -> int:
        for method, path, body, headers in self.plan:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")
        return self.records

    def close(self) -> None:
        self.conn.close()


def grpc_replay(channel: Any, body: bytes, *, records: int) -> Worker:
    call = channel.unary_unary(INFER_METHOD)  # bytes in, bytes out: no (de)serialisation

    def work() -> int:
        call(body, timeout=60)
        return records

    return work


# ---------------------------------------------------------------- ceilings (wrk, h2load)


def wrk_rate(
    url: str, body: bytes, headers: Mapping[str, str], *, connections: int, duration: float
) -> float | None:
    if shutil.which("wrk") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "body").write_bytes(body)
        lines = ['wrk.method = "POST"']
        lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items() if k.lower() != "host"]
        lines += [
            f'local f = io.open("{tmp}/body", "rb")',
            "wrk.body = f:read('*all')",
            "f:close()",
        ]
        Path(tmp, "post.lua").write_text("\n".join(lines) + "\n")
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s",
             "-s", f"{tmp}/post.lua", url],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
    if "Non-2xx" in out:
        return None
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(found.group(1)) if found else None


def h2load_rate(target: str, body: bytes, *, streams: int, duration: float) -> float | None:
    if shutil.which("h2load") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        frame = b"\x00" + len(body).to_bytes(4, "big") + body  # one gRPC message
        Path(tmp, "body").write_bytes(frame)
        out = subprocess.run(
            ["h2load", "-c1", f"-m{streams}", f"-D{max(1, round(duration))}",
             "-H", "content-type: application/grpc", "-H", "te: trailers",
             "-d", f"{tmp}/body", f"http://{target}{INFER_METHOD}"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    rate = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", out)
    if not (done and rate) or int(done.group(1)) == 0:
        return None
    return float(rate.group(1))


# ---------------------------------------------------------------- cases


@dataclass
class Case:
    """One server + protocol: the runner client, its records, and the hand-written direct client
    (for gRPC always HandGrpc; the tritonclient candidate is added for the v2 protocols)."""

    server: str
    label: str
    kind: str  # "rest" or "grpc"
    endpoint: ModelEndpoint
    client_class: Any
    make_records: Callable[[int], list[InputRecord]]
    direct: Any
    llm: bool = False
    binary: bool = False  # v2 REST: the server takes binary tensors (runners.models.kserve)


# server -> (label, protocol, transport kind, runner client, records, hand client) per case.
CASES: dict[str, list[tuple[str, str, str, Any, Callable[[int], list[InputRecord]], Any]]] = {
    "kserve": [
        ("v1 REST", "kserve-v1", "rest", KServeV1Client, iris_records, HandV1),
        ("v2 REST", "kserve-v2", "rest", KServeV2Client, iris_records, HandV2Json),
        ("v2 gRPC", "triton-grpc", "grpc", TritonGrpcClient, iris_records, HandGrpc),
    ],
    "mlserver": [
        ("v2 REST", "kserve-v2", "rest", KServeV2Client, iris_records, HandV2Json),
        ("v2 gRPC", "triton-grpc", "grpc", TritonGrpcClient, iris_records, HandGrpc),
    ],
    "triton": [
        ("v2 REST", "kserve-v2", "rest", KServeV2Client, iris_records, HandV2Json),
        ("v2 gRPC", "triton-grpc", "grpc", TritonGrpcClient, iris_records, HandGrpc),
    ],
    "llama-chat": [
        ("chat", "openai-chat", "rest", ChatClient, prompt_records, HandChat),
        (
            "completions",
            "openai-completions",
            "rest",
            CompletionsClient,
            prompt_records,
            HandCompletions,
        ),
    ],
    "llama-embeddings": [
        (
            "embeddings",
            "openai-embeddings",
            "rest",
            EmbeddingsClient,
            prompt_records,
            HandEmbeddings,
        ),
    ],
}
LLM_PROTOCOLS = ("openai-chat", "openai-completions", "openai-embeddings")


def cases_for(server: PeerServer, *, max_tokens: int) -> list[Case]:
    cases = []
    for label, protocol, kind, client_class, make_records, direct in CASES[server.name]:
        url = (server.grpc_url or "") if kind == "grpc" else server.http_url
        options: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0}
        if protocol not in ("openai-chat", "openai-completions"):
            options = {}
        model = ModelEndpoint(protocol=protocol, url=url, name=server.model, **options)
        short = server.name.split("-")[0]
        llm = protocol in LLM_PROTOCOLS
        binary = direct is HandV2Json and server_takes_binary(server.http_url)
        label += " (binary)" if binary else ""
        case = Case(short, label, kind, model, client_class, make_records, direct, llm, binary)
        cases.append(case)
    return cases


def server_takes_binary(url: str) -> bool:
    """Whether the server's metadata shows the binary tensor extension, as the runner reads it."""
    with urllib.request.urlopen(f"{url}/v2", timeout=10) as response:
        return takes_binary(json.loads(response.read()))


@dataclass
class Row:
    """One cell: a Measure per client (runner, replay and each direct candidate) per round."""

    case: Case
    batch: int
    concurrency: int
    rounds: list[dict[str, Measure]]

    @property
    def measures(self) -> dict[str, Measure]:
        """Every client's rounds added up."""
        total = dict(self.rounds[0])
        for round_ in self.rounds[1:]:
            total = {name: total[name] + measure for name, measure in round_.items()}
        return total

    @property
    def runner(self) -> Measure:
        return self.measures[RUNNER]

    @property
    def replay(self) -> Measure:
        return self.measures[REPLAY]

    @property
    def direct_name(self) -> str:
        """The direct candidate with the most records/s in this cell, all rounds added up."""
        measures = self.measures
        candidates = [name for name in measures if name not in (RUNNER, REPLAY)]
        return max(candidates, key=lambda name: measures[name].rate)

    @property
    def direct(self) -> Measure:
        return self.measures[self.direct_name]

    def ratio(self, other: str) -> float:
        """The median over rounds of runner records/s ÷ `other`'s in the same round.

        A ratio per round compares clients that ran seconds apart; the median of several rounds
        is not moved by one round that a load spike or a server's pause hit.
        """
        ratios = [r[RUNNER].rate / r[other].rate for r in self.rounds if r[other].rate]
        return statistics.median(ratios) if ratios else float("nan")


@dataclass
class Ceiling:
    case: Case
    batch: int
    concurrency: int
    requests_per_second: float | None
    records_per_request: int


def measure_case(case: Case, server: PeerServer, args: argparse.Namespace) -> Iterator[Any]:
    """A Row per batch size and concurrency, each followed by its Ceiling when asked."""
    pgid = os.getpgid(server.process.pid)
    for batch_size in args.llm_batch_sizes if case.llm else args.batch_sizes:
        batch = case.make_records(batch_size)
        if case.kind == "rest":
            wire: Any = capture_rest(case.client_class, case.endpoint, batch)
        else:
            wire = grpc_request_bytes(case.endpoint, batch)
        for threads in args.concurrency:
            yield measure_cell(case, batch, wire, threads=threads, args=args, pgid=pgid)
            if args.ceilings:
                yield ceiling(case, batch_size, threads, args, wire)


def replay_worker(case: Case, shared: Shared, batch: list[InputRecord], wire: Any) -> Worker:
    if shared.channel is not None:
        return grpc_replay(shared.channel, wire, records=len(batch))
    return RestReplay(wire, records=len(batch), timeout=case.endpoint.timeout_seconds)


def measure_cell(
    case: Case,
    batch: list[InputRecord],
    wire: Any,
    *,
    threads: int,
    args: argparse.Namespace,
    pgid: int,
) -> Row:
    """Every client, same batch and threads, `args.duration` each per round, interleaved
    A B C C B A, `args.repeats` rounds."""
    shared = Shared(case)
    try:
        direct = shared.direct_clients()
        want = runner_values(shared.runner.predict(batch))
        for name, make in direct.items():  # the same job, or its rate compares nothing
            client = make()
            try:
                check_direct(name, client, batch, want)
            finally:
                client.close()
        clients: dict[str, Callable[[], Worker]] = {
            REPLAY: partial(replay_worker, case, shared, batch, wire),
            **{name: partial(DirectWorker, make, batch) for name, make in direct.items()},
            RUNNER: partial(runner_worker, shared.runner, batch),
        }
        run = partial(run_threads, threads=threads, duration=args.duration / 2, pgid=pgid)
        rounds = []
        for _ in range(args.repeats):
            measures: dict[str, Measure] = {}
            # A B C C B A: a load change on the machine during the round hits every client alike.
            for name in [*clients, *reversed(clients)]:
                measure = run(clients[name])
                measures[name] = measures[name] + measure if name in measures else measure
            rounds.append(measures)
        return Row(case, len(batch), threads, rounds)
    finally:
        shared.close()


def ceiling(case: Case, batch: int, threads: int, args: argparse.Namespace, what: Any) -> Ceiling:
    if case.kind == "grpc":
        rate = h2load_rate(case.endpoint.url, what, streams=threads, duration=args.duration)
        return Ceiling(case, batch, threads, rate, batch)
    _, url, body, headers = what.requests[0]
    per_request = batch // len(what.requests)  # per-record protocols send `batch` requests
    rate = wrk_rate(url, body, headers, connections=threads, duration=args.duration)
    return Ceiling(case, batch, threads, rate, max(1, per_request))


# ---------------------------------------------------------------- output


def rate_text(measure: Measure | None, width: int) -> str:
    return f"{'-':>{width}}" if measure is None else f"{measure.rate:>{width},.0f}"


def cpu_text(measure: Measure | None, width: int) -> str:
    return f"{'-':>{width}}" if measure is None else f"{measure.cpu_per_k():>{width}.2f}"


def print_rows(rows: list[Row]) -> None:
    print(
        "records/s per client; r/direct = runner / the best of hand and tritonclient;\n"
        "cpu ms/1k = CPU milliseconds per 1,000 records (µs per record) of this process per\n"
        "client, and of the server's processes while the runner ran\n"
    )
    head = (
        f"{'server':8} {'protocol':17} {'B':>4} {'C':>2} | {'replay':>8} {'hand':>8} "
        f"{'tritoncl':>8} {'runner':>8} | {'r/direct':>8} {'r/replay':>8} | cpu ms/1k: "
        f"{'replay':>7} {'hand':>7} {'tritonc':>7} {'runner':>7} {'server':>7} | {'err':>3}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        m = row.measures
        library = m.get(LIBRARY)
        errors = sum(measure.errors for measure in m.values())
        print(
            f"{row.case.server:8} {row.case.label:17} {row.batch:>4} {row.concurrency:>2} | "
            f"{rate_text(row.replay, 8)} {rate_text(m[HAND], 8)} {rate_text(library, 8)} "
            f"{rate_text(row.runner, 8)} | {row.ratio(row.direct_name):>8.2f} "
            f"{row.ratio(REPLAY):>8.2f} |            {cpu_text(row.replay, 7)} "
            f"{cpu_text(m[HAND], 7)} {cpu_text(library, 7)} {cpu_text(row.runner, 7)} "
            f"{row.runner.cpu_per_k(row.runner.server_cpu):>7.2f} | {errors:>3}"
        )
    sys.stdout.flush()


def print_summary(rows: list[Row]) -> None:
    print("\nbest setting per protocol (the runner's highest records/s), ratios in that cell:")
    best: dict[tuple[str, str], Row] = {}
    for row in rows:
        key = (row.case.server, row.case.label)
        if key not in best or row.runner.rate > best[key].runner.rate:
            best[key] = row
    for (server, label), row in best.items():
        direct_best = max(
            r.direct.rate for r in rows if (r.case.server, r.case.label) == (server, label)
        )
        print(
            f"  {server:8} {label:17} B={row.batch:<4} C={row.concurrency:<2} "
            f"runner {row.runner.rate:>9,.0f} rec/s  "
            f"runner/direct {row.ratio(row.direct_name):.2f} "
            f"(best direct: {row.direct_name})  runner/replay {row.ratio(REPLAY):.2f}  "
            f"(vs best direct anywhere {row.runner.rate / direct_best:.2f})"
        )


def print_ceilings(ceilings: list[Ceiling]) -> None:
    if not ceilings:
        return
    print("\nserver ceilings (wrk for REST, h2load for gRPC), requests/s by batch size and C:")
    print(f"{'server':8} {'protocol':17} {'B':>4} {'C':>2} {'req/s':>9} {'rec/s':>10}")
    for c in ceilings:
        rps = c.requests_per_second
        rate = "n/a" if rps is None else f"{rps:,.0f}"
        rows = "n/a" if rps is None else f"{rps * c.records_per_request:,.0f}"
        where = f"{c.case.server:8} {c.case.label:17} {c.batch:>4} {c.concurrency:>2}"
        print(f"{where} {rate:>9} {rows:>10}")
    sys.stdout.flush()


# ---------------------------------------------------------------- main


@contextmanager
def serving(name: str) -> Iterator[PeerServer]:
    print(f"\n== starting {name} ...", file=sys.stderr, flush=True)
    with start(name) as server:
        yield server


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", default="kserve,mlserver,triton,llama-chat,llama-embeddings")
    parser.add_argument("--batch-sizes", type=ints, default=[1, 32, 256])
    parser.add_argument("--llm-batch-sizes", type=ints, default=[1, 8], help="for OpenAI protocols")
    parser.add_argument("--concurrency", type=ints, default=[1, 4, 8])
    parser.add_argument(
        "--duration", type=float, default=2.0, help="seconds per client, cell and round"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds per cell; ratios are their median"
    )
    parser.add_argument("--max-tokens", type=int, default=8, help="for chat and completions")
    parser.add_argument(
        "--no-ceilings", dest="ceilings", action="store_false", help="skip wrk/h2load"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: B=1,32, C=1,4, 1 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_sizes, args.llm_batch_sizes, args.concurrency = [1, 32], [1], [1, 4]
        args.duration, args.repeats = 1.0, 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settle_garbage_collector()  # as the runner does before its pipeline (every client alike)
    rows: list[Row] = []
    ceilings: list[Ceiling] = []
    for name in args.servers.split(","):
        try:
            with serving(name) as server:
                for case in cases_for(server, max_tokens=args.max_tokens):
                    for item in measure_case(case, server, args):
                        (rows if isinstance(item, Row) else ceilings).append(item)
        except Mismatch:
            raise  # a direct client that does another job: fix it before reading any number
        except Exception as exc:  # a server that cannot start is reported, the rest still run
            print(f"!! {name}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
    print(
        f"\nrunner model clients vs direct clients; {args.duration:g} s per client, cell and "
        f"round, {args.repeats} rounds (ratios: median of the rounds'); "
        f"{os.cpu_count()} CPUs\n"
    )
    print_rows(rows)
    print_summary(rows)
    print_ceilings(ceilings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
