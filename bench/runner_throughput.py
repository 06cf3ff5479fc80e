"""How close the runner's model clients come to the best direct client, server by server.

For every real server of `e2e.peers` and every protocol it speaks, over a grid of batch sizes
and concurrency N, this runs in one process, each client shared by (or one per) N threads,
interleaved A B C C B A so that a load change on the machine hits them all alike:

- runner: the runner's client for the protocol (from its registry), shared as the pipeline does;
- direct: the clients of direct_clients.py (`hand`, and `tritonclient` for the v2 protocols),
  each first checked to answer exactly the runner's values; the cell's rate is the best of them;
- replay: the exact bytes the runner sends, replayed in a tight loop, answers not decoded;
- ceiling: `wrk` (REST) or `h2load` (gRPC) replaying the same body, as in shared/PEERS.md.

It prints records/s, runner/direct (the issue's ratio), runner/replay (ratios: the median of
`--repeats` rounds) and CPU µs per record of this process, per client, and of the server's
process group. Servers run one at a time. bench/README.md says why, and how to read it.

    python bench/runner_throughput.py --quick
    python bench/runner_throughput.py --servers kserve,triton --batch-sizes 1,32,256 \\
        --concurrency 1,4,8 --duration 5
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import tritonclient.grpc as triton_grpc  # noqa: E402
from direct_clients import (  # noqa: E402
    INFER_METHOD,
    LLM_PROTOCOLS,
    SERVER_PROTOCOLS,
    DirectClient,
    HandRest,
    LibraryGrpc,
    LibraryHttp,
    Mismatch,
    check_direct,
    hand_client,
    infer_request,
    open_channel,
    records_for,
    runner_client,
    runner_posts,
    runner_sends_binary,
    runner_values,
)
from measuring import Measure, group_cpu  # noqa: E402

from contracts.model import ModelEndpoint  # noqa: E402
from e2e.peers.server import PeerServer, start  # noqa: E402
from runners.api import InputRecord, ModelClient, Prediction  # noqa: E402
from runners.cli import settle_garbage_collector  # noqa: E402

RUNNER, REPLAY, HAND, LIBRARY = "runner", "replay", "hand", "tritonclient"
Posts = list[tuple[str, bytes, dict[str, str]]]  # the runner's POSTs: (url, body, headers)
Client = Callable[[list[InputRecord]], Sized]  # one thread's client: records done per call


@dataclass(frozen=True)
class Case:
    """One server and one protocol it speaks."""

    server: str
    label: str
    endpoint: ModelEndpoint
    binary: bool = False  # v2 REST: the runner sends this server binary tensors

    @property
    def is_grpc(self) -> bool:
        return self.endpoint.protocol == "triton-grpc"


def cases_for(server: PeerServer, *, max_tokens: int) -> list[Case]:
    cases = []
    for label, protocol in SERVER_PROTOCOLS[server.name]:
        url = (server.grpc_url or "") if protocol == "triton-grpc" else server.http_url
        generates = protocol in ("openai-chat", "openai-completions")
        options = {"max_tokens": max_tokens, "temperature": 0} if generates else {}
        endpoint = ModelEndpoint(protocol=protocol, url=url, name=server.model, **options)
        binary = protocol == "kserve-v2" and runner_sends_binary(endpoint)
        label += " (binary)" if binary else ""
        cases.append(Case(server.name.split("-")[0], label, endpoint, binary))
    return cases


class Shared:
    """What the threads of one cell share: the runner client and the gRPC channels."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.runner: ModelClient = runner_client(case.endpoint)
        self.channel: Any = None
        self.library_grpc: Any = None
        if case.is_grpc:
            self.channel = open_channel(case.endpoint.url)
            self.library_grpc = triton_grpc.InferenceServerClient(case.endpoint.url)

    def direct_clients(self) -> dict[str, Callable[[], DirectClient]]:
        """A factory per direct candidate for this case: one client per thread."""
        endpoint, binary = self.case.endpoint, self.case.binary
        found = {HAND: hand_client(endpoint, binary=binary, channel=self.channel)}
        if self.case.is_grpc:
            found[LIBRARY] = partial(LibraryGrpc, endpoint, self.library_grpc)
        elif endpoint.protocol == "kserve-v2":
            found[LIBRARY] = partial(LibraryHttp, endpoint, binary=binary)
        return found

    def replay(self, wire: Posts | bytes) -> Client:
        if isinstance(wire, bytes):
            return GrpcReplay(self.channel, wire)
        return RestReplay(self.case.endpoint, wire)

    def runner_call(self) -> Client:
        def call(batch: list[InputRecord]) -> Sized:
            outcomes = self.runner.predict(batch)
            if not isinstance(outcomes[-1], Prediction):
                raise RuntimeError(str(outcomes[-1]))
            return outcomes

        return call

    def close(self) -> None:
        self.runner.close()
        if self.library_grpc is not None:
            self.library_grpc.close()
        if self.channel is not None:
            self.channel.close()


