"""Errors, not tracebacks: each bad input is one line naming the file, object or field.

Real: the `longrun` CLI's main() in-process for validate, run and render (an uncaught
exception would fail the test itself), the installed console script in a subprocess for
the binary file and the controller's missing kubeconfig, the controller's decision function
for the schedule that never fires, and YAML files written to a temporary directory.
Faked: the runner image of `longrun run` (tests/local/fake_runner.py; the errors here stop
the command before any pod starts).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts.run import InferenceRunSpec, InferenceRunStatus
from controller.cli import main
from controller.core.decide import decide
from controller.core.settings import Settings
from controller.core.status import Observed
from tests.controller.unit.objects import config, run
from tests.local.conftest import fake_image_map, fake_run_yaml

KNOWN = (
    "known kinds: InferenceConfig, InferenceHost, InferenceModel, InferenceRun, Model, "
    "ModelDeployment, Secret"
)
NEVER = (
    'spec.schedule: "0 0 30 2 *" never fires: the day of the month it names never occurs '
    "in the months it names (like February 30)"
)


def longrun(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("longrun")
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=120, check=False
    )


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_args(path: Path, tmp_path: Path) -> list[str]:
    return ["run", "-f", str(path), "--image-map", fake_image_map(), "--work-dir", str(tmp_path)]


def test_validate_on_a_binary_file_names_the_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "some.bin"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(128, 256)))
    done = longrun("validate", "-f", str(path))
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"{path}: not a text file: byte 0x80 at offset 8 is not UTF-8 (expected YAML or JSON)"
    )


def test_validate_on_broken_yaml_says_where_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "kind: InferenceRun\nmetadata: {name: [x\n")
    assert main(["validate", "-f", str(path)]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"{path}: not valid YAML: line 3, column 1: ")


def test_the_controller_with_a_missing_kubeconfig_exits_2_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    done = longrun("controller", "--kubeconfig", str(missing))
    assert done.returncode == 2
    assert one_line(done.stderr) == f"longrun controller: --kubeconfig {missing}: no such file"


def test_the_controller_with_an_unreadable_kubeconfig_exits_2_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "garbage: [\n", "kubeconfig")
    done = longrun("controller", "--kubeconfig", str(path))
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(f"longrun controller: kubeconfig {path}: ")


def test_validate_refuses_a_schedule_that_never_fires(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, fake_run_yaml(out=tmp_path, mode="ok") + '  schedule: "0 0 30 2 *"\n')
    assert main(["validate", "-q", "-f", str(path)]) == 1
    assert one_line(capsys.readouterr().err) == f"{path}: InferenceRun/fake-run: {NEVER}"


def test_run_refuses_a_schedule_that_never_fires_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, fake_run_yaml(out=tmp_path, mode="ok") + '  schedule: "0 0 30 2 *"\n')
    assert main(run_args(path, tmp_path)) == 2
    assert one_line(capsys.readouterr().err) == (
        f"longrun run: {path}: InferenceRun/fake-run: {NEVER}"
    )


def test_the_controller_refuses_a_schedule_that_never_fires() -> None:
    obj = run(schedule="0 0 30 2 *")
    observed = Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=InferenceRunStatus(),
        config=config(),
    )
    decision = decide(observed, Settings(), now=datetime(2026, 1, 1, tzinfo=UTC))
    assert decision.writes == ()  # no CronJob for a schedule that never fires
    accepted = next(c for c in decision.status.conditions if c.type == "Accepted")
    assert accepted.status == "False" and accepted.reason == "InvalidSchedule"
    assert "never fires" in accepted.message


MISSPELLED = "apiVersion: longrun.dev/v1alpha1\nkind: InferenceRunn\nmetadata: {name: x}\n"
NO_KIND = "apiVersion: longrun.dev/v1alpha1\nmetadata: {name: x}\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            MISSPELLED,
            f'kind: "InferenceRunn" is not a known kind (did you mean InferenceRun?); {KNOWN}',
        ),
        (NO_KIND, f"kind: required field is missing; {KNOWN}"),
    ],
    ids=["misspelled", "missing"],
)
@pytest.mark.parametrize("command", ["validate", "run", "render"])
def test_a_document_of_unknown_kind_is_one_line_naming_file_and_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, extra: str, message: str
) -> None:
    # The fake run's file holds 3 documents (Secret, config, run): the bad one is the 4th.
    path = write(tmp_path, fake_run_yaml(out=tmp_path, mode="ok") + "---\n" + extra)
    args = {
        "validate": ["validate", "-q", "-f", str(path)],
        "run": run_args(path, tmp_path),
        "render": ["render", "-f", str(path)],
    }[command]
    assert main(args) == (2 if command == "run" else 1)
    captured = capsys.readouterr()
    prefix = "longrun run: " if command == "run" else ""
    assert one_line(captured.err) == f"{prefix}{path}: document 4: {message}"
    assert captured.out == ""


def test_objects_of_other_kubernetes_kinds_are_still_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"
    path = write(tmp_path, fake_run_yaml(out=tmp_path, mode="ok") + "---\n" + namespace)
    assert main(["validate", "-q", "-f", str(path)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("port", "why"), [("99999", 'port "99999"'), ("abc", 'port "abc"')], ids=["range", "text"]
)
def test_validate_names_a_sql_url_whose_port_is_not_a_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str, why: str
) -> None:
    text = fake_run_yaml(out=tmp_path, mode="ok").replace(
        "{sql: {urlSecretRef: {name: db, key: url}, table: t}}",
        f'{{sql: {{url: "postgresql://u@127.0.0.1:{port}/db", table: t}}}}',
    )
    path = write(tmp_path, text)
    assert main(["validate", "-q", "-f", str(path)]) == 1
    assert one_line(capsys.readouterr().err) == (
        f"{path}: InferenceConfig/fake: spec.storage.input.sql.url: "
        f"{why} is not a TCP port (a number from 1 to 65535)"
    )


@pytest.mark.parametrize("schedule", ["0 0 29 2 *", "0 0 30 2 1", "0 0 31 1,4 *"])
def test_schedules_that_fire_rarely_or_on_weekdays_still_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], schedule: str
) -> None:
    # February 29 fires every 4 years; with a weekday, cron fires on either (Mondays in February).
    path = write(tmp_path, fake_run_yaml(out=tmp_path, mode="ok") + f'  schedule: "{schedule}"\n')
    assert main(["validate", "-q", "-f", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_run_with_an_image_mapped_to_a_missing_command_fails_at_once_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, fake_run_yaml(out=tmp_path, mode="ok"))
    missing = f"{fake_image_map().split('=')[0]}=no-such-runner-command --flag"
    (tmp_path / "token.env").write_text("token=abc\n")
    args = ["run", "-f", str(path), "--image-map", missing, "--work-dir", str(tmp_path),
            "--env-file", f"token={tmp_path / 'token.env'}"]  # fmt: skip

    assert main(args) == 2  # one pod only: a command that is not there fails the same every time

    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        'failed to start container: exec: "no-such-runner-command": No such file or directory'
        in err
    )
    assert err.count("failed to start container") == 1, err


def test_run_of_a_config_naming_an_inference_model_says_it_needs_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = fake_run_yaml(out=tmp_path, mode="ok").replace(
        '{protocol: kserve-v1, url: "http://127.0.0.1:9", name: iris}',
        "{deploymentRef: {kind: InferenceModel, name: qwen}}",
    )
    path = write(tmp_path, text)
    assert main(run_args(path, tmp_path)) == 2
    line = one_line(capsys.readouterr().err)
    assert "InferenceModel default/qwen: external hosts are placed and published by the " in line
    assert "run it on a cluster" in line
