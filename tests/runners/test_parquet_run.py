"""A run from a Parquet file to Parquet parts, end to end, and a re-run of its failures.

Real: the runner in-process (`runners.cli.main`: contract file in, exit code and summary out),
the pipeline, the file backend reading and writing Parquet (runners/parquet.py), pyarrow
writing the input and reading the parts back. Faked: the model (a FakeModel registered in
place of `kserve-v2`), which fails the records a test calls broken. The last tests build a
chunk's records and answers by hand, as runners/parquet.py and the model workers make them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fakes import FakeModel, contract

from runners import cli, parquet, parquetparts, registry
from runners.api import InputRecord, Outcome, OutputRecord, Prediction, RecordFailure
from runners.columns import ColumnAnswers, ColumnOutput, ColumnRecord, SliceRows, TensorValues
from runners.commit import _split
from runners.models.tensors import batch_values as tensor_batch_values
from runners.outcomes import Outcomes


class Model:
    """Answers `{"sum": a + b}` (NaN for a NaN), fails the records whose id is in `broken`."""

    def __init__(self) -> None:
        self.broken: set[str] = set()
        self.fake = FakeModel(self.predict)

    def predict(self, records: Sequence[InputRecord]) -> list[Outcome]:
        return [
            RecordFailure("model overloaded")
            if r.id in self.broken
            else Prediction({"sum": r.data["a"] + r.data["b"]})
            for r in records
        ]


@pytest.fixture
def model() -> Iterator[Model]:
    model = Model()
    registry.model_protocols.register("kserve-v2", model.fake.factory)
    yield model
    registry.model_protocols.unregister("kserve-v2")


def run(tmp_path: Path, uid: str, **blocks: Any) -> tuple[int, dict[str, Any]]:
    identity = {"name": uid, "namespace": "ns", "uid": uid, "generation": 1, "scheduled": False}
    doc = contract(jobId=uid, jobName=f"{uid}-job", run=identity, **blocks)
    doc["runner"].update(chunkSize=8, batchSize=4, maxFailedRecords=100)
    (tmp_path / f"{uid}.json").write_text(json.dumps(doc))
    code = cli.main(["--contract", str(tmp_path / f"{uid}.json")])
    return code, json.loads((tmp_path / "termination-log").read_text())


def rows(folder: Path) -> list[dict[str, Any]]:
    return [
        row
        for p in sorted(folder.glob("part-*.parquet"))
        for row in parquetparts.part_rows(p.read_bytes())
    ]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return tmp_path


def test_a_parquet_run_writes_parquet_parts_and_its_failures_run_again(
    env: Path, model: Model
) -> None:
    table = pa.table(
        {
            "key": [f"k{i}" for i in range(20)],
            "a": [float(i) for i in range(20)],
            "b": [math.nan if i == 6 else 1.0 for i in range(20)],
        }
    )
    pq.write_table(table, env / "in.parquet", row_group_size=5)
    model.broken = {"k3", "k11"}
    output = {"file": {"path": str(env / "out"), "format": "parquet", "includeInput": True}}
    code, summary = run(
        env,
        "first",
        input={"file": {"path": str(env / "in.parquet"), "idField": "key"}},
        output=output,
    )
    assert code == 0, summary
    written = rows(env / "out")
    assert [row["id"] for row in written] == [f"k{i}" for i in range(20) if i not in (3, 11)]
    nan = next(row for row in written if row["id"] == "k6")
    assert math.isnan(nan["prediction"]["sum"]) and math.isnan(nan["input"]["b"])
    assert [row["id"] for row in rows(env / "out-errors")] == ["k3", "k11"]
    manifest = json.loads((env / "out" / "_SUCCESS").read_text())
    assert manifest["format"] == "parquet"

    model.broken = set()
    again = {"file": {"path": str(env / "rerun"), "format": "parquet"}}
    errors = {"file": {"path": str(env / "out-errors"), "recordField": "input"}}
    code, summary = run(env, "second", input=errors, output=again)
    assert code == 0, summary
    assert [(row["id"], row["prediction"]) for row in rows(env / "rerun")] == [
        ("k3", {"sum": 4.0}),
        ("k11", {"sum": 12.0}),
    ]


class TensorModel:
    """Answers each record with its row number, reading no record's `data` (as a raw-tensor
    client reading a batch from its columns does)."""

    def __init__(self) -> None:
        self.fake = FakeModel(lambda records: [Prediction(r.position) for r in records])


@pytest.mark.parametrize(("output", "makes_rows"), [({}, False), ({"includeInput": True}, True)])
def test_rows_of_a_parquet_input_are_made_only_when_an_output_writes_them(
    env: Path, monkeypatch: pytest.MonkeyPatch, output: dict[str, Any], makes_rows: bool
) -> None:
    made: list[int] = []
    original = parquet._rows

    def counting(part: pa.RecordBatch, targets: list[pa.DataType]) -> list[Any]:
        made.append(part.num_rows)
        return original(part, targets)

    monkeypatch.setattr(parquet, "_rows", counting)
    model = TensorModel()
    registry.model_protocols.register("kserve-v2", model.fake.factory)
    try:
        pq.write_table(
            pa.table({"key": [f"k{i}" for i in range(20)], "x": range(20)}), env / "in.parquet"
        )
        code, summary = run(
            env,
            "lazy",
            input={"file": {"path": str(env / "in.parquet"), "idField": "key"}},
            output={"file": {"path": str(env / "out"), "format": "parquet", **output}},
        )
    finally:
        registry.model_protocols.unregister("kserve-v2")
    assert code == 0 and summary["recordsWritten"] == 20
    written = rows(env / "out")
    assert [(row["id"], row["prediction"]) for row in written] == [(f"k{i}", i) for i in range(20)]
    # The slice's rows (one slice: 20 rows) are made only for an output that writes them.
    assert made == ([20] if makes_rows else [])
    if makes_rows:
        assert [row["input"] for row in written] == [{"key": f"k{i}", "x": i} for i in range(20)]


def test_a_parquet_record_made_lazily_answers_like_any_other() -> None:
    rows_made: list[int] = []
    slice_rows = SliceRows(lambda: rows_made.append(1) or [{"a": 1}, {"a": 2}])
    # As runners/parquet.py and runners/commit.py make them: no dict, no input yet.
    record = ColumnRecord(7, "7", None, None, None, 1, slice_rows)  # type: ignore[arg-type]
    answer = ColumnOutput("7", 7, None, {"y": 3}, None, None, record)  # type: ignore[arg-type]
    assert rows_made == []
    assert answer.input == {"a": 2} and record.data == {"a": 2} and rows_made == [1]
    assert (answer.id, answer.position, answer.prediction) == ("7", 7, {"y": 3})


def test_a_chunk_of_parquet_answers_is_written_from_its_columns_byte_for_byte_as_records() -> None:
    made: list[int] = []
    rows = SliceRows(lambda: made.append(1) or [{"a": n, "b": str(n)} for n in range(6)])
    records = [ColumnRecord(10 + n, f"k{n}", None, None, None, n, rows) for n in range(6)]  # type: ignore[arg-type]
    predictions: list[Any] = [[0.5, math.nan], [1.0, 2.0], [3.0], [], [-math.inf], [1e300]]
    answers = ColumnAnswers()
    answers.records += records
    answers.values.append(predictions)
    plain = [OutputRecord(f"k{n}", 10 + n, {"a": n, "b": str(n)}, predictions[n]) for n in range(6)]
    for include_input in (False, True):
        got = parquetparts.encode_part(answers, errors=False, include_input=include_input)
        want = parquetparts.encode_part(plain, errors=False, include_input=include_input)
        assert got == want
        assert made == ([1] if include_input else [])  # the rows only for the input column
    # Anyone else gets ColumnOutputs, made once, in order.
    assert len(answers) == 6 and answers[2].prediction == [3.0] and answers[-1].id == "k5"
    assert [r.position for r in answers[1:3]] == [11, 12]
    assert answers[0] is next(iter(answers)) and answers[0].input == {"a": 0, "b": "0"}


def _tensor_answer(rng: np.random.Generator, count: int, outputs: int) -> TensorValues:
    """A batch's answer as a tensor client makes it: outputs of random kinds and shapes."""
    kinds = ["<i8", "<i4", "u1", "<u8", "<f4", "<f8", "<f2", "?"]
    tensors = []
    for _ in range(outputs):
        dtype = np.dtype(kinds[rng.integers(len(kinds))])
        shape = (count, *rng.integers(0, 4, size=rng.integers(0, 3)).tolist())  # 0: no item
        data = rng.normal(0, 1e3, size=shape)
        if dtype.kind == "f":
            data[rng.random(shape) < 0.2] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 1e300])
        if dtype == np.uint64:
            data = rng.integers(0, 2**64, size=shape, dtype=np.uint64, endpoint=False)
            data = data >> np.uint64(rng.integers(0, 2))  # half of them fit in an int64
        with np.errstate(all="ignore"):  # 1e300 as FP32 is inf; -3.0 as UINT8 wraps
            tensor = np.asarray(data).astype(dtype)
        tensors.append((["predict", "proba", "label"][int(rng.integers(3))], tensor))
    return tensors_values(tensors, count)


