"""`longrun run -o json|yaml`: the run's final status on stdout, and nothing else there.

Real: the command (`local.run.main`, in-process), validation, the controller's builders and
status function, the pod as a subprocess. Faked: the runner image, mapped with --image-map
to `tests/local/fake_runner.py`, which exits as FAKE_MODE says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from contracts.run import InferenceRunStatus
from tests.local.conftest import fake_run_yaml
from tests.local.test_run import longrun_run


@pytest.mark.parametrize(
    ("mode", "code", "phase"), [("ok", 0, "Succeeded"), ("fail", 1, "Failed"), ("bad", 2, "Failed")]
)
@pytest.mark.parametrize("output", ["json", "yaml"])
def test_output_prints_the_final_status_alone_on_stdout_and_keeps_the_exit_code(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    mode: str,
    code: int,
    phase: str,
    output: str,
) -> None:
    text = fake_run_yaml(out=tmp_path, mode=mode, backoff_limit=0)
    assert longrun_run(tmp_path, text, "-o", output) == code
    captured = capsys.readouterr()
    wire = json.loads(captured.out) if output == "json" else yaml.safe_load(captured.out)
    status = InferenceRunStatus.model_validate(wire)  # the controller's status model
    assert status.phase == phase and status.job_name == "fake-run"
    assert status.to_wire() == wire  # nothing but the status: no extra keys, no log lines
    assert f"InferenceRun default/fake-run: {phase}" in captured.err  # the human summary stays


def test_the_status_on_stdout_carries_the_runners_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="ok"), "-o", "json") == 0
    result = json.loads(capsys.readouterr().out)["result"]
    assert result["recordsRead"] == 10 and result["recordsWritten"] == 10
    assert result["output"] == "fake://out"


def test_without_output_nothing_goes_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="ok")) == 0
    assert capsys.readouterr().out == ""


def test_invalid_input_prints_nothing_on_stdout_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = fake_run_yaml(out=tmp_path, mode="ok").split("---")[2]  # the run without its config
    assert longrun_run(tmp_path, text, "-o", "json") == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "ConfigNotFound" in captured.err
