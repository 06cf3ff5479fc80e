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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from direct_clients import (  # noqa: E402
    FEATURES,
    IRIS,
    PROMPTS,
    SERVER_PROTOCOLS,
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

CHUNK = 10_000
BATCH_LINES = "openai-batch"  # not a protocol: the input format of the LLM servers' runs
LLM_SERVERS = {"vllm": [("batch lines, chat", BATCH_LINES)]}
LLM_SERVERS["llama-chat"] = LLM_SERVERS["vllm"]
MAX_TOKENS = 16


def write_input(path: Path, count: int, *, lines: bool = False) -> None:
    """`count` iris records, one JSON object per line; or `count` OpenAI batch chat lines."""
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
    (completion tokens: of batch lines only)."""
    make = direct_client(args.protocol, args.url, args.model, args.binary)
    local = threading.local()

    def call(batch: list[InputRecord]) -> list[Any]:
        client: DirectClient | None = getattr(local, "client", None)
        if client is None:
            client = local.client = make()
        return client(batch)

    encode = json.JSONEncoder().encode
    line = batch_output if args.protocol == BATCH_LINES else row_output
    settle_garbage_collector()
    started, cpu0 = time.perf_counter(), time.process_time()
    written = tokens = 0
    with (
        open(args.input) as source,
        open(args.output, "w") as out,
        ThreadPoolExecutor(args.concurrency) as pool,
    ):
        pending: deque[tuple[list[InputRecord], Future[list[Any]]]] = deque()

        def write_one() -> int:
            nonlocal tokens
            batch, future = pending.popleft()
            found = future.result()
            if args.protocol == BATCH_LINES:
                tokens += sum(p["body"]["usage"]["completion_tokens"] for p in found)
            lines = [encode(line(r, p)) for r, p in zip(batch, found, strict=True)]
            out.write("\n".join(lines) + "\n")
            return len(lines)

        for batch in batches(source, args.batch_size):
            pending.append((batch, pool.submit(call, batch)))
            if len(pending) >= 2 * args.concurrency:
                written += write_one()
        while pending:
            written += write_one()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    print(json.dumps({"records": written, "seconds": seconds, "cpu": cpu, "tokens": tokens}))


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
        batch.append(InputRecord(position, str(position), json.loads(line)))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---------------------------------------------------------------- running both

Found = tuple[int, float, float, int]  # records, seconds, CPU seconds, completion tokens


def run_runner(
    tmp: Path, source: Path, protocol: str, url: str, model: str, args: argparse.Namespace
) -> Found:
    """(records written, durationSeconds, CPU seconds, completion tokens) of one runner."""
    out = tmp / "runner-out"
    lines = protocol == BATCH_LINES
    contract = {
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": {"protocol": "openai-chat" if lines else protocol, "url": url, "name": model},
        "input": {"file": {"path": str(source), **({"format": BATCH_LINES} if lines else {})}},
        "output": {"file": {"path": str(out)}},
        "runner": {
            "chunkSize": CHUNK,
            "batchSize": args.batch_size,
            "concurrency": args.concurrency,
        },
    }
    (tmp / "contract.json").write_text(json.dumps(contract))
    env = {
        **os.environ,
        "CONTRACT_PATH": str(tmp / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners"],
        env=env,
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
        *("--output", str(tmp / "direct-out.jsonl"), "--protocol", protocol),
        *("--url", url, "--model", model, "--batch-size", str(args.batch_size)),
        *("--concurrency", str(args.concurrency), *(["--binary"] if binary else [])),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"direct program failed: {done.stderr[-2000:]}")
    found = json.loads(done.stdout)
    (tmp / "direct-out.jsonl").unlink()
    return found["records"], found["seconds"], found["cpu"], found["tokens"]


def protocols(server: PeerServer) -> list[tuple[str, str]]:
    return LLM_SERVERS.get(server.name) or SERVER_PROTOCOLS[server.name]


def measure(server: PeerServer, tmp: Path, source: Path, args: argparse.Namespace) -> None:
    pgid = server.process.pid
    for label, protocol in protocols(server):
        url = (server.grpc_url or "") if protocol == "triton-grpc" else server.http_url
        lines = protocol == BATCH_LINES
        one_batch = tmp / "one-batch.jsonl"
        write_input(one_batch, 1 if lines else args.batch_size, lines=lines)
        takes = False
        if not lines:
            endpoint = ModelEndpoint(protocol=protocol, url=url, name=server.model)
            takes = protocol == "kserve-v2" and runner_sends_binary(endpoint)
        label += " (binary)" if takes else ""
        starts = [run_runner(tmp, one_batch, protocol, url, server.model, args) for _ in range(2)]
        startup, startup_cpu = min(s[1] for s in starts), min(s[2] for s in starts)
        runs: dict[str, list[Measure]] = {"runner": [], "direct": []}
        tokens: dict[str, list[float]] = {"runner": [], "direct": []}  # completion tokens/s
        order = ["runner", "direct", "direct", "runner"] * ((args.repeats + 1) // 2)
        for name in order[: 2 * args.repeats]:
            server0 = group_cpu(pgid)
            if name == "runner":
                found = run_runner(tmp, source, protocol, url, server.model, args)
            else:
                found = run_direct(tmp, source, protocol, url, server.model, takes, args)
            records, seconds, cpu, used = found
            if name == "runner":
                seconds, cpu = seconds - startup, cpu - startup_cpu
            if records != args.records:
                raise SystemExit(f"{name} wrote {records} of {args.records} records")
            runs[name].append(Measure(records, seconds, cpu, group_cpu(pgid) - server0))
            tokens[name].append(used / seconds)
        report(server.name, label, runs, tokens if lines else None, startup, args.concurrency)


def report(
    server: str,
    label: str,
    runs: dict[str, list[Measure]],
    tokens: dict[str, list[float]] | None,
    startup: float,
    concurrency: int,
) -> None:
    """One line: best records/s of each, median and best ratios, CPU or tokens/s, start-up."""
    runner, hand = (max(runs[n], key=lambda m: m.rate) for n in ("runner", "direct"))
    ratios = [r.rate / d.rate for r, d in zip(runs["runner"], runs["direct"], strict=True)]
    rest = (
        f"{runner.cpu_per_k():>6.2f} {hand.cpu_per_k():>6.2f} "
        f"{runner.cpu_per_k(runner.server_cpu):>6.2f}"
    )
    if tokens is not None:
        runner_tokens, direct_tokens = max(tokens["runner"]), max(tokens["direct"])
        rest += (
            f" | tokens/s {runner_tokens:>6,.0f} {direct_tokens:>6,.0f} "
            f"{runner_tokens / direct_tokens:>5.2f}"
        )
    print(
        f"{server:8} {label:17} C={concurrency:<3} | {runner.rate:>9,.0f} {hand.rate:>9,.0f} | "
        f"{statistics.median(ratios):>5.2f} {runner.rate / hand.rate:>5.2f} | {rest} | "
        f"{startup:>5.2f}",
        flush=True,
    )
    if tokens is not None:
        each = " ".join(f"{m.rate:,.1f}" for m in runs["runner"])
        print(
            f"{'':27} each run, records/s: runner {each}; direct "
            + " ".join(f"{m.rate:,.1f}" for m in runs["direct"]),
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
    parser.add_argument("--concurrency", default="8", help="one or more, comma-separated")
    parser.add_argument("--servers", default="kserve,mlserver,triton")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each program")
    args = parser.parse_args()
    if args.command == "direct":
        direct(args)
        return
    print(
        f"whole runner vs a direct program, file -> model -> file, {args.records:,} records, "
        f"B={args.batch_size} C={args.concurrency}, best of {args.repeats} runs each "
        f"(ratio: median of paired runs, and best vs best; the runner's start-up, s, taken off "
        f"its time and shown apart); {os.cpu_count()} CPUs, load {load()}\n"
    )
    print(
        f"{'server':8} {'protocol':17} {'C':5} | {'runner':>9} {'direct':>9} | {'r/d':>5} "
        f"{'best':>5} | {'cpu µs/rec: runner':>18} {'direct':>6} {'server':>6} "
        f"(LLM: | tokens/s runner, direct, r/d) | {'start':>5}"
    )
    print("-" * 110)
    with tempfile.TemporaryDirectory(prefix="longrun-e2e-bench-") as name:
        tmp = Path(name)
        for server_name in args.servers.split(","):
            source = tmp / f"in-{server_name}.jsonl"
            write_input(source, args.records, lines=server_name in LLM_SERVERS)
            with start(server_name) as server:
                for concurrency in (int(c) for c in args.concurrency.split(",")):
                    measure(
                        server,
                        tmp,
                        source,
                        argparse.Namespace(**{**vars(args), "concurrency": concurrency}),
                    )
            print(f"load after {server_name}: {load()}", flush=True)


if __name__ == "__main__":
    main()
