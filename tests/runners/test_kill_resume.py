"""The kill test: SIGKILL `python -m runners` at random moments, restart, count the output.

Real: the runner process (a subprocess, exactly as the Job's container runs it),
its contract file, and the stores: local files, SQLite, PostgreSQL, MariaDB,
moto's S3 server, and an HTTP receiver on 127.0.0.1 (http_stub.Receiver, which
de-duplicates chunks and answers `committedUrl`, as the docs ask of receivers).
Faked: the model, an in-process echo protocol registered in place of `kserve-v2`
through LONGRUN_RUNNER_PLUGINS (see fake_models.py), so the test measures
commit/resume, not a model server.

Each scenario: 100,000 input records, a seeded RNG choosing when to kill
(a bounded number of kills), restarts until exit 0, then every record must be
in the output exactly once, and the last pod's summary must count all of them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fake_models import DELAY_ENV, PLUGIN_SPEC
from fakes import contract
from http_stub import Receiver, serve
from runner_stores import drop_tables, s3_client

HERE = Path(__file__).resolve().parent
RECORDS = 100_000
KILLS = 5
CHUNKS = 20
SIGTERM_RECORDS = 20_000
TUNING = {"chunkSize": 5000, "batchSize": 500, "concurrency": 2, "progressIntervalSeconds": 5}


@dataclass
class Outcome:
    kills: int = 0
    attempts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    committed_after_kill: list[int] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def run_with_kills(
    tmp: Path,
    doc: dict[str, Any],
    *,
    seed: int,
    extra_env: dict[str, str],
    committed: Callable[[], int],
) -> Outcome:
    """Start the runner until it exits 0, SIGKILLing the first KILLS attempts at random.

    Every store commits so fast that a whole attempt could finish between two kills (S3 on moto
    once went from chunk 17 to the end before the next kill): the fake model takes 30 ms per
    batch, so a chunk takes ~0.15 s and the kills land mid-run on any machine.
    """
    path = tmp / "contract.json"
    path.write_text(json.dumps(doc))
    env = {
        **os.environ,
        DELAY_ENV: "0.03",
        **extra_env,
        "CONTRACT_PATH": str(path),
        "TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
        "PYTHONPATH": str(HERE),
        "LONGRUN_RUNNER_PLUGINS": PLUGIN_SPEC,
    }
    rng = random.Random(seed)
    outcome = Outcome()
    with (tmp / "runner.log").open("ab") as log:
        while outcome.attempts < KILLS + 20:
            outcome.attempts += 1
            proc = subprocess.Popen(
                [sys.executable, "-m", "runners"], env=env, stdout=log, stderr=log
            )
            code = _wait_or_kill(
                proc, rng, kill=outcome.kills < KILLS, early=outcome.kills == 0, committed=committed
            )
            if code == -signal.SIGKILL:
                outcome.kills += 1
                outcome.committed_after_kill.append(committed())
                continue
            outcome.exit_codes.append(code)
            if code == 0:
                outcome.summary = json.loads((tmp / "termination-log").read_text())
                print(f"kill test {tmp.name}: {outcome}")  # shown with -s, for the record
                return outcome
    raise AssertionError(f"runner never succeeded: {outcome}; see {tmp / 'runner.log'}")


def _wait_or_kill(
    proc: subprocess.Popen[bytes],
    rng: random.Random,
    *,
    kill: bool,
    early: bool,
    committed: Callable[[], int],
) -> int:
    """Exit code of `proc`, or -SIGKILL when we killed it.

    The first kill lands early (start-up or first chunk); later ones wait until the
    attempt has committed something new, then a random extra moment, so kills land
    mid-chunk on a loaded machine as well as on an idle one.
    """
    if not kill:
        return proc.wait(timeout=120)
    if not early:
        before = committed()
        _poll_until(lambda: proc.poll() is not None or committed() > before)
    try:
        return proc.wait(timeout=rng.uniform(0.05, 1.0 if early else 0.6))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=30)


def _poll_until(condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def input_lines(count: int = RECORDS) -> Iterator[str]:
    for i in range(count):
        yield json.dumps({"key": f"k{i:06d}", "x": i}) + "\n"


def assert_exactly_once(ids: list[str], outcome: Outcome) -> None:
    assert outcome.kills >= 1, f"no kill landed before the run finished: {outcome}"
    mid_run = {n for n in outcome.committed_after_kill if 0 < n < CHUNKS}
    assert len(mid_run) >= 3, f"too few kills landed mid-run: {outcome}"
    assert len(ids) == RECORDS, f"{len(ids)} records written after {outcome}"
    assert len(set(ids)) == RECORDS, "duplicates in the output"
    assert set(ids) == {f"k{i:06d}" for i in range(RECORDS)}
    names = ("recordsRead", "recordsWritten", "recordsFailed", "chunks")
    counts = {k: outcome.summary.get(k) for k in names}
    assert counts == {
        "recordsRead": RECORDS,
        "recordsWritten": RECORDS,
        "recordsFailed": 0,
        "chunks": CHUNKS,
    }


def test_file_output_is_exactly_once_across_kills(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(input_lines()))
    out = tmp_path / "out"
    doc = contract(
        input={"file": {"path": str(source), "idField": "key"}},
        output={"file": {"path": str(out)}},
        runner=TUNING,
    )
    outcome = run_with_kills(
        tmp_path, doc, seed=11, extra_env={}, committed=lambda: len(list(out.glob("part-*")))
    )
    ids = [
        json.loads(line)["id"]
        for part in sorted(out.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert_exactly_once(ids, outcome)
    assert json.loads((out / "_SUCCESS").read_text())["committedChunks"] == list(range(20))


def test_s3_output_is_exactly_once_across_kills(
    tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> None:
    client = s3_client(moto_endpoint)
    try:
        client.put_object(
            Bucket=s3_bucket, Key="in/data.jsonl", Body="".join(input_lines()).encode()
        )
        s3 = {"bucket": s3_bucket, "endpointUrl": moto_endpoint, "forcePathStyle": True}
        doc = contract(
            input={"s3": {**s3, "key": "in/data.jsonl", "idField": "key"}},
            output={"s3": {**s3, "prefix": "out"}},
            runner=TUNING,
        )
        creds = {
            k: os.environ[k]
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
        }

        def committed() -> int:
            listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="out/part-")
            return len(listed.get("Contents", []))

        outcome = run_with_kills(tmp_path, doc, seed=12, extra_env=creds, committed=committed)
        ids = []
        listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="out/part-")
        for item in listed["Contents"]:
            body = client.get_object(Bucket=s3_bucket, Key=item["Key"])["Body"].read()
            ids += [json.loads(line)["id"] for line in body.decode().splitlines()]
        assert client.head_object(Bucket=s3_bucket, Key="out/_SUCCESS")["ContentLength"] > 0
    finally:
        client.close()
    assert_exactly_once(ids, outcome)


def test_http_output_resumes_across_kills_and_is_exactly_once(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(input_lines()))
    receiver = Receiver()
    with serve(receiver) as url:
        doc = contract(
            input={"file": {"path": str(source), "idField": "key"}},
            output={"http": {"url": f"{url}/out", "committedUrl": f"{url}/committed"}},
            runner=TUNING,
        )

        def committed() -> int:
            return sum(1 for key in receiver.chunks if key[3] == "output" and key[2] != "complete")

        outcome = run_with_kills(tmp_path, doc, seed=16, extra_env={}, committed=committed)
    outputs = {
        k: body for k, body in receiver.chunks.items() if k[3] == "output" and k[2] != "complete"
    }
    ids = [row["id"] for _, body in sorted(outputs.items()) for row in body["records"]]
    assert_exactly_once(ids, outcome)
    # Resumed, not re-sent: a chunk goes again only when a kill lands while it is in flight.
    sent = [
        b
        for _, path, b, _ in receiver.requests
        if path == "/out" and isinstance(b, dict) and b.get("role") == "output"  # not cut off
    ]
    assert len(sent) <= CHUNKS + 1 + outcome.kills  # the chunks, the completion, the kills


def _sql_roundtrip(tmp_path: Path, url: str, table: str, *, seed: int) -> None:
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    source = sa.Table(
        f"{table}_in",
        meta,
        sa.Column("key", sa.String(16), primary_key=True),
        sa.Column("x", sa.Integer),
    )
    try:
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(sa.text(_generate_rows(engine.dialect.name, source.name)))
        doc = contract(
            input={"sql": {"url": url, "table": source.name, "idField": "key"}},
            output={"sql": {"url": url, "table": f"{table}_out"}},
            runner=TUNING,
        )

        def committed() -> int:
            if not sa.inspect(engine).has_table(f"{table}_out_chunks"):
                return 0
            with engine.connect() as conn:
                query = f"SELECT count(*) FROM {table}_out_chunks WHERE chunk >= 0"
                return int(conn.execute(sa.text(query)).scalar_one())

        outcome = run_with_kills(tmp_path, doc, seed=seed, extra_env={}, committed=committed)
        with engine.connect() as conn:
            ids = list(conn.execute(sa.text(f"SELECT record_id FROM {table}_out")).scalars())
            manifest = conn.execute(
                sa.text(f"SELECT manifest FROM {table}_out_chunks WHERE chunk = -1")
            ).scalar_one()
    finally:
        engine.dispose()
    assert_exactly_once(ids, outcome)
    assert json.loads(manifest)["role"] == "output"


def _generate_rows(dialect: str, table: str) -> str:
    """SQL that fills `table` with the RECORDS input rows server-side (fast on a busy box)."""
    if dialect == "postgresql":
        return (
            f"INSERT INTO {table} SELECT 'k' || lpad(i::text, 6, '0'), i "
            f"FROM generate_series(0, {RECORDS - 1}) AS i"
        )
    if dialect in ("mysql", "mariadb"):
        # MariaDB's Sequence engine: its recursive CTEs stop at max_recursive_iterations (1000).
        return (
            f"INSERT INTO {table} SELECT CONCAT('k', LPAD(seq, 6, '0')), seq "
            f"FROM seq_0_to_{RECORDS - 1}"
        )
    return (
        f"WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {RECORDS - 1}) "
        f"INSERT INTO {table} SELECT printf('k%06d', i), i FROM c"
    )


def test_sqlite_output_is_exactly_once_across_kills(tmp_path: Path, table_name: str) -> None:
    _sql_roundtrip(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite'}", table_name, seed=13)


@pytest.mark.requires_service
def test_postgres_output_is_exactly_once_across_kills(
    tmp_path: Path, postgres_url: str, table_name: str
) -> None:
    try:
        _sql_roundtrip(tmp_path, postgres_url, table_name, seed=14)
    finally:
        drop_tables(postgres_url, table_name)


@pytest.mark.requires_service
def test_mariadb_output_is_exactly_once_across_kills(
    tmp_path: Path, mariadb_url: str, table_name: str
) -> None:
    try:
        _sql_roundtrip(tmp_path, mariadb_url, table_name, seed=15)
    finally:
        drop_tables(mariadb_url, table_name)


def test_sigterm_exits_143_with_summary_and_a_restart_completes(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(input_lines(SIGTERM_RECORDS)))
    out = tmp_path / "out"
    doc = contract(
        input={"file": {"path": str(source), "idField": "key"}},
        output={"file": {"path": str(out)}},
        runner={**TUNING, "chunkSize": 1000},
    )
    (tmp_path / "contract.json").write_text(json.dumps(doc))
    env = {
        **os.environ,
        "CONTRACT_PATH": str(tmp_path / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        "PYTHONPATH": str(HERE),
        "LONGRUN_RUNNER_PLUGINS": PLUGIN_SPEC,
    }
    run = [sys.executable, "-m", "runners"]
    with subprocess.Popen(
        run, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as proc:
        _poll_until(lambda: proc.poll() is not None or any(out.glob("part-*")))
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    summary = json.loads((tmp_path / "termination-log").read_text())
    if code == 0:
        pytest.skip("the run finished before SIGTERM arrived")  # a very fast machine
    assert code == 143 and summary["reason"] == "stopped by SIGTERM"
    assert not (out / "_SUCCESS").exists()
    assert subprocess.run(run, env=env, capture_output=True, timeout=120).returncode == 0
    lines = [line for part in out.glob("part-*.jsonl") for line in part.read_text().splitlines()]
    assert len(lines) == SIGTERM_RECORDS
