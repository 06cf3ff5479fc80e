"""The runner's errors about storage it cannot use: one line each, never a traceback.

Real: `python -m runners` in a subprocess (what a pod runs), the contract file, the S3
backend (boto3), the HTTP backend (requests), the SQL backend (SQLAlchemy), the file sink,
and a TCP port on 127.0.0.1 that nothing listens on (bound, then closed). Faked: nothing;
the model is never called (its URL is a closed port too).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import contract

ROOT = Path(__file__).resolve().parents[2]
FAST = {"maxAttempts": 3, "initialBackoffSeconds": 0, "maxBackoffSeconds": 0}


def closed_port() -> int:
    """A port on 127.0.0.1 that refuses connections (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def run_runner(tmp_path: Path, doc: dict[str, Any]) -> tuple[int, list[str], dict[str, Any]]:
    """Exit code, stderr lines and summary of a runner process for `doc`."""
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(doc))
    env = {
        **os.environ,
        "TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    done = subprocess.run(
        [sys.executable, "-m", "runners", "--contract", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    summary = json.loads((tmp_path / "termination-log").read_text())
    return done.returncode, done.stderr.splitlines(), summary


def doc_with(tmp_path: Path, *, input: dict[str, Any] | None = None, **blocks: Any) -> Any:
    port = closed_port()
    records = tmp_path / "in.jsonl"
    records.write_text('{"x": 1}\n{"x": 2}\n')
    return contract(
        input=input or {"file": {"path": str(records)}},
        output=blocks.get("output") or {"file": {"path": str(tmp_path / "out")}},
        runner=FAST,
        model={"protocol": "kserve-v2", "url": f"http://127.0.0.1:{port}", "name": "m"},
    )


def assert_one_line_per_attempt(lines: list[str], *, attempts: int, final: str) -> None:
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    retries = [line for line in lines if "retrying (attempt" in line]
    assert len(retries) <= attempts - 1, "\n".join(lines)
    assert lines[-1].startswith(f"longrun-runner: {final}"), "\n".join(lines)
    assert len(lines) <= attempts + 2, "\n".join(lines)  # start line, retries, final line


def test_an_unreachable_s3_input_prints_one_line_per_attempt_and_a_summary_line(
    tmp_path: Path,
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    s3 = {"bucket": "in-bucket", "key": "in.jsonl", "endpointUrl": endpoint, "region": "us-east-1"}
    code, lines, summary = run_runner(tmp_path, doc_with(tmp_path, input={"s3": s3}))
    assert code == 1  # a retried pod may find the store back
    assert_one_line_per_attempt(lines, attempts=3, final="unavailable: reading s3://in-bucket/")
    assert endpoint in lines[-1] and "gave up" in lines[-1]
    assert summary["reason"].startswith("unavailable: reading s3://in-bucket/in.jsonl")


def test_an_unreachable_s3_output_prints_one_line(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    s3 = {"bucket": "out-bucket", "prefix": "p/", "endpointUrl": endpoint, "region": "us-east-1"}
    code, lines, summary = run_runner(tmp_path, doc_with(tmp_path, output={"s3": s3}))
    assert code == 1
    assert_one_line_per_attempt(lines, attempts=3, final="unavailable: ")
    assert "s3://out-bucket/p/" in lines[-1]
    assert summary["reason"].startswith("unavailable: ")


def test_an_unreachable_http_input_prints_one_line_per_attempt_and_a_summary_line(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/records"
    code, lines, _ = run_runner(tmp_path, doc_with(tmp_path, input={"http": {"url": url}}))
    assert code == 1
    assert_one_line_per_attempt(lines, attempts=3, final=f"unavailable: GET {url}")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgresql://u@127.0.0.1:99999/db", "port 99999 is out of range"),
        ("postgresql://u@127.0.0.1:abc/db", "port is not a number"),
    ],
)
def test_a_bad_port_in_a_sql_url_is_a_bad_contract_exit_2(
    tmp_path: Path, url: str, why: str
) -> None:
    doc = doc_with(tmp_path, input={"sql": {"url": url, "table": "t"}})
    code, lines, summary = run_runner(tmp_path, doc)
    assert code == 2  # the Job's podFailurePolicy fails the Job at once: no pod does better
    assert lines == [
        f"longrun-runner: contract input.sql.url: {why}: a TCP port is a number from 1 to 65535"
    ]
    assert summary["reason"] == lines[0].removeprefix("longrun-runner: ")
