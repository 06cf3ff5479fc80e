"""Scheduled runs: each execution (Job) writes its own output, so none looks committed.

Real: the file backend on a temp dir. Faked: nothing.
"""

from __future__ import annotations

from pathlib import Path

from contracts.storage import FileStorage
from runners.api import OutputRecord, RunContext
from runners.storage.file import FileBackend


def _ctx(job: str, *, scheduled: bool) -> RunContext:
    return RunContext(run_uid="uid-1", job_name=job, scheduled=scheduled)


def test_each_scheduled_execution_gets_its_own_output_directory(tmp_path: Path) -> None:
    settings = FileStorage(path=str(tmp_path / "out"))
    first = FileBackend().open_sink(
        settings, _ctx("nightly-29000000", scheduled=True), role="output"
    )
    first.write_chunk(0, [OutputRecord(id="a", position=0, input={}, prediction=1)])
    second = FileBackend().open_sink(
        settings, _ctx("nightly-29001440", scheduled=True), role="output"
    )
    assert first.committed() == {0}
    assert second.committed() == set()
    assert second.location == str(tmp_path / "out" / "nightly-29001440")


def test_one_shot_run_writes_to_the_path_itself(tmp_path: Path) -> None:
    settings = FileStorage(path=str(tmp_path / "out"))
    sink = FileBackend().open_sink(settings, _ctx("once", scheduled=False), role="output")
    assert sink.location == str(tmp_path / "out")


def test_execution_subpath_keeps_prefix_shape() -> None:
    assert _ctx("j-1", scheduled=True).execution_subpath("preds/") == "preds/j-1"
    assert _ctx("j-1", scheduled=False).execution_subpath("preds/") == "preds/"
