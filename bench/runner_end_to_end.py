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
    SERVER_PROTOCOLS,
    DirectClient,
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


def write_input(path: Path, count: int) -> None:
    """`count` iris records, one JSON object per line."""
    with path.open("w") as handle:
        for i in range(count):
            handle.write(json.dumps(dict(zip(FEATURES, IRIS[i % 3], strict=True))) + "\n")


# ---------------------------------------------------------------- the direct program


def direct_client(protocol: str, url: str, model: str, binary: bool) -> Callable[[], Any]:
    """A factory of per-thread hand clients (gRPC ones share one channel)."""
    endpoint = ModelEndpoint(protocol=protocol, url=url, name=model)
    channel = open_channel(url) if protocol == "triton-grpc" else None
    return hand_client(endpoint, binary=binary, channel=channel)


def direct(args: argparse.Namespace) -> None:
    """Read, batch, call with C threads, write: prints {"records", "seconds", "cpu"}."""
    make = direct_client(args.protocol, args.url, args.model, args.binary)
    local = threading.local()

    def call(batch: list[InputRecord]) -> list[Any]:
        client: DirectClient | None = getattr(local, "client", None)
        if client is None:
            client = local.client = make()
        return client(batch)

    encode = json.JSONEncoder().encode
    settle_garbage_collector()
    started, cpu0 = time.perf_counter(), time.process_time()
    written = 0
    with (
        open(args.input) as source,
        open(args.output, "w") as out,
        ThreadPoolExecutor(args.concurrency) as pool,
    ):
        pending: deque[tuple[list[InputRecord], Future[list[Any]]]] = deque()

        def write_one() -> int:
            batch, future = pending.popleft()
            lines = [
                encode({"id": r.id, "position": r.position, "input": r.data, "prediction": p})
                for r, p in zip(batch, future.result(), strict=True)
            ]
            out.write("\n".join(lines) + "\n")
            return len(lines)

        for batch in batches(source, args.batch_size):
            pending.append((batch, pool.submit(call, batch)))
            if len(pending) >= 2 * args.concurrency:
                written += write_one()
        while pending:
            written += write_one()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
    print(json.dumps({"records": written, "seconds": seconds, "cpu": cpu}))


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


def run_runner(
    tmp: Path, source: Path, protocol: str, url: str, model: str, args: argparse.Namespace
) -> tuple[int, float, float]:
    """(records written, durationSeconds, CPU seconds) of one runner process."""
    out = tmp / "runner-out"
    contract = {
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": {"protocol": protocol, "url": url, "name": model},
        "input": {"file": {"path": str(source)}},
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
    return summary["recordsWritten"], summary["durationSeconds"], usage.ru_utime + usage.ru_stime


def run_direct(
    tmp: Path, source: Path, protocol: str, url: str, model: str, binary: bool, args: Any
) -> tuple[int, float, float]:
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
    return found["records"], found["seconds"], found["cpu"]


def measure(server: PeerServer, tmp: Path, source: Path, args: argparse.Namespace) -> None:
    pgid = server.process.pid
    one_batch = tmp / "one-batch.jsonl"
    write_input(one_batch, args.batch_size)
    for label, protocol in SERVER_PROTOCOLS[server.name]:
        url = (server.grpc_url or "") if protocol == "triton-grpc" else server.http_url
        endpoint = ModelEndpoint(protocol=protocol, url=url, name=server.model)
        takes = protocol == "kserve-v2" and runner_sends_binary(endpoint)
        label += " (binary)" if takes else ""
        starts = [run_runner(tmp, one_batch, protocol, url, server.model, args) for _ in range(2)]
        startup, startup_cpu = min(s[1] for s in starts), min(s[2] for s in starts)
        runs: dict[str, list[Measure]] = {"runner": [], "direct": []}
        order = ["runner", "direct", "direct", "runner"] * ((args.repeats + 1) // 2)
        for name in order[: 2 * args.repeats]:
            server0 = group_cpu(pgid)
            if name == "runner":
                found = run_runner(tmp, source, protocol, url, server.model, args)
            else:
                found = run_direct(tmp, source, protocol, url, server.model, takes, args)
            records, seconds, cpu = found
            if name == "runner":
                seconds, cpu = seconds - startup, cpu - startup_cpu
            if records != args.records:
                raise SystemExit(f"{name} wrote {records} of {args.records} records")
            runs[name].append(Measure(records, seconds, cpu, group_cpu(pgid) - server0))
        runner, hand = (max(runs[n], key=lambda m: m.rate) for n in ("runner", "direct"))
        ratios = [r.rate / d.rate for r, d in zip(runs["runner"], runs["direct"], strict=True)]
        print(
            f"{server.name:8} {label:17} | {runner.rate:>9,.0f} {hand.rate:>9,.0f} | "
            f"{statistics.median(ratios):>5.2f} {runner.rate / hand.rate:>5.2f} | "
            f"{runner.cpu_per_k():>6.2f} {hand.cpu_per_k():>6.2f} "
            f"{runner.cpu_per_k(runner.server_cpu):>6.2f} | {startup:>5.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    hand = commands.add_parser("direct", help="the direct program (run by the benchmark)")
    for name in ("--input", "--output", "--protocol", "--url", "--model"):
        hand.add_argument(name, required=True)
    hand.add_argument("--binary", action="store_true")
    for options in (parser, hand):
        options.add_argument("--batch-size", type=int, default=256)
        options.add_argument("--concurrency", type=int, default=8)
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
        f"its time and shown apart); {os.cpu_count()} CPUs\n"
    )
    print(
        f"{'server':8} {'protocol':17} | {'runner':>9} {'direct':>9} | {'r/d':>5} {'best':>5} | "
        f"{'cpu µs/rec: runner':>18} {'direct':>6} {'server':>6} | {'start':>5}"
    )
    print("-" * 96)
    with tempfile.TemporaryDirectory(prefix="longrun-e2e-bench-") as name:
        tmp = Path(name)
        source = tmp / "in.jsonl"
        write_input(source, args.records)
        for server_name in args.servers.split(","):
            with start(server_name) as server:
                measure(server, tmp, source, args)


if __name__ == "__main__":
    main()
