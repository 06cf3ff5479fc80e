"""Peak memory of the runner: does it stay flat as the input grows?

Runs `python -m runners` as a child process, file (JSONL, or Parquet with `--formats`) ->
file in the same format, with a
trivial in-process model protocol (`EchoClient` below, registered in place of
`kserve-v2` through LONGRUN_RUNNER_PLUGINS), for 10,000 and 1,000,000 input
records, and prints the child's peak RSS (`os.wait4` rusage, ru_maxrss) for
each. Target: the difference stays under 50 MB. Prints a table; asserts nothing.

    .venv/bin/python bench/runner_memory.py [--sizes 10000,1000000] [--formats jsonl,parquet]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class EchoClient:
    """A model protocol that answers instantly: the benchmark measures the runner only."""

    def __init__(self, endpoint: Any = None, ctx: Any = None) -> None:
        pass

    def predict(self, records: Sequence[Any]) -> list[Any]:
        from runners.api import Prediction

        return [Prediction({"echo": r.id}) for r in records]

    def close(self) -> None:
        pass


def write_input(path: Path, count: int) -> None:
    """`count` records with an id field; Parquet (row groups of 65,536) when `path` says so."""
    if path.suffix == ".parquet":  # a row group at a time: the child's peak RSS counts this
        import pyarrow as pa  # process's at fork, so it must stay small
        import pyarrow.parquet as pq

        schema = pa.schema([("key", pa.string()), ("a", pa.float64()), ("b", pa.string())])
        with pq.ParquetWriter(path, schema) as writer:
            for first in range(0, count, 65_536):
                rows = range(first, min(first + 65_536, count))
                columns = [
                    [f"k{i:08d}" for i in rows],
                    [i * 0.5 for i in rows],
                    ["x" * 32] * len(rows),
                ]
                writer.write_table(pa.table(columns, schema=schema))
        return
    with path.open("w") as handle:
        for i in range(count):
            handle.write(json.dumps({"key": f"k{i:08d}", "a": i * 0.5, "b": "x" * 32}) + "\n")


def contract(tmp: Path, source: Path) -> dict[str, Any]:
    return {
        "jobId": "bench",
        "jobName": "bench",
        "run": {"name": "b", "namespace": "b", "uid": "bench", "generation": 1, "scheduled": False},
        "config": {"name": "b", "namespace": "b", "generation": 1},
        "model": {"protocol": "kserve-v2", "url": "http://unused", "name": "m"},
        "input": {"file": {"path": str(source), "idField": "key"}},
        "output": {"file": {"path": str(tmp / "out"), "format": source.suffix[1:]}},
        "runner": {"chunkSize": 1000, "batchSize": 64, "concurrency": 4},
    }


def run_once(count: int, fmt: str) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one runner process over `count` records in `fmt`."""
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as name:
        tmp = Path(name)
        source = tmp / f"in.{fmt}"
        write_input(source, count)
        (tmp / "contract.json").write_text(json.dumps(contract(tmp, source)))
        env = {
            **os.environ,
            "CONTRACT_PATH": str(tmp / "contract.json"),
            "TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
            "PYTHONPATH": str(HERE),
            "LONGRUN_RUNNER_PLUGINS": "longrun.protocols:kserve-v2=runner_memory:EchoClient",
        }
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "runners"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"runner failed with exit code {proc.returncode} for {count} records")
        return usage.ru_maxrss / 1024, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,1000000", help="comma-separated record counts")
    parser.add_argument("--formats", default="jsonl", help="jsonl, parquet or both")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for fmt in args.formats.split(","):
        rows = [(count, *run_once(count, fmt)) for count in sizes]
        print(f"{fmt}:\n{'records':>10} | {'peak RSS MB':>11} | {'seconds':>8} | {'records/s':>9}")
        print(f"{'-' * 10}-+-{'-' * 11}-+-{'-' * 8}-+-{'-' * 9}")
        for count, rss, seconds in rows:
            print(f"{count:>10} | {rss:>11.1f} | {seconds:>8.1f} | {count / seconds:>9.0f}")
        print(f"peak RSS difference (largest - smallest input): {rows[-1][1] - rows[0][1]:.1f} MB")


if __name__ == "__main__":
    main()
