"""What one run over N pods delivers against one pod (issue 28): records/s of the whole run.

A run shared by N pods (the contract's `partitioning`) should go N times as fast as one pod
when the model server is not what limits it; the issue's target is rate(N) / (N x rate(1)) >=
0.9 for N = 2 and 4. `--format jsonl` (the default): rule chunkRoundRobin, chunk c is index
c mod N's, and every pod reads and parses the whole input in order (passing over the other
pods' chunks without calling the model), so the reading cost grows with N while the model
calls are shared. `--format parquet`: rule chunkRanges, as the controller picks for Parquet,
each pod reading its own contiguous range of row groups only. This measures what the reading,
the start-up of every pod and the machine's cores leave of the N-fold.

The model server must not be the bottleneck, so it is one that only waits: a threaded stdlib
HTTP server in a process of its own (`serve`, a thread per connection, so every pod's every
concurrent request is served at once) answering the Open Inference Protocol (kserve-v2 REST,
JSON tensors: one INT64 prediction per row) after sleeping `--latency-ms` per request. A pod's
rate is then bound by latency: concurrency x batch size / latency (4 x 32 / 50 ms = 2,560
records/s), whatever the number of pods, at about half a millisecond of server CPU a request. The
pods' CPU (from each process's rusage) and the server's (its process group, from /proc) are
printed so that the reader sees whether the machine's cores, not the latency, set the rate.

It writes R records (four floats each; no id field: a record's id is its position) as JSONL or
as Parquet (row groups of 10,000), then
for N = 1, 2, 4 (`--pods`), in rounds alternating the order (1 2 4, 4 2 1, ...), starts N
`python -m runners` processes at once on one contract (file input; a fresh file output
directory per run; `chunkSize`, `batchSize`, `concurrency`; `partitioning` for N > 1), each
with its `JOB_COMPLETION_INDEX` and its own termination message file, and times from before
the first start to the last exit. Before each such run the same N pods run over one batch of
records: their wall and CPU seconds are the start-up (interpreter, imports, contract, opening
the stores) that the run's wall time holds, and that N pods pay at once on the machine's cores.
Each run is checked: every pod exited 0, their summaries'
recordsWritten add up to R, the part files hold R lines, and `_SUCCESS` exists and says
recordsWritten = R. Per N it prints the median wall seconds and records/s, the ratio
rate(N) / (N x rate(1)) of each round (median and min), the start-up, the slowest pod's own
`durationSeconds` (counted from after its imports) and the same ratio on it (the run without
the interpreters' start), the pods' CPU per 1,000 records and
the cores they kept busy (CPU s / wall s), the server's CPU per 1,000 records, and the 1-minute
load average before the runs. Nothing is asserted: the numbers are printed.

    python bench/sharded_run.py
    python bench/sharded_run.py --records 200000 --rounds 5 --latency-ms 20 --pods 1,2,4,8
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from math import nan
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from measuring import group_cpu  # noqa: E402

MODEL = "iris"
ROWS = re.compile(rb'"shape":\s*\[\s*(\d+)')


# ---------------------------------------------------------------- the model server, a process


class LatencyServer(ThreadingHTTPServer):
    """kserve-v2 REST that answers every request after `latency` seconds; a thread per
    connection, so requests on different connections wait in parallel."""

    daemon_threads = True
    request_queue_size = 256  # every pod's connections open at once at start

    def __init__(self, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), LatencyHandler)
        self.latency = latency
        self.answers: dict[int, bytes] = {}

    def answer(self, rows: int) -> bytes:
        """The response to a batch of `rows`: one INT64 0 per row (cached per size)."""
        body = self.answers.get(rows)
        if body is None:
            output = {"name": "predict", "shape": [rows], "datatype": "INT64", "data": [0] * rows}
            doc = {"model_name": MODEL, "id": "0", "outputs": [output]}
            body = self.answers[rows] = json.dumps(doc).encode()
        return body


class LatencyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per runner thread
    disable_nagle_algorithm = True  # else the body waits for the headers' delayed ACK (40 ms)
    server: LatencyServer

    def do_POST(self) -> None:
        request = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        found = ROWS.search(request)  # the tensor's shape, without parsing the values
        if found is None or not self.path.endswith("/infer"):
            self.send_error(400)
            return
        time.sleep(self.server.latency)
        body = self.server.answer(int(found[1]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(latency_ms: float) -> None:
    """Serve until SIGTERM; the URL is printed first."""
    server = LatencyServer(latency_ms / 1000)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


class Server:
    """The latency server in a process (and process group) of its own."""

    def __init__(self, latency_ms: float) -> None:
        command = [sys.executable, __file__, "serve", "--latency-ms", str(latency_ms)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def cpu(self) -> float:
        return group_cpu(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


# ---------------------------------------------------------------- one run over N pods


@dataclass
class Run:
    """One run over `pods` pods: wall seconds from the first start to the last exit, the pods'
    CPU seconds (all together), the server's, and the load average before it."""

    pods: int
    records: int
    seconds: float
    cpu: float
    server_cpu: float
    load: float
    slowest: float  # the slowest pod's own durationSeconds (from after its imports)
    start: float = nan  # wall seconds of N pods at once over one batch: their start-up
    start_cpu: float = nan  # and the CPU seconds they used

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    def per_k(self, cpu: float) -> float:
        """CPU milliseconds per 1,000 records."""
        return cpu / self.records * 1e6


