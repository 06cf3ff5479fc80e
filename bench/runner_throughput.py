"""How close the runner's model clients come to the best direct client, server by server.

For every real server of `e2e.peers` and every protocol it speaks, and over a grid of batch sizes
and concurrency, this runs side by side in one process:

- runner: the protocol client from `runners.models`, shared by N threads as the pipeline shares
  it, turning `InputRecord`s into requests and answers into Outcomes;
- direct: the leanest client we can write for the same requests: the exact bytes the runner
  client sends, serialised once, replayed in a tight loop by N threads (`http.client` per thread
  for REST, raw bytes on one shared channel for gRPC), responses read but not decoded;
- ceiling: `wrk` (REST) or `h2load` (gRPC) replaying the same body, as in shared/PEERS.md.

It prints records/s, the runner/direct ratio, and CPU seconds per 1,000 records of this process
(runner and direct) and of the server's process group. Servers run one at a time, so they do not
compete for the CPU with each other; the client still competes with its server, as in a pod
sharing a small node. Nothing is asserted: the numbers are for people.

    python bench/runner_throughput.py --quick
    python bench/runner_throughput.py --servers kserve,triton --batch-sizes 1,32,256 \\
        --concurrency 1,4,8 --duration 5
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.model import ModelEndpoint
from e2e.peers.server import PeerServer, start
from runners.api import InputRecord, ModelClient, Prediction, RunContext
from runners.models.http import ConnectionPool, HttpResponse
from runners.models.kserve import KServeV1Client, KServeV2Client
from runners.models.openai import ChatClient, CompletionsClient, EmbeddingsClient
from runners.models.triton_grpc import CHANNEL_OPTIONS, INFER_METHOD, TritonGrpcClient

IRIS = ([5.1, 3.5, 1.4, 0.2], [5.9, 3.0, 4.2, 1.5], [6.7, 3.0, 5.2, 2.3])
FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
PROMPTS = ("Hello there", "Tell me a story", "1 2 3 4", "What is longrun?")
CTX = RunContext(run_uid="bench", job_name="bench")


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
    """Sends through a real pool and keeps what was sent (to build the direct client's bodies)."""

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
    check_outcomes(outcomes)
    return transport.captured


def grpc_request_bytes(endpoint: ModelEndpoint, batch: list[InputRecord]) -> bytes:
    rows = np.asarray([list(r.data.values()) for r in batch], dtype="<f4")
    request = service_pb2.ModelInferRequest(model_name=endpoint.name, id="1")
    tensor = request.inputs.add(name="input-0", datatype="FP32")
    tensor.shape.extend(rows.shape)
    request.raw_input_contents.append(rows.tobytes())
    return request.SerializeToString()  # type: ignore[no-any-return]


def check_outcomes(outcomes: Sequence[Any]) -> None:
    bad = [o for o in outcomes if not isinstance(o, Prediction)]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(outcomes)} records failed, e.g. {bad[0]}")


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

    def cpu_per_k(self, cpu: float) -> float:
        return cpu / self.records * 1000 if self.records else float("nan")

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


def run_threads(
    make_worker: Callable[[], Callable[[], int]],
    *,
    threads: int,
    duration: float,
    pgid: int,
) -> Measure:
    """Run `threads` workers for `duration` seconds; each call of a worker returns records done."""
    stop = threading.Event()
    counts = [0] * threads
    errors = [0] * threads
    workers = [make_worker() for _ in range(threads)]
    for worker in workers:  # connect and warm up outside the clock
        worker()

    def loop(index: int) -> None:
        work = workers[index]
        while not stop.is_set():
            try:
                counts[index] += work()
            except Exception:
                errors[index] += 1

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    server0, cpu0, wall0 = group_cpu(pgid), time.process_time(), time.perf_counter()
    for thread in pool:
        thread.start()
    time.sleep(duration)
    stop.set()
    for thread in pool:
        thread.join()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    for worker in workers:
        close = getattr(worker, "close", None)
        if close is not None:
            close()
    return Measure(sum(counts), wall, cpu, group_cpu(pgid) - server0, sum(errors))


def runner_worker(client: ModelClient, batch: list[InputRecord]) -> Callable[[], int]:
    def work() -> int:
        outcomes = client.predict(batch)
        if not isinstance(outcomes[-1], Prediction):
            raise RuntimeError(str(outcomes[-1]))
        return len(outcomes)

    return work


class RestWorker:
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


def grpc_worker(channel: Any, body: bytes, *, records: int) -> Callable[[], int]:
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
    """One server + protocol: how to make the runner client and its direct twin."""

    server: str
    label: str
    kind: str  # "rest" or "grpc"
    endpoint: ModelEndpoint
    client_class: Any
    make_records: Callable[[int], list[InputRecord]]
    llm: bool = False


# server -> (label, protocol, transport kind, client class, records, OpenAI-style) per case.
CASES: dict[str, list[tuple[str, str, str, Any, Callable[[int], list[InputRecord]], bool]]] = {
    "kserve": [
        ("v1 REST", "kserve-v1", "rest", KServeV1Client, iris_records, False),
        ("v2 REST", "kserve-v2", "rest", KServeV2Client, iris_records, False),
        ("v2 gRPC", "triton-grpc", "grpc", TritonGrpcClient, iris_records, False),
    ],
    "mlserver": [
        ("v2 REST", "kserve-v2", "rest", KServeV2Client, iris_records, False),
        ("v2 gRPC", "triton-grpc", "grpc", TritonGrpcClient, iris_records, False),
    ],
    "triton": [
        ("v2 REST (binary)", "kserve-v2", "rest", KServeV2Client, iris_records, False),
        ("v2 gRPC", "triton-grpc", "grpc", TritonGrpcClient, iris_records, False),
    ],
    "llama-chat": [
        ("chat", "openai-chat", "rest", ChatClient, prompt_records, True),
        ("completions", "openai-completions", "rest", CompletionsClient, prompt_records, True),
    ],
    "llama-embeddings": [
        ("embeddings", "openai-embeddings", "rest", EmbeddingsClient, prompt_records, True),
    ],
}


