"""Values JSON cannot hold, through every sink: one rule for all (issue 15 item 4).

Real: the pipeline, the formats, and the file, SQLite, http and krateo sinks (the last two
posting to http_stub.Receiver, a stdlib HTTP server on 127.0.0.1). Faked: the model (FakeModel
handlers) and the input (the memory source). Each sink gets a record holding NaN and the
infinities in its input and prediction, and one whose prediction is no JSON value at all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fakes import FakeModel
from http_stub import Receiver, serve
from memory_backend import MemoryBackend, MemoryStore

from contracts.config import RunnerTuning
from contracts.storage import FileStorage, HttpStorage, KrateoStorage, SqlStorage
from runners.api import InputRecord, Outcome, Prediction, RunContext, Sink
from runners.formats import decode_chunk
from runners.pipeline import Pipeline, Stats
from runners.storage.file import FileBackend
from runners.storage.http import HttpBackend
from runners.storage.krateo import KrateoBackend
from runners.storage.sql import SqlBackend

INPUTS = [{"a": 1.0, "note": math.nan}, {"a": 2.0, "note": -math.inf}, {"a": 3.0}]
SAFE_INPUTS = [{"a": 1.0, "note": "NaN"}, {"a": 2.0, "note": "-Infinity"}, {"a": 3.0}]


def predict(records: Sequence[InputRecord]) -> list[Outcome]:
    """NaN, infinity, and for the third record an object no JSON can hold."""
    values: list[Any] = [math.nan, [math.inf, 1.0], object()]
    return [Prediction(values[r.position]) for r in records]


def run(sink: Sink, errors: Sink, ctx: RunContext) -> Stats:
    source = MemoryBackend(MemoryStore(inputs=list(INPUTS))).open_source({}, ctx)
    stats = Stats()
    tuning = RunnerTuning(max_failed_records=1, progress_interval_seconds=60)
    Pipeline(source, sink, errors, FakeModel(predict), tuning, stats).run()
    return stats


def check(outputs: list[dict[str, Any]], errors: list[dict[str, Any]], stats: Stats) -> None:
    assert [(row["input"], row["prediction"]) for row in outputs] == [
        (SAFE_INPUTS[0], "NaN"),
        (SAFE_INPUTS[1], ["Infinity", 1.0]),
    ]
    assert [(row["input"], row["reason"][:29]) for row in errors] == [
        (SAFE_INPUTS[2], "the prediction is no JSON val")
    ]
    assert (stats.read, stats.written, stats.failed) == (3, 2, 1)


def test_file_outputs_write_the_documented_strings(tmp_path: Path) -> None:
    ctx = RunContext("uid-1", "job-1")
    settings = FileStorage(path=str(tmp_path / "out"))
    backend = FileBackend()
    errors = backend.open_sink(backend.error_settings(settings), ctx, role="errors")
    stats = run(backend.open_sink(settings, ctx, role="output"), errors, ctx)
    read = lambda d: decode_chunk((tmp_path / d / "part-000000.jsonl").read_bytes(), fmt="jsonl")  # noqa: E731
    check(read("out"), read("out-errors"), stats)


def test_sql_outputs_write_the_documented_strings(tmp_path: Path) -> None:
    ctx = RunContext("uid-1", "job-1")
    url = f"sqlite:///{tmp_path / 'out.db'}"
    settings = SqlStorage(url=url, table="p")
    backend = SqlBackend()
    errors = backend.open_sink(backend.error_settings(settings), ctx, role="errors")
    stats = run(backend.open_sink(settings, ctx, role="output"), errors, ctx)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT input, prediction FROM p ORDER BY position")).all()
        failed = conn.execute(sa.text("SELECT input, reason FROM p_errors")).all()
    engine.dispose()
    outputs = [{"input": json.loads(i), "prediction": json.loads(p)} for i, p in rows]
    check(outputs, [{"input": json.loads(i), "reason": r} for i, r in failed], stats)


@pytest.mark.parametrize("kind", ["http", "krateo"])
def test_http_and_krateo_outputs_send_the_documented_strings(tmp_path: Path, kind: str) -> None:
    receiver = Receiver()
    with serve(receiver) as url:
        (tmp_path / "finops").mkdir()
        (tmp_path / "finops" / "server-url").write_text(url)
        ctx = RunContext("uid-1", "job-1", {}, str(tmp_path))
        if kind == "http":
            backend: Any = HttpBackend()
            settings: Any = HttpStorage(url=f"{url}/out")
        else:
            backend = KrateoBackend()
            api = {"endpointRef": {"name": "finops"}, "path": "/compute/out", "verb": "POST"}
            settings = KrateoStorage.model_validate({"api": api})
        store = MemoryStore()
        errors = MemoryBackend(store).open_sink({"name": "err"}, ctx, role="errors")
        stats = run(backend.open_sink(settings, ctx, role="output"), errors, ctx)
    chunks = [body for _, path, body, _ in receiver.requests if "out" in path]
    (body,) = [body for body in chunks if "records" in body or "predictions" in body]
    if kind == "http":
        outputs = body["records"]
    else:  # Krateo's string-valued bodies: predictions and ids as JSON text, no inputs
        outputs = [
            {"input": SAFE_INPUTS[i], "prediction": p}
            for i, p in enumerate(json.loads(body["predictions"]))
        ]
    check(outputs, store.chunks["err"][0], stats)
