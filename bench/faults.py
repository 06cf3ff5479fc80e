"""What faults cost the whole runner: poison records, a model that is down, one that goes away.

Each scenario runs `python -m runners` as a process of its own (file input, the `kserve-v2`
protocol with JSON tensors, file output, the default tuning but for the batch size and
concurrency given) against the repo's KServe v2 stub model (tests/runners/http_stub.py's
KServeStub: a stdlib HTTP server, here in a process of its own, answering each row's sum
doubled, and 400, or 500 with `--status 500`, to a batch that holds the poison value), and
prints wall seconds, the requests the stub answered, records written and failed, and the exit
code:

- clean: N records, no poison;
- poison: the same N records, 1 % of them poison (`--poison`, seeded random positions): what
  isolating them costs against `clean` (issue 15 item 9);
- down: no server at the URL (connection refused): how long until the runner gives up
  (item 16);
- gone: the stub answers, and is killed once the runner has committed its first chunk: how long
  from the kill until the runner gives up (item 16).

`--baseline DIR` runs every scenario with the runner of another checkout too (for instance
`git worktree add /tmp/base HEAD`), before the current one, for before/after numbers. Nothing is
asserted. The stub is single-process Python: it answers a few thousand requests a second, so the
poison cost shows as requests more than as CPU.

    python bench/faults.py --records 50000 --batch-size 256 --concurrency 8
    python bench/faults.py --scenarios down,gone --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
POISON = 666.0
SCENARIOS = ("clean", "poison", "down", "gone")


@dataclass
class Outcome:
    """What one runner process did."""

    seconds: float
    code: int
    written: int
    failed: int
    requests: int
    reason: str


# ---------------------------------------------------------------- the stub model, a process


def stub(args: argparse.Namespace) -> None:
    """Serve KServeStub on `args.port` until SIGTERM; GET /stats answers the status counts."""
    sys.path.insert(0, str(ROOT / "tests" / "runners"))
    from http_stub import KServeStub, serve

    model = KServeStub(poison=POISON, poison_status=args.status)

    def handler(method: str, path: str, query: Any, body: Any, headers: Any) -> Any:
        if method == "GET" and path == "/stats":
            return 200, {}, model.statuses
        return model(method, path, query, body, headers)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve(handler) as url:
        print(url, flush=True)
        stop.wait()


class Stub:
    """The stub model in a process of its own."""

    def __init__(self, status: int) -> None:
        command = [sys.executable, __file__, "stub", "--status", str(status)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def requests(self) -> int:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=10) as response:
            return sum(json.loads(response.read()).values())

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


# ---------------------------------------------------------------- the runner, a process


def write_input(path: Path, count: int, *, poison: float, seed: int = 7) -> None:
    rng = random.Random(seed)
    bad = set(rng.sample(range(count), int(count * poison)))
    with path.open("w") as handle:
        for i in range(count):
            a = POISON if i in bad else float(i % 100)
            handle.write(json.dumps({"key": f"k{i}", "a": a, "b": 1.0}) + "\n")


def free_url() -> str:
    """A URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def run_runner(
    root: Path, tmp: Path, source: Path, url: str, args: argparse.Namespace, *, on_chunk: Any = None
) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, exit code, summary) of one `python -m runners` of checkout `root`."""
    out = tmp / "out"
    subprocess.run(["rm", "-rf", str(out), f"{out}-errors"], check=True)
    contract = {
        "contractVersion": "v1",
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": {
            "protocol": "kserve-v2",
            "url": url,
            "name": "iris",
            "binaryData": False,
            "inputFields": ["a", "b"],
        },
        "input": {"file": {"path": str(source), "idField": "key"}},
        "output": {"file": {"path": str(out)}},
        "runner": {
            "batchSize": args.batch_size,
            "concurrency": args.concurrency,
            "maxFailedRatio": 0.5,
            "progressIntervalSeconds": 3600,
        },
    }
    (tmp / "contract.json").write_text(json.dumps(contract))
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "CONTRACT_PATH": str(tmp / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if on_chunk is not None:
        while proc.poll() is None and not any(out.glob("part-*")):
            time.sleep(0.01)
        started = time.perf_counter()  # `gone`: from the kill on
        on_chunk()
    code = proc.wait()
    seconds = time.perf_counter() - started
    return seconds, code, json.loads((tmp / "termination-log").read_text())


def scenario(name: str, root: Path, tmp: Path, args: argparse.Namespace) -> Outcome:
    clean, poisoned = tmp / "clean.jsonl", tmp / "poison.jsonl"
    if name == "down":
        seconds, code, summary = run_runner(root, tmp, clean, free_url(), args)
        return _outcome(seconds, code, summary, requests=0)
    model = Stub(args.status)
    try:
        source = poisoned if name == "poison" else clean
        kill = model.kill if name == "gone" else None
        seconds, code, summary = run_runner(root, tmp, source, model.url, args, on_chunk=kill)
        requests = -1 if name == "gone" else model.requests()
    finally:
        model.kill()
    return _outcome(seconds, code, summary, requests=requests)


def _outcome(seconds: float, code: int, summary: dict[str, Any], *, requests: int) -> Outcome:
    return Outcome(
        seconds,
        code,
        summary.get("recordsWritten", 0),
        summary.get("recordsFailed", 0),
        requests,
        (summary.get("reason") or "")[:70],
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("stub", help="the stub model (run by the benchmark)")
    for options in (parser, serve):
        options.add_argument("--status", type=int, default=400, help="answer to poison batches")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--poison", type=float, default=0.01, help="share of poison records")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--baseline", help="another checkout whose runner to measure as well")
    args = parser.parse_args()
    if args.command == "stub":
        stub(args)
        return
    roots = [("baseline", Path(args.baseline))] if args.baseline else []
    roots.append(("current", ROOT))
    print(
        f"{args.records:,} records, B={args.batch_size} C={args.concurrency}, poison "
        f"{args.poison:.1%} answered HTTP {args.status}; {os.cpu_count()} CPUs\n"
    )
    print(
        f"{'scenario':8} {'runner':8} | {'seconds':>8} {'requests':>8} {'written':>8} "
        f"{'failed':>6} {'exit':>4} | reason"
    )
    print("-" * 110)
    with tempfile.TemporaryDirectory(prefix="longrun-faults-") as name:
        tmp = Path(name)
        write_input(tmp / "clean.jsonl", args.records, poison=0)
        write_input(tmp / "poison.jsonl", args.records, poison=args.poison)
        for scenario_name in args.scenarios.split(","):
            for label, root in roots:
                found = scenario(scenario_name, root, tmp, args)
                requests = "-" if found.requests < 0 else f"{found.requests:,}"
                print(
                    f"{scenario_name:8} {label:8} | {found.seconds:>8.2f} {requests:>8} "
                    f"{found.written:>8,} {found.failed:>6,} {found.code:>4} | {found.reason}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