def tensors_values(tensors: list[tuple[str, Any]], count: int) -> TensorValues:
    answer = tensor_batch_values([(name, t, list(t.shape)) for name, t in tensors], count=count)
    assert type(answer) is TensorValues
    return answer


def test_answers_kept_as_output_tensors_are_written_byte_for_byte_as_their_values() -> None:
    # Each batch's values stay the tensors (runners/models/tensors.py); the part takes them as
    # its prediction column, or, where the values would make another column (JSON text, lists
    # of nothing, integers beyond int64, batches of different types), goes by the values.
    rng = np.random.default_rng(32)
    taken = 0
    for case in range(400):
        counts = rng.integers(1, 5, size=rng.integers(1, 4)).tolist()
        outputs = int(rng.integers(1, 4))
        same = rng.random() < 0.5  # every batch of one type: taken as tensors, if they can be
        first = _tensor_answer(rng, counts[0], outputs)
        batches = [first] + [
            tensors_values([(n, t[:1].repeat(c, axis=0)) for n, t in first.outputs], c)
            if same
            else _tensor_answer(rng, c, outputs)
            for c in counts[1:]
        ]
        records = [ColumnRecord(n, str(n), None, None, None, n, None) for n in range(sum(counts))]  # type: ignore[arg-type]
        answers = ColumnAnswers()
        answers.records += records
        answers.values += batches
        values = [v for batch in batches for v in batch.values()]
        plain = [OutputRecord(str(n), n, {}, v) for n, v in enumerate(values)]
        try:
            want = parquetparts.encode_part(plain, errors=False, include_input=False)
        except (TypeError, ValueError) as exc:  # no Parquet or JSON value: the same error
            with pytest.raises(type(exc)):
                parquetparts.encode_part(answers, errors=False, include_input=False)
            continue
        assert parquetparts.encode_part(answers, errors=False, include_input=False) == want, case
        taken += parquetparts._tensor_column(answers.values) is not None
    assert taken > 80, taken  # a good share went the tensors' way


