"""The runner's `batchSize` x `concurrency` grid on the real servers: what should the defaults be?

For each real server of `e2e.peers` and each protocol it speaks, and each cell of the grid, this
runs the whole runner once per round (`python -m runners`: file input of N iris records, or N
prompts for the OpenAI protocols, file output, every other knob at its default, chunks of
1,000 records included) and prints records/s per cell, the best of `--repeats` rounds (rounds
interleave the cells, so that a load change on the machine hits them all alike). The runner's
start-up (~0.2-0.4 s) is in the time, as a user sees it; keep N large enough for it not to
matter (the default 100,000 records run 2-8 s a cell on the tensor servers).

    python bench/tuning.py --servers triton,kserve,mlserver --batch-sizes 32,64,128,256,512
    python bench/tuning.py --servers llama-chat,llama-embeddings --records 200 \\
        --batch-sizes 8,32,256 --concurrency 4,8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from direct_clients import FEATURES, IRIS, SERVER_PROTOCOLS  # noqa: E402

from e2e.peers.server import PeerServer, start  # noqa: E402

LLM = ("openai-chat", "openai-completions", "openai-embeddings")


def write_input(path: Path, count: int, *, prompts: bool) -> None:
    with path.open("w") as handle:
        for i in range(count):
            if prompts:
                record: dict[str, Any] = {"prompt": f"Say {i} in words."}
            else:
                record = dict(zip(FEATURES, IRIS[i % 3], strict=True))
            handle.write(json.dumps(record) + "\n")


def run_cell(
    tmp: Path, source: Path, protocol: str, url: str, model: str, *, batch: int, concurrency: int
) -> tuple[float, int]:
    """(seconds, records written) of one runner process."""
    out = tmp / "out"
    subprocess.run(["rm", "-rf", str(out), f"{out}-errors"], check=True)
    endpoint: dict[str, Any] = {"protocol": protocol, "url": url, "name": model}
    if protocol in ("openai-chat", "openai-completions"):
        endpoint["maxTokens"] = 4
    contract = {
        "contractVersion": "v1",
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": endpoint,
        "input": {"file": {"path": str(source)}},
        "output": {"file": {"path": str(out)}},
        "runner": {"batchSize": batch, "concurrency": concurrency},
    }
    (tmp / "contract.json").write_text(json.dumps(contract))
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
    summary = json.loads((tmp / "termination-log").read_text())
    return seconds, summary["recordsWritten"]


def measure(server: PeerServer, tmp: Path, args: argparse.Namespace) -> None:
    cells = [(b, c) for b in args.batch_sizes for c in args.concurrency]
    for label, protocol in SERVER_PROTOCOLS[server.name]:
        url = (server.grpc_url or "") if protocol == "triton-grpc" else server.http_url
        source = tmp / ("prompts.jsonl" if protocol in LLM else "iris.jsonl")
        best: dict[tuple[int, int], float] = {}
        for _ in range(args.repeats):
            for batch, concurrency in cells:
                seconds, written = run_cell(
                    tmp, source, protocol, url, server.model, batch=batch, concurrency=concurrency
                )
                if written != args.records:
                    raise SystemExit(f"wrote {written} of {args.records} records")
                rate = written / seconds
                best[(batch, concurrency)] = max(best.get((batch, concurrency), 0.0), rate)
        row = " ".join(f"{best[cell]:>9,.0f}" for cell in cells)
        print(f"{server.name:16} {label:12} | {row}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", default="triton,kserve,mlserver")
    parser.add_argument("--batch-sizes", default="32,64,128,256,512")
    parser.add_argument("--concurrency", default="4,8")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each cell's best counts")
    args = parser.parse_args()
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    cells = [f"B{b}/C{c}" for b in args.batch_sizes for c in args.concurrency]
    print(
        f"whole runner, file -> model -> file, {args.records:,} records, records/s (best of "
        f"{args.repeats}); {os.cpu_count()} CPUs\n"
    )
    print(f"{'server':16} {'protocol':12} | " + " ".join(f"{cell:>9}" for cell in cells))
    print("-" * (32 + 10 * len(cells)))
    with tempfile.TemporaryDirectory(prefix="longrun-tuning-") as name:
        tmp = Path(name)
        write_input(tmp / "iris.jsonl", args.records, prompts=False)
        write_input(tmp / "prompts.jsonl", args.records, prompts=True)
        for server_name in args.servers.split(","):
            with start(server_name) as server:
                measure(server, tmp, args)


if __name__ == "__main__":
    main()