def write_input(path: Path, count: int) -> None:
    rows = (
        {"a": 5.0 + i % 10 / 10, "b": 3.5, "c": 1.4 + i % 7 / 10, "d": 0.2} for i in range(count)
    )
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(rows)), path, row_group_size=10_000)
        return
    with path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def contract(source: Path, out: Path, url: str, pods: int, args: argparse.Namespace) -> str:
    doc: dict[str, Any] = {
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": {"protocol": "kserve-v2", "url": url, "name": MODEL, "binaryData": False},
        "input": {"file": {"path": str(source)}},
        "output": {"file": {"path": str(out)}},
        "runner": {
            "chunkSize": args.chunk_size,
            "batchSize": args.batch_size,
            "concurrency": args.concurrency,
            "progressIntervalSeconds": 3600,
        },
    }
    if pods > 1:
        rule = "chunkRanges" if source.suffix == ".parquet" else "chunkRoundRobin"
        doc["partitioning"] = {"count": pods, "rule": rule}
    return json.dumps(doc)


def run(
    tmp: Path, source: Path, server: Server, pods: int, args: argparse.Namespace, *, records: int
) -> Run:
    """N runner processes at once on one contract over `source` (`records` records); checked,
    then measured."""
    work = tmp / f"run-{pods}"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir()
    out = work / "out"
    (work / "contract.json").write_text(contract(source, out, server.url, pods, args))
    load, server0 = os.getloadavg()[0], server.cpu()
    started = time.perf_counter()
    processes = [start_pod(work, index) for index in range(pods)]
    cpu = 0.0
    for index, process in enumerate(processes):
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        if process.returncode != 0:
            log = (work / f"stderr-{index}").read_text()[-2000:]
            raise SystemExit(f"pod {index} of {pods} exited {process.returncode}: {log}")
    seconds = time.perf_counter() - started
    slowest = check(work, out, pods, records)
    return Run(pods, records, seconds, cpu, server.cpu() - server0, load, slowest)


