"""Parquet input and output (runners/parquet.py) through the file backend, and its contract rules.

Real: pyarrow writing the inputs and reading the parts back, the file backend's source and
sink on tmp_path, runners/parquet.py, the contract models. Faked: nothing; one test counts
the row groups pyarrow is asked to read (a wrapper around `ParquetFile.iter_batches`), and
one reads a Parquet file through `RangeFile` from bytes in memory, counting the bytes asked.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from contracts.config import StorageBlock
from contracts.storage import FileStorage
from runners import formats, parquet, parquetparts
from runners.api import ConfigError, ErrorRecord, OutputRecord, RunContext
from runners.formats import UnreadableRecord
from runners.storage.file import FileBackend

CTX = RunContext(run_uid="uid-1", job_name="job-1")


def write(path: Path, columns: dict[str, Any], *, rows_per_group: int = 3) -> Path:
    pq.write_table(pa.table(columns), path, row_group_size=rows_per_group)
    return path


def source(path: Path, **settings: Any) -> Any:
    return FileBackend().open_source(FileStorage(path=str(path), **settings), CTX)


def sink(path: Path, role: str = "output", **settings: Any) -> Any:
    """A Parquet file sink, closed at the end of a with block."""
    storage = FileStorage(path=str(path), format="parquet", **settings)
    return closing(FileBackend().open_sink(storage, CTX, role=role))


def part(folder: Path, index: int = 0) -> bytes:
    return (folder / f"part-{index:06d}.parquet").read_bytes()


# -- reading -----------------------------------------------------------------------------


def test_positions_continue_across_files_and_total_comes_from_the_footers(
    tmp_path: Path,
) -> None:
    write(tmp_path / "a.parquet", {"v": list(range(5))})
    write(tmp_path / "b.parq", {"v": list(range(5, 12))})
    found = source(tmp_path)
    assert [(r.position, r.id, r.data) for r in found.records(0)] == [
        (i, str(i), {"v": i}) for i in range(12)
    ]
    assert found.total() == 12


def test_resume_reads_no_row_group_that_ends_before_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "a.parquet", {"v": list(range(10))})  # row groups 0-2, 3-5, 6-8, 9
    write(tmp_path / "b.parquet", {"v": list(range(10, 14))})  # 10-12, 13
    asked: list[list[int]] = []
    iter_batches = pq.ParquetFile.iter_batches

    def counting(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        asked.append(list(kwargs["row_groups"]))
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    got = [(r.position, r.data["v"]) for r in source(tmp_path).records(7)]
    assert got == [(p, p) for p in range(7, 14)]
    assert asked == [[2], [3], [0], [1]]  # a.parquet from its third row group


def test_row_groups_after_the_first_are_read_in_slices_of_about_256_kib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "numbers.parquet", {"v": [0.5] * 200_000}, rows_per_group=100_000)
    write(tmp_path / "texts.parquet", {"t": ["x" * 8192] * 2000}, rows_per_group=1000)
    write(tmp_path / "short.parquet", {"s": ["x" * 100] * 50_000}, rows_per_group=25_000)
    sizes: dict[str, list[int]] = {}
    iter_batches = pq.ParquetFile.iter_batches

    def counting(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        sizes.setdefault(self.schema_arrow.names[0], []).append(kwargs["batch_size"])
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    numbers = [r.data["v"] for r in source(tmp_path / "numbers.parquet").records(0)]
    assert numbers == [0.5] * 200_000
    texts = [r.data["t"] for r in source(tmp_path / "texts.parquet").records(0)]
    assert len(texts) == 2000 and set(map(len, texts)) == {8192}
    short = [r.position for r in source(tmp_path / "short.parquet").records(0)]
    assert short == list(range(50_000))
    # The footer says the repeated texts take a few bytes (a dictionary); the first group's
    # rows say how long they are. 8 bytes a number and a validity bit: 32,263 rows; 104 bytes
    # a short text: 2,520 rows; 8 KiB a text: 64 rows (the least). Each group is read once.
    assert sizes == {"v": [1024, 32_263], "s": [1024, 2_520], "t": [1024, 64]}


def test_resume_in_the_second_file_skips_the_first_without_reading_it(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", {"v": list(range(4))})
    write(tmp_path / "b.parquet", {"v": list(range(4, 8))})
    assert [r.position for r in source(tmp_path).records(6)] == [6, 7]
    assert list(source(tmp_path).records(8)) == []


def test_an_s3_object_is_read_by_range_not_whole() -> None:
    out = pa.BufferOutputStream()
    values = [i * 1.1 for i in range(200_000)]  # ~1.6 MB: more than the footer read ahead
    pq.write_table(pa.table({"v": values}), out, row_group_size=10_000)
    data = out.getvalue().to_pybytes()
    asked: list[int] = []

    def fetch(first: int, last: int) -> bytes:
        asked.append(last + 1 - first)
        return data[first : last + 1]

    view = parquet.RangeFile(len(data), fetch)
    records = parquet.read_records(
        view, where="key: s3://b/k", start=0, skip=195_000, id_field=None, record_field=None
    )
    assert [r.position for r in records] == list(range(195_000, 200_000))
    assert sum(asked) < len(data) / 4  # the footer and the last row groups


def test_ids_come_from_a_column_and_nulls_stay_none(tmp_path: Path) -> None:
    path = write(tmp_path / "in.parquet", {"key": ["a", "b", None], "x": [1.5, None, 3.0]})
    got = [(r.id, r.data) for r in source(path, id_field="key").records(0)]
    assert got == [
        ("a", {"key": "a", "x": 1.5}),
        ("b", {"key": "b", "x": None}),
        ("2", {"key": None, "x": 3.0}),  # no id in the column: the position, as JSONL
    ]


def test_types_become_json_like_values(tmp_path: Path) -> None:
    columns = {
        "when": pa.array([dt.datetime(2024, 5, 1, 10, 30)], pa.timestamp("us", tz="UTC")),
        "nanos": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns")),
        "day": pa.array([dt.date(2024, 5, 1)]),
        "price": pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)),
        "colour": pa.array(["red"]).dictionary_encode(),
        "tags": pa.array([[1, 2]]),
        "point": pa.array([{"x": 1.0, "y": None}]),
        "nan": pa.array([math.nan]),
    }
    (record,) = source(write(tmp_path / "in.parquet", columns)).records(0)
    assert record.data["when"] == "2024-05-01T10:30:00.000000Z"
    assert record.data["nanos"] == "2023-11-14T22:13:20.123456789"
    assert record.data["day"] == "2024-05-01"
    assert record.data["price"] == decimal.Decimal("1.25")
    assert (record.data["colour"], record.data["tags"]) == ("red", [1, 2])
    assert record.data["point"] == {"x": 1.0, "y": None}
    assert math.isnan(record.data["nan"])


def test_a_column_of_a_type_with_no_json_value_is_refused_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path / "in.parquet", {"x": [1], "blob": pa.array([b"\x00"])})
    with pytest.raises(ConfigError, match=r"in.parquet: column 'blob' has type binary"):
        list(source(path).records(0))


def test_a_file_that_is_not_parquet_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    path.write_text('{"x": 1}\n')
    with pytest.raises(ConfigError, match=rf"path: {path} is not a Parquet file"):
        list(source(path).records(0))


def test_error_parts_read_back_with_record_field_keep_their_ids(tmp_path: Path) -> None:
    errors = [
        ErrorRecord("a", 3, {"x": 1}, "overloaded"),
        ErrorRecord("b", 7, {}, "invalid JSON"),  # unreadable: nothing to send again
    ]
    with sink(tmp_path / "errors", "errors") as out:
        out.write_chunk(0, errors)
    records = list(source(tmp_path / "errors", record_field="input").records(0))
    assert (records[0].id, records[0].data) == ("a", {"x": 1})
    assert isinstance(records[1], UnreadableRecord) and records[1].id == "b"


# -- writing -----------------------------------------------------------------------------


def test_empty_chunks_are_valid_parquet_files_with_their_roles_columns(tmp_path: Path) -> None:
    with sink(tmp_path / "out") as out, sink(tmp_path / "errors", "errors") as errors:
        out.write_chunk(0, [])
        errors.write_chunk(0, [])
        assert out.committed_records({0}) == 0
    assert pq.read_schema(pa.BufferReader(part(tmp_path / "out"))).names == [
        "id",
        "position",
        "prediction",
    ]
    schema = pq.read_schema(pa.BufferReader(part(tmp_path / "errors")))
    assert schema.names == ["id", "position", "input", "reason", "code", "response"]
    assert parquetparts.part_rows(part(tmp_path / "errors")) == []


def test_a_prediction_of_mixed_types_is_a_json_text_column_named_in_the_metadata(
    tmp_path: Path,
) -> None:
    records = [OutputRecord("a", 0, {}, 1.5), OutputRecord("b", 1, {}, "high")]
    with sink(tmp_path / "out") as out:
        out.write_chunk(0, records)
    data = part(tmp_path / "out")
    schema = pq.read_schema(pa.BufferReader(data))
    assert schema.field("prediction").type == pa.string()
    assert json.loads(schema.metadata[b"longrun.json_columns"]) == ["prediction"]
    assert [row["prediction"] for row in parquetparts.part_rows(data)] == [1.5, "high"]


def test_objects_with_other_keys_are_json_text_not_structs_with_added_nulls() -> None:
    records = [OutputRecord("a", 0, {}, {"x": 1}), OutputRecord("b", 1, {}, {"y": 2})]
    data = parquetparts.encode_part(records, errors=False, include_input=False)
    assert [row["prediction"] for row in parquetparts.part_rows(data)] == [{"x": 1}, {"y": 2}]


def test_nan_and_infinities_are_ieee_values_in_float_columns() -> None:
    records = [
        OutputRecord("a", 0, {}, {"score": math.nan}),
        OutputRecord("b", 1, {}, {"score": math.inf}),
    ]
    data = parquetparts.encode_part(records, errors=False, include_input=False)
    assert pq.read_schema(pa.BufferReader(data)).field("prediction").type == pa.struct(
        [("score", pa.float64())]
    )
    nan, inf = (row["prediction"]["score"] for row in parquetparts.part_rows(data))
    assert math.isnan(nan) and inf == math.inf


def test_tensor_rows_are_list_columns_of_their_kind_and_mixed_lists_stay_as_they_were() -> None:
    floats = [[0.25, math.nan], [1.0, -math.inf, 2.0]]
    cases = [
        (floats, pa.list_(pa.float64()), floats),
        ([[1, 2], [], [3]], pa.list_(pa.int64()), [[1, 2], [], [3]]),
        ([["a"], ["b", "c"]], pa.list_(pa.string()), [["a"], ["b", "c"]]),
        # Integers beside floats become the equal floats, as before (read back and compared).
        ([[1, 2.5], [3, 4]], pa.list_(pa.float64()), [[1.0, 2.5], [3.0, 4.0]]),
        ([[0.5, True]], pa.list_(pa.float64()), [[0.5, 1.0]]),
        ([[2**53 + 1, 0.5]], pa.string(), [[2**53 + 1, 0.5]]),  # no float64 holds it: text
        ([[1, "a"], [2]], pa.string(), [[1, "a"], [2]]),  # no one Arrow type: JSON text
        ([[2**70], [1]], pa.string(), [[2**70], [1]]),  # beyond int64: JSON text
    ]
    for values, kind, expected in cases:
        records = [OutputRecord(str(n), n, {}, v) for n, v in enumerate(values)]
        data = parquetparts.encode_part(records, errors=False, include_input=False)
        assert pq.read_schema(pa.BufferReader(data)).field("prediction").type == kind
        back = [row["prediction"] for row in parquetparts.part_rows(data)]
        assert json.dumps(back) == json.dumps(expected), values  # NaN and -inf too


def test_answers_of_several_outputs_are_struct_columns_holding_each_value_as_it_was() -> None:
    rows = [
        {"predict": [2], "predict_proba": [0.25, math.nan]},
        {"predict": [0], "predict_proba": []},
    ]
    kind = pa.struct([("predict", pa.list_(pa.int64())), ("predict_proba", pa.list_(pa.float64()))])
    cases = [
        (rows, kind, rows),
        ([{"label": "a", "score": 1}, {"label": None, "score": 0.5}],
         pa.struct([("label", pa.string()), ("score", pa.float64())]),
         [{"label": "a", "score": 1.0}, {"label": None, "score": 0.5}]),
        # Keys in another order (NaN or not): the same object, in the struct's key order.
        ([{"a": 1, "b": 2}, {"b": 3, "a": 4}], pa.struct([("a", pa.int64()), ("b", pa.int64())]),
         [{"a": 1, "b": 2}, {"a": 4, "b": 3}]),
        ([{"a": 1.5, "b": math.nan}, {"b": 3.0, "a": math.nan}],
         pa.struct([("a", pa.float64()), ("b", pa.float64())]),
         [{"a": 1.5, "b": math.nan}, {"a": math.nan, "b": 3.0}]),
        # A missing key (a null would be added), a key that is no str (Arrow names the field
        # as if it were) or nested objects: checked by reading back.
        ([{b"a": 1}], pa.string(), TypeError),
        ([{"a": 1, "b": 2}, {"a": 3}], pa.string(), [{"a": 1, "b": 2}, {"a": 3}]),
        ([{"a": {"x": 1}}, {"a": {"x": 2}}], pa.struct([("a", pa.struct([("x", pa.int64())]))]),
         [{"a": {"x": 1}}, {"a": {"x": 2}}]),
    ]  # fmt: skip
    for values, kind, expected in cases:
        records = [OutputRecord(str(n), n, {}, v) for n, v in enumerate(values)]
        if expected is TypeError:  # no JSON value either: the record fails (runners/commit.py)
            with pytest.raises(TypeError):
                parquetparts.encode_part(records, errors=False, include_input=False)
            continue
        data = parquetparts.encode_part(records, errors=False, include_input=False)
        assert pq.read_schema(pa.BufferReader(data)).field("prediction").type == kind
        back = [row["prediction"] for row in parquetparts.part_rows(data)]
        assert json.dumps(back) == json.dumps(expected), values  # key order and NaN too


def test_struct_answers_of_plain_fields_are_taken_without_comparing_a_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Triton's two outputs: a struct Arrow holds exactly, so no read-back is compared (what
    # such parts hold: the test above).
    compared: list[int] = []
    same = parquetparts._same
    monkeypatch.setattr(parquetparts, "_same", lambda b, v: compared.append(1) or same(b, v))
    triton = [{"predict": [n % 3], "predict_proba": [0.5, math.nan]} for n in range(5)]
    missing = [{"a": 1.5, "b": math.nan}, {"a": math.nan}]  # a null would be added: compared
    for values, read_back in ((triton, False), (missing, True)):
        compared.clear()
        records = [OutputRecord(str(n), n, {}, v) for n, v in enumerate(values)]
        data = parquetparts.encode_part(records, errors=False, include_input=False)
        assert bool(compared) is read_back
    back = [row["prediction"] for row in parquetparts.part_rows(data)]
    assert back == [{"a": 1.5, "b": "NaN"}, {"a": "NaN"}]  # JSON text: NaN as "NaN"


def test_output_parts_carry_the_input_only_with_include_input(tmp_path: Path) -> None:
    records = [OutputRecord("a", 0, {"x": 1, "t": "hi"}, [0.5, 0.5])]
    with sink(tmp_path / "plain") as plain, sink(tmp_path / "full", include_input=True) as full:
        plain.write_chunk(0, records)
        full.write_chunk(0, records)
    assert parquetparts.part_rows(part(tmp_path / "plain")) == [
        {"id": "a", "position": 0, "prediction": [0.5, 0.5]}
    ]
    (row,) = parquetparts.part_rows(part(tmp_path / "full"))
    assert row["input"] == {"x": 1, "t": "hi"}


def test_committed_records_and_usage_come_from_the_parts(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    with sink(tmp_path / "out") as out:
        out.write_chunk(0, [OutputRecord("a", 0, {}, "x", usage), OutputRecord("b", 1, {}, "y")])
        out.write_chunk(1, [OutputRecord("c", 4, {}, "z", usage)])
    with sink(tmp_path / "out") as again:
        assert again.committed() == {0, 1}
        assert again.committed_records({0, 1}) == 3
        assert again.committed_usage({0, 1}) == {k: 2 * v for k, v in usage.items()}


def test_a_value_that_is_no_json_value_raises_type_error() -> None:
    with pytest.raises(TypeError):
        parquetparts.encode_part(
            [OutputRecord("a", 0, {}, object())], errors=False, include_input=False
        )


# -- the other formats are unchanged -----------------------------------------------------


def test_csv_and_jsonl_are_guessed_and_written_as_before(tmp_path: Path) -> None:
    assert formats.guess_format("x.csv", None) == "csv"
    assert formats.guess_format("x.jsonl", None) == "jsonl"
    assert formats.guess_format("X.PARQUET", None) == "parquet"
    records = [OutputRecord("a", 0, {"x": 1}, {"y": math.nan})]
    for fmt in ("csv", "jsonl"):
        storage = FileStorage(path=str(tmp_path / fmt), format=fmt)  # type: ignore[arg-type]
        with closing(FileBackend().open_sink(storage, CTX, role="output")) as out:
            out.write_chunk(0, records)
        written = (tmp_path / fmt / f"part-000000.{fmt}").read_bytes()
        assert written == formats.encode_chunk(records, fmt=fmt)


# -- the contract ------------------------------------------------------------------------


def storage(output: dict[str, Any], errors: dict[str, Any] | None = None) -> StorageBlock:
    block: dict[str, Any] = {"input": {"file": {"path": "/data/in.parquet"}}, "output": output}
    if errors is not None:
        block["errors"] = errors
    return StorageBlock.model_validate(block)


def test_include_input_is_taken_on_a_parquet_output() -> None:
    block = storage(
        {"s3": {"bucket": "bkt", "prefix": "out", "format": "parquet", "includeInput": True}}
    )
    assert block.output.s3 is not None and block.output.s3.include_input is True


@pytest.mark.parametrize(
    ("output", "errors", "message"),
    [
        ({"file": {"path": "/o", "includeInput": True}}, None, "applies to format parquet only"),
        (
            {"file": {"path": "/o", "format": "parquet"}},
            {"file": {"path": "/e", "format": "parquet", "includeInput": False}},
            "error output",
        ),
    ],
)
def test_include_input_where_it_means_nothing_is_refused_naming_it(
    output: dict[str, Any], errors: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ValidationError, match=f"includeInput.*{message}"):
        storage(output, errors)


def test_include_input_on_the_input_is_refused() -> None:
    with pytest.raises(ValidationError, match="includeInput applies to output only"):
        StorageBlock.model_validate(
            {
                "input": {"file": {"path": "/in.parquet", "includeInput": True}},
                "output": {"file": {"path": "/o"}},
            }
        )
