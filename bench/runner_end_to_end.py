"""The whole runner against a whole direct program: file in, real model server, file out.

runner_throughput.py compares protocol clients alone; this compares processes doing the full
job, as a user sees it. For each server and protocol it writes N iris records as JSONL (no id
field: a record's id is its position), then runs, one after the other, `repeats` times each
(A B B A ...):

- runner: `python -m runners` with a contract (file input, the protocol, file output, batch
  size B, concurrency C, chunks of 10,000): parse, batch, call, commit chunks (temp file,
  fsync, rename), summary;
- direct: this file's `direct` command, the leanest program doing the same job: read and
  parse the lines, batch B records, C threads each calling the server with the hand client of
  direct_clients.py (kept-alive connection, binary tensors where the server takes them,
  cached request heads), and write one JSON line per record with the same fields as the
  runner (`id`, `position`, `input`, `prediction`) to one file, no fsync. It tunes the
  garbage collector as the runner does (`settle_garbage_collector`).

For an LLM server (`vllm`, `llama-chat`) the records are an OpenAI batch file instead (issue
27): N chat lines (`custom_id`, `url`, a body with `messages`, `max_tokens` and `temperature`
0, no `model`), which the runner reads with `format: openai-batch` and answers in OpenAI's
output lines, and the direct program sends as they are (the model filled in, one request per
line, B lines one after the other per thread, as the runner does) with `HandBatchLines`,
writing the same output lines. It prints records/s and completion tokens/s (from each answer's
`usage`: the runner's summary, the direct program's sum) for both, and the ratios. The
runner's start-up is then measured on a file of one line.

Both are separate processes, timed from before the input is opened to after the output is
closed. The runner's `durationSeconds` also counts its start-up (loading and checking the
contract, importing the protocol and storage modules, opening the channel, settling the
garbage collector: 0.2-0.4 s, which the direct program does before its clock starts), so the
runner's start-up is measured on its own (the least `durationSeconds`, and CPU, of two runs
over one batch of records) and taken off: the rates and CPU per record compare steady states,
and the start-up is printed apart. It prints records/s, runner/direct, and the CPU per record
of each process and of the server. Nothing is asserted; both outputs are checked to hold N
records.

    python bench/runner_end_to_end.py --servers triton --records 300000
    python bench/runner_end_to_end.py --servers vllm --records 2000 --batch-size 8 \
        --concurrency 8,16 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from direct_clients import (  # noqa: E402
    FEATURES,
    IRIS,
    PROMPTS,
    SERVER_PROTOCOLS,
    ColumnBatch,
    DirectClient,
    HandBatchLines,
    hand_client,
    open_channel,
    runner_sends_binary,
)
from measuring import Measure, group_cpu  # noqa: E402

from contracts.model import ModelEndpoint  # noqa: E402
from e2e.peers.server import PeerServer, start  # noqa: E402
from runners.api import InputRecord  # noqa: E402
from runners.cli import settle_garbage_collector  # noqa: E402

PARQUET_ROW_GROUP = 65_536
BATCH_LINES = "openai-batch"  # not a protocol: the input format of the LLM servers' runs
LLM_SERVERS = {"vllm": [("batch lines, chat", BATCH_LINES)]}
LLM_SERVERS["llama-chat"] = LLM_SERVERS["vllm"]
MAX_TOKENS = 16


def write_input(path: Path, count: int, *, lines: bool = False) -> None:
    """`count` iris records, one JSON object per line (a Parquet table when `path` ends in
    .parquet: one float64 column per feature, row groups of PARQUET_ROW_GROUP); or `count`
    OpenAI batch chat lines."""
    if path.suffix == ".parquet":
        columns = {name: [IRIS[i % 3][n] for i in range(count)] for n, name in enumerate(FEATURES)}
        pq.write_table(pa.table(columns), path, row_group_size=PARQUET_ROW_GROUP)
        return
    with path.open("w") as handle:
        for i in range(count):
            handle.write(json.dumps(batch_line(i) if lines else iris_row(i)) + "\n")


def iris_row(i: int) -> dict[str, float]:
    return dict(zip(FEATURES, IRIS[i % 3], strict=True))


def batch_line(i: int) -> dict[str, Any]:
    """A chat request of an OpenAI batch file, without `model` (the run's model fills it)."""
    message = {"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}
    body = {"messages": [message], "max_tokens": MAX_TOKENS, "temperature": 0}
    return {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}


# ---------------------------------------------------------------- the direct program


def direct_client(protocol: str, url: str, model: str, binary: bool) -> Callable[[], Any]:
    """A factory of per-thread hand clients (gRPC ones share one channel)."""
    if protocol == BATCH_LINES:
        return lambda: HandBatchLines(ModelEndpoint(protocol="openai-chat", url=url, name=model))
    endpoint = ModelEndpoint(protocol=protocol, url=url, name=model)
    channel = open_channel(url) if protocol == "triton-grpc" else None
    return hand_client(endpoint, binary=binary, channel=channel)


def direct(args: argparse.Namespace) -> None:
    """Read, batch, call with C threads, write: prints {"records", "seconds", "cpu", "tokens"}
    (completion tokens: of batch lines only). JSON with orjson, Parquet with pyarrow: the
    leanest program a data team would write today."""
    make = direct_client(args.protocol, args.url, args.model, args.binary)
    local = threading.local()

    def call(batch: list[InputRecord]) -> list[Any]:
        client: DirectClient | None = getattr(local, "client", None)
        if client is None:
            client = local.client = make()
        return client(batch)

    parquet = args.input.endswith(".parquet")
    settle_garbage_collector()
    started, cpu0 = time.perf_counter(), time.process_time()
    tokens = 0
    with ThreadPoolExecutor(args.concurrency) as pool:
        pending: deque[tuple[list[InputRecord], Future[list[Any]]]] = deque()

        def answered() -> Iterator[tuple[list[InputRecord], list[Any]]]:
            nonlocal tokens
            batch, future = pending.popleft()
            found = future.result()
            if args.protocol == BATCH_LINES:
                tokens += sum(p["body"]["usage"]["completion_tokens"] for p in found)
            yield batch, found

        def results(source: Iterator[list[InputRecord]]) -> Iterator[tuple[Any, list[Any]]]:
            for batch in source:
                pending.append((batch, pool.submit(call, batch)))
                if len(pending) >= 2 * args.concurrency:
                    yield from answered()
            while pending:
                yield from answered()

        if parquet:
            written = write_parquet(results(column_batches(args.input, args.batch_size)), args)
        else:
            with open(args.input) as source:
                written = write_lines(results(batches(source, args.batch_size)), args)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    print(json.dumps({"records": written, "seconds": seconds, "cpu": cpu, "tokens": tokens}))


def write_lines(answers: Iterator[tuple[Any, list[Any]]], args: argparse.Namespace) -> int:
    """One JSON line per record, as the runner writes them (`row_output`, `batch_output`)."""
    line = batch_output if args.protocol == BATCH_LINES else row_output
    written = 0
    with open(args.output, "wb") as out:
        for batch, found in answers:
            rows = [line(r, p) for r, p in zip(batch, found, strict=True)]
            out.write(b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in rows))
            written += len(rows)
    return written


def column_batches(path: str, size: int) -> Iterator[list[InputRecord]]:
    """Batches of `size` rows of a Parquet file, each tensor built from its Arrow columns."""
    for batch in pq.ParquetFile(path).iter_batches(batch_size=size, columns=list(FEATURES)):
        yield ColumnBatch(np.column_stack([column.to_numpy() for column in batch.columns]))


def write_parquet(answers: Iterator[tuple[Any, list[Any]]], args: argparse.Namespace) -> int:
    """Parquet with the runner's output columns (id, position, prediction), a row group per
    PART rows, as the runner writes a part per chunk."""
    written, parts = 0, list[tuple[pa.Array, pa.Array, pa.Array]]()
    writer: pq.ParquetWriter | None = None

    def flush() -> None:
        nonlocal writer, parts
        columns = [pa.concat_arrays(list(c)) for c in zip(*parts, strict=True)]
        table = pa.table(columns, names=OUTPUT_COLUMNS)
        writer = writer or pq.ParquetWriter(args.output, table.schema)
        writer.write_table(table)
        parts = []

    try:
        for batch, found in answers:
            positions = pa.array(np.arange(written, written + len(batch), dtype=np.int64))
            parts.append((positions.cast(pa.string()), positions, pa.array(found)))
            written += len(batch)
            if written % PART < len(batch):
                flush()
        if parts:
            flush()
    finally:
        if writer is not None:
            writer.close()
    return written


OUTPUT_COLUMNS = ["id", "position", "prediction"]
PART = 10_000


def row_output(record: InputRecord, prediction: Any) -> dict[str, Any]:
    """The runner's JSONL row."""
    return {
        "id": record.id,
        "position": record.position,
        "input": record.data,
        "prediction": prediction,
    }


def batch_output(record: InputRecord, response: Any) -> dict[str, Any]:
    """OpenAI's batch output line, as the runner writes it for an answered line."""
    custom_id = record.data["custom_id"]
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": response,
        "error": None,
    }


