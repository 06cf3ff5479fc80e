"""`concurrency: auto` against the best fixed concurrency, per real server: is auto good enough
to be the default?

For each real server of `e2e.peers` (and each protocol asked for), this runs the whole runner
(`python -m runners`: file input, file output, chunks of 1,000, every other knob at its
default) once per cell and round: `concurrency` fixed at each of `--fixed`, and `auto`. Rounds
interleave the cells (forward, then backward), so that a change of load on the machine hits
them all alike. Two lines per protocol: each cell's best round, and each cell's median round,
with the best fixed cell and auto / best fixed by that figure (the issue's bar is 0.9). On a
noisy machine the best fixed cell is partly the luckiest of several noisy cells: the medians
of more rounds show that less. The runner's start-up is in the
time, as a user sees it, and so is auto's climb from its start (4): size `--seconds` so that
each run lasts long enough for the climb not to dominate (records are counted from a first
fixed run at 4, so every cell gets about the same work). The load average is printed before
and after each server: compare only within one run.

    python bench/concurrency.py --servers triton,kserve,mlserver --seconds 15
    python bench/concurrency.py --servers vllm --protocols openai-chat --seconds 20
    python bench/concurrency.py --servers llama-server --server-args=--parallel=4   # 4 slots

`--server-args` go to the server's script (llama-server `--parallel N`: llama.cpp's slots;
vllm `--max-num-seqs N`). Servers that take an API key (vllm, llama-server) get one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from direct_clients import FEATURES, IRIS  # noqa: E402

from e2e.peers.server import PeerServer, start  # noqa: E402
from e2e.peers.specs import server_spec  # noqa: E402

PROTOCOLS = {
    "triton": ("kserve-v2", "triton-grpc"),
    "kserve": ("kserve-v2",),
    "mlserver": ("kserve-v2",),
    "llama-chat": ("openai-chat",),
    "llama-server": ("openai-chat",),
    "vllm": ("openai-chat",),
}
LLM = ("openai-chat", "openai-completions", "openai-embeddings")
API_KEY = "bench-key"


def write_input(path: Path, count: int, *, prompts: bool) -> None:
    with path.open("w") as handle:
        for i in range(count):
            if prompts:
                record: dict[str, Any] = {"prompt": f"Say {i} in words."}
            else:
                record = dict(zip(FEATURES, IRIS[i % 3], strict=True))
            handle.write(json.dumps(record) + "\n")


def contract(
    tmp: Path, source: Path, server: PeerServer, protocol: str, concurrency: int | str
) -> dict[str, Any]:
    url = (server.grpc_url or "") if protocol == "triton-grpc" else server.http_url
    endpoint: dict[str, Any] = {"protocol": protocol, "url": url, "name": server.model}
    if protocol in ("openai-chat", "openai-completions"):
        endpoint["maxTokens"] = 4
    if server.api_key:
        endpoint["auth"] = {"secretRef": {"name": "key", "key": "api-key"}}
    return {
        "contractVersion": "v1",
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": endpoint,
        "input": {"file": {"path": str(source)}},
        "output": {"file": {"path": str(tmp / "out")}},
        "runner": {"concurrency": concurrency},
        "secretsDir": str(tmp / "secrets"),
    }


def run_cell(tmp: Path, doc: dict[str, Any]) -> tuple[float, int, str]:
    """(seconds, records written, what auto said) of one runner process."""
    subprocess.run(["rm", "-rf", str(tmp / "out"), str(tmp / "out-errors")], check=True)
    (tmp / "contract.json").write_text(json.dumps(doc))
    env = {
        **os.environ,
        "CONTRACT_PATH": str(tmp / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runners"], env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"runner failed: {done.stderr[-2000:]}")
    said = [line for line in done.stderr.splitlines() if "concurrency auto:" in line]
    summary = json.loads((tmp / "termination-log").read_text())
    return (
        seconds,
        summary["recordsWritten"],
        said[-1].split("concurrency auto: ")[-1] if said else "",
    )


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(server: PeerServer, protocol: str, tmp: Path, args: argparse.Namespace) -> None:
    prompts = protocol in LLM
    source = tmp / f"input-{protocol}.jsonl"
    probe_count = 2000 if prompts else 50_000
    write_input(source, probe_count, prompts=prompts)
    seconds, written, _ = run_cell(tmp, contract(tmp, source, server, protocol, 4))
    count = max(probe_count, int(written / seconds * args.seconds))
    write_input(source, count, prompts=prompts)
    cells: list[int | str] = [*args.fixed, "auto"]
    rates: dict[int | str, list[float]] = {cell: [] for cell in cells}
    settled: list[str] = []
    before = load()
    for round_ in range(args.rounds):
        for cell in cells if round_ % 2 == 0 else cells[::-1]:
            seconds, written, said = run_cell(tmp, contract(tmp, source, server, protocol, cell))
            if written != count:
                raise SystemExit(f"{server.name} {protocol} C={cell}: wrote {written} of {count}")
            rates[cell].append(written / seconds)
            if cell == "auto":
                settled.append(said)
    for name, pick in (("best", max), ("median", statistics.median)):
        figure = {cell: pick(rates[cell]) for cell in cells}
        top = max(args.fixed, key=lambda c: figure[c])
        row = " ".join(f"{figure[c]:>9,.0f}" for c in cells)
        print(
            f"{server.name:12} {protocol:13} {name:6} | {row} | C={top:<3} "
            f"{figure['auto'] / figure[top]:5.2f}",
            flush=True,
        )
    print(f"{'':27}{count:,} records a run; load {before} -> {load()}", flush=True)
    for line in settled:
        print(f"{'':27}auto's last word: {line}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", default="triton,kserve,mlserver")
    parser.add_argument("--protocols", help="only these protocols (default: see PROTOCOLS)")
    parser.add_argument("--fixed", default="1,2,4,8,16,32", help="fixed concurrencies to try")
    parser.add_argument("--seconds", type=float, default=15.0, help="about how long a run lasts")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each cell's best counts")
    parser.add_argument("--server-args", default="", help="comma-separated server arguments")
    args = parser.parse_args()
    args.fixed = [int(c) for c in args.fixed.split(",")]
    cells = [*(f"C={c}" for c in args.fixed), "auto"]
    print(
        f"whole runner, file -> model -> file, records/s (best and median of {args.rounds} rounds, "
        f"~{args.seconds:g} s a run); {os.cpu_count()} CPUs, load {load()}\n"
    )
    header = " ".join(f"{cell:>9}" for cell in cells)
    print(f"{'server':12} {'protocol':13} {'of runs':6} | {header} | best  auto/best")
    server_args = [a for a in args.server_args.split(",") if a]
    with tempfile.TemporaryDirectory(prefix="longrun-concurrency-") as name:
        tmp = Path(name)
        for server_name in args.servers.split(","):
            key = API_KEY if server_spec(server_name).api_key_env else None
            with start(server_name, api_key=key, args=server_args) as server:
                if key:
                    (tmp / "secrets" / "key").mkdir(parents=True, exist_ok=True)
                    (tmp / "secrets" / "key" / "api-key").write_text(key)
                wanted = args.protocols.split(",") if args.protocols else None
                for protocol in PROTOCOLS[server_name]:
                    if wanted is None or protocol in wanted:
                        measure(server, protocol, tmp, args)


if __name__ == "__main__":
    main()