class RestReplay(HandRest):
    """One connection replaying the runner's POSTs for a batch; answers read, not decoded."""

    def __init__(self, endpoint: ModelEndpoint, posts: Posts) -> None:
        super().__init__(endpoint, "")
        self.plan = [(urlsplit(url).path, body, headers) for url, body, headers in posts]

    def __call__(self, batch: list[InputRecord]) -> list[InputRecord]:
        for path, body, headers in self.plan:
            self.post(body, headers, path)
        return batch


class GrpcReplay:
    """The request's bytes as they are, on the shared channel: no (de)serialisation."""

    def __init__(self, channel: Any, body: bytes) -> None:
        self.call, self.body = channel.unary_unary(INFER_METHOD), body

    def __call__(self, batch: list[InputRecord]) -> list[InputRecord]:
        self.call(self.body, timeout=60)
        return batch


# ---------------------------------------------------------------- measuring


def run_threads(
    make_client: Callable[[], Client],
    batch: list[InputRecord],
    *,
    threads: int,
    duration: float,
    pgid: int,
) -> Measure:
    """Run `threads` clients on `batch` for `duration` seconds.

    Each thread makes, connects and warms up its own client before the clock starts, and closes
    it after the clock stops: tritonclient.http's gevent client cannot change threads.
    """
    stop = threading.Event()
    ready, done = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    counts, errors = [0] * threads, [0] * threads

    def loop(index: int) -> None:
        try:
            client = make_client()
            client(batch)
        except BaseException:
            ready.abort()  # the main thread raises instead of waiting for ever
            raise
        ready.wait()
        while not stop.is_set():
            try:
                counts[index] += len(client(batch))
            except Exception:
                errors[index] += 1
        done.wait()
        getattr(client, "close", lambda: None)()

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
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(found.group(1)) if found and "Non-2xx" not in out else None


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


@dataclass
class Ceiling:
    case: Case
    batch: int
    concurrency: int
    requests_per_second: float | None
    records_per_request: int


def ceiling(case: Case, batch: int, threads: int, duration: float, wire: Any) -> Ceiling:
    if case.is_grpc:
        rate = h2load_rate(case.endpoint.url, wire, streams=threads, duration=duration)
        return Ceiling(case, batch, threads, rate, batch)
    url, body, headers = wire[0]
    per_request = batch // len(wire)  # per-record protocols send `batch` requests
    rate = wrk_rate(url, body, headers, connections=threads, duration=duration)
    return Ceiling(case, batch, threads, rate, max(1, per_request))


# ---------------------------------------------------------------- cells


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
        """The median over rounds of runner records/s ÷ `other`'s in the same round: not moved
        by one round that a load spike or a server's pause hit."""
        ratios = [r[RUNNER].rate / r[other].rate for r in self.rounds if r[other].rate]
        return statistics.median(ratios) if ratios else float("nan")


def measure_case(case: Case, server: PeerServer, args: argparse.Namespace) -> Iterator[Any]:
    """A Row per batch size and concurrency, each followed by its Ceiling when asked."""
    pgid = os.getpgid(server.process.pid)
    protocol = case.endpoint.protocol
    for batch_size in args.llm_batch_sizes if protocol in LLM_PROTOCOLS else args.batch_sizes:
        batch = records_for(protocol, batch_size)
        if case.is_grpc:
            wire: Posts | bytes = infer_request(case.endpoint.name, batch)
        else:
            wire = runner_posts(case.endpoint, batch)
        for threads in args.concurrency:
            yield measure_cell(case, batch, wire, threads=threads, args=args, pgid=pgid)
            if args.ceilings:
                yield ceiling(case, batch_size, threads, args.duration, wire)


def measure_cell(
    case: Case,
    batch: list[InputRecord],
    wire: Posts | bytes,
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
        clients: dict[str, Callable[[], Client]] = {
            REPLAY: partial(shared.replay, wire),
            **direct,
            RUNNER: shared.runner_call,
        }
        run = partial(run_threads, batch=batch, threads=threads, duration=args.duration / 2)
        rounds = []
        for _ in range(args.repeats):
            measures: dict[str, Measure] = {}
            # A B C C B A: a load change on the machine during the round hits every client alike.
            for name in [*clients, *reversed(clients)]:
                measure = run(clients[name], pgid=pgid)
                measures[name] = measures[name] + measure if name in measures else measure
            rounds.append(measures)
        return Row(case, len(batch), threads, rounds)
    finally:
        shared.close()


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
        print(f"\n== starting {name} ...", file=sys.stderr, flush=True)
        try:
            with start(name) as server:
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