def batches(lines: Iterator[str], size: int) -> Iterator[list[InputRecord]]:
    """InputRecords of `size` records, each's id its position (as the runner's)."""
    batch: list[InputRecord] = []
    for position, line in enumerate(lines):
        batch.append(InputRecord(position, str(position), orjson.loads(line)))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------- running both

Found = tuple[int, float, float, int]  # records, seconds, CPU seconds, completion tokens


def run_runner(
    tmp: Path,
    source: Path,
    protocol: str,
    url: str,
    model: str,
    args: argparse.Namespace,
    *,
    code: Path | None = None,
) -> Found:
    """(records written, durationSeconds, CPU seconds, completion tokens) of one runner: this
    checkout's, or the one at `code` (`--before`)."""
    out = tmp / "runner-out"
    lines = protocol == BATCH_LINES
    fmt = {"format": BATCH_LINES} if lines else {}
    if source.suffix == ".parquet":
        fmt = {"format": "parquet"}
    tuning = {"batchSize": args.batch_size, "concurrency": args.concurrency}
    if args.chunk_size is not None:
        tuning["chunkSize"] = args.chunk_size
    contract = {
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": {"protocol": "openai-chat" if lines else protocol, "url": url, "name": model},
        "input": {"file": {"path": str(source), **fmt}},
        "output": {"file": {"path": str(out), **fmt}},
        "runner": tuning,
    }
    (tmp / "contract.json").write_text(json.dumps(contract))
    env = {
        **os.environ,
        "CONTRACT_PATH": str(tmp / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }
    if code is not None:  # the other checkout's runner, whatever this one has installed
        env["PYTHONPATH"] = str(code)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners"],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"runner failed: {stderr.decode()[-2000:]}")
    summary = json.loads((tmp / "termination-log").read_text())
    subprocess.run(["rm", "-rf", str(out), str(out) + "-errors"], check=True)
    cpu = usage.ru_utime + usage.ru_stime
    tokens = summary.get("completionTokens", 0)
    return summary["recordsWritten"], summary["durationSeconds"], cpu, tokens


def run_direct(
    tmp: Path, source: Path, protocol: str, url: str, model: str, binary: bool, args: Any
) -> Found:
    command = [
        *(sys.executable, __file__, "direct", "--input", str(source)),
        *("--output", str(tmp / "direct-out"), "--protocol", protocol),
        *("--records", str(args.records)),
        *("--url", url, "--model", model, "--batch-size", str(args.batch_size)),
        *("--concurrency", str(args.concurrency), *(["--binary"] if binary else [])),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"direct program failed: {done.stderr[-2000:]}")
    found = json.loads(done.stdout)
    (tmp / "direct-out").unlink()
    return found["records"], found["seconds"], found["cpu"], found["tokens"]


def protocols(server: PeerServer) -> list[tuple[str, str]]:
    return LLM_SERVERS.get(server.name) or SERVER_PROTOCOLS[server.name]


def measure(server: PeerServer, tmp: Path, args: argparse.Namespace) -> None:
    for label, protocol in protocols(server):
        url = (server.grpc_url or "") if protocol == "triton-grpc" else server.http_url
        lines = protocol == BATCH_LINES
        takes = False
        if not lines:
            endpoint = ModelEndpoint(protocol=protocol, url=url, name=server.model)
            takes = protocol == "kserve-v2" and runner_sends_binary(endpoint)
        label += " (binary)" if takes else ""
        for fmt in ["jsonl"] if lines else args.formats.split(","):
            source = tmp / f"in-{'lines' if lines else 'iris'}.{fmt}"
            if not source.exists():
                write_input(source, args.records, lines=lines)
            job = Job(server, protocol, url, takes, source, args)
            report(server.name, f"{label} {fmt}", job.measure(tmp), args.concurrency)


@dataclass
class Job:
    """One cell: the runner, the direct program and (`--before`) the earlier runner, each run
    `repeats` times, interleaved, on the same input and server."""

    server: PeerServer
    protocol: str
    url: str
    binary: bool
    source: Path
    args: argparse.Namespace

    def measure(self, tmp: Path) -> dict[str, list[Run]]:
        programs = ["runner", "direct"]
        if self.args.before and self.source.suffix == ".jsonl":  # the earlier runner: JSONL only
            programs.append("before")
        one_batch = tmp / f"one-batch{self.source.suffix}"
        write_input(one_batch, 1 if self.lines else self.args.batch_size, lines=self.lines)
        startups = {
            name: self.startup(tmp, one_batch, name) for name in programs if name != "direct"
        }
        runs: dict[str, list[Run]] = {name: [] for name in programs}
        for repeat in range(self.args.repeats):
            for name in programs if repeat % 2 == 0 else programs[::-1]:
                server0 = group_cpu(self.server.process.pid)
                records, seconds, cpu, used = self.run(tmp, self.source, name)
                if name in startups:
                    seconds, cpu = seconds - startups[name][0], cpu - startups[name][1]
                if records != self.args.records:
                    raise SystemExit(f"{name} wrote {records} of {self.args.records} records")
                server_cpu = group_cpu(self.server.process.pid) - server0
                runs[name].append(Run(Measure(records, seconds, cpu, server_cpu), used / seconds))
        runs["startup"] = [Run(Measure(1, *startups["runner"], 0.0), 0.0)]
        return runs

    @property
    def lines(self) -> bool:
        return self.protocol == BATCH_LINES

    def startup(self, tmp: Path, one_batch: Path, name: str) -> tuple[float, float]:
        """The least seconds and CPU of two runs over one batch: the start-up taken off."""
        starts = [self.run(tmp, one_batch, name) for _ in range(2)]
        return min(s[1] for s in starts), min(s[2] for s in starts)

    def run(self, tmp: Path, source: Path, name: str) -> Found:
        model, args = self.server.model, self.args
        if name == "direct":
            return run_direct(tmp, source, self.protocol, self.url, model, self.binary, args)
        code = Path(args.before) if name == "before" else None
        return run_runner(tmp, source, self.protocol, self.url, model, args, code=code)


@dataclass
class Run:
    measure: Measure
    tokens: float  # completion tokens/s (LLM lines only)


def report(server: str, label: str, runs: dict[str, list[Run]], concurrency: int) -> None:
    """One line: best records/s of each, median and best ratios, CPU per record (medians) or
    tokens/s, the earlier runner's CPU and the ratio to it, start-up."""
    best = {name: max(each, key=lambda r: r.measure.rate) for name, each in runs.items()}
    runner, hand = best["runner"].measure, best["direct"].measure
    pairs = zip(runs["runner"], runs["direct"], strict=True)
    ratio = statistics.median(r.measure.rate / d.measure.rate for r, d in pairs)
    cpu = {
        name: statistics.median(r.measure.cpu_per_k() for r in each) for name, each in runs.items()
    }
    server_cpu = statistics.median(
        r.measure.cpu_per_k(r.measure.server_cpu) for r in runs["runner"]
    )
    rest = f"{cpu['runner']:>6.2f} {cpu['direct']:>6.2f} {server_cpu:>6.2f}"
    if "before" in runs:  # its CPU, the CPU ratio, and the median rate ratio of paired runs
        faster = statistics.median(
            r.measure.rate / b.measure.rate
            for r, b in zip(runs["runner"], runs["before"], strict=True)
        )
        rest += f" | before {cpu['before']:>6.2f} {cpu['runner'] / cpu['before']:>5.2f}"
        rest += f" {faster:>5.2f}"
    if server in LLM_SERVERS:
        runner_tokens, direct_tokens = best["runner"].tokens, best["direct"].tokens
        rest += (
            f" | tokens/s {runner_tokens:>6,.0f} {direct_tokens:>6,.0f} "
            f"{runner_tokens / direct_tokens:>5.2f}"
        )
    startup = runs["startup"][0].measure.seconds
    print(
        f"{server:8} {label:23} C={concurrency:<3} | {runner.rate:>9,.0f} {hand.rate:>9,.0f} | "
        f"{ratio:>5.2f} {runner.rate / hand.rate:>5.2f} | {rest} | {startup:>5.2f}",
        flush=True,
    )
    if server in LLM_SERVERS:
        each = " ".join(f"{r.measure.rate:,.1f}" for r in runs["runner"])
        print(
            f"{'':27} each run, records/s: runner {each}; direct "
            + " ".join(f"{r.measure.rate:,.1f}" for r in runs["direct"]),
            flush=True,
        )


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    hand = commands.add_parser("direct", help="the direct program (run by the benchmark)")
    for name in ("--input", "--output", "--protocol", "--url", "--model"):
        hand.add_argument(name, required=True)
    hand.add_argument("--binary", action="store_true")
    hand.add_argument("--concurrency", type=int, default=8)
    for options in (parser, hand):
        options.add_argument("--batch-size", type=int, default=256)
        options.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--concurrency", default="8", help="one or more, comma-separated")
    parser.add_argument("--servers", default="kserve,mlserver,triton")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each program")
    parser.add_argument(
        "--formats", default="jsonl", help="input (and output) formats: jsonl, parquet or both"
    )
    parser.add_argument(
        "--chunk-size", type=int, default=None, help="the runner's chunkSize (default: its own)"
    )
    parser.add_argument(
        "--before",
        default=None,
        help="a checkout of earlier code (git worktree add DIR COMMIT): its runner is run too, "
        "interleaved, and its CPU per record compared (JSONL only)",
    )
    args = parser.parse_args()
    if args.command == "direct":
        direct(args)
        return
    print(
        f"whole runner vs a direct program, file -> model -> file, {args.records:,} records, "
        f"B={args.batch_size} C={args.concurrency}, chunkSize {args.chunk_size or 'default'}, "
        f"{args.repeats} runs each, interleaved (r/d: median of paired runs, and best vs best; "
        f"CPU: medians; the runners' start-up, s, taken off their time and CPU and shown "
        f"apart); {os.cpu_count()} CPUs, load {load()}\n"
    )
    print(
        f"{'server':8} {'protocol, format':23} {'C':5} | {'runner':>9} {'direct':>9} | "
        f"{'r/d':>5} {'best':>5} | {'cpu µs/rec: runner':>18} {'direct':>6} {'server':>6} "
        f"(| before: cpu µs/rec, runner/before: cpu, rate) (LLM: | tokens/s runner, direct, r/d) | "
        f"{'start':>5}"
    )
    print("-" * 120)
    with tempfile.TemporaryDirectory(prefix="longrun-e2e-bench-") as name:
        tmp = Path(name)
        for server_name in args.servers.split(","):
            with start(server_name) as server:
                for concurrency in (int(c) for c in args.concurrency.split(",")):
                    measure(
                        server,
                        tmp,
                        argparse.Namespace(**{**vars(args), "concurrency": concurrency}),
                    )
            print(f"load after {server_name}: {load()}", flush=True)


if __name__ == "__main__":
    main()