def cases_for(server: PeerServer, *, max_tokens: int) -> list[Case]:
    cases = []
    for label, protocol, kind, client_class, make_records, llm in CASES[server.name]:
        url = (server.grpc_url or "") if kind == "grpc" else server.http_url
        options: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0}
        if protocol not in ("openai-chat", "openai-completions"):
            options = {}
        model = ModelEndpoint(protocol=protocol, url=url, name=server.model, **options)
        short = server.name.split("-")[0]
        cases.append(Case(short, label, kind, model, client_class, make_records, llm))
    return cases


@dataclass
class Row:
    case: Case
    batch: int
    concurrency: int
    runner: Measure
    direct: Measure


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


def measure_cell(
    case: Case,
    batch: list[InputRecord],
    wire: Any,
    *,
    threads: int,
    args: argparse.Namespace,
    pgid: int,
) -> Row:
    """Direct and runner client, same batch and threads, `args.duration` each, interleaved."""
    client = case.client_class(case.endpoint, CTX)
    channel = None
    try:
        direct: Callable[[], Callable[[], int]]
        if case.kind == "rest":
            timeout = case.endpoint.timeout_seconds
            direct = partial(RestWorker, wire, records=len(batch), timeout=timeout)
        else:
            channel = grpc.insecure_channel(case.endpoint.url, options=CHANNEL_OPTIONS)
            direct = partial(grpc_worker, channel, wire, records=len(batch))
        run = partial(run_threads, threads=threads, duration=args.duration / 2, pgid=pgid)
        runner = partial(runner_worker, client, batch)
        # A B B A: a load change on the machine during the cell hits both clients alike.
        d, r = run(direct), run(runner)
        r, d = r + run(runner), d + run(direct)
        return Row(case, len(batch), threads, r, d)
    finally:
        client.close()
        if channel is not None:
            channel.close()


def ceiling(case: Case, batch: int, threads: int, args: argparse.Namespace, what: Any) -> Ceiling:
    if case.kind == "grpc":
        rate = h2load_rate(case.endpoint.url, what, streams=threads, duration=args.duration)
        return Ceiling(case, batch, threads, rate, batch)
    _, url, body, headers = what.requests[0]
    per_request = batch // len(what.requests)  # per-record protocols send `batch` requests
    rate = wrk_rate(url, body, headers, connections=threads, duration=args.duration)
    return Ceiling(case, batch, threads, rate, max(1, per_request))


# ---------------------------------------------------------------- output


def print_rows(rows: list[Row]) -> None:
    head = (
        f"{'server':8} {'protocol':17} {'B':>4} {'C':>2} {'direct rec/s':>13} {'runner rec/s':>13} "
        f"{'ratio':>6} {'cpu/1k direct':>13} {'cpu/1k runner':>13} {'srv cpu/1k':>10} {'err':>4}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        r, d = row.runner, row.direct
        ratio = r.rate / d.rate if d.rate else float("nan")
        print(
            f"{row.case.server:8} {row.case.label:17} {row.batch:>4} {row.concurrency:>2} "
            f"{d.rate:>13,.0f} {r.rate:>13,.0f} {ratio:>6.2f} {d.cpu_per_k(d.cpu):>13.3f} "
            f"{r.cpu_per_k(r.cpu):>13.3f} {r.cpu_per_k(r.server_cpu):>10.3f} "
            f"{r.errors + d.errors:>4}"
        )
    sys.stdout.flush()


def print_summary(rows: list[Row]) -> None:
    print("\nbest setting per protocol (the runner's highest records/s):")
    best: dict[tuple[str, str], Row] = {}
    for row in rows:
        key = (row.case.server, row.case.label)
        if key not in best or row.runner.rate > best[key].runner.rate:
            best[key] = row
    for (server, label), row in best.items():
        ratio = row.runner.rate / row.direct.rate if row.direct.rate else float("nan")
        direct_best = max(
            r.direct.rate for r in rows if (r.case.server, r.case.label) == (server, label)
        )
        print(
            f"  {server:8} {label:17} B={row.batch:<4} C={row.concurrency:<2} "
            f"runner {row.runner.rate:>10,.0f} rec/s  ratio {ratio:.2f}  "
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
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--max-tokens", type=int, default=8, help="for chat and completions")
    parser.add_argument(
        "--no-ceilings", dest="ceilings", action="store_false", help="skip wrk/h2load"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: B=1,32, C=1,4, 1 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_sizes, args.llm_batch_sizes, args.concurrency = [1, 32], [1], [1, 4]
        args.duration = 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows: list[Row] = []
    ceilings: list[Ceiling] = []
    for name in args.servers.split(","):
        try:
            with serving(name) as server:
                for case in cases_for(server, max_tokens=args.max_tokens):
                    for item in measure_case(case, server, args):
                        (rows if isinstance(item, Row) else ceilings).append(item)
        except Exception as exc:  # a server that cannot start is reported, the rest still run
            print(f"!! {name}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
    print(
        f"\nrunner model clients vs direct clients; {args.duration:g} s per cell; "
        f"{os.cpu_count()} CPUs; cpu/1k = CPU seconds per 1,000 records\n"
    )
    print_rows(rows)
    print_summary(rows)
    print_ceilings(ceilings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
