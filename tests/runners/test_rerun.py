"""Re-running only the failed records: a run's error output read back with `recordField`.

Real: the runner end to end in-process (`runners.cli.main`: contract file in, exit code and
summary out), the pipeline, the file backend, the SQL backend on SQLite, the S3 backend on
moto's S3 server, the error records as the runner writes them, redaction. Faked: the model
(a FakeModel registered in place of `kserve-v2`), which fails the records a test calls
broken in the first run and answers every record in the second, as a model that was
overloaded, or fixed, between two runs does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeModel, contract

from runners import cli, registry
from runners.api import InputRecord, Outcome, Prediction, RecordFailure
from runners.redact import remember

RECORDS: list[dict[str, Any]] = [
    {"id": f"r{n}", "n": n, "text": f"row {n}", "tags": [n, "x"]} for n in range(40)
]
BROKEN = {"r3", "r4", "r17", "r18", "r19", "r31", "r39"}


class Model:
    """Answers `{"double": 2n}`; fails the records whose id is in `broken`."""

    def __init__(self) -> None:
        self.broken: set[str] = set()
        self.fake = FakeModel(self.predict)

    def predict(self, records: Sequence[InputRecord]) -> list[Outcome]:
        return [
            RecordFailure("model overloaded")
            if r.id in self.broken
            else Prediction({"double": 2 * r.data["n"]})
            for r in records
        ]


@pytest.fixture
def model() -> Iterator[Model]:
    model = Model()
    registry.model_protocols.register("kserve-v2", model.fake.factory)
    yield model
    registry.model_protocols.unregister("kserve-v2")


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return tmp_path


def run(env: Path, uid: str, **blocks: Any) -> tuple[int, dict[str, Any]]:
    """One execution of run `uid` (its own run UID and Job); (exit code, summary)."""
    identity = {"name": uid, "namespace": "ns", "uid": uid, "generation": 1, "scheduled": False}
    doc = contract(jobId=uid, jobName=f"{uid}-job", run=identity, **blocks)
    doc["runner"].update(chunkSize=8, batchSize=4, maxFailedRecords=100)
    path = env / f"{uid}.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((env / "termination-log").read_text())


def rows(folder: Path) -> list[dict[str, Any]]:
    """Every JSONL row of the part files of `folder`, in file order."""
    return [
        json.loads(line)
        for part in sorted(folder.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_rerun_of_the_error_output_gives_exactly_the_failed_records_results(
    env: Path, model: Model
) -> None:
    source = write_jsonl(env / "in.jsonl", RECORDS)
    model.broken = set(BROKEN)
    first = {"input": {"file": {"path": str(source), "idField": "id"}}}
    code, summary = run(env, "first", **first, output={"file": {"path": str(env / "out")}})
    assert code == 0 and (summary["recordsWritten"], summary["recordsFailed"]) == (33, 7)
    errors = rows(env / "out-errors")
    assert len({p.name for p in (env / "out-errors").glob("part-*")}) > 1  # several chunks
    assert sorted(e["id"] for e in errors) == sorted(BROKEN)

    model.broken = set()
    again = {"file": {"path": str(env / "out-errors"), "idField": "id", "recordField": "input"}}
    code, summary = run(env, "second", input=again, output={"file": {"path": str(env / "out2")}})

    assert code == 0 and (summary["recordsRead"], summary["recordsFailed"]) == (7, 0)
    redone = rows(env / "out2")
    assert sorted(r["id"] for r in redone) == sorted(BROKEN)  # each once: none lost, none twice
    by_id = {r["id"]: r for r in RECORDS}
    for row in redone:  # the whole original record went through, and the model saw it
        assert row["input"] == by_id[row["id"]]
        assert row["prediction"] == {"double": 2 * by_id[row["id"]]["n"]}
    both = [r["id"] for r in rows(env / "out")] + [r["id"] for r in redone]
    assert sorted(both) == sorted(by_id)


def test_without_an_id_field_the_rerun_keeps_the_first_runs_positions_as_ids(
    env: Path, model: Model
) -> None:
    source = write_jsonl(env / "in.jsonl", [{"n": n} for n in range(20)])
    model.broken = {"2", "11", "12"}  # ids are positions
    first = {"file": {"path": str(source)}}
    assert run(env, "first", input=first, output={"file": {"path": str(env / "out")}})[0] == 0

    model.broken = set()
    again = {"file": {"path": str(env / "out-errors"), "recordField": "input"}}
    code, _ = run(env, "second", input=again, output={"file": {"path": str(env / "out2")}})

    assert code == 0
    redone = rows(env / "out2")
    assert [(r["id"], r["input"]["n"]) for r in redone] == [("2", 2), ("11", 11), ("12", 12)]


def test_a_csv_error_output_is_read_back_with_its_input_column_decoded(
    env: Path, model: Model
) -> None:
    source = write_jsonl(env / "in.jsonl", RECORDS)
    model.broken = set(BROKEN)
    out = {"file": {"path": str(env / "out"), "format": "csv"}}
    assert (
        run(env, "first", input={"file": {"path": str(source), "idField": "id"}}, output=out)[0]
        == 0
    )
    assert any((env / "out-errors").glob("part-*.csv"))

    model.broken = set()
    again = {"file": {"path": str(env / "out-errors"), "idField": "id", "recordField": "input"}}
    code, _ = run(env, "second", input=again, output={"file": {"path": str(env / "out2")}})

    assert code == 0
    redone = {r["id"]: r for r in rows(env / "out2")}
    assert sorted(redone) == sorted(BROKEN)
    assert redone["r17"]["input"] == RECORDS[17]  # numbers and lists as they were


def test_a_line_the_first_run_could_not_read_fails_again_with_the_first_reason(
    env: Path, model: Model
) -> None:
    source = env / "in.jsonl"
    source.write_text('{"n": 0}\nnot json\n{"n": 2}\n')
    model.broken = {"2"}
    first = {"file": {"path": str(source)}}
    assert run(env, "first", input=first, output={"file": {"path": str(env / "out")}})[0] == 0
    assert len(rows(env / "out-errors")) == 2

    model.broken = set()
    again = {"file": {"path": str(env / "out-errors"), "recordField": "input"}}
    code, summary = run(env, "second", input=again, output={"file": {"path": str(env / "out2")}})

    assert code == 0 and (summary["recordsWritten"], summary["recordsFailed"]) == (1, 1)
    assert [r["id"] for r in rows(env / "out2")] == ["2"]
    (failed,) = rows(env / "out2-errors")
    assert failed["id"] == "1"
    assert failed["reason"].startswith("the earlier run could not read this record: invalid JSON")


def test_a_row_without_an_object_under_record_field_goes_to_the_error_output(
    env: Path, model: Model
) -> None:
    source = write_jsonl(env / "rows.jsonl", [{"id": "a", "input": {"n": 1}}, {"id": "b"}])
    again = {"file": {"path": str(source), "recordField": "input"}}
    code, summary = run(env, "second", input=again, output={"file": {"path": str(env / "out")}})

    assert code == 0 and (summary["recordsWritten"], summary["recordsFailed"]) == (1, 1)
    (failed,) = rows(env / "out-errors")
    assert failed["id"] == "b" and "no JSON object under 'input'" in failed["reason"]


def test_record_field_on_an_output_is_refused_with_exit_2(
    env: Path, model: Model, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(env / "in.jsonl", RECORDS[:2])
    out = {"file": {"path": str(env / "out"), "recordField": "input"}}
    code, _ = run(env, "first", input={"file": {"path": str(source)}}, output=out)

    assert code == 2
    assert "recordField applies to input only" in capsys.readouterr().err


def test_an_sql_error_table_is_read_back_with_a_query(env: Path, model: Model) -> None:
    db = f"sqlite:///{env / 'runs.db'}"
    source = write_jsonl(env / "in.jsonl", RECORDS)
    model.broken = set(BROKEN)
    first = {"file": {"path": str(source), "idField": "id"}}
    assert run(env, "first", input=first, output={"sql": {"url": db, "table": "preds"}})[0] == 0

    model.broken = set()
    query = "SELECT record_id, input FROM preds_errors WHERE run_uid = 'first' ORDER BY position"
    again = {"sql": {"url": db, "query": query, "idField": "id", "recordField": "input"}}
    code, _ = run(env, "second", input=again, output={"file": {"path": str(env / "out2")}})

    assert code == 0
    redone = rows(env / "out2")
    assert sorted(r["id"] for r in redone) == sorted(BROKEN)
    assert all(r["input"] == RECORDS[int(r["id"][1:])] for r in redone)


def test_an_s3_error_output_is_read_back_from_its_prefix(
    env: Path, model: Model, moto_endpoint: str, s3_bucket: str
) -> None:
    s3 = {"bucket": s3_bucket, "endpointUrl": moto_endpoint, "forcePathStyle": True}
    source = write_jsonl(env / "in.jsonl", RECORDS)
    model.broken = set(BROKEN)
    first = {"file": {"path": str(source), "idField": "id"}}
    code, summary = run(env, "first", input=first, output={"s3": {**s3, "prefix": "out/"}})
    assert code == 0 and summary["errorOutput"].startswith(f"s3://{s3_bucket}/out-errors")

    model.broken = set()
    again = {"s3": {**s3, "prefix": "out-errors/", "idField": "id", "recordField": "input"}}
    code, _ = run(env, "second", input=again, output={"file": {"path": str(env / "out2")}})

    assert code == 0
    assert sorted(r["id"] for r in rows(env / "out2")) == sorted(BROKEN)


def test_the_error_output_holds_the_whole_input_but_no_secret_in_its_reason(
    env: Path, model: Model
) -> None:
    key = "sk-very-secret-key-42"

    def refuse(records: Sequence[InputRecord]) -> list[Outcome]:
        remember(key)  # as a client that read its API key from a Secret does
        return [RecordFailure(f"server said: key {key} refused") for _ in records]

    model.fake.handler = refuse
    source = write_jsonl(env / "in.jsonl", RECORDS[:3])
    first = {"file": {"path": str(source), "idField": "id"}}
    assert run(env, "first", input=first, output={"file": {"path": str(env / "out")}})[0] == 0

    errors = rows(env / "out-errors")
    assert [e["input"] for e in errors] == RECORDS[:3]
    assert all(e["reason"] == "server said: key *** refused" for e in errors)
