"""What a run may do with its stores, end to end: whose output it resumes, what a reason may
say, which store errors are retried, and what counts as a retry.

Real: the runner in-process (contract file -> exit code and summary), the pipeline, the
file and SQL backends on temp files, SQLite, the local PostgreSQL and MariaDB servers
(unique tables, dropped after). Faked: the model (FakeModel registered in place of
`kserve-v2`), and where noted storage (the memory backend registered as kind `memory`, and
`boom`, a sink that fails the way a database driver does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fakes import FakeModel, contract
from memory_backend import MemoryBackend, MemoryStore
from runner_stores import drop_tables

from contracts.config import RunnerTuning
from contracts.storage import SqlStorage
from runners import cli, registry
from runners.api import (
    ConfigError,
    ErrorRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
    TransientError,
)
from runners.pipeline import Pipeline, Stats
from runners.storage.sql import SqlBackend

SECRET_ROW = "row-with-a-secret-7f3a"


class BoomSink(Sink):
    """A sink whose chunk write fails like SQLAlchemy does: the statement and rows in the text."""

    location = "boom://out"

    def committed(self) -> set[int]:
        return set()

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        if not records:
            return
        rows = [{"record_id": r.id, "input": json.dumps(r.input)} for r in records]
        orig = Exception('value too long for type character varying(255)\nDETAIL: "x"')
        raise sa.exc.DataError("INSERT INTO t (record_id, input) VALUES (?, ?)", rows, orig)

    def finish(self, summary: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class BoomBackend(StorageBackend):
    def open_source(self, settings: Any, ctx: RunContext) -> Source:
        raise NotImplementedError

    def open_sink(self, settings: Any, ctx: RunContext, *, role: str) -> Sink:
        return BoomSink()


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(inputs=[{"key": f"k{i}", "note": SECRET_ROW} for i in range(6)])


@pytest.fixture
def model() -> FakeModel:
    return FakeModel()


@pytest.fixture(autouse=True)
def plugins(store: MemoryStore, model: FakeModel) -> Iterator[None]:
    registry.storage_backends.register("memory", lambda: MemoryBackend(store))
    registry.storage_backends.register("boom", BoomBackend)
    registry.model_protocols.register("kserve-v2", model.factory)
    yield
    registry.storage_backends.unregister("memory")
    registry.storage_backends.unregister("boom")
    registry.model_protocols.unregister("kserve-v2")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return tmp_path


def run_cli(env: Path, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    path = env / "contract.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((env / "termination-log").read_text())


def other_run(doc: dict[str, Any], uid: str) -> dict[str, Any]:
    """The same config run again: a new InferenceRun, so a new UID (and here other parameters)."""
    return {**doc, "jobId": uid, "run": {**doc["run"], "uid": uid}, "parameters": {"day": "2"}}


# -- item 2: a second run of the same config ------------------------------------------------


def test_second_run_into_the_same_directory_is_refused_naming_both(
    env: Path, model: FakeModel
) -> None:
    data = env / "in.jsonl"
    data.write_text("".join(json.dumps({"key": f"k{i}"}) + "\n" for i in range(5)))
    out = env / "out"
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        output={"file": {"path": str(out)}},
    )
    assert run_cli(env, doc)[0] == 0
    first_manifest = (out / "_SUCCESS").read_text()
    model.batches.clear()
    code, summary = run_cli(env, other_run(doc, "uid-2"))
    assert code == 2
    assert str(out) in summary["reason"] and "uid-1" in summary["reason"]
    assert model.batches == []  # nothing was read, predicted or written
    assert (out / "_SUCCESS").read_text() == first_manifest


def test_a_rerun_of_the_same_run_resumes_its_own_output(env: Path, model: FakeModel) -> None:
    data = env / "in.jsonl"
    data.write_text("".join(json.dumps({"key": f"k{i}"}) + "\n" for i in range(5)))
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        output={"file": {"path": str(env / "out")}},
        runner={"chunkSize": 2},
    )
    assert run_cli(env, doc)[0] == 0
    model.batches.clear()
    code, summary = run_cli(env, doc)  # the same run and Job: a retried pod
    assert code == 0 and summary["recordsWritten"] == 5 and model.batches == []


# -- item 3: duplicate ids, through the command --------------------------------------------


def test_duplicate_ids_from_the_id_field_go_to_the_error_output(
    env: Path, store: MemoryStore
) -> None:
    data = env / "in.jsonl"
    keys = ["k0", "k1", "k2", "k3", "k1", "k5"]
    data.write_text("".join(json.dumps({"key": k}) + "\n" for k in keys))
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        runner={"maxFailedRecords": 1, "chunkSize": 2},
    )
    code, summary = run_cli(env, doc)
    assert code == 0 and (summary["recordsWritten"], summary["recordsFailed"]) == (5, 1)
    failed = [row for rows in store.chunks["out-errors"].values() for row in rows]
    assert [(row["id"], row["position"]) for row in failed] == [("k1", 4)]
    assert "duplicate id 'k1'" in failed[0]["reason"]


# -- item 5: what a reason may say ----------------------------------------------------------


def test_a_database_error_reason_has_no_statement_and_no_rows(env: Path) -> None:
    code, summary = run_cli(env, contract(output={"boom": {}}))
    reason = summary["reason"]
    assert code != 0 and "value too long" in reason, reason
    for leak in ("INSERT", SECRET_ROW, "DETAIL", "record_id"):
        assert leak not in reason, reason


@pytest.mark.requires_service
@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_an_id_longer_than_the_sql_column_fails_that_record_only(
    env: Path, request: pytest.FixtureRequest, table_name: str, server: str
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    data = env / "in.jsonl"
    keys = ["a", "k" * 300, "c"]
    data.write_text("".join(json.dumps({"key": k, "note": SECRET_ROW}) + "\n" for k in keys))
    doc = contract(
        input={"file": {"path": str(data), "idField": "key"}},
        output={"sql": {"url": url, "table": table_name}},
        runner={"maxFailedRecords": 1},
    )
    try:
        code, summary = run_cli(env, doc)
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            written = conn.execute(sa.text(f"SELECT record_id FROM {table_name}")).scalars()
            failed = conn.execute(sa.text(f"SELECT record_id FROM {table_name}_errors")).scalars()
            written_ids, failed_ids = sorted(written), list(failed)
        engine.dispose()
    finally:
        drop_tables(url, table_name)
    assert code == 0, summary
    assert (summary["recordsWritten"], summary["recordsFailed"]) == (2, 1)
    assert written_ids == ["a", "c"] and failed_ids == ["k" * 300]


# -- item 6: an input never needs write access; permanent errors exit 2 at once -----------


def _sqlite_input(path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (key TEXT PRIMARY KEY, x INT)"))
        conn.execute(sa.text("INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', 3)"))
    engine.dispose()


def test_a_read_only_sqlite_input_is_read(env: Path) -> None:
    _sqlite_input(env / "in.db")
    # mode=ro: SQLite refuses every write on this connection, as for a read-only file or volume
    # (chmod would not stop root, which the tests may run as).
    url = f"sqlite:///file:{env / 'in.db'}?mode=ro&uri=true"
    doc = contract(
        input={"sql": {"url": url, "table": "t"}}, output={"file": {"path": str(env / "out")}}
    )
    code, summary = run_cli(env, doc)
    assert code == 0, summary
    assert summary["recordsWritten"] == 3


def test_a_permanent_sqlite_input_error_exits_2_at_once(env: Path) -> None:
    (env / "in.db").write_text("this is not a database\n" * 100)
    doc = contract(
        input={"sql": {"url": f"sqlite:///{env / 'in.db'}", "table": "t"}},
        output={"file": {"path": str(env / "out")}},
    )
    started = time.monotonic()
    code, summary = run_cli(env, doc)
    assert code == 2, summary
    assert "input.sql" in summary["reason"] and "not a database" in summary["reason"]
    assert time.monotonic() - started < 10


# -- item 7: retried sink writes are retries ------------------------------------------------


class FlakySink(Sink):
    """Refuses each chunk's first write with a TransientError (a 503), then takes it."""

    location = "flaky://out"

    def __init__(self) -> None:
        self.refused: set[int] = set()

    def committed(self) -> set[int]:
        return set()

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        if index not in self.refused:
            self.refused.add(index)
            raise TransientError("HTTP 503")

    def finish(self, summary: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def test_records_retried_counts_retried_sink_writes(store: MemoryStore) -> None:
    backend, stats = MemoryBackend(store), Stats()
    ctx = RunContext("uid-1", "job-1")
    Pipeline(
        source=backend.open_source({}, ctx),
        sink=FlakySink(),
        error_sink=backend.open_sink({"name": "err"}, ctx, role="errors"),
        client=FakeModel(),
        tuning=RunnerTuning(
            chunk_size=3, initial_backoff_seconds=0, progress_interval_seconds=3600
        ),
        stats=stats,
    ).run()
    assert (stats.written, stats.chunks, stats.retried) == (6, 2, 2)


@pytest.mark.requires_service
@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_a_sql_error_that_cannot_pass_is_a_config_error_and_a_lost_server_is_retried(
    request: pytest.FixtureRequest, table_name: str, server: str
) -> None:
    url = request.getfixturevalue(f"{server}_url")
    ctx = RunContext("uid-1", "job-1")
    sink = SqlBackend().open_sink(SqlStorage(url=url, table=table_name), ctx, role="output")
    try:
        drop_tables(url, table_name)  # gone behind the sink's back: every retry would fail
        with pytest.raises(ConfigError, match=f"table: writing chunk 0: .*{table_name}") as gone:
            sink.write_chunk(0, [OutputRecord("a", 0, {"note": SECRET_ROW}, 1)])
        assert SECRET_ROW not in str(gone.value) and "INSERT" not in str(gone.value)
    finally:
        sink.close()
        drop_tables(url, table_name)
    unreachable = url.replace(":5432/", ":1/").replace(":3306/", ":1/")
    with pytest.raises(TransientError):
        SqlBackend().open_sink(SqlStorage(url=unreachable, table=table_name), ctx, role="output")