def start_pod(work: Path, index: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "CONTRACT_PATH": str(work / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(work / f"termination-{index}"),
        "JOB_COMPLETION_INDEX": str(index),
    }
    with (work / f"stderr-{index}").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "runners"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def check(work: Path, out: Path, pods: int, records: int) -> float:
    """The run wrote every record once: summaries, part files and `_SUCCESS` agree on it.
    Returns the slowest pod's durationSeconds."""
    summaries = [json.loads((work / f"termination-{i}").read_text()) for i in range(pods)]
    written = sum(s["recordsWritten"] for s in summaries)
    lines = 0
    for part in out.glob("part-*.jsonl"):
        with part.open("rb") as handle:
            lines += sum(1 for _ in handle)
    marker = out / "_SUCCESS"
    manifest = json.loads(marker.read_text()) if marker.exists() else {}
    found = (written, lines, manifest.get("recordsWritten"))
    if found != (records, records, records):
        raise SystemExit(
            f"run over {pods} pods: summaries {found[0]}, part lines {found[1]}, _SUCCESS "
            f"recordsWritten {found[2]} (expected {records} each)"
        )
    return max(float(s["durationSeconds"]) for s in summaries)


# ---------------------------------------------------------------- rounds and the table


def measure(tmp: Path, server: Server, args: argparse.Namespace) -> list[Run]:
    """`rounds` rounds over every N, the order alternating (1 2 4, 4 2 1, ...); each run is
    preceded by the same N pods over one batch of records, which times their start-up."""
    source, one_batch = tmp / f"in.{args.format}", tmp / f"one-batch.{args.format}"
    write_input(source, args.records)
    write_input(one_batch, args.batch_size)
    pods = [int(n) for n in args.pods.split(",")]
    runs = []
    for round_ in range(args.rounds):
        for n in pods if round_ % 2 == 0 else pods[::-1]:
            start = run(tmp, one_batch, server, n, args, records=args.batch_size)
            done = run(tmp, source, server, n, args, records=args.records)
            done.start, done.start_cpu = start.seconds, start.cpu
            print(
                f"  round {round_ + 1} N={n}: {done.seconds:6.2f} s {done.rate:>8,.0f} rec/s, "
                f"pods CPU {done.cpu:5.2f} s, start-up {start.seconds:4.2f} s "
                f"(CPU {start.cpu:4.2f} s), load {done.load:.2f}",
                flush=True,
            )
            runs.append(done)
    return runs


def report(runs: list[Run], args: argparse.Namespace) -> None:
    """One line per N: medians over rounds; ratios of each round against its N=1 run."""
    by_n = {n: [r for r in runs if r.pods == n] for n in sorted({r.pods for r in runs})}
    print(
        f"\n{'N':>2} | {'wall s':>6} {'rec/s':>7} | {'ratio':>5} {'min':>5} | "
        f"{'start':>5} {'cpu':>4} {'pod s':>6} {'ratio':>5} | "
        f"{'pods CPU ms/1k rec':>18} {'cores':>5} | {'server ms/1k':>12} | {'load':>9}"
    )
    print("-" * 108)
    for n, each in by_n.items():
        pairs = list(zip(each, by_n.get(1, []), strict=False))
        ratios = [r.rate / (n * one.rate) for r, one in pairs]
        inside = [one.slowest / (n * r.slowest) for r, one in pairs]
        loads = [r.load for r in each]
        print(
            f"{n:>2} | {median(r.seconds for r in each):6.2f} "
            f"{median(r.rate for r in each):>7,.0f} | "
            f"{median(ratios):5.2f} {min(ratios, default=nan):5.2f} | "
            f"{median(r.start for r in each):5.2f} {median(r.start_cpu for r in each):4.2f} "
            f"{median(r.slowest for r in each):6.2f} {median(inside):5.2f} | "
            f"{median(r.per_k(r.cpu) for r in each):>18.1f} "
            f"{median(r.cpu / r.seconds for r in each):5.2f} | "
            f"{median(r.per_k(r.server_cpu) for r in each):>12.1f} | "
            f"{min(loads):4.1f}-{max(loads):.1f}"
        )
    ideal = args.concurrency * args.batch_size / (args.latency_ms / 1000)
    print(
        f"\nratio: rate(N) / (N x rate(1)) of each round, median and min, from the first start "
        f"to the last exit; start, cpu: wall and CPU seconds of the same N pods over one "
        f"batch (their start-up, which the wall time holds); pod s: the slowest pod's own "
        f"durationSeconds (interpreter start and imports not counted), and the ratio on it; "
        f"cores: pods' CPU s / wall s; load: 1-minute load average before the runs, "
        f"least-most. A pod's latency-bound ceiling, C x B / latency: {ideal:,.0f} records/s."
    )


def median(values: Iterable[float]) -> float:
    found = list(values)
    return statistics.median(found) if found else nan


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", nargs="?", choices=["serve"], help="the model server alone")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the server's, a request")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--pods", default="1,2,4", help="N, comma-separated (1 for the ratio)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="input")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.latency_ms)
        return
    print(
        f"one run over N pods vs one pod: {args.records:,} {args.format} records, chunkSize "
        f"{args.chunk_size}, "
        f"B={args.batch_size} C={args.concurrency}, a kserve-v2 server that waits "
        f"{args.latency_ms:g} ms a request, {args.rounds} rounds; {os.cpu_count()} CPUs, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    server = Server(args.latency_ms)
    try:
        with tempfile.TemporaryDirectory(prefix="longrun-sharded-bench-") as name:
            tmp = Path(name)
            report(measure(tmp, server, args), args)
    finally:
        server.stop()
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