def test_a_tensor_answer_makes_its_values_only_when_one_is_read() -> None:
    made = tensors_values([("predict", np.array([[1], [0]])), ("p", np.array([0.5, 2.0]))], 2)
    assert made._make is not None and len(made) == 2  # nothing made yet
    assert list(made) == [{"predict": [1], "p": 0.5}, {"predict": [0], "p": 2.0}]
    assert made[1] == {"predict": [0], "p": 2.0} and made._make is None


def test_a_chunk_is_kept_as_columns_only_when_every_parquet_record_was_answered() -> None:
    rows = SliceRows(lambda: [{"a": n} for n in range(4)])
    records = [ColumnRecord(n, str(n), None, None, None, n, rows) for n in range(4)]  # type: ignore[arg-type]
    clean = [(records[:2], Outcomes([1, 2])), (records[2:], Outcomes([3, 4]))]
    outputs, errors, tokens = _split(clean)
    assert type(outputs) is ColumnAnswers and errors == [] and tokens == {}
    assert outputs.predictions() == [1, 2, 3, 4] and outputs.records == records
    failed = [clean[0], (records[2:], Outcomes([3, None], {1: RecordFailure("bad")}))]
    outputs, errors, _ = _split(failed)
    assert type(outputs) is list and [r.prediction for r in outputs] == [1, 2, 3]
    assert [(e.position, e.reason, e.input) for e in errors] == [(3, "bad", {"a": 3})]
