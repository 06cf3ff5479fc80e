"""Ctrl-C and resume: a SIGINT'ed `longrun run` keeps committed chunks and the next one resumes.

Real: the `longrun run` process (`python -m local.run`), the real runner
(`python -m runners`), the file storage backend and its commit protocol, SIGINT.
Faked: the model, a KServe v1 stub answering class 0 slowly enough to be interrupted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.local.conftest import ModelStub

RECORDS = 200


def write_inputs(tmp_path: Path, *, url: str) -> Path:
    rows = [{"id": i, "x": [i % 7, 1.0, 2.0, 3.0]} for i in range(RECORDS)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {{name: slow}}
spec:
  model: {{protocol: kserve-v1, url: "{url}", name: iris, inputFields: [x]}}
  storage:
    input: {{file: {{path: {tmp_path}/in.jsonl, idField: id}}}}
    output: {{file: {{path: {tmp_path}/out}}}}
  runner: {{batchSize: 5, concurrency: 1, chunkSize: 20, progressIntervalSeconds: 1}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata: {{name: slow}}
spec:
  configRef: {{name: slow}}
"""
    (tmp_path / "run.yaml").write_text(config)
    return tmp_path / "run.yaml"


def start(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "local.run",
            "-f",
            str(tmp_path / "run.yaml"),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def committed(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "out").glob("part-*"))


def written_ids(tmp_path: Path) -> list[int]:
    ids = []
    for part in committed(tmp_path):
        ids += [int(json.loads(line)["id"]) for line in part.read_text().splitlines() if line]
    return ids


def test_ctrl_c_stops_cleanly_and_the_next_run_resumes_exactly_once(
    tmp_path: Path, model_stub: ModelStub
) -> None:
    write_inputs(tmp_path, url=model_stub.url)
    model_stub.delay = 0.05  # 40 requests: about 2 s for the whole input
    first = start(tmp_path)
    deadline = time.monotonic() + 30
    while len(committed(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=30)
    assert first.returncode == 130, out
    assert "run the same command again to resume" in out
    done_before = len(written_ids(tmp_path))
    assert 0 < done_before < RECORDS

    model_stub.delay = 0.0
    second = start(tmp_path)
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out
    assert sorted(written_ids(tmp_path)) == list(range(RECORDS))  # every record exactly once
    assert model_stub.instances < RECORDS + 40  # resumed: at most the in-flight chunk again
